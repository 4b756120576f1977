"""run_spec_sweep: the grid goes through the results store point by point and resumes."""

import pandas as pd
import pytest

from workbench.spec import sweep as spec_sweep
from workbench.spec.config import SpecConfig
from workbench.spec.run import run_spec
from workbench.spec.sweep import prompts_identity, run_spec_sweep, spec_points


@pytest.fixture(scope="module")
def setup(toy):
    target = toy.tiny_llama(seed=1)
    drafts = {"self": (target, {"draft_key": {"draft": "self"}}), "other": toy.tiny_llama(seed=2)}
    prompts = pd.DataFrame({"prompt_id": [10, 11, 12], "category": ["a", "a", "b"],
                            "prompt_ids": [[1, 2, 3], [4, 5], [6, 7, 8, 9]]})
    configs = [SpecConfig(k=2, max_new_tokens=8), SpecConfig(k=3, temperature=1.0, max_new_tokens=8)]
    return target, drafts, prompts, configs


def test_points_cover_the_grid_in_run_order(setup):
    _, drafts, prompts, configs = setup
    pts = spec_points(drafts, prompts, configs, prompts_per_point=2, loop="auto")
    assert len(pts) == 2 * 2 * 2  # configs x blocks x drafts
    assert [p["prompts"] for p in pts[:4]] == [[10, 11], [10, 11], [12], [12]]
    assert pts[0]["draft_key"] == {"draft": "self"} and pts[1]["draft_key"] == {"draft": "other"}
    assert pts[0]["config"]["k"] == 2 and pts[-1]["config"]["temperature"] == 1.0
    with pytest.raises(ValueError, match="prompts_per_point"):
        spec_points(drafts, prompts, configs, prompts_per_point=0)


def test_sweep_stores_resumes_and_matches_run_spec(setup, tmp_path, monkeypatch):
    """Greedy rows equal run_spec's (same tokens, counters); an interrupted sweep keeps its finished
    points and a re-run computes only the missing ones; other prompts are other data."""
    target, drafts, prompts, configs = setup
    calls = []
    real = spec_sweep.run_spec

    def counting(*a, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # interrupted in the third point
        return real(*a, **kw)

    monkeypatch.setattr(spec_sweep, "run_spec", counting)
    with pytest.raises(KeyboardInterrupt):
        run_spec_sweep(target, drafts, prompts, configs, name="spec_t", root=tmp_path, prompts_per_point=2)
    calls.clear()
    monkeypatch.setattr(spec_sweep, "run_spec", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    out = run_spec_sweep(target, drafts, prompts, configs, name="spec_t", root=tmp_path, prompts_per_point=2)
    assert len(calls) == 8 - 2  # two points were stored before the interruption
    assert len(out) == 3 * 2 * 2 and out.point_id.nunique() == 8
    again = run_spec_sweep(target, drafts, prompts, configs, name="spec_t", root=tmp_path, prompts_per_point=2)
    assert len(calls) == 6 and len(again) == len(out)  # nothing recomputed
    ref = run_spec(target, {n: d[0] if isinstance(d, tuple) else d for n, d in drafts.items()}, prompts,
                   configs[:1])
    got = out[out.temperature == 0].sort_values(["draft", "prompt_id"]).reset_index(drop=True)
    ref = ref.sort_values(["draft", "prompt_id"]).reset_index(drop=True)
    for col in ("num_accepted_tokens", "num_drafts", "n_new", "kl_pq"):
        assert got[col].tolist() == pytest.approx(ref[col].tolist())
    assert [list(x) for x in got.tokens_per_step] == [list(x) for x in ref.tokens_per_step]
    assert set(out.loop) == {"device"}  # engine runners (run_spec's default) take the device loop
    assert prompts_identity(prompts) != prompts_identity(prompts.iloc[:2])


def test_without_a_name_nothing_is_stored(setup, tmp_path, monkeypatch):
    target, drafts, prompts, configs = setup
    monkeypatch.setenv("WORKBENCH_RESULTS", str(tmp_path))
    out = run_spec_sweep(target, drafts, prompts.iloc[:1], configs[:1])
    assert len(out) == 2 and not list(tmp_path.iterdir())
