"""Speculative-decoding table for the default target and its drafts, through the package's study.

For SmolLM2-135M-Instruct and each draft (INT8 / INT4 / INT3 RTN self-drafts, a distilled 2-layer
draft) on Spec-Bench prompts at each temperature: KL(p||q), predicted and measured alpha, tau with a
95% CI (bootstrap over prompts), the measured c, realized vs theoretical speedup. Prints markdown.
The grid is the ``spec-table`` preset (``workbench.spec.SpecGrid``, options override it); it runs
through ``workbench.spec.run_spec_sweep`` (engine runners, the device speculative loop, the results
store), so an interrupted run resumes where it stopped when started again with the same options.

    nice -n 10 python -m benchmarks.spec_table --n-prompts 120            # store name spec_table_cpu
    python -m benchmarks.spec_table --summarize spec_table_cpu            # table from the stored rows
    # a second process on other prompts writes its own name: --start 60 --name spec_table_cpu_b
"""

from __future__ import annotations

import argparse
import time

import pandas as pd
import torch

from workbench.data import load_prompts
from workbench.models import load_model
from workbench.results import load_results
from workbench.spec import (
    SpecGrid,
    encode_prompts,
    make_draft,
    run_spec_sweep,
    summarize_spec,
    target_generations,
)


def markdown(df: pd.DataFrame, floatfmt: str = "{:.3g}") -> str:
    """A plain GitHub markdown table (no tabulate dependency)."""
    cells = [[floatfmt.format(v) if isinstance(v, float) else str(v) for v in row] for row in df.itertuples(index=False)]
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in cells])


def table(rows: pd.DataFrame) -> str:
    s = summarize_spec(rows)
    base = rows.groupby("temperature").apply(
        lambda g: g.drop_duplicates("prompt_id").baseline_decode_s.sum()
        / (g.drop_duplicates("prompt_id").baseline_n_new - 1).sum(), include_groups=False)
    out = pd.DataFrame({
        "draft": s.draft, "acceptance": s.acceptance, "T": s.temperature.map("{:g}".format),
        "prompts": s.n_prompts, "steps": s.n_steps,
        "KL(p‖q)": s.kl_pq.map("{:.3f}".format), "alpha pred": s.alpha_pred.map("{:.3f}".format),
        "alpha": [f"{a:.3f} [{lo:.3f}, {hi:.3f}]" for a, lo, hi in zip(s.alpha, s.alpha_lo, s.alpha_hi)],
        "tau (95% CI)": [f"{t:.2f} [{lo:.2f}, {hi:.2f}]" for t, lo, hi in zip(s.tau, s.tau_lo, s.tau_hi)],
        "tau theory (alpha)": s.tau_theory.map("{:.2f}".format),
        "tau theory (alpha pred)": s.tau_theory_pred.map("{:.2f}".format), "c": s.c.map("{:.2f}".format),
        "verify cost": s.verify_cost.map("{:.2f}".format),
        "speedup": s.speedup.map("{:.2f}".format), "speedup theory": s.speedup_theory.map("{:.2f}".format),
        "theory w/ verify": s.speedup_theory_verify.map("{:.2f}".format),
    })
    by_cat = summarize_spec(rows, by=("draft", "temperature", "policy", "k", "category"))
    piv = by_cat.pivot_table(index=["draft", "temperature"], columns="category", values="tau").reset_index()
    plain = ", ".join(f"T={t:g}: {1000 * v:.1f} ms/token" for t, v in base.items())
    return (markdown(out) + f"\n\nPlain decoding through the same runner: {plain}.\n\n"
            + "tau by Spec-Bench category:\n\n" + markdown(piv, "{:.2f}"))


def parse_args() -> argparse.Namespace:
    g = SpecGrid.from_name("spec-table")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", default="spec-table", help="a SpecGrid preset; the options below override it")
    ap.add_argument("--n-prompts", type=int, default=None, help=f"default: the grid's ({g.n_prompts})")
    ap.add_argument("--max-new", type=int, default=None, help=f"default: the grid's ({g.max_new_tokens})")
    ap.add_argument("--max-prompt-tokens", type=int, default=None, help=f"default: the grid's ({g.max_prompt_tokens})")
    ap.add_argument("--k", type=int, nargs="+", default=None, help=f"static k values (default {g.ks})")
    ap.add_argument("--temperatures", type=float, nargs="+", default=None)
    ap.add_argument("--drafts", nargs="+", default=None, help=f"default {g.drafts}")
    ap.add_argument("--distill-steps", type=int, default=None)
    ap.add_argument("--distill-batch", type=int, default=4)
    ap.add_argument("--distill-seq", type=int, default=64)
    ap.add_argument("--distill-lr", type=float, default=1e-3)
    ap.add_argument("--distill-data", choices=["self", "wikitext"], default="self",
                    help="self: the target's own chat continuations of the Spec-Bench prompts NOT evaluated "
                         "(DistillSpec's on-policy data); wikitext: WikiText-2 valid")
    ap.add_argument("--distill-gen-new", type=int, default=192, help="tokens generated per held-out prompt")
    ap.add_argument("--distill-gen-samples", type=int, default=2, help="sampled continuations per prompt (T=0.8), "
                    "plus one greedy")
    ap.add_argument("--distill-prompts", type=int, default=None, help="use at most this many held-out prompts")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (the CPU timings are per thread)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu",
                    help="cpu: process CPU time (robust on a shared CPU); wall: perf_counter (use on GPU)")
    ap.add_argument("--name", default=None, help="results-store name (default spec_table_<device>)")
    ap.add_argument("--root", default=None, help="results-store folder (default data/results)")
    ap.add_argument("--prompts-per-point", type=int, default=10, help="prompts per stored point (resume grain)")
    ap.add_argument("--start", type=int, default=0, help="skip the first START prompts (split a run over "
                    "processes; give each process its own --name)")
    ap.add_argument("--summarize", nargs="+", default=None, help="print the table of stored names and exit")
    return ap.parse_args()


