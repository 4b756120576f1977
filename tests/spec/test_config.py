"""Bad input gets a clear ValueError (or TokenizerMismatchError) naming the field and the fix."""

import pytest
import torch

from workbench.models import TokenizerMismatchError, check_tokenizers_match
from workbench.spec.config import SpecConfig
from workbench.spec.generate import speculative_generate
from workbench.spec.sampling import probs_from_logits


@pytest.mark.parametrize("kwargs,match", [
    ({"k": 0}, "k=0"), ({"k": -2}, "k=-2"), ({"k": 1.5}, "k=1.5"),
    ({"temperature": -0.1}, "temperature"), ({"temperature": float("nan")}, "temperature"),
    ({"top_p": 0.0}, "top_p"), ({"top_p": 1.2}, "top_p"), ({"top_p": -1}, "top_p"),
    ({"policy": "heuristc"}, "Did you mean 'heuristic'"), ({"k": 8, "k_max": 4}, "k_max"),
    ({"confidence_threshold": 2.0}, "confidence_threshold"), ({"max_new_tokens": 0}, "max_new_tokens"),
])
def test_config_rejects(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SpecConfig(**kwargs)


@pytest.mark.parametrize("kwargs", [{"k": 0}, {"temperature": -1.0}, {"top_p": 0.0}, {"top_p": 1.5}])
def test_generate_rejects(toy, kwargs):
    m = toy.tiny_llama()
    with pytest.raises(ValueError):
        speculative_generate(m, m, [1, 2], **kwargs)


def test_vocab_mismatch_rejected(toy):
    with pytest.raises(ValueError, match="vocab_size"):
        speculative_generate(toy.tiny_llama(vocab=64), toy.tiny_llama(vocab=80), [1, 2])


def test_probs_reject_bad_sampling():
    with pytest.raises(ValueError, match="temperature"):
        probs_from_logits(torch.zeros(4), temperature=-1)
    with pytest.raises(ValueError, match="top_p"):
        probs_from_logits(torch.zeros(4), top_p=0)


def test_top_p_keeps_smallest_nucleus():
    probs = probs_from_logits(torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05])), 1.0, top_p=0.8)
    torch.testing.assert_close(probs, torch.tensor([0.625, 0.375, 0.0, 0.0]))
    greedy = probs_from_logits(torch.tensor([0.1, 3.0, -1.0]), 0.0)
    assert greedy.tolist() == [0.0, 1.0, 0.0]


class _CharTokenizer:
    """Stand-in tokenizer with another vocabulary (one id per character)."""

    def __call__(self, s, add_special_tokens=False):
        return {"input_ids": [ord(ch) % 1000 for ch in s]}

    def __len__(self):
        return 1000


def test_mismatched_tokenizers(default_model):
    _, tok = default_model
    with pytest.raises(TokenizerMismatchError):
        check_tokenizers_match(tok, _CharTokenizer())
    check_tokenizers_match(tok, tok)  # the same tokenizer passes


def test_make_draft_checks_tokenizer(default_model, toy, tmp_path):
    """A local draft folder whose tokenizer differs from the target's is refused by ``make_draft``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from workbench.spec.drafts import make_draft

    target, tok = default_model
    vocab = {ch: i for i, ch in enumerate([*"abcdefghijklmnopqrstuvwxyz .,", "[UNK]"])}
    wl = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    wl.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    other = PreTrainedTokenizerFast(tokenizer_object=wl, unk_token="[UNK]")
    toy.tiny_llama(vocab=len(vocab)).save_pretrained(tmp_path)
    other.save_pretrained(tmp_path)
    with pytest.raises(TokenizerMismatchError):
        make_draft(target, str(tmp_path), tokenizer=tok)


def test_unknown_builtin_draft(toy):
    from workbench.spec.drafts import make_draft

    with pytest.raises(ValueError, match="Did you mean 'int4'"):
        make_draft(toy.tiny_llama(), "int44")
