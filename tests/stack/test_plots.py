"""Figures take frames and return figures with the right numbers; the slider panels draw and redraw."""

import pandas as pd
import plotly.io as pio
import pytest

from workbench.pd.sim import SLO, LengthDist, WorkloadConfig
from workbench.stack import StackConfig, multiplicativity, plots, stack_table, whatif_batch1
from workbench.stack.load import deployments, simulate_deployment
from workbench.stack.widgets import load_explorer, whatif_explorer

CFG = StackConfig(prompt_len=100, gen_len=10, k=4, workload=WorkloadConfig(30, prompt=LengthDist("fixed", 32),
                                                                           output=LengthDist("fixed", 8)),
                  load_fractions=(0.5, 1.0), table_load=0.5, slo_scales=(1.0, 2.0), whatif_alphas=(0.5, 0.8),
                  whatif_ks=(2, 4))


@pytest.fixture()
def frames(hand_pts):
    deps = deployments(hand_pts, CFG, mem_gb=100.0)
    load = pd.concat([simulate_deployment(d, CFG, [5.0, 10.0], SLO(500.0, 50.0)) for d in deps], ignore_index=True)
    return hand_pts, load, stack_table(hand_pts, load, CFG)


def test_waterfall_steps_add_up(frames):
    _, _, table = frames
    fig = plots.plot_waterfall(table, "decode_tok_s")
    w = fig.data[0]
    assert list(w.x) == ["baseline", "+ W4A16", "+ spec", "+ P/D", "combined"]
    assert w.y[0] == pytest.approx(100.0) and sum(w.y[:4]) == pytest.approx(w.y[4]) == pytest.approx(300.0)
    assert w.text[1] == "x2.00" and w.text[3] == "x1.00" and w.text[4].endswith("(x3.00)")


def test_other_figures(frames):
    pts, load, table = frames
    assert len(plots.plot_multiplicative(multiplicativity(table)).data) == 5
    hm = plots.plot_whatif(whatif_batch1(pts, CFG), quantized=False).data[0]
    assert hm.z.shape == (2, 2)
    buckets = pd.DataFrame({"kv_dtype": ["int8", "int8"], "lo": [0, 256], "hi": [256, 512], "bucket": ["a", "b"],
                            "kl_mean": [1e-3, 2e-3], "top1_agreement": [0.99, 0.98], "top1_lo": [0.98, 0.97],
                            "top1_hi": [1.0, 0.99]})
    assert len(plots.plot_kv_fidelity(buckets).data) == 2
    assert len(plots.plot_goodput_by_deployment(load).data) == load["label"].nunique()


@pytest.fixture()
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    renderer = pio.renderers.default
    pio.renderers.default = "plotly_mimetype"
    yield InteractiveShell.instance()
    pio.renderers.default = renderer
    InteractiveShell.clear_instance()


def _titles(out):
    return [o["data"]["application/vnd.plotly.v1+json"]["layout"]["title"]["text"] for o in out.outputs]


def test_panels_draw_and_redraw(frames, shell):
    pts, load, _ = frames
    panel = load_explorer(load, load_fraction=0.5)
    _frac, scale, _ = panel.children[0].children
    out = panel.children[1]
    assert "SLO x1" in _titles(out)[0]
    scale.value = 2.0
    assert "SLO x2" in _titles(out)[0]
    wl = pd.concat([simulate_deployment(d, CFG, [5.0, 10.0], SLO(500.0, 50.0)).assign(alpha=0.5, k=2)
                    for d in deployments(pts, CFG, 100.0, combos=[(False, True), (True, True)])], ignore_index=True)
    wp = whatif_explorer(whatif_batch1(pts, CFG), wl, alpha=0.5, k=2, load_fraction=0.5)
    assert _titles(wp.children[1])[0] == "what-if alpha=0.5, k=2: batch 1"
    wp.children[0].children[1].value = 4
    assert _titles(wp.children[1])[0] == "what-if alpha=0.5, k=4: batch 1"
