"""workbench.predict against AIConfigurator itself (its own CLI entry points called directly), the issue's
figures, the stand-in's stated scaling, and the errors that name what is supported.

Needs ``aiconfigurator`` (requirements/cpu.txt installs it on Python >= 3.11); without it these tests skip
with the install command, and ``test_unavailable.py`` checks the message users get."""

import logging
import math

import pytest

from workbench.predict.aic import INSTALL_HINT, available

if not available():
    pytest.skip(f"AIConfigurator is not installed: {INSTALL_HINT}", allow_module_level=True)

from aiconfigurator.cli.api import cli_default, cli_estimate

from workbench.pd.costmodel import CostModel
from workbench.predict import (
    STAND_INS,
    batch1_table,
    claim_predictions,
    plot_batch1,
    plot_steps,
    predict,
    recommend,
    step_costs,
    systems,
)
from workbench.registry import UnknownNameError


def _reference(model, system, **kw):
    logging.disable(logging.WARNING)
    try:
        return cli_estimate(model, system, backend_name="vllm", **kw)
    finally:
        logging.disable(logging.NOTSET)


def test_llama3_8b_shape_gives_aiconfigurators_own_answer_for_its_shipped_config():
    """The workbench's Llama-3-8B shape, written as a config.json, predicts exactly what AIConfigurator
    predicts from the config it ships for meta-llama/Meta-Llama-3.1-8B; and those are the issue's figures
    (``aiconfigurator cli estimate ... --system h200_sxm --backend vllm --estimate-mode static``: 4.81 / 5.22 /
    5.96 ms at batch 1 / 16 / 64, ISL = OSL = 128)."""
    df = predict("llama3-8b", "h200_sxm", "vllm", "bf16", batch_sizes=(1, 16, 64), isl=128, osl=128)
    for b, want in zip((1, 16, 64), (4.81, 5.22, 5.96)):
        ref = _reference("meta-llama/Meta-Llama-3.1-8B", "h200_sxm", mode="static", batch_size=b, isl=128, osl=128)
        row = df[df["batch_size"] == b].iloc[0]
        assert row["tpot_ms"] == pytest.approx(ref.tpot, rel=1e-9)
        assert row["ttft_ms"] == pytest.approx(ref.ttft, rel=1e-9)
        assert round(row["tpot_ms"], 2) == want
    assert (df["label"] == "predicted for h200_sxm in vllm").all()
    assert df["source"].iloc[0].startswith("aiconfigurator 0.12.0 / vllm ")
    # rates follow from the times: per user 1000 / TPOT; per GPU b * OSL tokens over TTFT + (OSL - 1) TPOT
    r = df.iloc[1]
    assert r["tokens_per_s_per_user"] == pytest.approx(1000 / r["tpot_ms"])
    assert r["tokens_per_s_per_gpu"] == pytest.approx(1000 * 16 * 128 / (r["ttft_ms"] + 127 * r["tpot_ms"]))


def test_rtx_4090_stand_in_is_the_l40s_with_decode_scaled_by_bandwidth():
    """864/1008 on TPOT, TTFT unscaled, the scaling stated in the row."""
    l40s = predict("qwen2-7b", "l40s", batch_sizes=(1,)).iloc[0]
    r4090 = predict("qwen2-7b", "rtx-4090", batch_sizes=(1,)).iloc[0]
    assert r4090["system"] == "l40s"
    assert r4090["tpot_ms"] == pytest.approx(l40s["tpot_ms"] * 864 / 1008, rel=1e-12)
    assert r4090["ttft_ms"] == pytest.approx(l40s["ttft_ms"], rel=1e-12)
    assert "864/1008" in r4090["stand_in"] and r4090["stand_in"].startswith("l40s for rtx-4090: ")
    assert l40s["stand_in"] == ""
    assert "QKV bias" in r4090["note"]  # Qwen2 through AIConfigurator's LLAMA family, stated
    assert STAND_INS["rtx-4090"].decode_scale == pytest.approx(0.857, abs=5e-4)


