"""The stacked study's 8-combination table for random-init Qwen2-7B, and the claims ledger.

Target: Qwen2-7B's published config with random weights (timing only), bf16 and W4A16 engines; draft:
Qwen2-0.5B's config with random weights and the target's 152,064 vocabulary rows (the real 0.5B pads to
151,936; speculative decoding needs one vocabulary). A random pair has no real acceptance, so every
speculative row runs at a what-if alpha: the built-in model's measured acceptance with its INT4 self-draft
(measured here when the built-in model loads, else read from ``--alpha-from``, a JSON written by this
script's ``--alpha-only`` run on a machine that has it). Everything else is measured through the package
(:func:`workbench.stack.run_stack`, :mod:`workbench.claims`); this script only chooses sizes.

    python -m benchmarks.stack_table --out $OUT                      # H200: well under 5 minutes
    python -m benchmarks.stack_table --smoke --out /tmp/st           # CPU, tiny configs, about a minute
    python -m benchmarks.stack_table --alpha-only --out benchmarks/results   # the built-in alpha, on the CPU

Writes ``stack_table.json`` (table, multiplicativity, points, ledger, alpha and its source, timings,
environment) and ``stack_table.md`` (the tables as markdown) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd
import torch

from benchmarks.common import QWEN2_0_5B, QWEN2_7B, environment
from workbench.pd.profile import ProfileConfig
from workbench.pd.sim import SLO, LengthDist, WorkloadConfig

ALPHA_FILE = Path(__file__).resolve().parent / "results" / "stack_builtin_alpha_cpu.json"
TINY_T = {"model_type": "qwen2", "vocab_size": 512, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 1024, "tie_word_embeddings": False}
TINY_D = TINY_T | {"num_hidden_layers": 1, "hidden_size": 64, "intermediate_size": 128}


def builtin_alpha(device: str, k: int, n_prompts: int, gen_len: int) -> dict | None:
    """The built-in model's acceptance with its INT4 self-draft on Spec-Bench prompts, or None if it does
    not load here."""
    from workbench.data import load_prompts
    from workbench.engine import Engine
    from workbench.models import BUILTINS, ModelNotAvailableError, cache_dir, cached_copies, load_model
    from workbench.spec import encode_prompts, make_draft
    from workbench.stack.batch1 import measure_acceptance

    b = BUILTINS["smollm2-135m"]
    if not cached_copies(b) and not (cache_dir() / "gguf" / Path(b.gguf_member).name).exists():
        print(f"# built-in model not cached here; alpha from {ALPHA_FILE.name}", flush=True)  # (no download)
        return None
    try:
        model, tok = load_model("smollm2-135m", dtype="bfloat16" if device == "cuda" else "float32", device=device)
        prompts = encode_prompts(tok, load_prompts("spec-bench", n=n_prompts, seed=0), max_prompt_tokens=128)
    except (ModelNotAvailableError, OSError) as e:
        print(f"# built-in model or Spec-Bench not available ({type(e).__name__}); alpha from {ALPHA_FILE.name}",
              flush=True)
        return None
    draft, _ = make_draft(model, "int4", tok)
    seq = int(prompts.n_prompt.max()) + gen_len + k + 2
    t, d = Engine.from_hf(model, max_seq=seq), Engine.from_hf(draft, max_seq=seq)
    out = measure_acceptance(t, d, list(prompts.prompt_ids), k=k, gen_len=gen_len)
    return out | {"source": f"smollm2-135m + int4 self-draft, {n_prompts} Spec-Bench prompts, greedy, on {device}"}


def study_config(smoke: bool, alpha: float, k: int):
    from workbench.stack import StackConfig

    if smoke:
        return StackConfig(target="random:tiny-qwen2", draft="random:tiny-draft", group_size=32, k=k, alpha=alpha,
                           prompt_len=32, gen_len=8,
                           profile=ProfileConfig(prompt_lens=(16, 32, 64), prefill_batches=(1,), decode_batches=(1, 2, 4),
                                                 context_lens=(32,), repeats=1, warmup=0),
                           workload=WorkloadConfig(60, prompt=LengthDist("lognormal", 32, 8, 64, 0.5),
                                                   output=LengthDist("lognormal", 8, 2, 16, 0.5)),
                           load_fractions=(0.5, 1.0), table_load=0.5, whatif_alphas=(0.6, 0.8), whatif_ks=(2, k))
    return StackConfig(target="random:qwen2-7b", draft="random:qwen2-0.5b (vocab 152064)", group_size=128, k=k,
                       alpha=alpha, prompt_len=512, gen_len=128, repeats=3, slo=SLO(400.0, 40.0),
                       profile=ProfileConfig(prompt_lens=(128, 512, 1024, 2048), prefill_batches=(1, 2, 4),
                                             decode_batches=(1, 4, 16, 32), context_lens=(256, 1024), repeats=5),
                       workload=WorkloadConfig(1000, prompt=LengthDist("lognormal", 512, 16, 4096, 0.8),
                                               output=LengthDist("lognormal", 128, 2, 1024, 0.8)),
                       splits=((1, 1), (1, 2), (2, 1)), whatif_alphas=(0.5, 0.6, 0.7, 0.8, 0.9), whatif_ks=(2, 3, 4, 5, 6, 7))


def ledger(res, cfg, device: str) -> pd.DataFrame:
    from workbench.claims import collect_evidence, evaluate
    from workbench.claims.evidence import spec_cost_evidence, stack_evidence
    from workbench.claims.serving import long_prompt_evidence, pd16_evidence, vllm_flags_evidence
    from workbench.pd import HardwareSpec

    bw = HardwareSpec.measure(device, copy_mb=1024 if device == "cuda" else 16).hbm_gbs
    ev = collect_evidence(stack=stack_evidence(res.table, res.multiplicative, res.points, target=cfg.target, device=device,
                                               bandwidth_gbs=bw),
                          spec_costs=spec_cost_evidence(res.points), long_prompt=long_prompt_evidence(res.points, cfg, res.mem_gb),
                          pd16=pd16_evidence(res.points, cfg, res.mem_gb), vllm_flags=vllm_flags_evidence())
    return evaluate(ev)


def markdown(df: pd.DataFrame, fmt: str = "{:.4g}") -> str:
    cells = [[fmt.format(v) if isinstance(v, float) else str(v) for v in r] for r in df.itertuples(index=False)]
    return "\n".join(["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
                     + ["| " + " | ".join(r) + " |" for r in cells])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--smoke", action="store_true", help="tiny random configs (CPU test of the script)")
    ap.add_argument("--alpha", type=float, default=None, help="what-if alpha (skips the built-in measurement)")
    ap.add_argument("--alpha-from", type=Path, default=ALPHA_FILE, help="JSON with 'alpha' when the built-in is absent")
    ap.add_argument("--alpha-only", action="store_true", help="measure the built-in alpha, write it, exit")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--n-prompts", type=int, default=12)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.set_num_threads(1 if device == "cpu" else torch.get_num_threads())
    t0 = time.perf_counter()
    meas = None if args.alpha is not None else builtin_alpha(device, args.k, 2 if args.smoke else args.n_prompts,
                                                             8 if args.smoke else 32)
    if args.alpha_only:
        (args.out / ALPHA_FILE.name).write_text(json.dumps(meas, indent=1))
        print(json.dumps(meas))
        return
    if args.alpha is not None:
        alpha = {"alpha": args.alpha, "source": "--alpha"}
    else:
        alpha = meas or json.loads(args.alpha_from.read_text()) | {"read_from": str(args.alpha_from)}
    a = min(max(float(alpha["alpha"]), 0.0), 0.99)
    print(f"# what-if alpha {a:.3f} ({alpha.get('source')}) after {time.perf_counter() - t0:.0f} s", flush=True)
    from workbench.stack import run_stack
    from workbench.stack.run import default_clock

    cfg = study_config(args.smoke, a, args.k)
    target, draft = (TINY_T, TINY_D) if args.smoke else (QWEN2_7B, QWEN2_0_5B | {"vocab_size": QWEN2_7B["vocab_size"]})
    prompt = torch.randint(0, target["vocab_size"], (cfg.prompt_len,), generator=torch.Generator().manual_seed(0)).tolist()
    t1 = time.perf_counter()
    res = run_stack(target, draft, cfg, prompt, device=device, clock=default_clock(device))
    t_stack = time.perf_counter() - t1
    out = {"env": environment(), "alpha": alpha, "config": cfg.to_row(), "slo": str(res.slo),
           "capacity_rps": res.capacity_rps, "table": res.table.to_dict("records"),
           "multiplicative": res.multiplicative.to_dict("records"), "points": res.points.to_dict("records"),
           "stack_s": t_stack}
    # the measured table is written before the ledger runs: a failing verdict never loses the measurement
    (args.out / "stack_table.json").write_text(json.dumps(out, indent=1, default=str))
    led = ledger(res, cfg, device)
    out |= {"ledger": led.to_dict("records"), "total_s": time.perf_counter() - t0}
    (args.out / "stack_table.json").write_text(json.dumps(out, indent=1, default=str))
    cols = ["label", "decode_tok_s", "ttft_ms", "e2e_ms", "tau", "spec_timing", "peak_mem_gb", "goodput_rps",
            "slo_capacity_rps", "p99_ttft_ms", "p99_tpot_ms", "n_gpus", "decode_speedup", "e2e_change"]
    md = (markdown(res.table[cols]) + "\n\n" + markdown(res.multiplicative) + "\n\n"
          + markdown(led[["id", "claimed", "measured", "verdict"]]))
    (args.out / "stack_table.md").write_text(md + "\n")
    print(md, flush=True)
    print(f"# stack {t_stack:.0f} s, total {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
