"""Speculative sampling reproduces the target distribution exactly (Leviathan et al. 2023, Thm 3.5),
for the reference sampler (``rejection.rejection_sample``) and its device fast path
(``fast.rejection_sample_fast`` with ``fast.sample_from_logits`` for the drafts).

Chi-square goodness of fit of 30,000 vectorized speculative generations of N_TOKENS = 4 tokens with
K = 3 drafts per step (Markov-table target and draft over V = 4 tokens: 256 cells of the joint)
against the target's exact joint. The window is longer than K, so the bonus token of a fully
accepted first step (position 4) and the tokens of the second step are inside it. Cells whose
expected count is below 5 are pooled into one (29 of 256 at T = 0.7, minimum 0.77). Threshold:
p > 0.01 for the correct samplers (the seeds are fixed, so the test is deterministic; measured
p = 0.21-0.50). Power: each planted bug of ``MUTANTS`` must give p < 1e-6 at every (temperature, top-p)
of ``SETTINGS``: bonus drawn uniformly, bonus drawn from p_k instead of p_{k+1}, every draft accepted,
and the two classic bugs, bonus drawn from the draft's q_{k+1} and acceptance with min(1, q / p)
instead of min(1, p / q). Measured: at top-p 1 (T = 1 and 0.7) chi-square statistics of 3,070-118,079
on about 230 cells (p < 1e-300); at top-p 0.8 every mutant also emits sequences the target cannot
(411-8,052 of 30,000; p = 0 exactly). With the bonus outside the window (K = N_TOKENS = 3) the first
two pass at T = 1: p = 0.12 and 0.60.
"""

import pytest
import torch

from workbench.spec.fast import rejection_sample_fast
from workbench.spec.rejection import PLACEHOLDER, rejection_sample
from workbench.spec.sampling import probs_from_logits

N_TRIALS, N_TOKENS, K, V = 30_000, 4, 3, 4


def _pvalue(toy, tokens, p_logits, temperature, top_p):
    idx = (tokens * V ** torch.arange(N_TOKENS - 1, -1, -1)).sum(-1)
    observed = torch.bincount(idx, minlength=V ** N_TOKENS).numpy()
    expected = toy.markov_joint(p_logits, N_TOKENS, temperature, top_p).numpy()
    if observed[expected == 0].sum():  # a sequence the target cannot emit (outside top-p): impossible under H0
        return 0.0
    return toy.chi2_pvalue(observed, expected)


def bonus_uniform(out, n, x, q, p, g):
    """Planted bug: after k acceptances the bonus is uniform over the vocabulary, not from p_{k+1}."""
    out, full = out.clone(), n == x.shape[1]
    out[full, x.shape[1]] = torch.randint(0, p.shape[-1], (int(full.sum()),), generator=g)
    return out, n


def bonus_wrong_position(out, n, x, q, p, g):
    """Planted bug: after k acceptances the bonus is drawn from p_k (the last draft's position)."""
    out, full, k = out.clone(), n == x.shape[1], x.shape[1]
    out[full, k] = torch.multinomial(p[full, k - 1], 1, generator=g).squeeze(-1)
    return out, n


def accept_all(out, n, x, q, p, g):
    """Planted bug: every draft accepted (the output then follows the draft), bonus from p_{k+1}."""
    bonus = torch.multinomial(p[:, x.shape[1]], 1, generator=g)
    return torch.cat([x, bonus], 1), torch.full_like(n, x.shape[1])


def bonus_from_draft(out, n, x, q, p, g):
    """Planted bug (classic): after k acceptances the bonus is drawn from the draft's q_{k+1}, not the
    target's p_{k+1}."""
    out, full, k = out.clone(), n == x.shape[1], x.shape[1]
    out[full, k] = torch.multinomial(q[full, k], 1, generator=g).squeeze(-1)
    return out, n


def accept_q_over_p(out, n, x, q, p, g):
    """Planted bug (classic): draft i is accepted with probability min(1, q(x_i) / p(x_i)), the ratio upside
    down (Leviathan et al. 2023, Algorithm 1 accepts with min(1, p / q)); the rest as the correct rule: a
    rejection resamples from norm(max(0, p - q)), k acceptances take the bonus from p_{k+1}."""
    B, k = x.shape
    qx = q[:, :k].gather(-1, x[..., None]).squeeze(-1)
    px = p[:, :k].gather(-1, x[..., None]).squeeze(-1)
    ok = torch.rand(B, k, generator=g) * px < qx  # u < q / p
    n = ok.long().cumprod(1).sum(1)  # leading acceptances
    out = torch.full((B, k + 1), PLACEHOLDER, dtype=torch.long)
    rows = torch.arange(B)
    for j in range(k):
        out[n > j, j] = x[n > j, j]
    resid = (p[rows, n.clamp(max=k - 1)] - q[rows, n.clamp(max=k - 1)]).clamp_min(0)
    resid = torch.where(resid.sum(-1, keepdim=True) > 0, resid, p[rows, n.clamp(max=k - 1)])
    dist = torch.where((n == k)[:, None], p[:, k], resid)
    out[rows, n] = torch.multinomial(dist, 1, generator=g).squeeze(-1)
    return out, n


MUTANTS = [bonus_uniform, bonus_wrong_position, accept_all, bonus_from_draft, accept_q_over_p]
SETTINGS = [(1.0, 1.0), (0.7, 1.0), (1.0, 0.8), (0.7, 0.8)]  # (temperature, top_p)


