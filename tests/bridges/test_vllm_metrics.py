"""vLLM measurements in: ``vllm bench serve --save-result`` JSON and ``/metrics`` spec-decoding counters.

The sample files are written by vLLM 0.33.0's own functions, compiled from its source (see
``conftest.VllmCode``): ``calculate_metrics`` + ``benchmark()``'s ``result`` literal and
``process_one_metric`` + ``main_async``'s setup block for the JSON; ``SpecDecodingStats.observe_draft``
+ ``SpecDecodingProm.observe`` on a ``prometheus_client`` registry for the ``/metrics`` text. Committed
copies in ``data/`` keep the reader tests running offline; ``test_committed_samples_are_vllms``
regenerates them from the source.
"""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.bridges.plots import compare_sim_vllm, plot_sim_vs_vllm
from workbench.bridges.vllm_metrics import (
    SPEC_COUNTERS,
    bench_serve_requests,
    read_bench_serve,
    read_spec_metrics,
    spec_metrics_delta,
)
from workbench.pd.metrics import SLO, summarize
from workbench.spec.metrics import SpecDecodingStats

DATA = Path(__file__).parent / "data"
SLO_GOODPUT = {"ttft": 150.0, "tpot": 25.0}
STATS = ["mean", "p50", "p90", "p99"]


def _wb_stats(steps) -> SpecDecodingStats:
    s = SpecDecodingStats()
    for _engine, drafted, accepted in steps:
        s.observe(drafted, accepted)
    return s


def test_spec_counters_match_specdecodingstats(bh):
    # 300 steps of k=4 on two engines; expected values from the workbench's own accumulator
    text = (DATA / "vllm-0.33.0_metrics_after.txt").read_text()
    got = read_spec_metrics(text).iloc[0]
    want = _wb_stats(bh.PLANTED_STEPS).summary()
    for col in ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_rejections"):
        assert got[col] == want[col], col
    for col in ("alpha", "tau", "draft_acceptance_rate"):
        assert got[col] == pytest.approx(want[col], rel=1e-12), col
    assert got["acceptance_per_pos"] == pytest.approx(_wb_stats(bh.PLANTED_STEPS).acceptance_per_pos, rel=1e-12)
    assert got["k"] == 4 and 0.55 < got["alpha"] < 0.85  # planted alpha 0.7


def test_spec_delta_is_the_window(bh):
    before = (DATA / "vllm-0.33.0_metrics_before.txt").read_text()
    after = (DATA / "vllm-0.33.0_metrics_after.txt").read_text()
    got = spec_metrics_delta(before, after).iloc[0]
    want = _wb_stats(bh.PLANTED_STEPS[100:]).summary()  # 'before' was scraped after the first 100 steps
    assert (got["num_drafts"], got["num_accepted_tokens"]) == (want["num_drafts"], want["num_accepted_tokens"])
    assert got["tau"] == pytest.approx(want["tau"], rel=1e-12)
    assert got["alpha"] == pytest.approx(want["alpha"], rel=1e-12)


def test_alpha_not_identifiable_with_variable_k(vllm_code):
    # a step that drafted fewer than k tokens breaks "rejected iff last position not accepted"
    text = vllm_code.metrics_text([(0, 3, 3), (0, 2, 2), (0, 3, 1)], k=3)
    row = read_spec_metrics(text).iloc[0]
    assert np.isnan(row["alpha"]) and row["tau"] == pytest.approx(1 + 6 / 3)


def test_no_spec_counters_is_an_error():
    with pytest.raises(ValueError, match="--speculative-config"):
        read_spec_metrics("# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n"
                          'vllm:num_requests_running{engine="0",model_name="m"} 1.0\n')


def test_our_reader_agrees_with_vllms_reader(vllm_code):
    text = (DATA / "vllm-0.33.0_metrics_after.txt").read_text()
    ref = vllm_code.fetch_spec_decode_metrics(text)  # vLLM bench serve's own parser
    row = read_spec_metrics(text).iloc[0]
    assert (row["num_drafts"], row["num_draft_tokens"], row["num_accepted_tokens"]) == \
        (ref.num_drafts, ref.num_draft_tokens, ref.num_accepted_tokens)
    assert row["num_accepted_tokens_per_pos"] == [ref.accepted_per_pos[i] for i in range(4)]


def test_bench_serve_aggregates_equal_workbench_summarize(bh):
    """vLLM's calculate_metrics (mean/median/p90/p99 of TTFT, TPOT, ITL, E2EL; goodput) equals the
    workbench's summarize() over the per-request rows read from the same file."""
    path = DATA / "vllm-0.33.0_bench_serve.json"
    vl = read_bench_serve(path).iloc[0]
    reqs = bench_serve_requests(path)
    wb = summarize(reqs, SLO(ttft_ms=SLO_GOODPUT["ttft"], tpot_ms=SLO_GOODPUT["tpot"])).iloc[0]
    assert len(reqs) == vl["n_requests"] == 11 and vl["n_failed"] == 1  # the failed request is dropped
    for m in ("ttft", "tpot", "itl", "e2e"):
        for s in STATS:
            assert wb[f"{s}_{m}_ms"] == pytest.approx(vl[f"{s}_{m}_ms"], rel=1e-9), f"{s}_{m}_ms"
    # vLLM divides by the benchmark's wall time; the count of good requests is the same
    assert round(wb["goodput_rps"] * wb["duration_s"]) == round(vl["goodput_rps"] * vl["duration_s"]) == 5
    assert vl["tau"] == pytest.approx(_wb_stats(bh.PLANTED_STEPS[100:]).tau, rel=1e-12)
    assert vl["draft_acceptance_rate"] == pytest.approx(_wb_stats(bh.PLANTED_STEPS[100:]).draft_acceptance_rate)


