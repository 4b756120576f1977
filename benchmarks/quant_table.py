"""Quantization table for the default model: memory, fidelity to FP, MMLU and speed per scheme.

Usage (resumable: an interrupted run skips the points already stored):

    python -m benchmarks.quant_table --n-tokens 4096 --n-questions 0         # CPU, no MMLU
    python -m benchmarks.quant_table --device cuda --dtype bfloat16 --n-questions 10   # + MMLU (570 q.)
    python -m benchmarks.quant_table --grid full                            # notebook 01's 26 points

Rows: the named grid ``--grid`` of ``workbench.quant.GRIDS`` (default ``table``: FP; RTN g128 INT4; GPTQ
and AWQ g128 INT4; INT8 per channel; RTN g128 INT3; RTN per-tensor symmetric INT4; and two g32 INT4 rows
that show the Q4_1 origin of the offline weights, integer vs float zero point). g128 on SmolLM2-135M
uses partial groups: in_features 576 = 4 x 128 + 64. MMLU in lm-eval's ``mmlu_continuation``
formulation (``acc_norm``) unless ``--formulation mmlu``. Speed (decode ms/token at batch 1 and 8,
prefill ms for 512 tokens, peak memory) on the engine on ``--device`` unless ``--no-speed``.
Prints a markdown table and saves it beside the results store entry (``data/results/<name>.md``).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import torch
from workbench.quant.speed import SpeedConfig

from benchmarks.common import environment
from workbench.models import is_random, load_model
from workbench.quant import GRIDS, quant_grid, run_quant_speed, run_quant_sweep
from workbench.results import results_dir


def markdown(df) -> str:
    cols = ["label", "scheme", "MiB", "bits/w (quantized)", "KL mean", "KL p95", "top-1", "ppl"]
    has_mmlu = "mmlu_acc" in df and df["mmlu_acc"].notna().any()
    has_speed = "decode_ms_b1" in df and df["decode_ms_b1"].notna().any()
    cols += ["MMLU [95% CI] (chance 0.25)", "n"] if has_mmlu else []
    cols += ["decode ms b1", "decode ms b8", "prefill ms 512", "peak MiB", "runtime"] if has_speed else []
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        bpw = "-" if r["method"] == "fp" else f"{r['bits_per_weight_quantized']:.2f}"
        cells = [r["label"], r["scheme"], f"{r['weight_bytes'] / 2**20:.1f}", bpw, f"{r['kl_mean']:.4f}",
                 f"{r['kl_p95']:.4f}", f"{r['top1_agreement']:.3f}", f"{r['ppl']:.2f}"]
        if has_mmlu:
            flag = "" if r["mmlu_vs_chance"] == "above chance" else f" ({r['mmlu_vs_chance']})"
            cells += [f"{r['mmlu_acc']:.3f} [{r['mmlu_ci_lo']:.3f}, {r['mmlu_ci_hi']:.3f}]{flag}", str(int(r["mmlu_n"]))]
        if has_speed:
            cells += [f"{r['decode_ms_b1']:.2f}", f"{r['decode_ms_b8']:.2f}", f"{r['prefill_ms_512']:.1f}",
                      f"{r['peak_mem_bytes'] / 2**20:.0f}", str(r["runtime"])]
        lines.append("| " + " | ".join(cells) + " |")
    head = ""
    if has_speed:
        head = f"Speed on {df['speed_device'].iloc[0]} ({df['speed_clock'].iloc[0]} clock; memory: {df['mem_source'].iloc[0]})\n\n"
    if has_mmlu:
        head += f"MMLU: {df['mmlu_formulation'].iloc[0]}, {df['mmlu_metric'].iloc[0]}, {int(df['n_shot'].iloc[0])}-shot\n\n"
    return head + "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--n-tokens", type=int, default=4096, help="WikiText-2 test tokens for KL / top-1 / ppl")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--grid", default=None, choices=sorted(GRIDS),
                    help="named grid of presets (default: table; timing with --speed-only)")
    ap.add_argument("--n-questions", type=int, default=None,
                    help="MMLU questions per subject (0: skip MMLU; default 10 on CUDA, 1 on the CPU)")
    ap.add_argument("--n-shot", type=int, default=None, help="default 0 (mmlu_continuation), 5 (mmlu)")
    ap.add_argument("--formulation", default="mmlu_continuation", choices=["mmlu_continuation", "mmlu"])
    ap.add_argument("--no-speed", action="store_true", help="skip the engine timings")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1 ... (quantization runs there too)")
    ap.add_argument("--dtype", default="float32", help="float32 | bfloat16 | float16")
    ap.add_argument("--only", default=None, help="comma-separated grid indices to run (default all)")
    ap.add_argument("--name", default=None, help="results-store name (default quant_table_<tokens>_<q>)")
    ap.add_argument("--speed-only", action="store_true",
                    help="speed and memory only (workbench.quant.run_quant_speed); implied for a random: model")
    ap.add_argument("--out", default=None, help="also write the speed-only table as JSON here")
    ap.add_argument("--repeats", type=int, default=None, help="timed runs per speed point (SpeedConfig.repeats)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    model, tok = load_model(a.model, dtype=a.dtype, device=a.device)
    if a.speed_only or is_random(model):
        if a.no_speed:
            ap.error("--no-speed contradicts --speed-only (implied for a random: model): drop one of them")
        return speed_only(model, tok, a)
    a.grid = a.grid or "table"
    suffix = "" if (a.device, a.dtype) == ("cpu", "float32") else f"_{a.device.replace(':', '')}_{a.dtype}"
    nq = "auto" if a.n_questions is None else a.n_questions
    grid = "" if a.grid == "table" else f"_{a.grid}"
    name = a.name or f"quant_table{grid}_{a.n_tokens}_{nq}q_{a.formulation}{suffix}"
    table = quant_grid(a.grid)
    configs = [table[int(i)] for i in a.only.split(",")] if a.only else table
    speed = False if a.no_speed else SpeedConfig.for_device(a.device)
    df = run_quant_sweep(model, tok, configs, n_tokens=a.n_tokens, seq_len=a.seq_len, batch_size=a.batch_size,
                         n_questions=a.n_questions, n_shot=a.n_shot, formulation=a.formulation, speed=speed,
                         name=name)
    md = markdown(df)
    print(md, flush=True)
    (results_dir() / f"{name}.md").write_text(md + "\n")


SPEED_COLS = ["label", "scheme", "weights", "decode_ms_b1", "speedup_b1", "decode_ms_b8", "speedup_b8",
              "prefill_ms_512", "peak_mem_bytes", "engine_weight_bytes", "quantize_s", "runtime"]


def speed_only(model, tok, a) -> None:
    """The speed columns of grid ``--grid`` (default for this mode: "timing", the three W4A16 methods) and FP, on a
    model of any weights (``random:qwen2-7b``: timing only); AWQ / GPTQ calibrate on 4 windows of 128 tokens."""
    grid = a.grid or "timing"
    configs = quant_grid(grid, n_calib_samples=4, calib_seq_len=128, awq_max_tokens=512, awq_grid=4)
    configs = [configs[int(i)] for i in a.only.split(",")] if a.only else configs
    name = a.name or re.sub(r"[^A-Za-z0-9_.-]", "_", f"quant_speed_{a.model}_{grid}_{a.device}_{a.dtype}")
    over = {} if a.repeats is None else {"repeats": a.repeats}
    df = run_quant_speed(model, tok, configs, speed=SpeedConfig.for_device(a.device, **over), name=name)
    cols = [c for c in SPEED_COLS if c in df]
    md = (f"Speed on {df['speed_device'].iloc[0]} ({df['speed_clock'].iloc[0]} clock), {df['weights'].iloc[0]}\n\n"
          + "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
          + "\n".join("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in r) + " |"
                      for r in df[cols].itertuples(index=False)))
    print(md, flush=True)
    (results_dir() / f"{name}.md").write_text(md + "\n")
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps({"env": environment(), "model": a.model,
                                           "rows": df.to_dict(orient="records")}, indent=1, default=str))


if __name__ == "__main__":
    main()
