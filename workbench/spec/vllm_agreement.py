"""Speculative-decoding agreement between the workbench and vLLM: per-position counts and alpha / tau.

vLLM runs out of process (:mod:`workbench.spec.vllm_worker` under ``.venv-vllm``'s Python); it reports per
request the per-step drafted and accepted counts (``per_request_spec_decode_metrics="detailed"``, vLLM 0.32
``RequestSpecDecodeMetrics``) and engine-wide ``vllm:spec_decode_*`` counters. The workbench runs the same
prompts through :func:`workbench.spec.speculative_generate` **on vLLM's schedule** (the prefill emits the
first token; drafts follow every later token):

* n-gram drafts: :func:`workbench.spec.ngram.proposer_generate` has that schedule;
* a draft model: the workbench loop drafts from its first step, so it is given the prompt plus the target's
  first token and ``max_tokens - 1`` tokens, which is vLLM's schedule exactly at temperature 0 (and in
  distribution above it). vLLM drafts are sampled (``draft_sample_method="probabilistic"``) at T > 0, as the
  workbench's exact rule (Leviathan et al. 2023, arXiv 2211.17192, Algorithm 1) does; vLLM's default
  ``"greedy"`` would verify the draft's argmax as a one-hot q instead.

Checks (:func:`greedy_agreement`, :func:`sampled_agreement`):

* temperature 0: on the prompts where both engines emit the same tokens (bf16 near-ties can make them
  differ; the count is reported), ``num_drafts``, ``num_draft_tokens``, ``num_accepted_tokens`` and
  ``num_accepted_tokens_per_pos`` are equal, prompt by prompt;
* temperature > 0: alpha (accepted / tested drafts) and tau (1 + accepted / drafts, bonus token included,
  vLLM's "mean acceptance length") with 95% cluster-bootstrap intervals over prompts on each engine; they
  agree when the 95% interval of the difference (bootstraps of the two engines independent) holds 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from workbench.spec.config import SpecConfig
from workbench.spec.metrics import SpecDecodingStats

WORKER = Path(__file__).with_name("vllm_worker.py")
VENV_ENV = "WORKBENCH_VLLM_PYTHON"  # override for the vLLM environment's python


def vllm_python() -> Path:
    """The vLLM environment's interpreter: ``$WORKBENCH_VLLM_PYTHON``, else ``.venv-vllm/bin/python`` at the
    repository root. Raises ``FileNotFoundError`` naming the fix (``make setup-vllm``) when it is missing."""
    env = os.environ.get(VENV_ENV)
    py = Path(env) if env else Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python"
    if not py.exists():
        raise FileNotFoundError(f"no vLLM environment at {py}: run `make setup-vllm` (or set {VENV_ENV} to the "
                                "python of an environment with vllm installed)")
    return py


def run_vllm(request: dict, *, timeout: float = 1800, python: Path | None = None) -> dict:
    """Run :mod:`workbench.spec.vllm_worker` on ``request`` (its IN JSON) in the vLLM environment; return its
    OUT JSON plus ``wall_s`` (seconds, process start to exit, model load included). Raises
    ``RuntimeError`` with the tail of vLLM's log when the worker fails."""
    py = python or vllm_python()
    with tempfile.TemporaryDirectory() as d:
        src, dst = Path(d) / "in.json", Path(d) / "out.json"
        src.write_text(json.dumps(request))
        t0 = time.time()
        proc = subprocess.run([str(py), str(WORKER), str(src), str(dst)], capture_output=True, text=True, check=False,
                              timeout=timeout, cwd=d)
        if proc.returncode or not dst.exists():
            raise RuntimeError(f"vLLM worker failed (rc {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
        out = json.loads(dst.read_text())
    out["wall_s"] = time.time() - t0
    return out


def stats_from_steps(drafted, accepted) -> SpecDecodingStats:
    """A :class:`SpecDecodingStats` replayed from per-step drafted / accepted counts (vLLM's detailed
    per-request arrays): the same accumulator computes both engines' alpha, tau and per-position counts."""
    st = SpecDecodingStats()
    for d, a in zip(drafted, accepted):
        st.observe(int(d), int(a))
    return st


def _row(engine: str, prompt_id, tokens, st: SpecDecodingStats, k: int) -> dict:
    pos = list(st.num_accepted_tokens_per_pos) + [0] * (k - len(st.num_accepted_tokens_per_pos))
    return {"engine": engine, "prompt_id": prompt_id, "tokens": list(tokens), "num_drafts": st.num_drafts,
            "num_draft_tokens": st.num_draft_tokens, "num_accepted_tokens": st.num_accepted_tokens,
            "num_rejections": st.num_rejections, "accepted_per_pos": pos}


def vllm_frame(out: dict, prompt_ids, k: int) -> pd.DataFrame:
    """One row per request of a worker's OUT JSON: ``engine="vllm"``, ``prompt_id``, ``tokens``, the counters
    and ``accepted_per_pos`` (length ``k``). Raises ``ValueError`` when vLLM returned no per-request metrics
    (speculative decoding off) or its engine-wide counters disagree with the sum of the per-request ones."""
    rows = []
    for pid, o in zip(prompt_ids, out["outputs"]):
        m = o["spec_decode_metrics"]
        if m is None:
            raise ValueError("vLLM returned no per-request speculative metrics: was speculative_config set?")
        st = stats_from_steps(m.get("per_step_drafted", []), m.get("per_step_accepted", []))
        rows.append(_row("vllm", pid, o["token_ids"], st, k))
    df = pd.DataFrame(rows)
    tot = out.get("metrics", {})
    if "vllm:spec_decode_num_drafts" in tot:  # the two vLLM counters must tell the same story
        per_pos = np.sum(np.stack(df.accepted_per_pos.to_list()), 0).tolist()
        got = (tot["vllm:spec_decode_num_drafts"], tot["vllm:spec_decode_num_draft_tokens"],
               tot["vllm:spec_decode_num_accepted_tokens"], tot["vllm:spec_decode_num_accepted_tokens_per_pos"][:k])
        want = (df.num_drafts.sum(), df.num_draft_tokens.sum(), df.num_accepted_tokens.sum(), per_pos)
        if [float(x) for x in got[:3]] != [float(x) for x in want[:3]] or [float(x) for x in got[3]] != \
                [float(x) for x in want[3]]:
            raise ValueError(f"vLLM's engine counters {got} differ from its per-request sums {want}")
    return df


def workbench_frame(target, draft, prompts: pd.DataFrame, config: SpecConfig) -> pd.DataFrame:
    """The workbench's rows on vLLM's schedule (module docstring) for each prompt of ``prompts``
    (``prompt_id, prompt_ids``): ``target`` a module or Runner; ``draft`` an n-gram proposer, or a module or
    Runner. Greedy or sampled per ``config`` (its ``seed`` plus the prompt's row number seeds each prompt)."""
    import dataclasses

    from workbench.spec.generate import as_runner, speculative_generate
    from workbench.spec.sampling import make_generator, probs_from_logits, sample

    t_run = as_runner(target)
    proposer = callable(getattr(draft, "propose", None))
    d_run = draft if proposer else as_runner(draft)
    rows = []
    for i, pr in enumerate(prompts.itertuples(index=False)):
        cfg = dataclasses.replace(config, seed=config.seed + i)
        ids = list(pr.prompt_ids)
        if proposer:
            out = speculative_generate(t_run, d_run, ids, config=cfg)
            rows.append(_row("workbench", pr.prompt_id, out.tokens, out.stats, cfg.k))
            continue
        t_run.reset()  # the prefill step emits token 1 (vLLM), then the loop starts from prompt + [token 1]
        logits = t_run.extend(torch.tensor(ids))[-1]
        gen = make_generator(None, cfg.seed + 10_000, logits.device)
        first = int(sample(probs_from_logits(logits, cfg.temperature, cfg.top_p), gen))
        rest = dataclasses.replace(cfg, max_new_tokens=cfg.max_new_tokens - 1)
        out = speculative_generate(t_run, d_run, ids + [first], config=rest, loop="reference")
        rows.append(_row("workbench", pr.prompt_id, [first] + out.tokens, out.stats, cfg.k))
    return pd.DataFrame(rows)


def greedy_agreement(wb: pd.DataFrame, vl: pd.DataFrame) -> pd.DataFrame:
    """Per prompt at temperature 0: ``same_tokens`` (both engines emitted the same ids), ``first_diff`` (index
    of the first differing token, -1 if none), both engines' counters and ``counts_equal`` (every counter and
    every per-position count equal; meaningful where ``same_tokens``)."""
    m = wb.merge(vl, on="prompt_id", suffixes=("_wb", "_vllm"))
    cols = ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_pos")

    def first_diff(a, b):
        n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
        return n if n is not None else (-1 if len(a) == len(b) else min(len(a), len(b)))

    m["first_diff"] = [first_diff(a, b) for a, b in zip(m.tokens_wb, m.tokens_vllm)]
    m["same_tokens"] = m.first_diff == -1
    m["counts_equal"] = [all(list(np.atleast_1d(r[f"{c}_wb"])) == list(np.atleast_1d(r[f"{c}_vllm"])) for c in cols)
                         for _, r in m.iterrows()]
    keep = ["prompt_id", "same_tokens", "first_diff", "counts_equal"] + [f"{c}_{e}" for c in cols for e in ("wb", "vllm")]
    return m[keep]


def _boot(num: np.ndarray, den: np.ndarray, rng, n_boot: int) -> np.ndarray:
    idx = rng.integers(0, len(num), (n_boot, len(num)))
    return num[idx].sum(1) / np.maximum(den[idx].sum(1), 1e-12)


def sampled_agreement(wb: pd.DataFrame, vl: pd.DataFrame, n_boot: int = 4000, seed: int = 0) -> pd.DataFrame:
    """alpha and tau of each engine with 95% percentile cluster-bootstrap intervals (prompts resampled: the
    steps of one prompt are not independent), the difference vllm - workbench with its interval (the two
    engines' bootstraps independent) and ``agree`` = that interval holds 0. One row per metric:
    ``metric, workbench, workbench_lo, workbench_hi, vllm, vllm_lo, vllm_hi, diff, diff_lo, diff_hi, agree``.

    alpha = accepted / (accepted + rejections) (:attr:`SpecDecodingStats.alpha`); tau = 1 + accepted / drafts
    (vLLM's mean acceptance length, bonus token included); ``draft_acceptance_rate`` = accepted / drafted."""
    rng = np.random.default_rng(seed)
    defs = {"alpha": ("num_accepted_tokens", None), "tau": ("num_accepted_tokens", "num_drafts"),
            "draft_acceptance_rate": ("num_accepted_tokens", "num_draft_tokens")}
    rows = []
    for metric, (num_c, den_c) in defs.items():
        rec, boots = {"metric": metric}, {}
        for name, df in (("workbench", wb), ("vllm", vl)):
            num = df[num_c].to_numpy(float)
            den = (df.num_accepted_tokens + df.num_rejections).to_numpy(float) if den_c is None else \
                df[den_c].to_numpy(float)
            add = 1.0 if metric == "tau" else 0.0
            b = _boot(num, den, rng, n_boot) + add
            rec[name] = num.sum() / den.sum() + add
            rec[f"{name}_lo"], rec[f"{name}_hi"] = np.quantile(b, [0.025, 0.975])
            boots[name] = b
        d = boots["vllm"] - boots["workbench"]
        rec["diff"] = rec["vllm"] - rec["workbench"]
        rec["diff_lo"], rec["diff_hi"] = np.quantile(d, [0.025, 0.975])
        rec["agree"] = bool(rec["diff_lo"] <= 0 <= rec["diff_hi"])
        rows.append(rec)
    return pd.DataFrame(rows)


def vllm_request(model: str, prompts: pd.DataFrame, config: SpecConfig, speculative_config: dict,
                 max_model_len: int = 2048) -> dict:
    """The worker's IN JSON for ``prompts`` under ``config`` (k, temperature, top_p, max_new_tokens, seed;
    each prompt seeded ``seed + row``) and a vLLM ``speculative_config``."""
    return {"model": str(model), "prompts": [list(map(int, p)) for p in prompts.prompt_ids],
            "max_tokens": config.max_new_tokens, "temperature": config.temperature, "top_p": config.top_p,
            "seeds": [config.seed + i for i in range(len(prompts))], "seed": config.seed,
            "speculative_config": speculative_config, "max_model_len": max_model_len}


def draft_speculative_config(draft_path: str, k: int, temperature: float) -> dict:
    """vLLM's ``speculative_config`` for a draft-model pair: ``method="draft_model"``, sampled drafts at
    T > 0 (``draft_sample_method="probabilistic"``, the exact rule), greedy at T = 0."""
    return {"method": "draft_model", "model": str(draft_path), "num_speculative_tokens": k,
            "draft_sample_method": "probabilistic" if temperature > 0 else "greedy"}


def layer_draft_folder(model_dir, n_layers: int, dtype: str = "bfloat16", root=None) -> Path:
    """An HF folder vLLM can load as a draft model: the first ``n_layers`` decoder layers of the model in
    ``model_dir`` (:func:`workbench.spec.drafts.truncated_draft`) with its tokenizer, saved in ``dtype`` under
    ``root`` (default ``<workbench cache>/drafts``) as ``<model_dir name>-layers-<n>-<dtype>``. Built once through
    :func:`workbench.models.hf.save_folder` (a temporary folder renamed into place, with its provenance file written
    last) and reused only when that provenance file names this build; an incomplete or foreign folder is rebuilt.
    Raises ``ValueError`` for ``n_layers`` outside the model's."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from workbench.models.builtin import cache_dir
    from workbench.models.hf import PROVENANCE_FILE, save_folder
    from workbench.spec.drafts import truncated_draft

    model_dir = Path(model_dir)
    root = Path(root) if root is not None else cache_dir() / "drafts"
    out = root / f"{model_dir.name}-layers-{n_layers}-{dtype}"
    prov = {"draft": f"layers-{n_layers}", "of": str(model_dir.resolve()), "dtype": dtype}
    try:
        if json.loads((out / PROVENANCE_FILE).read_text()) == prov:
            return out
    except (OSError, ValueError):
        pass
    target = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
    save_folder(truncated_draft(target, n_layers), AutoTokenizer.from_pretrained(model_dir), out, prov)
    return out


__all__ = ["draft_speculative_config", "greedy_agreement", "layer_draft_folder", "run_vllm", "sampled_agreement", "stats_from_steps",
           "vllm_frame", "vllm_python", "vllm_request", "workbench_frame"]
