"""A live vLLM server (tests/vllm/conftest.py ``served``): the W4A16 export served, ``vllm bench serve`` and
``/metrics`` read by the workbench's readers, and the files it wrote kept as test data
(``tests/vllm/data/live_*``, rewritten with ``WB_VLLM_REFRESH_DATA=1``, next to the files made from vLLM's source in ``tests/bridges/data``).

The committed live files are re-read without vLLM (``test_committed_live_files``), so the readers stay checked
against a real server's output where ``.venv-vllm`` is absent."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from workbench.bridges import bench_serve_requests, read_bench_serve, read_spec_metrics, spec_metrics_delta
from workbench.bridges.vllm_process import bench_serve

DATA = Path(__file__).parent / "data"
N, IN, OUT = 8, 64, 16  # bench serve: requests, input and output tokens (--ignore-eos: every request emits OUT)
REPEAT = "one two three four five six seven eight " * 6  # a prompt n-gram lookup drafts from


def check_bench(path) -> None:
    """What a `vllm bench serve` file of N requests of IN -> OUT tokens must say, read by both readers."""
    s = read_bench_serve(path).iloc[0]
    assert (s.n_requests, s.n_failed, s.input_tokens, s.output_tokens) == (N, 0, N * IN, N * OUT)
    assert s.p50_ttft_ms <= s.p99_ttft_ms and s.p50_tpot_ms <= s.p99_tpot_ms
    r = bench_serve_requests(path)
    assert len(r) == N and (r.output_len == OUT).all() and (r.prompt_len == IN).all()
    # vLLM's calculate_metrics: tpot = (e2e - ttft) / (n_out - 1), averaged over requests
    assert np.isclose(r.tpot_ms.mean(), s.mean_tpot_ms, rtol=1e-9)
    assert np.isclose(r.ttft_ms.mean(), s.mean_ttft_ms, rtol=1e-9)
    assert (r.e2e_ms >= r.ttft_ms).all()


def check_spec(before: str, after: str) -> dict:
    row = spec_metrics_delta(before, after).iloc[0]
    assert row.num_drafts > 0 and row.num_draft_tokens >= row.num_drafts
    assert row.k == 3 and row.num_draft_tokens <= 3 * row.num_drafts
    # vLLM counts every accepted token once at its position: the per-position counts sum to the total
    assert sum(row.num_accepted_tokens_per_pos) == row.num_accepted_tokens
    assert np.isclose(row.tau, 1 + row.num_accepted_tokens / row.num_drafts)
    assert read_spec_metrics(after).iloc[0].num_drafts >= row.num_drafts
    return row.to_dict()


def test_w4a16_export_is_served(served):
    """vLLM loads the workbench's compressed-tensors export (its W4A16 kernel) and answers greedily: the same
    prompt twice gives the same tokens, and the built-in model's known answer (it says Paris)."""
    a = served.completion("The capital of France is", max_tokens=6)["choices"][0]["text"]
    b = served.completion("The capital of France is", max_tokens=6)["choices"][0]["text"]
    assert a == b and "Paris" in a
    cfg = json.loads((Path(served.model) / "config.json").read_text())["quantization_config"]
    assert cfg["quant_method"] == "compressed-tensors"
    assert "quantization_config" in served.log() or "compressed" in served.log().lower()


def test_bench_serve_and_metrics_from_a_live_server(served, tmp_path):
    before = served.metrics()
    for _ in range(2):
        served.completion(REPEAT, max_tokens=24)
    after = served.metrics()
    row = check_spec(before, after)
    path = bench_serve(served, tmp_path, num_prompts=N, request_rate=4, input_len=IN, output_len=OUT)
    check_bench(path)
    if os.environ.get("WB_VLLM_REFRESH_DATA") == "1":  # refresh the committed copies (git shows the change)
        DATA.mkdir(exist_ok=True)
        shutil.copy(path, DATA / "live_bench_serve.json")
        (DATA / "live_metrics_before.txt").write_text(before)
        (DATA / "live_metrics_after.txt").write_text(after)
    assert row["num_accepted_tokens"] > 0  # n-gram lookup on a repeating prompt accepts drafts


def test_committed_live_files():
    """The files a live vLLM 0.32.0 (CPU) server wrote, read without vLLM."""
    if not (DATA / "live_bench_serve.json").exists():
        pytest.skip("no live files committed yet (run the vllm tests once with .venv-vllm)")
    check_bench(DATA / "live_bench_serve.json")
    check_spec((DATA / "live_metrics_before.txt").read_text(), (DATA / "live_metrics_after.txt").read_text())


def test_spec_check_fails_on_a_planted_bug():
    """The spec check catches per-position counts that do not sum to the total (a planted off-by-one)."""
    if not (DATA / "live_metrics_after.txt").exists():
        pytest.skip("no live files committed yet")
    after = (DATA / "live_metrics_after.txt").read_text()
    line = next(ln for ln in after.splitlines() if ln.startswith("vllm:spec_decode_num_accepted_tokens_total"))
    val = float(line.rsplit(" ", 1)[1])
    bad = after.replace(line, line.rsplit(" ", 1)[0] + f" {val + 1}")
    with pytest.raises(AssertionError):
        check_spec((DATA / "live_metrics_before.txt").read_text(), bad)
