"""The divergence module against hand-computed values and torch's own functions, and the callers
(fidelity, alignment, distillation) against it: they report exactly what it computes."""

from __future__ import annotations

import math

import pytest
import torch

from workbench import divergence as dv


def test_known_two_point_distributions():
    """p = (1/2, 1/2), q = (1/4, 3/4): KL(p||q) = 1/2 ln 2 + 1/2 ln(2/3), KL(q||p) = 1/4 ln(1/2) +
    3/4 ln(3/2), TV = 1/4, overlap = 3/4 (all by hand)."""
    p, q = torch.tensor([0.5, 0.5]), torch.tensor([0.25, 0.75])
    lp, lq = dv.log_probs(p.log()), dv.log_probs(q.log())
    assert dv.kl(lp, lq).item() == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(2 / 3), abs=1e-7)
    assert dv.kl(lq, lp).item() == pytest.approx(0.25 * math.log(0.5) + 0.75 * math.log(1.5), abs=1e-7)
    assert dv.total_variation(p, q).item() == pytest.approx(0.25)
    assert dv.overlap(p, q).item() == pytest.approx(0.75)
    assert dv.top1_agreement(p.log(), q.log()).item() == 0.0


def test_against_torch_on_random_logits():
    """KL against ``F.kl_div(log_target=True)``, log_probs against ``log_softmax``, cosine against
    ``F.cosine_similarity``, overlap = 1 - TV, shapes ``[..., V] -> [...]``."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(3, 5, 40, generator=g), 2 * torch.randn(3, 5, 40, generator=g)
    lp, lq = dv.log_probs(a, 0.7), dv.log_probs(b, 0.7)
    torch.testing.assert_close(lp, torch.log_softmax(a / 0.7, -1))
    ref = torch.nn.functional.kl_div(lq, lp, log_target=True, reduction="none").sum(-1)
    torch.testing.assert_close(dv.kl(lp, lq), ref)
    assert dv.kl(lp, lq).shape == (3, 5) and (dv.kl(lp, lq) > 0).all()
    torch.testing.assert_close(dv.kl_logits(a, b, 0.7), ref.clamp(min=0))
    torch.testing.assert_close(dv.overlap(lp.exp(), lq.exp()), 1 - dv.total_variation(lp.exp(), lq.exp()))
    torch.testing.assert_close(dv.logit_cosine(a, b), torch.nn.functional.cosine_similarity(a, b, dim=-1))
    assert dv.top1_agreement(a, a.clone()).eq(1).all() and dv.top1_agreement(a, b).dtype == torch.float32


def test_equal_distributions_and_bad_temperature():
    x = torch.randn(4, 9)
    assert dv.kl_logits(x, x + 3.0).abs().max() < 1e-6  # a shift of the logits is the same distribution
    with pytest.raises(ValueError, match="temperature"):
        dv.log_probs(x, 0.0)


def test_callers_report_the_module_values():
    """fidelity.token_metrics, alignment_metrics and distill's loss are the module's values."""
    from workbench.eval.fidelity import token_metrics
    from workbench.spec.alignment import alignment_metrics
    from workbench.spec.distill import _kl_and_alpha

    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(6, 30, generator=g), torch.randn(6, 30, generator=g)
    m = token_metrics(a, b)
    torch.testing.assert_close(m["kl"], dv.kl_logits(a, b), rtol=0, atol=0)
    torch.testing.assert_close(m["top1"], dv.top1_agreement(a, b))
    al = alignment_metrics(a, b, temperature=0.8)
    lp, lq = dv.log_probs(a, 0.8), dv.log_probs(b, 0.8)
    assert al["kl_pq"].tolist() == dv.kl(lp, lq).clamp_min(0).tolist()
    assert al["kl_qp"].tolist() == dv.kl(lq, lp).clamp_min(0).tolist()
    assert al["tv"].tolist() == dv.total_variation(lp.exp(), lq.exp()).tolist()
    kl, alpha = _kl_and_alpha(a, b)
    assert kl.item() == pytest.approx(dv.kl_logits(a, b).mean().item(), abs=1e-7)
    assert alpha.item() == pytest.approx(1 - dv.total_variation(dv.log_probs(a).exp(), dv.log_probs(b).exp()).mean().item(),
                                         abs=1e-6)
