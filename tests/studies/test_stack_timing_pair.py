"""The stacked study's GPU timing pair (random Qwen2-7B target, random Qwen2-0.5B draft) has two embedding sizes
(152,064 vs 151,936 rows); notebook 04 at demo size on an H100 failed in speculative decoding's one-vocabulary check
(2026-12-07, ``benchmarks/results/2026-12-07_h100``). ``match_vocab`` pads the random draft to the target's size."""

import pytest
import torch

from workbench.models.provenance import attach
from workbench.spec import speculative_generate
from workbench.studies.stack import match_vocab


def _pair(make_tiny, random_draft=True):
    target, draft = make_tiny(seed=0), make_tiny(seed=1, layers=1)
    if random_draft:  # as load_model("random:...") marks it
        attach(draft, {"weights": "random"})
    draft.resize_token_embeddings(200, mean_resizing=False)  # a draft with fewer embedding rows, as Qwen2-0.5B
    return target.eval(), draft.eval()


def test_mismatched_pair_is_refused_then_runs_after_match_vocab(make_tiny):
    target, draft = _pair(make_tiny)
    prompt = [1, 5, 9, 13]
    with pytest.raises(ValueError, match="vocab_size 256 != draft vocab_size 200"):
        speculative_generate(target, draft, prompt, k=2, max_new_tokens=4)
    match_vocab(draft, target)
    assert draft.config.vocab_size == 256
    assert draft.get_output_embeddings().weight.shape == (256, 128)
    assert draft(torch.tensor([prompt])).logits.shape[-1] == 256
    out = speculative_generate(target, draft, prompt, k=2, max_new_tokens=4)
    assert len(out.tokens) == 4


def test_real_weight_draft_is_not_resized(make_tiny):
    target, draft = _pair(make_tiny, random_draft=False)
    with pytest.raises(ValueError, match="pick a draft of the target's tokenizer"):
        match_vocab(draft, target)
    assert draft.config.vocab_size == 200
    match_vocab(target, target)  # equal sizes: nothing to do
