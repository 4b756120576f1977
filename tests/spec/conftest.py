"""Toy models for speculative-decoding tests: Markov tables (no transformer) and tiny random Llamas."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from scipy import stats

from workbench.spec.fast import rejection_sample_fast, sample_from_logits
from workbench.spec.rejection import rejection_sample
from workbench.spec.sampling import probs_from_logits, sample


def markov_tables(V: int = 5, seed: int = 0, noise: float = 0.8) -> tuple[torch.Tensor, torch.Tensor]:
    """Target and draft next-token logits ``[V, V]`` (row = previous token); the draft is a noisy copy."""
    g = torch.Generator().manual_seed(seed)
    target = torch.randn(V, V, generator=g)
    draft = target + noise * torch.randn(V, V, generator=g)
    return target, draft


def batched_speculative_markov(p_logits, q_logits, n_trials: int, n_tokens: int, k: int,
                               temperature: float, top_p: float = 1.0, start: int = 0, seed: int = 0,
                               impl: str = "reference", mutate=None) -> torch.Tensor:
    """Run ``n_trials`` independent speculative generations of ``n_tokens`` tokens, vectorized over
    trials, with Markov-table target/draft; return the generated tokens ``[n_trials, n_tokens]``.

    ``impl``: ``"reference"`` (``sampling.sample`` for drafts, ``rejection.rejection_sample``) or
    ``"device"`` (``fast.sample_from_logits``, ``fast.rejection_sample_fast`` on the logits).
    ``mutate(out, n, x, q, p, g) -> (out, n)``: a planted bug applied to each verification
    (``x`` [B, k] drafts; ``q``, ``p`` [B, k+1, V] the warped draft and target distributions at the k
    drafted positions and the bonus position; ``out``, ``n`` the correct sampler's output)."""
    g = torch.Generator().manual_seed(seed)
    P = probs_from_logits(p_logits, temperature, top_p)  # [V, V]
    Q = probs_from_logits(q_logits, temperature, top_p)
    B = n_trials
    seqs = torch.full((B, n_tokens + k + 2), -1, dtype=torch.long)
    seqs[:, 0] = start
    lengths = torch.ones(B, dtype=torch.long)  # tokens in seqs, start token included
    rows = torch.arange(B)
    while bool((lengths <= n_tokens).any()):
        active = lengths <= n_tokens
        prev = seqs[rows, lengths - 1]
        xs, qs, rows_p = [], [], [prev]
        for _ in range(k):
            if impl == "device":
                x, q = sample_from_logits(q_logits[prev], temperature, top_p, g)
            else:
                q = Q[prev]  # [B, V]
                x = sample(q, g)
            xs.append(x)
            qs.append(q)
            rows_p.append(x)
            prev = x
        x, q, ctx = torch.stack(xs, 1), torch.stack(qs, 1), torch.stack(rows_p, 1)  # ctx [B, k+1]
        if impl == "device":
            out, n = rejection_sample_fast(x, q, p_logits[ctx], temperature, top_p, g)
        else:
            out, n = rejection_sample(x, q, P[ctx], g)
        if mutate is not None:
            out, n = mutate(out, n, x, Q[ctx], P[ctx], g)
        for j in range(k + 1):
            m = active & (j <= n)
            seqs[rows[m], lengths[m] + j] = out[m, j]
        lengths = torch.where(active, lengths + n + 1, lengths)
    return seqs[:, 1: n_tokens + 1]


def chi2_pvalue(observed: np.ndarray, expected: np.ndarray, min_expected: float = 5.0) -> float:
    """Chi-square goodness-of-fit p-value of counts ``observed`` against ``expected`` (same cells,
    rescaled to the same total). Cells whose expected count is below ``min_expected`` are pooled into
    one cell (the usual rule for the chi-square approximation); cells of expected 0 must be empty."""
    observed, expected = np.asarray(observed, float), np.asarray(expected, float)
    assert observed[expected == 0].sum() == 0, "tokens outside the target's support were emitted"
    keep = expected > 0
    observed, expected = observed[keep], expected[keep] * observed.sum() / expected[keep].sum()
    small = expected < min_expected
    if small.any():
        observed = np.append(observed[~small], observed[small].sum())
        expected = np.append(expected[~small], expected[small].sum())
    return float(stats.chisquare(observed, expected).pvalue)


def markov_joint(p_logits, n_tokens: int, temperature: float, top_p: float = 1.0, start: int = 0) -> torch.Tensor:
    """Exact probability of each token sequence of length ``n_tokens`` under the target, flattened
    ``[V ** n_tokens]`` (index = sum_i t_i V^(n_tokens-1-i))."""
    P = probs_from_logits(p_logits, temperature, top_p).double()
    # recursion: joint over (t_1..t_i), times P[t_i, :] for t_{i+1}
    V = P.shape[0]
    joint = P[start].clone()
    for _ in range(n_tokens - 1):
        last = torch.arange(joint.numel()) % V  # last token of each prefix
        joint = (joint.unsqueeze(-1) * P[last]).reshape(-1)
    return joint


def tiny_llama(vocab: int = 64, seed: int = 0, layers: int = 2):
    """A random 2-layer Llama (hidden 32): fast, with a real KV cache."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return LlamaForCausalLM(cfg).eval()


class ForcedDraftRunner:
    """Wraps a runner; at the given absolute positions its proposal is forced off the argmax, so a
    greedy target rejects it there (to force rejections at chosen draft positions)."""

    def __init__(self, inner, positions):
        self.inner, self.positions = inner, set(positions)
        self.vocab_size, self.device = inner.vocab_size, inner.device

    def reset(self):
        self.inner.reset()

    @property
    def length(self):
        return self.inner.length

    def extend(self, tokens):
        start = self.inner.length
        logits = self.inner.extend(tokens).clone()
        for i in range(logits.shape[0]):
            if start + i + 1 in self.positions:  # row i predicts the token at position start + i + 1
                wrong = (int(logits[i].argmax()) + 1) % logits.shape[1]
                logits[i, wrong] = logits[i].max() + 10
        return logits

    def truncate(self, length):
        self.inner.truncate(length)

    def synchronize(self):
        self.inner.synchronize()


@pytest.fixture(scope="session")
def toy():
    """This module's helpers (``markov_tables``, ``batched_speculative_markov``, ``markov_joint``,
    ``chi2_pvalue``, ``tiny_llama``, ``ForcedDraftRunner``, ``TableRunner``): test modules cannot import siblings under importlib mode."""
    return sys.modules[__name__]


class TableRunner:
    """A :class:`workbench.engine.api.Runner` whose next-token logits depend on the last token only
    (a Markov table ``[V, V]``); lets the real decoding loop run thousands of times per second."""

    def __init__(self, table: torch.Tensor):
        self.table, self.tokens = table, []
        self.vocab_size, self.device = table.shape[1], torch.device("cpu")

    def reset(self):
        self.tokens = []

    @property
    def length(self):
        return len(self.tokens)

    def extend(self, tokens):
        t = torch.as_tensor(tokens).reshape(-1)
        self.tokens += t.tolist()
        return self.table[t]

    def truncate(self, length):
        assert 0 <= length <= len(self.tokens)
        del self.tokens[length:]

    def synchronize(self):
        pass
