"""vLLM as a study's engine (``engine="vllm"``): out of process, through ``.venv-vllm``
(:mod:`workbench.bridges.vllm_process`). The workbench never imports vllm.

:class:`VLLMEngine` is the backend :func:`workbench.studies.engines.resolve_engine` returns for ``"vllm"``. It
holds the vLLM flags every run uses (``dtype``, ``max_model_len``, eager mode, and the parallel layout:
``tensor_parallel_size``, ``pipeline_parallel_size``, ``distributed_executor_backend`` -- ``"ray"`` across
nodes), passes them to every server and ``vllm.LLM`` it starts, and records them in :meth:`provenance` (so a point
is keyed by the vLLM version and flags that produced it). The methods the studies call:

* :meth:`score_mmlu` -- MMLU by prompt log-probs: the same lm-eval token pairs the workbench scorer builds
  (:func:`workbench.eval.mmlu_tokens.tokenize_mmlu`), each choice's continuation log-likelihood summed from
  vLLM's ``prompt_logprobs``; rows in :func:`workbench.eval.mmlu.run_mmlu`'s columns;
* :meth:`run_quant` -- each quantization point exported as a compressed-tensors checkpoint
  (:func:`workbench.bridges.export_compressed_tensors`), served, and timed by ``vllm bench serve`` at batch 1
  (``--max-concurrency 1``) and under Poisson load: TTFT / TPOT / ITL in :func:`read_bench_serve`'s columns;
* :meth:`spec_counters` / :meth:`run_spec` -- vLLM's speculative-decoding counters (``num_drafts,
  num_draft_tokens, num_accepted_tokens``, per position) for n-gram drafting and for a draft model, from
  ``LLM.get_metrics()``; ``tau``, ``draft_acceptance_rate`` and ``alpha`` as
  :func:`workbench.bridges.vllm_metrics.read_spec_metrics` defines them.

* :meth:`run_pd` -- the P/D study's measured half against a vLLM server: its profile, the fitted cost model,
  and the simulator (vLLM's scheduler as the policy) against the server at three Poisson loads.

* :meth:`run_stack` -- the stacked study's combinations vLLM runs on this build (base precision and W4A16, each with
  and without n-gram drafting) at batch 1; the P/D half needs a KV connector the CPU build cannot run.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["VLLMEngine", "model_folder"]

EXECUTORS = (None, "mp", "ray", "uni", "external_launcher")  # vLLM ParallelConfig.distributed_executor_backend


def model_folder(model, tok=None, out: str | Path | None = None) -> str:
    """A folder vLLM can load for ``model``: a hub id or folder string as is; a loaded HF model's own folder
    (``name_or_path``) when it exists on disk, else the model and ``tok`` saved to ``out`` (a temporary folder
    when ``None``). Raises ``TypeError`` for anything else."""
    if isinstance(model, (str, Path)):
        return str(model)
    src = getattr(model, "name_or_path", None) or getattr(getattr(model, "config", None), "_name_or_path", None)
    if src and (Path(src) / "config.json").exists():
        return str(src)
    if not hasattr(model, "save_pretrained"):
        raise TypeError(f"model={type(model).__name__}: pass a hub id, a model folder or an HF model")
    out = Path(out or tempfile.mkdtemp(prefix="wb-vllm-model-"))
    model.save_pretrained(out)
    if tok is not None:
        tok.save_pretrained(out)
    return str(out)


@dataclass(frozen=True)
class VLLMEngine:
    """The vLLM backend (module docstring). Raises ``ValueError`` naming the field on bad values."""

    dtype: str = "bfloat16"  # vLLM --dtype (the CPU build runs bfloat16 or float32)
    max_model_len: int = 2048  # tokens per sequence; bounds the KV cache vLLM reserves
    enforce_eager: bool = True  # no torch.compile / CUDA graphs: faster start-up, as on the CPU build
    tensor_parallel_size: int = 1  # GPUs per model replica, splitting each layer (8 for a 70B on 8 GPUs)
    pipeline_parallel_size: int = 1  # stages of consecutive layers (nodes, across machines)
    distributed_executor_backend: str | None = None  # None: vLLM's choice ("mp" on one host); "ray" across nodes
    extra_args: tuple = ()  # more `vllm serve` flags, passed through
    venv: str | None = None  # the vLLM environment (None: workbench.bridges.vllm_process.vllm_venv())
    name: str = field(default="vllm", init=False)
    in_process: bool = field(default=False, init=False)

    def __post_init__(self):
        for f in ("max_model_len", "tensor_parallel_size", "pipeline_parallel_size"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"VLLMEngine.{f}={v!r} must be an integer >= 1")
        if self.distributed_executor_backend not in EXECUTORS:
            raise ValueError(f"VLLMEngine.distributed_executor_backend={self.distributed_executor_backend!r}: one of "
                             f"{EXECUTORS} (vLLM ParallelConfig; 'ray' spans nodes)")
        object.__setattr__(self, "extra_args", tuple(str(a) for a in self.extra_args))

    # -- what identifies a run -----------------------------------------------------------------------
    def available(self) -> tuple[bool, str]:
        """Whether ``.venv-vllm`` is usable, and if not why (naming ``make setup-vllm``)."""
        from workbench.bridges.vllm_process import vllm_available

        return vllm_available(self.venv)

    def serve_args(self) -> list[str]:
        """The flags every ``vllm serve`` of this backend gets (after the model)."""
        a = ["--dtype", self.dtype, "--max-model-len", str(self.max_model_len)]
        a += ["--enforce-eager"] if self.enforce_eager else []
        if self.tensor_parallel_size > 1:
            a += ["--tensor-parallel-size", str(self.tensor_parallel_size)]
        if self.pipeline_parallel_size > 1:
            a += ["--pipeline-parallel-size", str(self.pipeline_parallel_size)]
        if self.distributed_executor_backend:
            a += ["--distributed-executor-backend", self.distributed_executor_backend]
        return a + list(self.extra_args)

    def llm_kwargs(self, model: str, **more) -> dict:
        """``vllm.LLM(**kwargs)`` with the same settings as :meth:`serve_args` (``extra_args`` excepted)."""
        kw = {"model": model, "dtype": self.dtype, "max_model_len": self.max_model_len,
              "enforce_eager": self.enforce_eager, "tensor_parallel_size": self.tensor_parallel_size,
              "pipeline_parallel_size": self.pipeline_parallel_size}
        if self.distributed_executor_backend:
            kw["distributed_executor_backend"] = self.distributed_executor_backend
        return kw | more

    def provenance(self) -> dict:
        """``name``, the installed vLLM distribution and version, and every flag (part of each point's key)."""
        from workbench.bridges.vllm_process import vllm_available, vllm_version

        ok, _ = vllm_available(self.venv)
        return {"name": self.name, "vllm": vllm_version(self.venv) if ok else "not installed",
                "serve_args": self.serve_args(), "tensor_parallel_size": self.tensor_parallel_size,
                "pipeline_parallel_size": self.pipeline_parallel_size,
                "distributed_executor_backend": self.distributed_executor_backend}

    # -- MMLU --------------------------------------------------------------------------------------------
    def score_mmlu(self, model, tok, questions: pd.DataFrame, dev: pd.DataFrame, n_shot: int = 0, *,
                   formulation: str = "mmlu", **_) -> pd.DataFrame:
        """MMLU on vLLM by prompt log-probs, rows as :func:`workbench.eval.mmlu.run_mmlu` (``qid, subject,
        answer, pred, correct, pred_norm, correct_norm, logprob_A..D`` in nats, ``n_tokens``...) plus
        ``is_greedy_A..D`` (every continuation token vLLM's argmax, lm-eval's ``is_greedy``).

        ``model``: a folder / hub id or a loaded HF model (:func:`model_folder`); ``tok``: its tokenizer, which
        builds lm-eval's token pairs here, so vLLM scores exactly the workbench scorer's tokens. Raises
        ``RuntimeError`` with vLLM's error lines when the job fails."""
        import time

        from workbench.bridges.vllm_process import run_worker
        from workbench.eval.mmlu import LETTERS, MMLUConfig, build_prompts
        from workbench.eval.mmlu_tokens import tokenize_mmlu

        t0 = time.perf_counter()
        MMLUConfig(formulation=formulation, n_shot=n_shot)  # validates
        if "qid" not in questions:
            questions = questions.assign(qid=questions["subject"] + "/"
                                         + questions.groupby("subject").cumcount().astype(str))
        p = build_prompts(questions, dev, n_shot, formulation)
        req = tokenize_mmlu(tok, p["prefix"], p["subject"], p["text"], p["choices"], reuse_prefix=False)
        n, c = len(req), len(req.cont_ids[0])
        jobs = [{"ids": list(req.ctx_ids[i]) + list(k), "n_cont": len(k)} for i in range(n) for k in req.cont_ids[i]]
        longest = max(len(j["ids"]) for j in jobs)
        res = run_worker({"task": "prompt_logprobs", "requests": jobs,
                          "llm": self.llm_kwargs(model_folder(model, tok), max_model_len=max(self.max_model_len,
                                                                                             longest + 1))},
                         venv=self.venv)
        ll = np.asarray(res["logprob"], np.float64).reshape(n, c)  # [question, choice] nats
        greedy = np.asarray(res["is_greedy"], bool).reshape(n, c)
        answer = questions["answer"].to_numpy().astype(int)
        pred, pred_norm = ll.argmax(1), (ll / req.choice_chars).argmax(1)  # first maximum on ties, as lm-eval
        out = pd.DataFrame({"qid": questions["qid"].to_numpy(), "subject": questions["subject"].to_numpy(),
                            "answer": answer, "pred": pred, "correct": pred == answer, "pred_norm": pred_norm,
                            "correct_norm": pred_norm == answer})
        for i, letter in enumerate(LETTERS[:c]):
            out[f"logprob_{letter}"] = ll[:, i]
        for i, letter in enumerate(LETTERS[:c]):
            out[f"is_greedy_{letter}"] = greedy[:, i]
        out["n_tokens"] = req.n_context
        return out.assign(n_shot=n_shot, formulation=formulation, backend="vllm", vllm_load_s=res["load_s"],
                          vllm_run_s=res["run_s"], wall_s=time.perf_counter() - t0)

    # -- quantization: serve each export, time it ----------------------------------------------------
    def time_served(self, folder: str, out_dir: str | Path, *, input_len: int = 128, output_len: int = 32,
                    n_batch1: int = 8, n_load: int = 32, load_rps: float = 4.0, server_args=()) -> pd.DataFrame:
        """Serve ``folder`` and run ``vllm bench serve`` twice: batch 1 (``--max-concurrency 1``, ``n_batch1``
        requests) and under load (``n_load`` Poisson requests at ``load_rps``). Two rows of
        :func:`read_bench_serve` (``load`` = ``"batch1"`` / ``"poisson"``) with ``startup_s`` and the result
        file in ``bench_file``."""
        from workbench.bridges.vllm_metrics import read_bench_serve
        from workbench.bridges.vllm_process import VllmServer, bench_serve

        rows = []
        with VllmServer(folder, [*self.serve_args(), *server_args], venv=self.venv) as srv:
            for load, kw in (("batch1", {"num_prompts": n_batch1, "max_concurrency": 1}),
                             ("poisson", {"num_prompts": n_load, "request_rate": load_rps})):
                f = bench_serve(srv, out_dir, input_len=input_len, output_len=output_len,
                                filename=f"{Path(folder).name}_{load}.json", **kw)
                rows.append(read_bench_serve(f).assign(load=load, bench_file=str(f), startup_s=srv.startup_s))
        return pd.concat(rows, ignore_index=True)

    def run_quant(self, model, tok, configs, config=None, *, data=None, store=None, provenance=None,
                  out_dir: str | Path | None = None, **timing) -> pd.DataFrame:
        """The quantization study's points on vLLM: full precision (``model``'s folder) and each
        :class:`workbench.quant.QuantConfig` of ``configs`` exported (compressed-tensors) and timed by
        :meth:`time_served`. One row per point and load: ``label, method, w_bits, group_size, load``, the bench
        columns (``mean_ttft_ms, p50_tpot_ms, ...``) and ``export_dir``. Points vLLM refuses (its error) are
        kept with ``error`` set. ``data``, ``store`` and ``provenance`` are accepted for the study's call;
        this runner stores nothing itself."""
        from workbench.bridges.export import export_compressed_tensors
        from workbench.bridges.vllm_process import VllmServerError
        from workbench.quant import quantize

        out = Path(out_dir or tempfile.mkdtemp(prefix="wb-vllm-quant-"))
        points = [("fp", None, model_folder(model, tok, out / "fp"))]
        for qc in configs:
            if getattr(qc, "method", "fp") == "fp":
                continue
            folder = out / qc.label.replace(" ", "_").replace("/", "_")
            qm, _ = quantize(model, qc)
            export_compressed_tensors(qm, folder, tok)
            points.append((qc.label, qc, str(folder)))
        rows = []
        for label, qc, folder in points:
            meta = {"label": label, "method": getattr(qc, "method", "fp"), "w_bits": getattr(qc, "bits", 16),
                    "group_size": getattr(qc, "group_size", np.nan), "export_dir": folder}
            try:
                rows.append(self.time_served(folder, out / "bench", **timing).assign(**meta))
            except VllmServerError as e:
                rows.append(pd.DataFrame([meta | {"error": e.error}]))
        return pd.concat(rows, ignore_index=True)

    # -- speculative decoding: vLLM's counters -------------------------------------------------------
    def spec_counters(self, model, prompts: list[list[int]], *, method: str = "ngram", k: int = 3,
                      draft_model: str | None = None, temperature: float = 0.0, max_tokens: int = 32,
                      seed: int = 0, prompt_lookup_min: int = 2, prompt_lookup_max: int = 3) -> dict:
        """Generate from token-id ``prompts`` with vLLM speculative decoding (``method`` ``"ngram"``: prompt
        lookup with ``prompt_lookup_min/max``; ``"draft_model"``: ``draft_model`` folder) and ``k`` =
        ``num_speculative_tokens``. Returns ``token_ids`` (per prompt) and one row of
        :func:`workbench.bridges.vllm_metrics.read_spec_metrics`'s columns (``num_drafts, num_draft_tokens,
        num_accepted_tokens, num_accepted_tokens_per_pos, tau, draft_acceptance_rate, alpha``) for this run.
        Raises ``ValueError`` for an unknown method or a draft model missing."""
        from workbench.bridges.vllm_metrics import _spec_row
        from workbench.bridges.vllm_process import run_worker

        if method == "ngram":
            spec = {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": prompt_lookup_min,
                    "prompt_lookup_max": prompt_lookup_max}
        elif method == "draft_model":
            if not draft_model:
                raise ValueError("method='draft_model' needs draft_model= (a folder or hub id)")
            spec = {"method": "draft_model", "model": draft_model, "num_speculative_tokens": k}
        else:
            raise ValueError(f"method={method!r}: 'ngram' or 'draft_model'")
        res = run_worker({"task": "generate", "prompts": [list(map(int, p)) for p in prompts],
                          "sampling": {"temperature": temperature, "max_tokens": max_tokens, "seed": seed,
                                       "ignore_eos": True},
                          "llm": self.llm_kwargs(model_folder(model), speculative_config=spec)}, venv=self.venv)
        a, b = res["spec_after"], res["spec_before"]

        def delta(name):
            x, y = a.get(f"vllm:spec_decode_{name}", 0), b.get(f"vllm:spec_decode_{name}", 0)
            if isinstance(x, list):
                y = y if isinstance(y, list) else [0] * len(x)
                return [float(u) - float(v) for u, v in zip(x, y)]
            return float(x) - float(y)

        c = {n: delta(n) for n in ("num_drafts", "num_draft_tokens", "num_accepted_tokens",
                                    "num_accepted_tokens_per_pos")}
        if not isinstance(c["num_accepted_tokens_per_pos"], list):
            c["num_accepted_tokens_per_pos"] = []
        return {"token_ids": res["token_ids"], "generate_s": res["generate_s"], "load_s": res["load_s"],
                "counters": _spec_row(c)}

    def run_spec(self, target, tok, built, prompts: pd.DataFrame, configs, *, store=None, name=None,
                 provenance=None) -> pd.DataFrame:
        """The speculative study's grid on vLLM for the drafts vLLM runs: ``"ngram"`` (prompt lookup) and drafts
        given as a model folder / hub id (``built[name] == (None, {"folder": ...})`` or a loaded HF model).
        Static ``k`` only (vLLM has no adaptive policy). One row per (draft, config): ``draft, k, temperature``
        and :meth:`spec_counters`' counters; the engine-agreement logic lives with the speculative study."""
        rows = []
        ids = [list(p) for p in prompts["prompt_ids"]]
        for draft, (dmodel, info) in built.items():
            method = "ngram" if draft == "ngram" else "draft_model"
            folder = None
            if method == "draft_model":
                folder = (info or {}).get("folder") if dmodel is None else model_folder(dmodel, tok)
                if folder is None:
                    continue
            for sc in configs:
                if sc.policy != "static":
                    continue
                r = self.spec_counters(target, ids, method=method, k=sc.k, draft_model=folder,
                                       temperature=sc.temperature, max_tokens=sc.max_new_tokens, seed=sc.seed)
                rows.append({"draft": draft, "k": sc.k, "temperature": sc.temperature, "policy": "static",
                             **r["counters"], "generate_s": r["generate_s"]})
        return pd.DataFrame(rows)

    def run_stack(self, target, tok, config, prompt: list[int], *, store, repeats: int = 3, progress: bool = False,
                  out_dir: str | Path | None = None,
                  combinations=((False, False), (False, True), (True, False), (True, True))) -> pd.DataFrame:
        """The stacked study's combinations that vLLM runs here, at batch 1 (``config``: a
        ``workbench.studies.stack.Config``): the base precision (``self.dtype``) and W4A16 (RTN, groups of
        ``config.group_size``, asymmetric, exported as compressed-tensors), each without speculation and with
        n-gram drafting (``k = config.k``, prompt lookup 2-4): vLLM's own draft-free method, because the study's
        self-draft served as a second model would run at the target's dense cost, not the draft's. ``prompt``: the
        study's fixed request (token ids); each point serves it ``repeats`` times one after another
        (:func:`workbench.pd.server.stream_completion`, ``config.gen_len`` tokens, ``ignore_eos``) and reads the
        speculative counters of the window from ``/metrics``. Stored per point (a re-run serves only what is
        missing). ``combinations``: ``(quantized, speculative)`` pairs to run (default all four).

        One row per combination: ``quantized``, ``speculative``, ``label``, ``mean_ttft_ms``, ``mean_tpot_ms``,
        ``decode_tokens_per_s`` (1000 / mean TPOT), ``e2e_ms``, for the speculative rows ``alpha``, ``tau`` and
        ``draft_acceptance_rate`` (:func:`~workbench.bridges.vllm_metrics.read_spec_metrics`), and ``error`` where
        vLLM refused the point. The four P/D combinations are left out: they need a KV connector the CPU build
        cannot run (NixlConnector is GPU-only)."""
        import json
        import time

        from workbench.bridges.export import export_compressed_tensors
        from workbench.bridges.vllm_metrics import spec_metrics_delta
        from workbench.bridges.vllm_process import VllmServer, VllmServerError
        from workbench.pd.server import stream_completion
        from workbench.quant import QuantConfig, quantize
        from workbench.results import STORE_COLUMNS, collect_provenance
        from workbench.studies.base import slug

        out = Path(out_dir or tempfile.mkdtemp(prefix="wb-vllm-stack-"))
        ngram = {"method": "ngram", "num_speculative_tokens": int(config.k), "prompt_lookup_min": 2,
                 "prompt_lookup_max": 4}
        points = [{"quantized": bool(q), "speculative": bool(sp)} for q, sp in combinations]

        base = model_folder(target, tok, out / "base")  # the model's own folder when it has one on disk

        def folder(quantized: bool) -> str:
            if not quantized:
                return base
            dest = out / f"w4a16_g{config.group_size}"
            if not (dest / "config.json").exists():
                qm, _ = quantize(target, QuantConfig(method="rtn", bits=4, granularity="group",
                                                     group_size=config.group_size, symmetric=False))
                export_compressed_tensors(qm, dest, tok)
            return str(dest)

        def one(p):
            label = ("W4A16" if p["quantized"] else self.dtype) + (" + n-gram spec" if p["speculative"] else "")
            args = [*self.serve_args(), "--served-model-name", "wb-stack"]
            args += ["--speculative-config", json.dumps(ngram)] if p["speculative"] else []
            row = {**p, "label": label, "k": int(config.k) if p["speculative"] else 0}
            try:
                with VllmServer(folder(p["quantized"]), args, venv=self.venv) as srv:
                    stream_completion(srv.url, "wb-stack", prompt, config.gen_len)  # warm-up, untimed
                    before = srv.metrics()
                    ttft, tpot, e2e = [], [], []
                    for _ in range(int(repeats)):
                        t0, times, _n = stream_completion(srv.url, "wb-stack", prompt, config.gen_len)
                        ttft.append(1e3 * (times[0] - t0))
                        e2e.append(1e3 * (times[-1] - t0))
                        tpot.append(1e3 * (times[-1] - times[0]) / max(config.gen_len - 1, 1))
                    after = srv.metrics()
            except VllmServerError as e:
                return row | {"error": e.error}
            row |= {"mean_ttft_ms": float(np.mean(ttft)), "mean_tpot_ms": float(np.mean(tpot)),
                    "e2e_ms": float(np.mean(e2e)), "decode_tokens_per_s": 1000.0 / float(np.mean(tpot)),
                    "startup_s": srv.startup_s, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            if p["speculative"]:
                d = spec_metrics_delta(before, after).iloc[0]
                row |= {"alpha": float(d["alpha"]), "tau": float(d["tau"]),
                        "draft_acceptance_rate": float(d["draft_acceptance_rate"])}
            return row

        prov = collect_provenance(target, seed=config.seed, engine=self.provenance(),
                                  data={"prompt_ids": list(map(int, prompt)), "gen_len": config.gen_len,
                                        "repeats": repeats, "group_size": config.group_size, "k": config.k})
        rows = store.sweep(slug(f"stack_vllm_{Path(base).name}"), points, one,
                           provenance=prov, progress=progress)
        return rows.drop(columns=list(STORE_COLUMNS), errors="ignore")

    def run_pd(self, model, tok, config, *, store, progress: bool = True) -> dict:
        """The P/D study's measured half on a vLLM server (``config``: a ``workbench.studies.pd.Config``): the
        server is profiled over HTTP (:func:`workbench.pd.server.profile_server`), a
        :class:`~workbench.pd.CostModel` is fitted to that profile, and the simulator with vLLM's scheduler as its
        policy (:func:`workbench.pd.server.vllm_sim_config`: chunked prefill under ``max_num_batched_tokens``,
        ``max_num_seqs``) predicts the server's TTFT / TPOT / E2E on the real loop's Poisson workload at
        ``config.vllm_loads`` fractions of the simulated saturation rate (all requests at once: ``n / makespan``),
        each load followed by the drift check. Every part is stored as it finishes (the profile, then each load),
        so a re-run measures only what is missing, and starts the server only then.

        Returns ``{"profile", "cost", "real", "drift", "sim_vs_real", "capacity_rps", "sim_config",
        "client_overhead_ms"}`` (:func:`workbench.pd.server.client_overhead_ms`, added to the simulated TTFT / E2E): ``real``,
        ``drift`` and ``sim_vs_real`` carry ``rate`` and ``load`` (the fraction) columns; ``sim_vs_real`` is
        :func:`workbench.pd.loop.compare_to_sim`'s frame per load. Raises :class:`~workbench.bridges.vllm_process.
        VllmUnavailable` without ``.venv-vllm``, :class:`~workbench.bridges.vllm_process.VllmServerError` with
        vLLM's error lines when the server does not start."""
        from workbench.bridges.vllm_process import VllmServer
        from workbench.pd import CostModel
        from workbench.pd import server as srv
        from workbench.pd.loop import compare_to_sim
        from workbench.pd.sim import LengthDist, WorkloadConfig, generate_workload, simulate
        from workbench.results import STORE_COLUMNS, collect_provenance
        from workbench.studies.base import slug

        folder = model_folder(model, tok)
        vocab = int(model.config.vocab_size)
        seqs, budget = int(config.vllm_max_num_seqs), int(config.vllm_max_num_batched_tokens)
        args = [*self.serve_args(), "--max-num-seqs", str(seqs), "--max-num-batched-tokens", str(budget),
                "--no-enable-prefix-caching", "--served-model-name", "wb-pd"]
        server: dict = {}

        def url() -> str:  # started on first use: a fully stored study never starts vLLM
            if "s" not in server:
                server["s"] = VllmServer(folder, args, venv=self.venv).start()
            return server["s"].url

        # prefill points within one step's budget (a longer prompt is chunked over steps); decode up to max_num_seqs
        pcfg = {"prompt_lens": tuple(budget // d for d in (8, 4, 2, 1)), "max_step_tokens": budget,
                "decode_batches": tuple(b for b in (1, 2, 4, 8, 16, 32) if b <= seqs),
                "context_lens": (config.loop_prompt,), "repeats": 2 if config.size == "smoke" else 3}
        # the workload's shape is part of every point's identity (a different one re-measures)
        shape = {k: getattr(config, k) for k in ("loop_requests", "loop_prompt", "loop_output_max", "seed")}
        prov = collect_provenance(model, seed=config.seed, engine=self.provenance() | {"serve_args": args},
                                  data={"workload": shape})
        name = slug(f"pd_vllm_{Path(folder).name}")

        def workload(rate):
            return generate_workload(WorkloadConfig(
                n_requests=config.loop_requests, rate=rate, prompt=LengthDist("fixed", config.loop_prompt),
                output=LengthDist("uniform", low=4, high=config.loop_output_max), seed=config.seed))

        def profile(p):  # after a burst of the workload's requests (untimed): the server's first steps run slower
            srv.run_workload(url(), "wb-pd", workload(1e6), vocab=vocab, seed=config.seed + 1)
            return srv.profile_server(url(), "wb-pd", vocab=vocab, seed=config.seed, **p)

        try:
            prof = store.sweep(name + "_profile", [pcfg], profile, provenance=prov, progress=progress)
            prof = prof.drop(columns=list(STORE_COLUMNS), errors="ignore")
            cost = CostModel.fit(prof)
            overhead = srv.client_overhead_ms(prof)
            sim_cfg = srv.vllm_sim_config(seqs, budget)

            burst = simulate(workload(1e6), sim_cfg, cost)
            capacity = len(burst) / float(burst["finish_s"].max() - burst["arrival_s"].min())
            points = [{"load": float(f), "rate": round(float(f) * capacity, 4)} for f in config.vllm_loads]

            def one_load(p):
                real = srv.run_workload(url(), "wb-pd", workload(p["rate"]), vocab=vocab, seed=config.seed)
                drift = srv.drift_check(url(), "wb-pd", prof, vocab=vocab)
                d = {f"drift_{r.phase}_{k}": getattr(r, k) for r in drift.itertuples() for k in ("ms_profile",
                                                                                               "ms_now", "drift_pct")}
                return real.drop(columns=["itl_ms"]).assign(**p, **d)

            rows = store.sweep(name + "_loads", points, one_load, provenance=prov, progress=progress)
        finally:
            if "s" in server:
                server["s"].stop()
        reals, drifts, cmps = [], [], []
        for p in points:
            real = rows[(rows["rate"] == p["rate"]) & (rows["load"] == p["load"])]
            drift = pd.DataFrame([{"phase": ph, "ms_profile": real[f"drift_{ph}_ms_profile"].iloc[0],
                                   "ms_now": real[f"drift_{ph}_ms_now"].iloc[0],
                                   "drift_pct": real[f"drift_{ph}_drift_pct"].iloc[0]} for ph in ("prefill", "decode")])
            cmps.append(compare_to_sim(real, workload(p["rate"]), cost, sim_cfg, drift=drift,
                                       client_overhead_ms=overhead).assign(**p))
            reals.append(real)
            drifts.append(drift.assign(**p))
        return {"profile": prof, "cost": cost, "real": pd.concat(reals, ignore_index=True),
                "drift": pd.concat(drifts, ignore_index=True), "sim_vs_real": pd.concat(cmps, ignore_index=True),
                "capacity_rps": capacity, "sim_config": sim_cfg, "client_overhead_ms": overhead}
