"""MMLU through the package's scorer (``workbench.eval.mmlu.run_mmlu``) on the GPU, timed with
tokenization included, and cross-checked against lm-eval's HF backend and the CPU path.

The scorer, the prompts and the tokens are the package's (lm-eval's ``mmlu`` / ``mmlu_continuation``
tasks, checked question by question on the CPU in ``tests/eval``); on CUDA it scores through the
engine's batch prefill with shared few-shot prefixes. This script only times it and compares:

* timing: ``run_mmlu`` on every question (after a warm-up on one subject), its wall time with
  tokenization and the engine build included (``tokenize_s`` is reported apart);
* lm-eval: ``HFLM.loglikelihood`` (``workbench.eval.lm_eval_ref.lm_eval_loglikelihood``) on the same
  (context, continuation) strings for ``--lm-eval-per-subject`` questions per subject, predictions
  compared question by question; ``--shard K/N`` splits that over calls, ``merge`` adds the shards;
* ``--check-cpu-gpu``: the built-in model in float32, the engine path on CUDA against the HF path on
  the CPU, both formulations; exits 1 when a prediction differs by more than a near-tie.

    python -m benchmarks.bench_mmlu --mmlu .stage/mmlu --tokenizer .stage/tok [--model qwen2-7b] [--lm-eval-per-subject 10]
    python -m benchmarks.bench_mmlu --check-cpu-gpu --mmlu .stage/mmlu [--per-subject 3]
    python -m benchmarks.bench_mmlu merge a.json b.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import CONFIGS, DEVICE, Recorder, environment, hf_model, sync
from workbench.data import load_mmlu, sample_mmlu
from workbench.eval.mmlu import build_prompts, run_mmlu

BUILTIN = "smollm2-135m"
LP = [f"logprob_{c}" for c in "ABCD"]
NEAR_TIE = 1e-3  # nats: a prediction flip with a reference top-2 margin below this is a near-tie


def load_target(model_name: str, tok_dir: str | None, dtype: str, device: str = DEVICE):
    """``(model, tokenizer)``: the built-in model (float weights, ``workbench.models.load_model``) or a
    random-init config of ``benchmarks.common.CONFIGS`` with the tokenizer in ``tok_dir``."""
    if model_name == BUILTIN:
        from workbench.models import load_model

        model, tok = load_model(BUILTIN, dtype=dtype, device=device)
        return model.eval(), tok
    from transformers import AutoTokenizer

    return hf_model(CONFIGS[model_name], device=device, dtype=getattr(torch, dtype)), AutoTokenizer.from_pretrained(tok_dir)


def _data(mmlu_dir: str, n_subjects: int | None):
    test, dev = load_mmlu(mmlu_dir, split="test"), load_mmlu(mmlu_dir, split="dev")
    if n_subjects:
        keep = sorted(test["subject"].unique())[:n_subjects]
        test, dev = test[test.subject.isin(keep)], dev[dev.subject.isin(keep)]
    return test.reset_index(drop=True), dev


def _margin(ll: np.ndarray) -> np.ndarray:
    top2 = np.sort(ll, axis=1)[:, -2:]
    return top2[:, 1] - top2[:, 0]


def compute_floor(model, test, dev, tok, n_shot: int, formulation: str) -> dict:
    """FLOPs of the tokens the scorer computes (each shared prefix once, every question's own tokens,
    continuation tokens after the first) ``2 * block matmul params * tokens + 2 * lm_head params *
    (questions + continuation tokens)``, attention left out (a lower bound), and that over the measured
    bf16 matmul rate (``benchmarks.common.measure_floors``): ``floor_s``."""
    from benchmarks.common import measure_floors
    from workbench.eval.mmlu_tokens import tokenize_mmlu

    p = build_prompts(test, dev, n_shot, formulation)
    req = tokenize_mmlu(tok, p["prefix"], p["subject"], p["text"], p["choices"])
    step2 = sum(len(k) - 1 for ks in req.cont_ids for k in ks)
    tokens = sum(len(x) for x in req.prefix_ids) + sum(len(c) for c in req.ctx_ids) + step2
    block = sum(m.weight.numel() for m in model.model.layers.modules() if isinstance(m, torch.nn.Linear))
    flops = 2 * block * tokens + 2 * model.lm_head.weight.numel() * (len(req) + step2)
    rate = measure_floors()["matmul_flops"]
    return {"tokens_computed": tokens, "flops": flops, "matmul_flops_per_s": rate, "floor_s": flops / rate}


def lm_eval_compare(model, tok, test, dev, rows: list[int], n_shot: int, formulation: str, preds, max_len: int) -> dict:
    """lm-eval's loglikelihoods on ``test.iloc[rows]``; predictions and top-2 margins vs ``preds``."""
    from workbench.eval.lm_eval_ref import lm_eval_loglikelihood

    sub = test.iloc[rows]
    p = build_prompts(sub, dev, n_shot, formulation)
    pairs = [(p["prefix"][s] + t, " " + c) for s, t, cs in zip(p["subject"], p["text"], p["choices"]) for c in cs]
    sync()
    t0 = time.perf_counter()
    ll = lm_eval_loglikelihood(model, tok, pairs, max_length=max(max_len + 8, 2048)).reshape(len(rows), -1)
    sync()
    secs = time.perf_counter() - t0
    lm_pred, margin = ll.argmax(1), _margin(ll)
    agree = lm_pred == np.asarray(preds)[rows]
    bad = margin[~agree]
    return {"lm_eval_n": len(rows), "lm_eval_s": secs, "identical_predictions": int(agree.sum()),
            "mismatched_rows": [int(rows[i]) for i in np.flatnonzero(~agree)][:50],
            "lm_eval_margin_median": float(np.median(margin)),
            "lm_eval_margin_mismatched_max": float(bad.max()) if len(bad) else 0.0,
            "lm_eval_margin_mismatched": [round(float(m), 5) for m in bad][:50],
            "frac_margin_below_mismatched_max": float((margin <= bad.max()).mean()) if len(bad) else 0.0,
            "_rows": {"lm_eval_rows": [int(i) for i in rows], "lm_eval_preds": lm_pred.tolist(),
                      "lm_eval_margin": [round(float(m), 5) for m in margin]}}


