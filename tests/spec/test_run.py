"""run_spec / summarize_spec on a tiny target with two drafts (itself and an unrelated model)."""

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
    assert len(results) == 3 * 2 * 3
    for col in ("k", "temperature", "policy", "draft", "category", "alpha", "tau", "kl_pq", "alpha_pred",
                "c", "speedup", "tokens_per_step", "accepted_per_pos", "tested_per_pos"):
        assert col in results.columns
    assert (results.n_new == 12).all()
    assert (results.c > 0).all() and (results.speedup > 0).all()


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
