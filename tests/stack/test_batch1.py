"""Batch-1 request through the engine: latency definitions, exact self-speculation, the theory fallback."""

import time

import pytest

from workbench.engine import Engine
from workbench.spec.theory import expected_tokens_per_step
from workbench.stack import batch1
from workbench.stack.batch1 import latency_row, run_batch1


def test_latency_row_known_answer():
    r = latency_row(0.1, 0.5, 5)
    assert r == {"ttft_ms": 100.0, "e2e_ms": 500.0, "tpot_ms": pytest.approx(100.0), "decode_tok_s": pytest.approx(10.0),
                 "n_out": 5}


def test_self_draft_accepts_everything(tiny_target):
    """The target as its own draft (greedy): every draft token is accepted, so alpha = 1 and tau = k + 1,
    and the output equals plain greedy decoding."""
    t = Engine.from_hf(tiny_target, max_seq=64)
    d = Engine.from_hf(tiny_target, max_seq=64)
    row = run_batch1(t, d, list(range(1, 17)), gen_len=13, k=3)
    assert row["alpha"] == 1.0 and row["tau"] == 4.0 and row["match_plain"] == 1.0
    assert row["spec_timing"] == "real" and row["acceptance"] == "real" and row["n_out"] == 13
    plain = run_batch1(t, None, list(range(1, 17)), gen_len=13)
    assert plain["spec_timing"] == "" and plain["plain_tpot_ms"] == plain["tpot_ms"]


def test_what_if_without_synthetic_loop_is_predicted(tiny_target, monkeypatch):
    """Where SpecConfig has no synthetic acceptance the row is the Theorem 3.8 prediction at that alpha."""
    monkeypatch.setattr(batch1, "has_synthetic_acceptance", lambda: False)
    t = Engine.from_hf(tiny_target, max_seq=64)
    row = run_batch1(t, Engine.from_hf(tiny_target, max_seq=64), list(range(1, 9)), gen_len=6, k=4, alpha=0.6)
    assert row["spec_timing"] == "theory" and row["acceptance"] == "synthetic alpha=0.6"
    assert row["tau"] == pytest.approx(expected_tokens_per_step(0.6, 4))
    assert row["tpot_ms"] == pytest.approx((4 * row["draft_step_ms"] + row["verify_ms"]) / row["tau"])


def test_empty_prompt_refused(tiny_target):
    with pytest.raises(ValueError, match="prompt is empty"):
        run_batch1(Engine.from_hf(tiny_target, max_seq=8), None, [], gen_len=2)


def test_synthetic_acceptance_at_zero_rejects_every_draft(tiny_target):
    """The what-if loop (acceptance="synthetic") at alpha = 0: every first draft is rejected, tau = 1."""
    assert batch1.has_synthetic_acceptance()
    t, d = Engine.from_hf(tiny_target, max_seq=64), Engine.from_hf(tiny_target, max_seq=64)
    row = run_batch1(t, d, list(range(1, 9)), gen_len=6, k=3, alpha=0.0)
    assert row["spec_timing"] == "synthetic" and row["alpha"] == 0.0 and row["tau"] == 1.0


class _FirstCallSlow:
    """An engine whose first decode step (one token) costs ``extra`` seconds more, as graph capture and kernel
    compilation do on a GPU; every other call is the wrapped engine's."""

    def __init__(self, engine, extra: float):
        self.engine, self.extra, self.first = engine, extra, True
        self.device = engine.device

    def runner(self, slot=0):
        outer, inner = self, self.engine.runner(slot)

        class _R:
            def __getattr__(self, name):
                return getattr(inner, name)

            def extend(self, tokens):
                if outer.first and len(tokens) == 1:
                    outer.first = False
                    time.sleep(outer.extra)
                return inner.extend(tokens)

        return _R()


@pytest.mark.parametrize("warmup", [True, False])
def test_warmup_keeps_first_use_costs_out_of_the_timed_run(tiny_target, warmup):
    """A 0.3 s first-use cost lands in the timed decode without the warm-up (TPOT >= 0.3 s / 7 steps) and not with
    it; the planted False case shows the test sees the cost."""
    eng = _FirstCallSlow(Engine.from_hf(tiny_target, max_seq=64), 0.3)
    row = run_batch1(eng, None, list(range(1, 9)), gen_len=8, warmup=warmup)
    if warmup:
        assert row["tpot_ms"] < 0.3e3 / 7 / 3
    else:
        assert row["tpot_ms"] >= 0.3e3 / 7


def test_warmup_defaults_to_devices_other_than_the_cpu(tiny_target):
    assert batch1._warms_up(Engine.from_hf(tiny_target, max_seq=64), None) is False
    assert batch1._warms_up(type("E", (), {"device": __import__("torch").device("cuda")})(), None) is True