def run(a, rec: Recorder) -> dict:
    """Time ``run_mmlu`` on every question (or the lm-eval subset with ``--subset-only``), then
    lm-eval on ``--lm-eval-per-subject`` questions per subject of this shard."""
    test, dev = _data(a.mmlu, a.subjects)
    if a.subset_only:
        test = test.groupby("subject", sort=False).head(a.lm_eval_per_subject).reset_index(drop=True)
    model, tok = load_target(a.model, a.tokenizer, a.dtype)
    kw = {"n_shot": a.n_shot, "batch_size": a.max_batch, "formulation": a.formulation, "max_tokens": a.max_tokens,
          "backend": a.backend, "progress": False}
    run_mmlu(model, tok, test[test.subject == test.subject.iloc[0]], dev, **kw)  # warm-up: kernel compilation
    sync()
    t0 = time.perf_counter()
    df = run_mmlu(model, tok, test, dev, **kw)
    sync()
    total = time.perf_counter() - t0
    preds = df["pred"].to_numpy()
    max_len = int(df["n_tokens"].max())
    out = {"model": a.model, "dtype": a.dtype, "formulation": a.formulation, "n_shot": a.n_shot,
           "n_questions": len(df), "backend": df["backend"].iloc[0], "max_len": max_len,
           "tokens_in_contexts": int(df["n_tokens"].sum()), "tokenize_s": float(df["tokenize_s"].iloc[0]),
           "total_s": total, "score_s": total - float(df["tokenize_s"].iloc[0]), "max_batch": a.max_batch,
           "max_tokens": a.max_tokens, "acc_vs_labels": float(df["correct"].mean()),
           "acc_norm_vs_labels": float(df["correct_norm"].mean()), "chance": 0.25}
    out.update(compute_floor(model, test, dev, tok, a.n_shot, a.formulation))
    out["total_over_floor"] = total / out["floor_s"]
    rec.put("mmlu_engine", out)
    if a.profile:
        rec.put("mmlu_profile", profile_scorer(model, tok, test, dev, kw, a.profile))
    if a.lm_eval_per_subject >= 0:
        in_shard = test
        if a.shard is not None:
            keep = sorted(test["subject"].unique())[a.shard[0]::a.shard[1]]
            in_shard = test[test.subject.isin(keep)]
        sub = (in_shard if a.lm_eval_per_subject == 0
               else in_shard.groupby("subject", sort=False).head(a.lm_eval_per_subject)).index.tolist()
        cmp = lm_eval_compare(model, tok, test, dev, sub, a.n_shot, a.formulation, preds, max_len)
        rows = cmp.pop("_rows")
        out.update(cmp, lm_eval_s_per_q=cmp["lm_eval_s"] / len(sub), engine_s_per_q=total / len(df),
                   speedup_per_question=(cmp["lm_eval_s"] / len(sub)) / (total / len(df)),
                   shard=list(a.shard) if a.shard else None, engine_s=total)
        rec.put("mmlu_rows", {"engine_preds": preds.tolist(), **rows})
    rec.put("mmlu", out)
    return out