def distill_data(target, tok, evaluated_ids: set, args, grid: SpecGrid):
    """``(text, eval_text)`` for the distilled draft: the target's own continuations of held-out
    Spec-Bench prompts (never evaluated), the last 10% of them for the curve only."""
    held = load_prompts("spec-bench")
    held = held[~held.prompt_id.isin(evaluated_ids)]
    held = held.sample(n=min(args.distill_prompts or len(held), len(held)), random_state=1)  # all categories
    held = encode_prompts(tok, held.reset_index(drop=True), max_prompt_tokens=grid.max_prompt_tokens)
    kw = {"max_new_tokens": args.distill_gen_new, "eos_token_id": tok.eos_token_id,
          "pad_token_id": tok.pad_token_id or 0, "batch_size": 64 if args.device != "cpu" else 8}

    def continuations(ids):
        out = [target_generations(target, ids, temperature=0.0, **kw)]
        if args.distill_gen_samples > 0:
            out.append(target_generations(target, ids, temperature=0.8, samples=args.distill_gen_samples, **kw))
        return torch.cat(out)

    n_eval = max(1, round(0.1 * len(held)))
    return continuations(held.prompt_ids[:-n_eval]), continuations(held.prompt_ids[-n_eval:])


def main() -> None:
    args = parse_args()
    root = args.root
    if args.summarize:
        print(table(pd.concat([load_results(n, root) for n in args.summarize], ignore_index=True)))
        return
    grid = SpecGrid.from_name(args.grid, n_prompts=args.n_prompts, max_new_tokens=args.max_new,
                              max_prompt_tokens=args.max_prompt_tokens, ks=tuple(args.k) if args.k else None,
                              k_policy=args.k[-1] if args.k else None,
                              temperatures=tuple(args.temperatures) if args.temperatures else None,
                              drafts=tuple(args.drafts) if args.drafts else None, distill_steps=args.distill_steps)
    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    target, tok = load_model("smollm2-135m", dtype=args.dtype, device=args.device)
    prompts = load_prompts("spec-bench", n=grid.n_prompts, seed=grid.seed)
    prompts = prompts.sample(frac=1.0, random_state=0).reset_index(drop=True)  # categories interleaved
    evaluated_ids = set(prompts.prompt_id)  # by every process of a --start split: never distillation data
    prompts = encode_prompts(tok, prompts.iloc[args.start:].reset_index(drop=True),
                             max_prompt_tokens=grid.max_prompt_tokens)
    distill_text = distill_eval = None
    if "distilled" in grid.drafts and args.distill_data == "self":
        t0 = time.perf_counter()
        distill_text, distill_eval = distill_data(target, tok, evaluated_ids, args, grid)
        print(f"# distillation data: {len(distill_text)} tokens of the target's own continuations, "
              f"in {time.perf_counter() - t0:.0f} s", flush=True)
    drafts = {}
    for name in grid.drafts:
        t0 = time.perf_counter()
        kw = {"steps": grid.distill_steps, "tokenizer": tok, "batch_size": args.distill_batch,
              "seq_len": args.distill_seq, "eval_every": max(1, grid.distill_steps // 10), "seed": grid.seed,
              "lr": args.distill_lr, "text": distill_text, "eval_text": distill_eval}
        drafts[name] = make_draft(target, name, tok, distill_kwargs=kw)
        if "curve" in drafts[name][1]:
            print(markdown(drafts[name][1]["curve"].round(4)), flush=True)
        print(f"# draft {name} built in {time.perf_counter() - t0:.0f} s", flush=True)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    name = args.name or f"spec_table_{args.device.replace(':', '')}"
    rows = run_spec_sweep(target, drafts, prompts, grid.configs(), name=name, root=root, clock=clock,
                          prompts_per_point=args.prompts_per_point, stop_token_ids=[tok.eos_token_id],
                          seed=grid.seed)
    print(f"\n## SmolLM2-135M-Instruct, grid {args.grid}: k={grid.ks}, {grid.max_new_tokens} new tokens, "
          f"device={args.device} ({args.dtype}), loop={sorted(rows.loop.unique())}, clock={args.clock}, "
          f"distill steps={grid.distill_steps} (data: {args.distill_data}, batch {args.distill_batch} x "
          f"{args.distill_seq} tokens), store {name!r}, {time.perf_counter() - t_start:.0f} s\n")
    print(table(rows))


if __name__ == "__main__":
    main()
