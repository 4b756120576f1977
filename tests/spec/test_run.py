"""run_spec / summarize_spec on a tiny target with two drafts (itself and an unrelated model)."""

import numpy as np
import pandas as pd
import pytest

from workbench.spec.config import SpecConfig
from workbench.spec.run import run_spec, summarize_spec


@pytest.fixture(scope="module")
def results(toy):
    target = toy.tiny_llama(seed=1)
    drafts = {"self": target, "other": toy.tiny_llama(seed=2)}
    prompts = pd.DataFrame({"prompt_id": [0, 1, 2], "category": ["a", "a", "b"],
                            "prompt_ids": [[1, 2, 3], [4, 5], [6, 7, 8, 9]]})
    configs = [SpecConfig(k=2, temperature=0.0, max_new_tokens=12),
               SpecConfig(k=3, temperature=1.0, max_new_tokens=12),
               SpecConfig(k=3, temperature=1.0, policy="heuristic", max_new_tokens=12)]
    return run_spec(target, drafts, prompts, configs)


def test_rows_and_columns(results):
    """One row per (prompt, draft, config), each row's counters consistent with its per-step lists and with
    the definitions (vLLM: tau = 1 + accepted / drafts, bonus token included; draft acceptance rate =
    accepted / drafted; alpha = accepted / tested), ratios equal to the times they are made of, the prompt's
    fields carried over, and the self draft's greedy steps known exactly (k + 1 tokens each)."""
    keys = ["prompt_id", "draft", "k", "temperature", "policy"]
    assert len(results) == 3 * 2 * 3 and not results.duplicated(keys).any()
    assert results.groupby("prompt_id")["category"].first().to_dict() == {0: "a", 1: "a", 2: "b"}
    assert results.groupby("prompt_id")["n_prompt"].first().to_dict() == {0: 3, 1: 2, 2: 4}
    assert (results.n_new == 12).all() and set(results.loop) == {"device"}
    assert set(results.target_runner) == {"engine"} and set(results.draft_runner) == {"engine"}
    for r in results.itertuples():
        steps, drafted = np.asarray(r.tokens_per_step), np.asarray(r.draft_tokens_per_step)
        assert r.num_drafts == len(steps) == len(drafted)
        assert r.num_draft_tokens == drafted.sum() == sum(r.drafted_per_pos)
        assert r.num_accepted_tokens == sum(r.accepted_per_pos) == steps.sum() - r.num_drafts  # 1 bonus per step
        assert r.num_rejections == sum(r.tested_per_pos) - r.num_accepted_tokens
        assert ((steps >= 1) & (steps <= drafted + 1)).all()
        assert steps[:-1].sum() < r.n_new <= steps.sum()  # the last step reaches max_new_tokens
        assert r.tau == pytest.approx(1 + r.num_accepted_tokens / r.num_drafts)
        assert r.draft_acceptance_rate == pytest.approx(r.num_accepted_tokens / r.num_draft_tokens)
        assert r.alpha == pytest.approx(r.num_accepted_tokens / (r.num_accepted_tokens + r.num_rejections))
        assert r.draft_step_s == pytest.approx(r.draft_s / r.num_draft_tokens)
        assert r.c == pytest.approx(r.draft_step_s / r.baseline_tpot_s) and r.c > 0
        assert r.speedup == pytest.approx(r.baseline_tpot_s / r.spec_tpot_s) and r.speedup > 0
        assert r.spec_tpot_s == pytest.approx(r.spec_decode_s / r.n_new)
    greedy_self = results[(results.draft == "self") & (results.temperature == 0)]
    assert greedy_self.tokens_per_step.map(list).tolist() == [[3, 3, 3, 3]] * 3


def test_self_draft_is_perfect(results):
    own = results[results.draft == "self"]
    assert (own.alpha == 1).all() and (own.kl_pq < 1e-6).all() and (own.alpha_pred > 0.999).all()
    other = results[results.draft == "other"]
    assert (other.alpha < 1).any() and (other.kl_pq > 0.01).all()


def test_summary(results):
    s = summarize_spec(results)
    assert len(s) == 6
    assert ((s.tau_lo <= s.tau + 1e-12) & (s.tau <= s.tau_hi + 1e-12)).all()
    assert ((s.alpha_lo <= s.alpha + 1e-12) & (s.alpha <= s.alpha_hi + 1e-12)).all()
    static = s[s.policy == "static"]
    assert static.tau_theory.notna().all() and s[s.policy != "static"].tau_theory.isna().all()
    assert static.tau_theory_pred.between(1, static.k + 1).all()
    by_cat = summarize_spec(results, by=("draft", "temperature", "policy", "k", "category"))
    assert set(by_cat.category) == {"a", "b"}


def test_warm_up_runs_untimed_decodes_first_and_changes_no_token(toy):
    """Off the CPU, first calls (graph capture, compilation) must not land in the baseline every speedup is
    divided by. The warm-up runs one short plain decode and one short speculative decode per (draft, k,
    policy, greedy/sampled) before any timed run; tokens and counters are those of a run without it."""
    from workbench.engine import HFRunner
    from workbench.spec import run as run_mod

    target, draft = toy.tiny_llama(seed=1), toy.tiny_llama(seed=2)
    prompts = pd.DataFrame({"prompt_id": [0, 1], "category": ["a", "a"], "prompt_ids": [[1, 2, 3], [4, 5]]})
    configs = [SpecConfig(k=2, temperature=0.0, max_new_tokens=8), SpecConfig(k=3, temperature=0.0, max_new_tokens=8),
               SpecConfig(k=2, temperature=1.0, max_new_tokens=8)]
    t_run, d_run = HFRunner(target), HFRunner(draft)
    assert run_mod._warm_up(t_run, {"d": d_run}, prompts, configs, "auto", ()) == 1 + 3
    cols = ["prompt_id", "k", "temperature", "num_drafts", "num_accepted_tokens", "n_new"]
    warm = run_spec(t_run, {"d": d_run}, prompts, configs, warmup=True)[cols]
    cold = run_spec(t_run, {"d": d_run}, prompts, configs, warmup=False)[cols]
    pd.testing.assert_frame_equal(warm, cold)
