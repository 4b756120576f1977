"""Named spec grids: the notebook's grid and the benchmark's come from one place."""

import pandas as pd
import pytest

from workbench.spec.presets import SPEC_GRIDS, SpecGrid
from workbench.spec.theory import best_k, best_k_table


def test_full_grid_is_the_notebook_grid_under_wb_full():
    g = SpecGrid.from_name("full")
    cfgs = g.configs()
    # per temperature: static k = 1, 2, 4, 6, then heuristic and confidence at k = 4
    assert len(cfgs) == 2 * (4 + 2)
    assert [(c.k, c.policy) for c in cfgs[:6]] == [(1, "static"), (2, "static"), (4, "static"), (6, "static"),
                                                    (4, "heuristic"), (4, "confidence")]
    assert {c.temperature for c in cfgs} == {0.0, 0.7} and {c.max_new_tokens for c in cfgs} == {24}
    demo = SpecGrid.from_name("demo")  # the same studies on a smaller grid (CUDA; "demo_cpu" on the CPU)
    assert [(c.k, c.policy) for c in demo.configs()[:5]] == [(1, "static"), (2, "static"), (4, "static"),
                                                             (4, "heuristic"), (4, "confidence")]
    assert demo.n_prompts == 6 and demo.max_new_tokens == 12 and len(demo.drafts) == 3 and {c.temperature for c in demo.configs()} == {0.0, 0.7}
    smoke = SpecGrid.from_name("smoke").configs()
    assert [(c.k, c.policy) for c in smoke[:4]] == [(1, "static"), (2, "static"), (2, "heuristic"),
                                                    (2, "confidence")]
    table = SpecGrid.from_name("spec-table", ks=(3,), n_prompts=None)
    assert table.n_prompts == 120  # None keeps the preset's value
    assert [(c.k, c.policy) for c in table.configs()] == [(3, "static"), (4, "static")] * 2
    assert set(SPEC_GRIDS) == {"demo", "demo_cpu", "full", "smoke", "spec-table"}


@pytest.mark.parametrize("kwargs,match", [({"ks": ()}, "ks"), ({"ks": (0,)}, "ks"), ({"k_policy": 0}, "k_policy"),
                                          ({"policies": ("heuristc",)}, "Did you mean 'heuristic'"),
                                          ({"temperatures": (-1.0,)}, "temperatures"), ({"drafts": ()}, "drafts"),
                                          ({"n_prompts": 0}, "n_prompts")])
def test_bad_grids_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SpecGrid(**kwargs)


def test_unknown_name():
    with pytest.raises(ValueError, match="Did you mean 'smoke'"):
        SpecGrid.from_name("smok")


def test_best_k_table():
    s = pd.DataFrame({"draft": ["a", "b"], "temperature": [0.0, 0.7], "alpha": [0.9, 1.2], "c": [0.05, 1.0]})
    t = best_k_table(s, k_max=16)
    assert list(t.columns) == ["draft", "temperature", "alpha", "c", "best_k", "best_speedup"]
    assert (t.best_k[0], t.best_speedup[0]) == best_k(0.9, 0.05, 16)
    assert (t.best_k[1], t.best_speedup[1]) == best_k(1.0, 1.0, 16)  # alpha clipped to 1
    assert t.best_speedup[1] == pytest.approx(2 / 2)  # c = 1: k = 1 emits 2 tokens for 2 step costs
