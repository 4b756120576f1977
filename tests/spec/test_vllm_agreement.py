"""The agreement logic of workbench.spec.vllm_agreement on hand-made frames (no vLLM needed)."""

import numpy as np
import pandas as pd
import pytest

from workbench.spec import vllm_agreement as va


def test_stats_from_steps_hand_worked():
    """Steps (drafted, accepted) = (3, 3), (3, 1), (2, 0): 3 drafts, 8 tokens, 4 accepted, 2 rejections;
    per position [2, 1, 1]; tau = 1 + 4/3; alpha = 4 / 6."""
    st = va.stats_from_steps([3, 3, 2], [3, 1, 0])
    assert (st.num_drafts, st.num_draft_tokens, st.num_accepted_tokens, st.num_rejections) == (3, 8, 4, 2)
    assert st.num_accepted_tokens_per_pos == [2, 1, 1]
    assert st.tau == pytest.approx(1 + 4 / 3) and st.alpha == pytest.approx(4 / 6)


def _row(engine, pid, tokens, steps, k=3):
    st = va.stats_from_steps(*zip(*steps)) if steps else va.stats_from_steps([], [])
    return va._row(engine, pid, tokens, st, k)


def test_greedy_agreement_flags():
    wb = pd.DataFrame([_row("workbench", "a", [1, 2, 3], [(3, 2)]), _row("workbench", "b", [1, 2, 3], [(3, 2)]),
                       _row("workbench", "c", [1, 2, 3], [(3, 2)])])
    vl = pd.DataFrame([_row("vllm", "a", [1, 2, 3], [(3, 2)]), _row("vllm", "b", [1, 9, 3], [(3, 0)]),
                       _row("vllm", "c", [1, 2, 3], [(3, 1)])])
    ag = va.greedy_agreement(wb, vl).set_index("prompt_id")
    assert ag.same_tokens.tolist() == [True, False, True] and ag.first_diff.tolist() == [-1, 1, -1]
    assert ag.counts_equal.tolist() == [True, False, False]  # c: same tokens, other counts -> a failure to report


def test_sampled_agreement_is_calibrated_and_has_power():
    """Engines of 30 prompts x 10 steps (k = 3, each draft token accepted with probability a). Same a (0.7) on
    both, 60 repetitions: the 95% interval of the difference misses 0 in about 5% of them (false alarms
    <= 12 of 60 for alpha, a binomial(60, 0.05) exceeds 12 with probability < 1e-4 even at a 10% true rate's
    mean); a = 0.7 against 0.5: flagged in >= 55 of 60 (the gap is about 6 standard errors)."""
    rng = np.random.default_rng(0)

    def frame(engine, a):
        rows = []
        for p in range(30):
            acc = [int(np.argmin(np.append(rng.random(3) < a, False))) for _ in range(10)]  # leading accepts
            rows.append(_row(engine, p, [], [(3, n) for n in acc]))
        return pd.DataFrame(rows)

    def flagged(a_vllm):
        res = [va.sampled_agreement(frame("workbench", 0.7), frame("vllm", a_vllm), n_boot=800, seed=r)
               .set_index("metric") for r in range(60)]
        return sum(not r.loc["alpha", "agree"] for r in res), sum(not r.loc["tau", "agree"] for r in res)

    false_alpha, false_tau = flagged(0.7)
    assert false_alpha <= 12 and false_tau <= 12
    hit_alpha, hit_tau = flagged(0.5)
    assert hit_alpha >= 55 and hit_tau >= 55


def test_vllm_frame_checks_engine_counters():
    out = {"outputs": [{"token_ids": [1, 2], "spec_decode_metrics": {"per_step_drafted": [3, 3],
                                                                      "per_step_accepted": [3, 0]}}],
           "metrics": {"vllm:spec_decode_num_drafts": 2.0, "vllm:spec_decode_num_draft_tokens": 6.0,
                       "vllm:spec_decode_num_accepted_tokens": 3.0,
                       "vllm:spec_decode_num_accepted_tokens_per_pos": [1.0, 1.0, 1.0]}}
    df = va.vllm_frame(out, ["p"], 3)
    assert df.accepted_per_pos[0] == [1, 1, 1] and df.num_rejections[0] == 1
    out["metrics"]["vllm:spec_decode_num_accepted_tokens"] = 4.0
    with pytest.raises(ValueError, match="differ from its per-request sums"):
        va.vllm_frame(out, ["p"], 3)


def test_missing_environment_names_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv(va.VENV_ENV, str(tmp_path / "nope" / "python"))
    with pytest.raises(FileNotFoundError, match="make setup-vllm"):
        va.vllm_python()
