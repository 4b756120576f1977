"""transformers 5.17 ignores ``clean_up_tokenization_spaces=True`` for BPE tokenizers and warns about it on the first
decode, a red line in notebooks 00 and 02 the user cannot act on; ``load_model`` turns the flag off for BPE
tokenizers (the decoded text is the same) and leaves other tokenizers alone."""

import logging

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from workbench.models.load import _quiet_bpe_cleanup


def _tok(model) -> PreTrainedTokenizerFast:
    t = Tokenizer(model)
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=t, clean_up_tokenization_spaces=True)


def _warnings_on_decode(tok, ids, caplog) -> list:
    logging.Logger.warning_once.cache_clear()  # transformers logs this warning once per process
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        tok.decode(ids)
    return [r for r in caplog.records if "clean_up_tokenization_spaces" in r.getMessage()]


def test_bpe_cleanup_flag_off_and_text_unchanged(caplog):
    vocab = {"a": 0, "b": 1, ",": 2, "ab": 3}
    ids = [3, 2, 0]
    loud = _tok(models.BPE(vocab=vocab, merges=[("a", "b")]))
    assert _warnings_on_decode(loud, ids, caplog)  # the warning this silences (the test can see it)
    tok = _tok(models.BPE(vocab=vocab, merges=[("a", "b")]))
    before = tok.decode(ids, clean_up_tokenization_spaces=True)  # what transformers returns with the flag on
    quiet = _quiet_bpe_cleanup(tok)
    assert quiet is tok and tok.clean_up_tokenization_spaces is False
    assert tok.decode(ids) == before
    assert not _warnings_on_decode(tok, ids, caplog)


def test_other_tokenizers_keep_the_flag():
    tok = _tok(models.WordLevel(vocab={"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    assert _quiet_bpe_cleanup(tok).clean_up_tokenization_spaces is True
