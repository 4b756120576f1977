"""Speculative sampling reproduces the target distribution exactly (Leviathan et al. 2023, Thm 3.5).

Chi-square goodness of fit of >= 100,000 vectorized speculative generations (3 tokens each, k = 3,
Markov-table target and draft over V = 5 tokens: 125 cells of the joint) against the target's exact
joint, at p > 0.01. A naive sampler that accepts every draft must fail the same test (power check).
"""

import numpy as np
import pytest
import torch
from scipy import stats

from workbench.spec.rejection import PLACEHOLDER, rejection_sample
from workbench.spec.sampling import probs_from_logits

N_TRIALS, N_TOKENS, K, V = 100_000, 3, 3, 5


def _chi2_pvalue(toy, tokens, p_logits, temperature, top_p):
    idx = (tokens * V ** torch.arange(N_TOKENS - 1, -1, -1)).sum(-1)
    observed = np.bincount(idx.numpy(), minlength=V ** N_TOKENS)
    expected = toy.markov_joint(p_logits, N_TOKENS, temperature, top_p).numpy() * len(tokens)
    support = expected > 0
    assert observed[~support].sum() == 0, "tokens outside the target's (top-p) support were emitted"
    return stats.chisquare(observed[support], expected[support] * observed.sum() / expected[support].sum()).pvalue


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 1.0), (1.0, 0.8)])
def test_output_distribution_matches_target(toy, temperature, top_p):
    p_logits, q_logits = toy.markov_tables(V, seed=1)
    tokens = toy.batched_speculative_markov(p_logits, q_logits, N_TRIALS, N_TOKENS, K, temperature, top_p, seed=2)
    assert tokens.shape == (N_TRIALS, N_TOKENS) and bool((tokens >= 0).all())
    assert _chi2_pvalue(toy, tokens, p_logits, temperature, top_p) > 0.01


def test_naive_acceptance_is_detected(toy):
    """Power check: always accepting the drafts gives the draft's distribution, and the test sees it."""
    def accept_all(x, q, p, g):
        B, k = x.shape
        bonus = torch.multinomial(p[:, k], 1, generator=g)
        return torch.cat([x, bonus], 1), torch.full((B,), k)

    p_logits, q_logits = toy.markov_tables(V, seed=1)
    tokens = toy.batched_speculative_markov(p_logits, q_logits, N_TRIALS, N_TOKENS, K, 1.0, seed=2,
                                            sampler=accept_all)
    assert _chi2_pvalue(toy, tokens, p_logits, 1.0, 1.0) < 1e-6


def test_greedy_is_argmax_matching():
    # target argmax per position: 2, 0, 3, 1; draft proposes 2, 0, 1 -> accept 2, 0, then emit 3
    p_logits = torch.tensor([[0, 0, 5, 0], [5, 0, 0, 0], [0, 0, 0, 5], [0, 5, 0, 0]], dtype=torch.float)
    q_logits = torch.tensor([[0, 0, 5, 0], [5, 0, 0, 0], [0, 5, 0, 0]], dtype=torch.float)
    x = q_logits.argmax(-1)
    out, n = rejection_sample(x[None], probs_from_logits(q_logits, 0)[None], probs_from_logits(p_logits, 0)[None])
    assert n.tolist() == [2]
    assert out.tolist() == [[2, 0, 3, PLACEHOLDER]]


def test_all_accepted_takes_bonus_from_p():
    p = torch.tensor([[[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]]])  # [1, k+1=2, V=3]
    q = torch.tensor([[[0.5, 0.5, 0.0]]])  # q == p at the drafted position -> always accepted
    out, n = rejection_sample(torch.tensor([[1]]), q, p)
    assert n.tolist() == [1] and out.tolist() == [[1, 2]]


def test_shape_mismatch_raises():
    with pytest.raises(ValueError, match="shapes disagree"):
        rejection_sample(torch.zeros(1, 2, dtype=torch.long), torch.rand(1, 3, 4), torch.rand(1, 3, 4))