def profile_scorer(model, tok, test, dev, kw: dict, n_subjects: int, top: int = 20) -> dict:
    """Where the scorer's time goes: ``run_mmlu`` on the first ``n_subjects`` subjects under torch.profiler
    (CUDA activity), kernels grouped by name: ``{"wall_s", "device_s", "kernels": [{"kernel", "ms", "calls",
    "share"}]}``, largest first (``top`` of them)."""
    from torch.profiler import ProfilerActivity, profile

    keep = sorted(test["subject"].unique())[:n_subjects]
    sub = test[test.subject.isin(keep)]
    sync()
    t0 = time.perf_counter()
    cuda = torch.cuda.is_available()
    attr = "self_device_time_total" if cuda else "self_cpu_time_total"  # CPU: operator times (a smoke run)
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        run_mmlu(model, tok, sub, dev, **kw)
        sync()
    wall = time.perf_counter() - t0
    ev = [e for e in prof.key_averages() if getattr(e, attr) > 0]
    total = sum(getattr(e, attr) for e in ev) or 1.0
    ev.sort(key=lambda e: -getattr(e, attr))
    rows = [{"kernel": e.key[:120], "ms": getattr(e, attr) / 1e3, "calls": e.count, "share": getattr(e, attr) / total}
            for e in ev[:top]]
    for r in rows:
        print(f"{r['ms']:10.1f} ms {r['share']:6.1%} {r['calls']:7d}  {r['kernel']}")
    return {"subjects": keep, "n_questions": len(sub), "wall_s": wall, "device_s": total / 1e6, "kernels": rows}


def check_cpu_gpu(a, rec: Recorder) -> int:
    """Built-in model, float32: ``run_mmlu`` on ``--gpu-device`` (engine) vs on the CPU (HF), per
    formulation. Returns the number of prediction flips that are not near-ties (the exit status)."""
    test, dev = _data(a.mmlu, a.subjects)
    q = test if a.per_subject <= 0 else sample_mmlu(test, a.per_subject, seed=0)
    gpu_model, tok = load_target(BUILTIN, None, "float32", a.gpu_device)
    cpu_model, _ = load_target(BUILTIN, None, "float32", "cpu")
    bad = 0
    for form in ("mmlu", "mmlu_continuation"):
        g = run_mmlu(gpu_model, tok, q, dev, a.n_shot, formulation=form, backend="engine", progress=False)
        c = run_mmlu(cpu_model, tok, q, dev, a.n_shot, formulation=form, backend="hf", progress=False)
        ll = c[LP].to_numpy()
        chars = np.array([[len(x) for x in cs] for cs in build_prompts(q, dev, 0, form)["choices"]], dtype=float)
        res = {"formulation": form, "n_questions": len(q), "n_shot": a.n_shot, "gpu_s": float(g["wall_s"].iloc[0]),
               "cpu_s": float(c["wall_s"].iloc[0]), "max_abs_logprob_diff": float(np.abs(g[LP].to_numpy() - ll).max())}
        for col, scores in (("pred", ll), ("pred_norm", ll / chars)):
            flips = np.flatnonzero(g[col].to_numpy() != c[col].to_numpy())
            margins = _margin(scores)[flips]
            res[f"{col}_identical"] = int(len(q) - len(flips))
            res[f"{col}_flip_margins"] = [round(float(m), 6) for m in margins][:50]
            bad += int((margins > NEAR_TIE).sum())
        rec.put(f"check_{form}", res)
    print(f"check-cpu-gpu: {'PASS' if bad == 0 else 'FAIL'} ({bad} prediction flips beyond near-ties of {NEAR_TIE} nats)")
    return bad


