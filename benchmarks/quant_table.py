"""Quantization table for the default model: memory, fidelity to FP and (optionally) MMLU per scheme.

Usage (CPU, resumable: an interrupted run skips the points already stored):

    python benchmarks/quant_table.py --n-tokens 4096 --n-questions 0
    python benchmarks/quant_table.py --n-questions 10      # + MMLU 5-shot, 10 per subject (570)

Rows: FP; RTN per-tensor symmetric INT4; RTN g128 INT4; AWQ g128 INT4; GPTQ g128 INT4; INT8 per-channel;
RTN g128 INT3; and two g32 INT4 rows that show the Q4_1 origin of the offline weights (integer vs float
zero point). g128 on SmolLM2-135M uses partial groups: in_features 576 = 4 x 128 + 64.
Prints a markdown table and saves it beside the results store entry (``data/results/<name>.md``).
"""

from __future__ import annotations

import argparse

import torch

from workbench.models import load_model
from workbench.quant import QuantConfig, run_quant_sweep
from workbench.results import results_dir

TABLE = [  # most informative first: a run cut short by its time budget still answers the main question
    QuantConfig(method="rtn", bits=4, group_size=128, partial_groups=True),
    QuantConfig(method="gptq", bits=4, group_size=128, partial_groups=True),
    QuantConfig(method="awq", bits=4, group_size=128, partial_groups=True),
    QuantConfig(method="rtn", bits=8, granularity="per_channel", symmetric=True),
    QuantConfig(method="rtn", bits=3, group_size=128, partial_groups=True),
    QuantConfig(method="rtn", bits=4, granularity="per_tensor", symmetric=True),
    QuantConfig(method="rtn", bits=4, group_size=32),
    QuantConfig(method="rtn", bits=4, group_size=32, zero_point="float"),
]


def markdown(df) -> str:
    cols = ["label", "scheme", "MiB", "bits/w (quantized)", "KL mean", "KL p95", "top-1", "ppl"]
    has_mmlu = "mmlu_acc" in df and df["mmlu_acc"].notna().any()
    cols += ["MMLU acc [95% CI]", "n"] if has_mmlu else []
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        bpw = "-" if r["method"] == "fp" else f"{r['bits_per_weight_quantized']:.2f}"
        cells = [r["label"], r["scheme"], f"{r['weight_bytes'] / 2**20:.1f}", bpw, f"{r['kl_mean']:.4f}",
                 f"{r['kl_p95']:.4f}", f"{r['top1_agreement']:.3f}", f"{r['ppl']:.2f}"]
        if has_mmlu:
            cells += [f"{r['mmlu_acc']:.3f} [{r['mmlu_ci_lo']:.3f}, {r['mmlu_ci_hi']:.3f}]", str(int(r["mmlu_n"]))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--n-tokens", type=int, default=4096, help="WikiText-2 test tokens for KL / top-1 / ppl")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--n-questions", type=int, default=0, help="MMLU questions per subject (0: skip MMLU)")
    ap.add_argument("--n-shot", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1 ... (quantization runs there too)")
    ap.add_argument("--dtype", default="float32", help="float32 | bfloat16 | float16")
    ap.add_argument("--only", default=None, help="comma-separated TABLE indices to run (default all)")
    ap.add_argument("--name", default=None, help="results-store name (default quant_table_<tokens>_<q>)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    model, tok = load_model(a.model, dtype=a.dtype, device=a.device)
    suffix = "" if (a.device, a.dtype) == ("cpu", "float32") else f"_{a.device.replace(':', '')}_{a.dtype}"
    name = a.name or f"quant_table_{a.n_tokens}_{a.n_questions}q{suffix}"
    configs = [TABLE[int(i)] for i in a.only.split(",")] if a.only else TABLE
    df = run_quant_sweep(model, tok, configs, n_tokens=a.n_tokens, seq_len=a.seq_len, batch_size=a.batch_size,
                         n_questions=a.n_questions, n_shot=a.n_shot, name=name)
    md = markdown(df)
    print(md, flush=True)
    (results_dir() / f"{name}.md").write_text(md + "\n")


if __name__ == "__main__":
    main()
