"""policy_explorer: the default figures are drawn at once, and a control change redraws them from the grid."""

import plotly.io as pio
import pytest

from workbench.pd import CostModel, HardwareSpec, ModelSpec
from workbench.pd.sim import SLO, LengthDist, SimConfig, WorkloadConfig, deployment_grid, sweep_grid
from workbench.pd.widgets import policy_explorer


@pytest.fixture()
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    renderer = pio.renderers.default
    pio.renderers.default = "plotly_mimetype"
    yield InteractiveShell.instance()
    pio.renderers.default = renderer
    InteractiveShell.clear_instance()


def _figs(out):
    return [o["data"]["application/vnd.plotly.v1+json"] for o in out.outputs]


def test_policy_explorer_draws_and_redraws(shell):
    spec, hw = ModelSpec.from_name("qwen2-7b"), HardwareSpec.from_name("h200")
    base = SimConfig.for_hardware(spec, hw)
    wl = {"chat": WorkloadConfig(60, prompt=LengthDist("fixed", 256), output=LengthDist("fixed", 16), seed=0)}
    grid = deployment_grid(base, splits=((1, 1),), chunk_budgets=(512,), link_gbs=(None,))
    quantiles, summary = sweep_grid(wl, grid, CostModel.from_roofline(spec, hw), [10.0, 40.0], SLO(400, 40))

    panel = policy_explorer(summary, quantiles, SLO(400, 40), rate=40.0, link_gbs=base.link_gbs)
    (_, rate, policies), _ = (b.children for b in panel.children[:2])
    out = panel.children[2]
    goodput, cdfs = _figs(out)
    assert cdfs["layout"]["title"]["text"] == "TTFT and TPOT CDFs at 40 req/s"
    labels = {t["name"] for t in goodput["data"]}
    assert {"goodput = rate"} < labels and len(labels) == 4  # 3 deployments (colocated, chunked, P/D) + ideal

    rate.value = 10.0
    assert _figs(out)[1]["layout"]["title"]["text"] == "TTFT and TPOT CDFs at 10 req/s"
    policies.value = ("colocated",)
    goodput = _figs(out)[0]
    assert {t["name"] for t in goodput["data"]} == {"colocated x2", "goodput = rate"}
