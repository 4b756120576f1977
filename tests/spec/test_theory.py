"""Closed forms of Leviathan et al. 2023 against known values and Monte Carlo simulation.

Tolerance: the Monte Carlo mean of tokens per step has standard error s / sqrt(n); the formula must
lie within 4 standard errors (a false alarm has probability ~6e-5 per case).
"""

import numpy as np
import pytest
import torch

from workbench.spec.rejection import rejection_sample
from workbench.spec.theory import best_k, expected_tokens_per_step, simulate_tokens_per_step, speedup


def test_known_values():
    assert expected_tokens_per_step(0.8, 4) == pytest.approx((1 - 0.8 ** 5) / 0.2)  # 3.3616
    assert expected_tokens_per_step(0.8, 4) == pytest.approx(3.3616)
    assert expected_tokens_per_step(0.0, 5) == pytest.approx(1.0)
    assert expected_tokens_per_step(1.0, 5) == pytest.approx(6.0)
    assert speedup(0.8, 4, 0.1) == pytest.approx(3.3616 / 1.4)
    # a self-draft of equal cost (c = 1) never pays off: tokens / (k + 1) < 1 for alpha < 1
    assert all(speedup(a, k, 1.0) < 1 for a in (0.5, 0.9, 0.99) for k in (1, 4, 8))


def test_best_k_is_the_argmax():
    for alpha, c in [(0.6, 0.05), (0.8, 0.05), (0.9, 0.2), (0.95, 0.01)]:
        k, s = best_k(alpha, c, k_max=40)
        brute = max(range(1, 41), key=lambda kk: speedup(alpha, kk, c))
        assert k == brute and s == pytest.approx(speedup(alpha, brute, c))
    # Leviathan et al. 2023 Figure 3 regime: a cheap, well aligned draft wants several tokens
    assert best_k(0.8, 0.05)[0] >= 4 and best_k(0.5, 0.5)[0] == 1


def test_bad_inputs():
    with pytest.raises(ValueError, match="alpha"):
        expected_tokens_per_step(1.5, 4)
    with pytest.raises(ValueError, match="k="):
        expected_tokens_per_step(0.5, 0)
    with pytest.raises(ValueError, match="c="):
        speedup(0.5, 4, -1)


@pytest.mark.parametrize("alpha", [0.3, 0.6, 0.9])
@pytest.mark.parametrize("k", [1, 4, 8])
def test_tau_formula_matches_monte_carlo(alpha, k):
    tokens = simulate_tokens_per_step(alpha, k, 200_000, seed=k)
    se = tokens.std(ddof=1) / np.sqrt(len(tokens))
    assert abs(tokens.mean() - expected_tokens_per_step(alpha, k)) < 4 * se


@pytest.mark.parametrize("k", [2, 5])
def test_tau_of_the_rejection_sampler(k):
    """The real sampler with fixed p, q: acceptance rate sum min(p, q) and tau of Eq. (1), both within
    4 standard errors over 100,000 steps."""
    g = torch.Generator().manual_seed(k)
    V, B = 8, 100_000
    p = torch.softmax(torch.randn(V, generator=g), -1)
    q = torch.softmax(torch.randn(V, generator=g), -1)
    alpha = float(torch.minimum(p, q).sum())
    x = torch.multinomial(q, B * k, replacement=True, generator=g).reshape(B, k)
    _, n = rejection_sample(x, q.expand(B, k, V), p.expand(B, k + 1, V), g)
    tokens = (n + 1).double().numpy()
    se = tokens.std(ddof=1) / np.sqrt(B)
    assert abs(tokens.mean() - expected_tokens_per_step(alpha, k)) < 4 * se
    tested = n.sum().item() + int((n < k).sum())
    alpha_hat = n.sum().item() / tested
    assert abs(alpha_hat - alpha) < 4 * np.sqrt(alpha * (1 - alpha) / tested)
