"""The resumable sweep: an interrupted sweep skips finished points when re-run."""

import pandas as pd
import pytest

from workbench.results import sweep


def test_sweep_resumes_after_interruption(tmp_path):
    calls = []

    def fn(cfg):
        if cfg["bits"] == 3 and not calls.count("crashed"):
            calls.append("crashed")
            raise KeyboardInterrupt  # simulate the user stopping the sweep at the third point
        calls.append(cfg["bits"])
        return {"bits": cfg["bits"], "err": 1.0 / cfg["bits"]}

    configs = [{"bits": b} for b in (8, 4, 3, 2)]
    with pytest.raises(KeyboardInterrupt):
        sweep("s", configs, fn, root=tmp_path, progress=False)
    done = pd.read_parquet(tmp_path / "s.parquet")
    assert done["bits"].tolist() == [8, 4]  # finished points were saved one by one
    out = sweep("s", configs, fn, root=tmp_path, progress=False)
    assert calls == [8, 4, "crashed", 3, 2]  # 8 and 4 were not recomputed
    assert out["bits"].tolist() == [8, 4, 3, 2]
    assert out["err"].tolist() == pytest.approx([1 / 8, 1 / 4, 1 / 3, 1 / 2])