def test_bench_serve_one_token_request_has_nan_tpot():
    reqs = bench_serve_requests(DATA / "vllm-0.33.0_bench_serve.json")
    one = reqs[reqs["output_len"] == 1]
    assert len(one) == 1 and np.isnan(one["tpot_ms"].iloc[0]) and one["itl_ms"].iloc[0] == []


def test_bench_serve_without_detail_and_appended(tmp_path, vllm_code, bh):
    plain = vllm_code.bench_result(bh.planted_requests(), 3.3, save_detailed=False)
    assert "ttfts" not in plain and "latencies" in plain  # as main_async prunes without --save-detailed
    f = tmp_path / "appended.json"
    f.write_text(json.dumps(plain) + "\n" + json.dumps(plain))  # --append-result layout
    df = read_bench_serve(f)
    assert len(df) == 2 and df["mean_ttft_ms"].iloc[0] == pytest.approx(plain["mean_ttft_ms"])
    assert np.isnan(df["goodput_rps"].iloc[0])  # no --goodput: request_goodput is null
    with pytest.raises(ValueError, match="--save-detailed"):
        bench_serve_requests(f)
    with pytest.raises(ValueError, match="vllm bench serve"):
        read_bench_serve({"foo": 1})


def test_names_read_exist_in_vllm_source(vllm_src):
    strings = set(vllm_src.string_constants("vllm/v1/spec_decode/metrics.py", "SpecDecodingProm", "__init__"))
    assert set(SPEC_COUNTERS) <= strings
    sample = json.loads((DATA / "vllm-0.33.0_bench_serve.json").read_text())
    from workbench.bridges.vllm_metrics import _RENAME

    assert set(_RENAME) <= set(sample), set(_RENAME) - set(sample)


def test_bench_serve_args_exist(vllm_src):
    from workbench.bridges.vllm_metrics import BENCH_SERVE_ARGS

    flags = {a for a in BENCH_SERVE_ARGS if a.startswith("--")}
    assert flags <= set(vllm_src.string_constants("vllm/benchmarks/serve.py", None, "add_cli_args"))


def test_committed_samples_are_vllms(vllm_code, bh):
    """data/ holds what vLLM 0.33.0's own code writes for the planted requests and steps."""

    def strip(t):  # the _created gauges and the JSON's "date" hold wall-clock times
        return [ln for ln in t.splitlines() if "_created" not in ln and not ln.startswith('{"date"')]

    for name, text in bh.samples(vllm_code).items():
        committed = (DATA / name).read_text()
        if name.endswith(".json"):
            got, want = json.loads(text), json.loads(committed)
            got.pop("date"), want.pop("date")
            assert got == want, name
        else:
            assert strip(text) == strip(committed), name


def test_sim_vs_vllm_table_and_figure():
    path = DATA / "vllm-0.33.0_bench_serve.json"
    vl = read_bench_serve(path)
    sim = summarize(bench_serve_requests(path).assign(ttft_ms=lambda d: d["ttft_ms"] * 1.1))
    cmp = compare_sim_vllm(sim, vl)
    by = cmp.set_index("metric")
    assert by.loc["mean_ttft_ms", "err_pct"] == pytest.approx(10.0)
    assert by.loc["mean_tpot_ms", "err_pct"] == pytest.approx(0.0, abs=1e-9)
    fig = plot_sim_vs_vllm(cmp)
    assert {t.name for t in fig.data} == {"vLLM", "simulator"} and len(fig.data) % 2 == 0
    with pytest.raises(ValueError, match="one-row"):
        compare_sim_vllm(pd.concat([sim, sim]), vl)


def test_spec_delta_refuses_a_server_restart(vllm_code, bh):
    """Two scrapes with a restart between them: after - before is not the window. A restart that left the
    counters lower (negative counts with plausible ratios) and one that left them higher (only the
    counters' _created times show it) both raise, naming the restart; one server's scrapes do not."""
    before, after = vllm_code.metrics_scrapes(bh.PLANTED_STEPS, k=4, at=(100, 300), engines=2)
    assert spec_metrics_delta(before, after).iloc[0]["num_drafts"] == 200
    lower = vllm_code.metrics_text(bh.PLANTED_STEPS[:50], k=4, engines=2)  # a new server, fewer steps so far
    with pytest.raises(ValueError, match=r"server restarted between the two /metrics scrapes: counters "):
        spec_metrics_delta(before, lower)
    higher = vllm_code.metrics_text(bh.PLANTED_STEPS, k=4, engines=2)  # a new server that has done more
    with pytest.raises(ValueError, match=r"restarted .* counters recreated \(vllm:spec_decode_num_"):
        spec_metrics_delta(before, higher)
    with pytest.raises(ValueError, match=r"counters went down \(num_drafts 100 -> 50"):
        spec_metrics_delta(_drop_created(before), _drop_created(lower))


def _drop_created(text: str) -> str:
    """The text without its _created samples (an exporter that does not expose them)."""
    return "".join(ln for ln in text.splitlines(keepends=True) if "_created" not in ln)


def test_truncated_bench_json_names_the_file(tmp_path):
    text = (DATA / "vllm-0.33.0_bench_serve.json").read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 2])
    with pytest.raises(ValueError, match=rf"{cut}: not valid JSON at line 1, column \d+ .*truncated"):
        read_bench_serve(cut)
    with pytest.raises(ValueError, match=rf"{cut}: not valid JSON"):
        bench_serve_requests(cut)
