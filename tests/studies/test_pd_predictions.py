from types import SimpleNamespace

import numpy as np
import pytest

from workbench.pd.sim import WorkloadConfig
from workbench.studies import pd as pd_study


def test_predictions_label_each_row_and_use_the_workload_medians():
    from workbench.predict import available

    if not available():
        pytest.skip("AIConfigurator is not installed: pip install -e '.[predict]'")
    cfg = pd_study.Config.from_name("smoke", device="cpu")
    wl = WorkloadConfig.from_name("chat")
    df = pd_study.predictions(cfg, SimpleNamespace(projection={"workloads": {"chat": wl}}), ("h200_sxm",))
    rng = np.random.default_rng(0)
    assert set(df["isl"]) == {int(np.median(wl.prompt.sample(rng, 2000)))}
    assert set(df["osl"]) == {int(np.median(wl.output.sample(rng, 2000)))}
    assert set(df["label"]) == {"predicted for h200_sxm in vllm"}
    assert sorted(df["mode"]) == ["agg", "disagg"] and int(df["chosen"].sum()) == 1
    assert (df["slo_ttft_ms"] == cfg.slo_ttft_ms).all() and (df["tpot_ms"] > 0).all()
