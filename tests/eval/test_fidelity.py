"""Fidelity metrics on hand-built logits (known KL, cosine, agreement, perplexity)."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from workbench.eval.fidelity import FidelityConfig, eval_windows, run_fidelity, token_metrics


def test_token_metrics_known_values():
    lp = torch.tensor([[0.0, math.log(2.0)]])  # p = [1/3, 2/3]
    lq = torch.tensor([[1.0, 0.0]])  # q = [e, 1] / (1 + e)
    p = np.array([1 / 3, 2 / 3])
    q = np.array([math.e, 1.0]) / (1 + math.e)
    m = token_metrics(lp, lq, targets=torch.tensor([1]))
    assert m["kl"].item() == pytest.approx(float((p * np.log(p / q)).sum()), rel=1e-5)
    assert m["top1"].item() == 0.0
    assert m["cosine"].item() == pytest.approx(0.0, abs=1e-7)  # [0, ln2] is orthogonal to [1, 0]
    assert m["nll_p"].item() == pytest.approx(-math.log(2 / 3), rel=1e-6)
    assert m["nll_q"].item() == pytest.approx(-math.log(1 / (1 + math.e)), rel=1e-6)
    same = token_metrics(lp, 3 * lp)  # same direction: cosine 1, argmax agrees, KL > 0
    assert same["cosine"].item() == pytest.approx(1.0) and same["top1"].item() == 1.0 and same["kl"].item() > 0


class Fixed(torch.nn.Module):
    """A 'model' whose logits are a fixed function of the token ids (no context)."""

    def __init__(self, table: torch.Tensor):
        super().__init__()
        self.table = torch.nn.Parameter(table, requires_grad=False)  # [vocab, vocab]

    def forward(self, input_ids, use_cache=False):
        return SimpleNamespace(logits=self.table[input_ids])


class CharTok:
    def __call__(self, s, add_special_tokens=False):
        return {"input_ids": [ord(c) % 8 for c in s]}


TEXT = "abcdefgh" * 40  # 320 tokens


def test_identical_models_kl_zero_agreement_one():
    m = Fixed(torch.randn(8, 8, generator=torch.Generator().manual_seed(0)))
    r = run_fidelity(m, m, CharTok(), TEXT, n_tokens=256, seq_len=32, batch_size=3).iloc[0]
    assert r["kl_mean"] == pytest.approx(0.0, abs=1e-7) and r["kl_p95"] == pytest.approx(0.0, abs=1e-7)
    assert r["top1_agreement"] == 1.0 and r["cosine_mean"] == pytest.approx(1.0, abs=1e-6)
    assert r["ppl_fp"] == r["ppl_q"] and r["n_scored"] == 256 and r["n_tokens"] == 256


def test_uniform_model_perplexity_is_vocab_and_kl_known():
    uniform = Fixed(torch.zeros(8, 8))
    table = torch.zeros(8, 8)
    table[:, 0] = math.log(8.0)  # q = [8, 1, ..., 1] / 15 for every context
    other = Fixed(table)
    r = run_fidelity(uniform, other, CharTok(), TEXT, n_tokens=320, seq_len=64, batch_size=2).iloc[0]
    assert r["ppl_fp"] == pytest.approx(8.0, rel=1e-5)  # uniform over 8 tokens
    u = np.full(8, 1 / 8)
    q = np.array([8] + [1] * 7) / 15
    assert r["kl_mean"] == pytest.approx(float((u * np.log(u / q)).sum()), rel=1e-5)
    # ids cycle 1..7, 0; a 64-token window scores its last 63 tokens, 8 of them id 0 (q = 8/15), 55 not
    expected_nll = (8 * math.log(15 / 8) + 55 * math.log(15)) / 63
    assert math.log(r["ppl_q"]) == pytest.approx(expected_nll, rel=1e-5)


def test_kl_p95_matches_numpy_quantile():
    g = torch.Generator().manual_seed(1)
    lp, lq = torch.randn(50, 16, generator=g), torch.randn(50, 16, generator=g)
    kl = token_metrics(lp, lq)["kl"].numpy()
    lpq = torch.nn.functional.log_softmax(lp, -1), torch.nn.functional.log_softmax(lq, -1)
    ref = (lpq[0].exp() * (lpq[0] - lpq[1])).sum(-1).numpy()
    assert np.allclose(kl, ref, atol=1e-6) and (kl >= 0).all()


def test_bad_input():
    with pytest.raises(ValueError, match="empty"):
        eval_windows(CharTok(), "  ", 100, 10)
    with pytest.raises(ValueError, match="seq_len"):
        eval_windows(CharTok(), "abc", 100, 10)
    with pytest.raises(ValueError, match="n_tokens"):
        FidelityConfig(n_tokens=10, seq_len=20)
