"""Speculative-decoding table for the default target and its drafts (issue 4's resolution numbers).

For SmolLM2-135M-Instruct and each draft (INT8 / INT4 / INT3 RTN self-drafts, a distilled 2-layer
draft) on Spec-Bench prompts at each temperature: KL(p||q), predicted and measured alpha, tau with a
95% CI (bootstrap over prompts), the measured c, realized vs theoretical speedup. Prints markdown.

    nice -n 10 python benchmarks/spec_table.py --n-prompts 120 --out /tmp/spec_rows.pkl
    python benchmarks/spec_table.py --summarize /tmp/spec_rows.pkl      # table from saved rows
    # a second process on other prompts (e.g. quantized drafts only): --start 60 --drafts int8 int4 int3

Rows are saved after every prompt (``--out``), so an interrupted run still gives a table.
"""

from __future__ import annotations

import argparse
import time

import pandas as pd
import torch


def markdown(df: pd.DataFrame, floatfmt: str = "{:.3g}") -> str:
    """A plain GitHub markdown table (no tabulate dependency)."""
    cells = [[floatfmt.format(v) if isinstance(v, float) else str(v) for v in row] for row in df.itertuples(index=False)]
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in cells])


def table(rows: pd.DataFrame) -> str:
    from workbench.spec.run import summarize_spec

    s = summarize_spec(rows)
    base = rows.groupby("temperature").apply(
        lambda g: g.drop_duplicates("prompt_id").baseline_decode_s.sum()
        / (g.drop_duplicates("prompt_id").baseline_n_new - 1).sum(), include_groups=False)
    out = pd.DataFrame({
        "draft": s.draft, "T": s.temperature.map("{:g}".format), "prompts": s.n_prompts, "steps": s.n_steps,
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-prompts", type=int, default=120)
    ap.add_argument("--max-new", type=int, default=32)
    ap.add_argument("--max-prompt-tokens", type=int, default=192)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.7])
    ap.add_argument("--drafts", nargs="+", default=["int8", "int4", "int3", "distilled"])
    ap.add_argument("--distill-steps", type=int, default=150)
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
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu",
                    help="cpu: process CPU time (robust on a shared CPU); wall: perf_counter (use on GPU)")
    ap.add_argument("--out", default=None, help="pickle of the per-(prompt, draft, T) rows, rewritten per prompt")
    ap.add_argument("--start", type=int, default=0, help="skip the first START prompts (split a run over processes)")
    ap.add_argument("--summarize", nargs="+", default=None,
                    help="print the table of saved rows pickles (concatenated) and exit")
    args = ap.parse_args()
    if args.summarize:
        print(table(pd.concat([pd.read_pickle(p) for p in args.summarize], ignore_index=True)))
        return
    torch.set_num_threads(args.threads)
    from workbench.data import load_prompts
    from workbench.engine import fast_runner
    from workbench.models import load_model
    from workbench.spec import SpecConfig, encode_prompts, make_draft, run_spec, target_generations

    t_start = time.perf_counter()
    target, tok = load_model("smollm2-135m", device=args.device)
    all_prompts = load_prompts("spec-bench")
    prompts = load_prompts("spec-bench", n=args.n_prompts, seed=0)
    prompts = prompts.sample(frac=1.0, random_state=0).reset_index(drop=True)  # categories interleaved
    evaluated_ids = set(prompts.prompt_id)  # by every process of a --start split: never distillation data
    prompts = prompts.iloc[args.start:].reset_index(drop=True)
    prompts = encode_prompts(tok, prompts, max_prompt_tokens=args.max_prompt_tokens)
    distill_text = distill_eval = None
    if "distilled" in args.drafts and args.distill_data == "self":
        t0 = time.perf_counter()
        held = all_prompts[~all_prompts.prompt_id.isin(evaluated_ids)]
        held = held.sample(n=min(args.distill_prompts or len(held), len(held)), random_state=1)  # all categories
        held = encode_prompts(tok, held.reset_index(drop=True), max_prompt_tokens=args.max_prompt_tokens)
        gen_kw = {"max_new_tokens": args.distill_gen_new, "eos_token_id": tok.eos_token_id,
                  "pad_token_id": tok.pad_token_id or 0, "batch_size": 64 if args.device != "cpu" else 8}

        def continuations(ids):
            out = [target_generations(target, ids, temperature=0.0, **gen_kw)]
            if args.distill_gen_samples > 0:
                out.append(target_generations(target, ids, temperature=0.8, samples=args.distill_gen_samples,
                                              **gen_kw))
            return torch.cat(out)

        # the distillation curve is measured on 10% of the prompts, never trained on
        n_eval = max(1, round(0.1 * len(held)))
        distill_text, distill_eval = continuations(held.prompt_ids[:-n_eval]), continuations(held.prompt_ids[-n_eval:])
        print(f"# distillation data: {len(held)} held-out prompts, {len(distill_text)} tokens of the target's "
              f"own continuations, in {time.perf_counter() - t0:.0f} s", flush=True)
    drafts = {}
    for name in args.drafts:
        t0 = time.perf_counter()
        kw = {"steps": args.distill_steps, "tokenizer": tok, "batch_size": args.distill_batch,
              "seq_len": args.distill_seq, "eval_every": max(1, args.distill_steps // 10),
              "lr": args.distill_lr, "text": distill_text, "eval_text": distill_eval}
        drafts[name], info = make_draft(target, name, tok, distill_kwargs=kw)
        if "curve" in info:
            print(markdown(info["curve"].round(4)), flush=True)
        print(f"# draft {name} built in {time.perf_counter() - t0:.0f} s", flush=True)
    configs = [SpecConfig(k=args.k, temperature=t, max_new_tokens=args.max_new) for t in args.temperatures]
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    # one engine per model for the whole run (KV cache sized for the longest prompt; graphs captured once)
    max_seq = int(prompts.n_prompt.max()) + args.max_new + args.k + 2
    t_run = fast_runner(target, max_seq=max_seq)
    d_runs = {n: fast_runner(d, max_seq=max_seq) for n, d in drafts.items()}
    print(f"# runners: target {type(t_run).__name__}, drafts "
          f"{ {n: type(r).__name__ for n, r in d_runs.items()} }, max_seq {max_seq}", flush=True)
    parts = []
    for i in range(len(prompts)):
        parts.append(run_spec(t_run, d_runs, prompts.iloc[[i]], configs, clock=clock,
                              stop_token_ids=[tok.eos_token_id]))
        if args.out:
            pd.concat(parts, ignore_index=True).to_pickle(args.out)
        print(f"# prompt {i + 1}/{len(prompts)} ({prompts.category[i]}) done at "
              f"{time.perf_counter() - t_start:.0f} s", flush=True)
    rows = pd.concat(parts, ignore_index=True)
    print(f"\n## SmolLM2-135M-Instruct, k={args.k}, {args.max_new} new tokens, device={args.device}, "
          f"threads={args.threads}, clock={args.clock}, distill steps={args.distill_steps} "
          f"(data: {args.distill_data}, batch {args.distill_batch} x {args.distill_seq} tokens)\n")
    print(table(rows))


if __name__ == "__main__":
    main()
