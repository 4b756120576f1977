"""Markdown tables from ``run_all`` / ``bench_mmlu`` JSON (the figures in benchmarks/RESULTS.md).

    python -m benchmarks.report benchmarks/results/run_all.json benchmarks/results/mmlu.json
"""

from __future__ import annotations

import json
import sys


def _t(headers, rows) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def decode_table(d: dict) -> str:
    rows = []
    for key in [k for k in d if k.startswith("decode_")]:
        base = {r["batch"]: r["ms_per_token"] for r in d[key] if r["impl"] == "engine_bf16"}
        for r in d[key]:
            floor = r.get("floor_ms", r["bf16_floor_ms"])
            rows.append([key[7:], r["impl"], r["batch"], f"{r['ms_per_token']:.2f}", f"{floor:.2f}",
                         f"{r['ms_per_token'] / floor:.2f}", f"{base[r['batch']] / r['ms_per_token']:.2f}"
                         if r["batch"] in base else ""])
    return _t(["model", "implementation", "batch", "ms/token", "floor ms", "x floor", "speedup vs engine bf16"], rows)


def prefill_table(d: dict) -> str:
    rows = []
    for key in [k for k in d if k.startswith("prefill_")]:
        for r in d[key]:
            f = max(r["compute_floor_ms"], r["memory_floor_ms"])
            rows.append([key[8:], r["tokens"], f"{r['ms']:.2f}", f"{r['compute_floor_ms']:.2f}",
                         f"{r['ms'] / f:.2f}", f"{r['flops'] / r['ms'] / 1e9:.0f}"])
    return _t(["model", "prompt tokens (batch 1)", "ms", "compute floor ms", "x floor", "achieved TFLOP/s"], rows)


def int4_table(d: dict) -> str:
    rows = []
    for r in d.get("int4_kernels", []):
        err = r["rel_err"] if isinstance(r["rel_err"], str) else f"{r['rel_err']:.4f}"
        rows.append([r["shape"], f"{r['n']}x{r['k']}", r["m"], r["impl"], f"{r['ms'] * 1e3:.1f}", err])
    return _t(["matmul", "N x K", "M", "kernel", "us", "rel. error vs dequantized"], rows)


def spec_table(d: dict) -> str:
    rows = [[r.get("acceptance", "synthetic"), r["alpha"], r["k"], f"{r['c']:.3f}", f"{r['verify_cost']:.3f}", f"{r['tau']:.2f}",
             f"{r['tau_expected']:.2f}", f"{r['spec_ms_per_token']:.2f}", f"{r['realized_speedup']:.3f}",
             f"{r['theoretical_speedup']:.3f}", f"{r['ratio']:.3f}", f"{r['ratio_at_realized_tau']:.3f}"]
            for r in d.get("spec", [])]
    return _t(["acceptance", "alpha", "k", "c", "verify/decode", "tau", "E[tau]", "ms/token", "realized", "theory",
               "realized/theory", "same at realized tau"], rows)


def profile_table(d: dict) -> str:
    rows = []
    for key in [k for k in d if k.startswith("profile_")]:
        for r in d[key][:9]:
            rows.append([key[8:], r["kernel"][:70], f"{r['us_per_step']:.1f}", f"{r['calls_per_step']:.0f}"])
    return _t(["engine", "kernel", "us / step", "calls / step"], rows)


def main(paths):
    for p in paths:
        with open(p) as fh:
            d = json.load(fh)
        print(f"<!-- {p} -->")
        if "env" in d:
            print("env: " + ", ".join(f"{k} {v}" for k, v in d["env"].items()) + "\n")
        if "floors" in d:
            f = d["floors"]
            print(f"floors: copy {f['copy_bw_Bps'] / 1e12:.3f} TB/s (read + write), bf16 matmul "
                  f"{f['matmul_flops'] / 1e12:.0f} TFLOP/s ({f['matmul_n']}^3, random data)\n")
        for name, fn in (("decode", decode_table), ("prefill", prefill_table), ("int4", int4_table),
                         ("spec", spec_table), ("profile", profile_table)):
            if any(k.startswith(name) for k in d):
                print(fn(d) + "\n")
        if "mmlu" in d:
            print(_t(list(d["mmlu"]), [[v if not isinstance(v, float) else f"{v:.4g}" for v in d["mmlu"].values()]]))


if __name__ == "__main__":
    main(sys.argv[1:])