def test_step_costs_are_single_steps_whose_mean_is_the_static_tpot():
    """A static batch's TPOT is its decode steps' mean: the one-step decode estimates at contexts
    128..255 (every 32nd, AIConfigurator's own stride) average to within 2% of the TPOT of ISL = OSL = 128."""
    steps = step_costs("llama3-8b", "h100_sxm", decode_batches=(1,), context_lens=(128, 160, 192, 224),
                       prompt_lens=(512,))
    dec = steps[steps["phase"] == "decode"]
    tpot = predict("llama3-8b", "h100_sxm", batch_sizes=(1,), isl=128, osl=128).iloc[0]["tpot_ms"]
    assert dec["ms"].mean() == pytest.approx(tpot, rel=0.02)
    pre = steps[steps["phase"] == "prefill"].iloc[0]
    ref = _reference("meta-llama/Meta-Llama-3.1-8B", "h100_sxm", mode="static_ctx", batch_size=1, isl=512, osl=1)
    assert pre["ms"] == pytest.approx(ref.ttft, rel=1e-9)
    assert pre["attn_sq"] == 512**2 and dec["kv_tokens"].tolist() == [128, 160, 192, 224]


def test_a_cost_model_fits_the_predicted_steps():
    """The frame has the measured profile's schema: CostModel.fit takes it; the fit is within 10% per point
    and decode cost rises with the batch."""
    steps = step_costs("llama3-8b", "h200_sxm", context_lens=(512,), prompt_lens=(256, 512, 2048))
    cm = CostModel.fit(steps)
    assert cm.residuals(steps)["rel_err"].abs().max() < 0.10
    dec = steps[steps["phase"] == "decode"].sort_values("batch")["ms"].to_numpy()
    assert dec[-1] > dec[0]


@pytest.fixture(scope="module")
def rec():
    return recommend("llama3-8b", "h200_sxm", total_gpus=8, isl=512, osl=128, ttft_ms=400, tpot_ms=40)


def test_recommend_reports_aiconfigurators_pick_and_pd_workers(rec):
    """The frame's figures are cli_default's best rows; the chosen mode has the higher tokens/s per GPU;
    every reported point meets the SLOs; workers x tp fit in the GPUs."""
    logging.disable(logging.WARNING)
    try:
        ref = cli_default("meta-llama/Meta-Llama-3.1-8B", 8, "h200_sxm", backend="vllm", isl=512, osl=128, ttft=400,
                          tpot=40, top_n=1)
    finally:
        logging.disable(logging.NOTSET)
    assert rec.loc[rec["chosen"], "mode"].item() == ref.chosen_exp
    best = rec.loc[rec["tokens_per_s_per_gpu"].idxmax(), "mode"]
    assert best == ref.chosen_exp
    for mode in ("agg", "disagg"):
        r = rec[rec["mode"] == mode].iloc[0]
        assert r["tokens_per_s_per_gpu"] == pytest.approx(ref.best_throughputs[mode], rel=1e-3)
        assert r["ttft_ms"] <= 400 and r["tpot_ms"] <= 40
        assert r["n_gpus"] <= 8
    d = rec[rec["mode"] == "disagg"].iloc[0]
    assert d["pd_ratio"] == f"{int(d['prefill_workers'])}:{int(d['decode_workers'])}"
    assert (d["prefill_workers"] * d["prefill_tp"] + d["decode_workers"] * d["decode_tp"]) == d["n_gpus"]
    a = rec[rec["mode"] == "agg"].iloc[0]
    assert a["goodput_rps"] == pytest.approx(a["goodput_rps_per_gpu"] * a["n_gpus"])


