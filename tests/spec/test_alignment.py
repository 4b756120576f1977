"""Alignment metrics on hand-computed cases; predicted alpha is the measured acceptance rate."""

import math

import pytest
import torch

from workbench.engine import HFRunner
from workbench.spec.alignment import alignment_metrics, score_positions


def test_hand_computed_pair():
    p, q = torch.tensor([[0.5, 0.5]]), torch.tensor([[0.9, 0.1]])
    al = alignment_metrics(p.log(), q.log(), temperature=1.0).iloc[0]
    assert al.kl_pq == pytest.approx(0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1), rel=1e-5)
    assert al.kl_qp == pytest.approx(0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5), rel=1e-5)
    assert al.tv == pytest.approx(0.4, rel=1e-5)
    assert al.alpha_pred == pytest.approx(0.6, rel=1e-5)  # sum min(p, q) = 1 - TV


def test_identical_and_greedy():
    x = torch.randn(5, 11)
    al = alignment_metrics(x, x.clone(), temperature=0.7)
    assert al.kl_pq.max() < 1e-5 and al.tv.max() < 1e-5 and al.alpha_pred.min() == pytest.approx(1.0)
    y = x.clone()
    y[0] = -y[0]  # flips the argmax at position 0 only
    g = alignment_metrics(x, y, temperature=0.0)
    assert g.alpha_pred.tolist() == [0.0, 1.0, 1.0, 1.0, 1.0]
    assert g.argmax_match.tolist() == [False, True, True, True, True]


def test_shape_mismatch():
    with pytest.raises(ValueError, match="same shape"):
        alignment_metrics(torch.zeros(2, 3), torch.zeros(3, 3))


def test_score_positions_is_teacher_forcing(toy):
    m = toy.tiny_llama(seed=3)
    prompt, new = [1, 2, 3], [4, 5]
    logits = score_positions(HFRunner(m), prompt, new)
    ref = m(input_ids=torch.tensor([prompt + new])).logits[0]
    torch.testing.assert_close(logits, ref[2:4], rtol=1e-4, atol=1e-4)