@pytest.mark.parametrize("impl", ["reference", "device"])
@pytest.mark.parametrize("temperature,top_p", SETTINGS)
def test_output_distribution_matches_target(toy, impl, temperature, top_p):
    p_logits, q_logits = toy.markov_tables(V, seed=1)
    tokens = toy.batched_speculative_markov(p_logits, q_logits, N_TRIALS, N_TOKENS, K, temperature, top_p,
                                            seed=2, impl=impl)
    assert tokens.shape == (N_TRIALS, N_TOKENS) and bool((tokens >= 0).all())
    assert _pvalue(toy, tokens, p_logits, temperature, top_p) > 0.01


@pytest.mark.parametrize("temperature,top_p", SETTINGS)
@pytest.mark.parametrize("mutate", MUTANTS, ids=lambda f: f.__name__)
def test_planted_bugs_are_detected(toy, mutate, temperature, top_p):
    """Power check: the same test, same seeds, on each planted bug, at every temperature and top-p the
    samplers are tested at."""
    p_logits, q_logits = toy.markov_tables(V, seed=1)
    tokens = toy.batched_speculative_markov(p_logits, q_logits, N_TRIALS, N_TOKENS, K, temperature, top_p, seed=2,
                                            mutate=mutate)
    assert _pvalue(toy, tokens, p_logits, temperature, top_p) < 1e-6


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.8)])
def test_fast_sampler_draws_what_the_reference_draws(temperature, top_p):
    """From one generator state both accept the same drafts (the same ``torch.rand(B, k)`` uniforms and
    the same test u q(x) < p(x)), and draw the same recovered/bonus token: ``torch.multinomial``'s
    one-sample path is the exponential race that ``sample_race`` writes out."""
    g = torch.Generator().manual_seed(0)
    B, k, V_ = 4000, 4, 7
    t_logits, d_logits = torch.randn(B, k + 1, V_, generator=g), torch.randn(B, k, V_, generator=g)
    q = probs_from_logits(d_logits, temperature, top_p)
    x = torch.multinomial(q.view(-1, V_), 1, generator=g).view(B, k)
    ref = rejection_sample(x, q, probs_from_logits(t_logits, temperature, top_p), torch.Generator().manual_seed(1))
    fast = rejection_sample_fast(x, q, t_logits, temperature, top_p, torch.Generator().manual_seed(1))
    assert torch.equal(ref[1], fast[1]) and 0 < int(ref[1].min()) + 1 and int(ref[1].max()) == k
    assert torch.equal(ref[0], fast[0])


@pytest.mark.parametrize("impl", ["reference", "device"])
def test_greedy_is_argmax_matching(impl):
    # target argmax per position: 2, 0, 3, 1; draft proposes 2, 0, 1 -> accept 2, 0, then emit 3
    p_logits = torch.tensor([[0, 0, 5, 0], [5, 0, 0, 0], [0, 0, 0, 5], [0, 5, 0, 0]], dtype=torch.float)
    q_logits = torch.tensor([[0, 0, 5, 0], [5, 0, 0, 0], [0, 5, 0, 0]], dtype=torch.float)
    x = q_logits.argmax(-1)
    if impl == "reference":
        out, n = rejection_sample(x[None], probs_from_logits(q_logits, 0)[None], probs_from_logits(p_logits, 0)[None])
    else:
        out, n = rejection_sample_fast(x[None], None, p_logits[None], 0.0)
    assert n.tolist() == [2]
    assert out.tolist() == [[2, 0, 3, PLACEHOLDER]]


def test_greedy_all_accepted_emits_bonus_argmax():
    p_logits = torch.tensor([[[0.0, 5, 0], [0, 0, 5]]])  # [1, k+1=2, V=3]: argmax 1, then 2
    out, n = rejection_sample_fast(torch.tensor([[1]]), None, p_logits, 0.0)
    assert n.tolist() == [1] and out.tolist() == [[1, 2]]


@pytest.mark.parametrize("impl", ["reference", "device"])
def test_all_accepted_takes_bonus_from_p(impl):
    p = torch.tensor([[[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]]])  # [1, k+1=2, V=3]
    q = torch.tensor([[[0.5, 0.5, 0.0]]])  # q == p at the drafted position -> always accepted
    if impl == "reference":
        out, n = rejection_sample(torch.tensor([[1]]), q, p)
    else:
        out, n = rejection_sample_fast(torch.tensor([[1]]), q, p.clamp_min(1e-30).log(), 1.0)
    assert n.tolist() == [1] and out.tolist() == [[1, 2]]


def test_synthetic_acceptance_is_geometric():
    """acceptance="synthetic": accepted counts follow the leading run of Bernoulli(alpha) trials
    (P(n = j) = alpha^j (1 - alpha) for j < k, alpha^k for j = k), whatever p and q say."""
    g = torch.Generator().manual_seed(0)
    B, k, a = 20_000, 3, 0.7
    x = torch.zeros(B, k, dtype=torch.long)
    logits = torch.randn(B, k + 1, 6, generator=g)
    _, n = rejection_sample_fast(x, None, logits, 0.0, generator=g, synthetic_alpha=a)
    freq = torch.bincount(n, minlength=k + 1).double() / B
    expect = torch.tensor([a ** j * (1 - a) for j in range(k)] + [a ** k], dtype=torch.double)
    assert torch.allclose(freq, expect, atol=0.015)  # 4.6 standard errors at B = 20,000


def test_shape_mismatch_raises():
    with pytest.raises(ValueError, match="shapes disagree"):
        rejection_sample(torch.zeros(1, 2, dtype=torch.long), torch.rand(1, 3, 4), torch.rand(1, 3, 4))
    with pytest.raises(ValueError, match="shapes disagree"):
        rejection_sample_fast(torch.zeros(1, 2, dtype=torch.long), None, torch.rand(1, 3, 4), 1.0)