def merge(paths: list[str]) -> dict:
    """Add up shard files of :func:`run` (``--shard K/N``): lm-eval seconds and questions summed over
    shards, engine seconds per shard (each timed every question), predictions compared on the union.

    Raises ``ValueError`` when the shards' engine predictions differ (not the same weights) or when
    they overlap."""
    ds = [json.loads(Path(q).read_text()) for q in paths]
    base = ds[0]["mmlu_rows"]["engine_preds"]
    rows, lm, margin = [], [], []
    for q, d in zip(paths, ds):
        if d["mmlu_rows"]["engine_preds"] != base:
            raise ValueError(f"{q}: engine predictions differ from {paths[0]}'s: not the same weights; "
                             "re-run the shards with the same --model and --dtype")
        rows += d["mmlu_rows"]["lm_eval_rows"]
        lm += d["mmlu_rows"]["lm_eval_preds"]
        margin += d["mmlu_rows"]["lm_eval_margin"]
    if len(set(rows)) != len(rows):
        raise ValueError("shards overlap: give each K of one N once")
    shards = [tuple(d["mmlu"].get("shard") or (0, 1)) for d in ds]
    if len({n for _, n in shards}) != 1 or sorted(k for k, _ in shards) != list(range(shards[0][1])):
        raise ValueError(f"shards {shards}: want K = 0..N-1 of one N, each once")
    eng, lm_t, m_t = np.asarray(base)[rows], np.asarray(lm), np.asarray(margin)
    agree = eng == lm_t
    lm_s = sum(d["mmlu"]["lm_eval_s"] for d in ds)
    eng_s = [d["mmlu"]["engine_s"] for d in ds]
    n_q = ds[0]["mmlu"]["n_questions"]
    bad = m_t[~agree]
    vals, counts = np.unique(bad, return_counts=True)
    return {"shards": len(ds), "n_questions": n_q, "lm_eval_n": len(rows), "lm_eval_s": lm_s,
            "engine_s_runs": eng_s, "engine_s_median": statistics.median(eng_s),
            "speedup": (lm_s / len(rows)) / (statistics.median(eng_s) / n_q),
            "identical_predictions": int(agree.sum()), "mismatched": int((~agree).sum()),
            "lm_eval_margin_median": float(np.median(m_t)),
            "lm_eval_margin_mismatched_max": float(bad.max()) if len(bad) else 0.0,
            "mismatched_margin_counts": {str(float(k)): int(v) for k, v in zip(vals, counts)},
            "frac_margin_below_mismatched_max": float((m_t <= bad.max()).mean()) if len(bad) else 0.0}


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mmlu", default=".stage/mmlu", help="MMLU folder (test/ and dev/ CSVs)")
    p.add_argument("--tokenizer", default=".stage/tok", help="tokenizer folder for the random-init models")
    p.add_argument("--model", default="qwen2-7b", help=f"{BUILTIN} or one of {sorted(CONFIGS)} (random init)")
    p.add_argument("--formulation", default="mmlu", choices=["mmlu", "mmlu_continuation"])
    p.add_argument("--n-shot", type=int, default=5)
    p.add_argument("--backend", default="auto", choices=["auto", "hf", "engine"], help="auto: the engine on CUDA")
    p.add_argument("--max-batch", type=int, default=None, help="questions per engine step (default 128)")
    p.add_argument("--max-tokens", type=int, default=None, help="padded tokens per engine step (default 16384)")
    p.add_argument("--lm-eval-per-subject", type=int, default=10, help="0 = every question, -1 = no lm-eval")
    p.add_argument("--shard", default=None, help="K/N: lm-eval on subjects sorted(subjects)[K::N] only")
    p.add_argument("--subjects", type=int, default=None, help="first N subjects only (smoke runs)")
    p.add_argument("--tiny", action="store_true", help="tiny model config (CPU smoke run)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--subset-only", action="store_true", help="time only the lm-eval subset")
    p.add_argument("--check-cpu-gpu", action="store_true", help="built-in model, float32: CUDA engine vs CPU HF")
    p.add_argument("--per-subject", type=int, default=3, help="--check-cpu-gpu questions per subject (0 = all)")
    p.add_argument("--profile", type=int, default=0, help="after timing, profile the scorer on N subjects")
    p.add_argument("--gpu-device", default="cuda", help="--check-cpu-gpu: the engine's device (cpu: a smoke run)")
    a = p.parse_args(argv)
    a.shard = None if not a.shard else tuple(int(v) for v in a.shard.split("/"))
    if a.shard and not 0 <= a.shard[0] < a.shard[1]:
        p.error(f"--shard {a.shard}: want K/N with 0 <= K < N, e.g. 0/2")
    return a


def main(argv=None) -> int:
    a = _args(argv)
    if a.tiny:
        import benchmarks.common as C

        C.CONFIGS[a.model] = {**C.CONFIGS[a.model], "hidden_size": 128, "intermediate_size": 256,
                              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
    if a.check_cpu_gpu:
        rec = Recorder(name="mmlu_check_cpu_gpu.json")
        rec.put("env", environment())
        return 1 if check_cpu_gpu(a, rec) else 0
    tag = f"_shard{a.shard[0]}of{a.shard[1]}" if a.shard else ""
    rec = Recorder(name=f"mmlu_{a.model}_{a.formulation}_{a.dtype}{'_subset' if a.subset_only else ''}{tag}.json")
    rec.put("env", environment())
    run(a, rec)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "merge":  # python -m benchmarks.bench_mmlu merge a.json b.json
        print(json.dumps(merge(sys.argv[2:]), indent=1))
    else:
        sys.exit(main())