@pytest.mark.parametrize("call, match", [
    (lambda: predict("llama3-8b", "h100", batch_sizes=(1,)), r"Did you mean 'h100_pcie'|Did you mean 'h100_sxm'"),
    (lambda: predict("llama3-8b", "h200_sxm", "tgi"), r"engine='tgi' is unknown; choose one of \['sglang', 'trtllm', 'vllm'\]"),
    (lambda: predict("llama3-8b", "h200_sxm", "vllm", "W4A16"), r"no vllm GEMM table on h200_sxm; it has \['bfloat16'"),
    (lambda: predict({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}, "h200_sxm"),
     r"no model family for architecture 'GPT2LMHeadModel'.*LlamaForCausalLM"),
    (lambda: predict("qwen2-7", "h200_sxm"), r"neither a model AIConfigurator ships.*qwen2-7b"),
    (lambda: predict("llama3-8b", "h200_sxm", osl=1), r"osl >= 2"),
    (lambda: recommend("qwen2-7b", "rtx-4090"), r"not made for a stand-in"),
    (lambda: predict("smollm2-135m", "h100_sxm"), r"no measured kernels for smollm2-135m on h100_sxm.*head_size: 64"),
])
def test_bad_input_names_what_is_supported(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_unknown_system_is_an_unknown_name_error():
    with pytest.raises(UnknownNameError, match="rtx-4090"):  # stand-ins are listed among the choices
        predict("llama3-8b", "rtx-5090")


def test_systems_lists_tables_and_stand_ins():
    s = systems()
    assert {"h100_sxm", "h200_sxm", "l40s", "b200_sxm"} <= set(s["system"])
    assert set(s["engine"]) <= {"vllm", "sglang", "trtllm"}
    l40s = s[(s["system"] == "l40s") & (s["engine"] == "vllm")].iloc[0]
    assert l40s["mem_bw_gbs"] == pytest.approx(864) and l40s["stand_in_for"] == "rtx-4090"


def test_claim_predictions_feed_claim_1_as_a_labelled_prediction():
    """Qwen2-7B bf16 batch 1 on the 4090 stand-in: TPOT = L40S's x 864/1008; the ledger's verdict on the
    claimed 18 tokens/s baseline is computed from it and labelled a prediction naming the tool, engine and
    stand-in, never "measured"."""
    from workbench.claims import collect_evidence, load_records
    from workbench.claims.ledger import run_rule
    from workbench.claims.support import PREDICTION_COLUMNS

    cp = claim_predictions()
    assert list(cp.columns[:len(PREDICTION_COLUMNS)]) == list(PREDICTION_COLUMNS)
    assert cp["precision"].tolist() == ["bfloat16"]  # no W4A16 (int4_wo) GEMM table in the vLLM tables
    assert "int4_wo" in cp.attrs["skipped"][0][2]
    rate = 1000 / cp.iloc[0]["tpot_ms"]
    rec = {r.id: r for r in load_records()}[1]
    v = run_rule(rec, collect_evidence(predictions=cp, mechanisms=False))
    assert v.basis.startswith("predicted (aiconfigurator 0.12.0 / vllm ") and "l40s standing in for rtx-4090" in v.basis
    assert f"{rate:.1f} tokens/s" in v.measured
    want = "contradicted" if abs(rate - 18) / 18 > 0.25 else "not testable here"
    assert v.verdict == want


def test_plots_draw_one_trace_group_per_label():
    b1 = batch1_table("llama3-8b", ["h100_sxm", "h200_sxm"], precisions=("bf16", "fp8"))
    assert len(b1) == 4 and set(b1["technique"]) == {"16-bit baseline", "FP8 weights and activations (W8A8)"}
    fig = plot_batch1(b1, measured=b1.iloc[:1][["technique", "tokens_per_s"]])
    assert [t.name for t in fig.data] == ["predicted for h100_sxm in vllm", "predicted for h200_sxm in vllm",
                                          "measured here"]
    steps = step_costs("llama3-8b", "h200_sxm", decode_batches=(1, 8), prompt_lens=(512,))
    fig = plot_steps(steps)
    assert len(fig.data) == 2 and not math.isnan(fig.data[0].y[0])
