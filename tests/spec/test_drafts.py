"""Draft builders: a truncated draft shares tensors and leaves the target whole."""

import pytest
import torch

from workbench.spec.drafts import truncated_draft


def test_truncated_draft_shares_and_leaves_target_intact(toy):
    target = toy.tiny_llama(seed=8, layers=3)
    ids = torch.tensor([[1, 2, 3, 4]])
    before = target(input_ids=ids).logits
    draft = truncated_draft(target, 1)
    assert len(target.model.layers) == 3 and target.config.num_hidden_layers == 3
    assert len(draft.model.layers) == 1 and draft.config.num_hidden_layers == 1
    assert draft.model.layers[0] is target.model.layers[0]
    assert draft.lm_head.weight.data_ptr() == target.lm_head.weight.data_ptr()
    torch.testing.assert_close(target(input_ids=ids).logits, before)  # target unchanged
    # the draft is layer 0 + final norm + head: lm_head(norm(hidden state after layer 0))
    hs = target(input_ids=ids, output_hidden_states=True).hidden_states[1]
    torch.testing.assert_close(draft(input_ids=ids).logits, target.lm_head(target.model.norm(hs)))
    with pytest.raises(ValueError):
        truncated_draft(target, 4)
