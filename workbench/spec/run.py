"""``run_spec``: speculative decoding of many prompts with many drafts -> one tidy row per run.

For each prompt and sampling setting the target first decodes plainly (the timing baseline, and the
target's own trajectory); each draft is scored along that trajectory (alignment: KL, TV, predicted
alpha), then each config decodes speculatively through the same runners. ``summarize_spec`` pools
rows into alpha / tau with 95% CIs, the measured c and realized vs theoretical speedup.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from workbench.engine import Engine, HFRunner, SlotRunner
from workbench.models import require_trained
from workbench.spec.alignment import alignment_metrics, score_positions
from workbench.spec.config import SpecConfig
from workbench.spec.generate import autoregressive_generate, speculative_generate
from workbench.spec.theory import expected_tokens_per_step, speedup


def encode_prompts(tokenizer, prompts: pd.DataFrame, chat: bool = True, max_prompt_tokens: int = 256) -> pd.DataFrame:
    """Add ``prompt_ids`` (list of int) to a ``load_prompts`` frame (``prompt_id, category, prompt``).

    The prompt text is cut to ``max_prompt_tokens`` tokens (CPU prefill budget), then wrapped in the
    tokenizer's chat template when ``chat`` and a template exists.
    """
    ids = []
    for text in prompts["prompt"]:
        t = tokenizer(text, add_special_tokens=False)["input_ids"][:max_prompt_tokens]
        text = tokenizer.decode(t)
        if chat and getattr(tokenizer, "chat_template", None):
            enc = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
            enc = enc["input_ids"] if hasattr(enc, "keys") else enc
            ids.append([int(x) for x in enc])
        else:
            ids.append(tokenizer(text)["input_ids"])
    return prompts.assign(prompt_ids=ids, n_prompt=[len(x) for x in ids])


def sampling_key(cfg: SpecConfig) -> tuple:
    """The settings a plain decode depends on: ``(temperature, top_p, max_new_tokens, seed)``."""
    return (cfg.temperature, cfg.top_p, cfg.max_new_tokens, cfg.seed)


class SpecCache:
    """What several ``run_spec`` calls can share: the target's plain decode of each prompt (the
    timing baseline and the target's trajectory, keyed by prompt and sampling settings) and each
    draft's alignment along it. ``max_baselines`` bounds the baselines kept (each holds ``[n_new, V]``
    float32 logits); the oldest go first."""

    def __init__(self, max_baselines: int = 64):
        self.max_baselines = max_baselines
        self.baselines: dict = {}
        self.alignment: dict = {}

    def baseline(self, t_run, prompt_id, prompt_ids, cfg: SpecConfig, stop_token_ids, timer: dict):
        key = (prompt_id, tuple(prompt_ids), sampling_key(cfg))
        if key not in self.baselines:
            while len(self.baselines) >= max(self.max_baselines, 1):
                self.baselines.pop(next(iter(self.baselines)))
            self.baselines[key] = autoregressive_generate(t_run, prompt_ids, config=cfg, return_logits=True,
                                                          stop_token_ids=stop_token_ids, **timer)
        return self.baselines[key]

    def align(self, name: str, d_run, prompt_id, prompt_ids, base, cfg: SpecConfig) -> dict:
        key = (name, prompt_id, tuple(prompt_ids), sampling_key(cfg))
        if key not in self.alignment and callable(getattr(d_run, "propose", None)):  # n-gram: no distribution
            self.alignment[key] = {"kl_pq": float("nan"), "kl_qp": float("nan"), "tv": float("nan"),
                                   "alpha_pred": float("nan"), "n_align": 0}
        if key not in self.alignment:
            q_logits = score_positions(d_run, prompt_ids, base.tokens)
            al = alignment_metrics(base.logits, q_logits, cfg.temperature, cfg.top_p)
            self.alignment[key] = {**{c: float(al[c].mean()) for c in ("kl_pq", "kl_qp", "tv", "alpha_pred")},
                                   "n_align": len(al)}
        return self.alignment[key]


def _row(cfg: SpecConfig, name: str, pr, base, align: dict, out, runners: tuple[str, str]) -> dict:
    """One ``run_spec`` row: config, counters, alignment, times and ratios."""
    st, n_new, n_base = out.stats, len(out.tokens), len(base.tokens)
    base_tpot = base.decode_s / (n_base - 1) if n_base > 1 else float("nan")
    summ = st.summary()
    row = {**cfg.to_row(), "draft": name, "loop": out.loop, "target_runner": runners[0], "draft_runner": runners[1],
           "prompt_id": pr.prompt_id, "category": pr.category,
           "n_prompt": len(pr.prompt_ids), "n_new": n_new, **summ, **align,
           "tokens_per_step": list(st.tokens_per_step), "draft_tokens_per_step": list(st.draft_tokens_per_step),
           "accepted_per_pos": list(st.num_accepted_tokens_per_pos), "drafted_per_pos": list(st.num_drafts_per_pos),
           "tested_per_pos": list(st.num_tested_per_pos),
           "baseline_n_new": n_base, "baseline_decode_s": base.decode_s, "baseline_tpot_s": base_tpot,
           "spec_decode_s": out.decode_s, "spec_tpot_s": out.decode_s / max(n_new, 1),
           "draft_step_s": summ["draft_s"] / max(st.num_draft_tokens, 1),
           "verify_s": summ["target_s"] / max(st.num_drafts, 1)}
    row["c"] = row["draft_step_s"] / base_tpot
    row["verify_cost"] = row["verify_s"] / base_tpot
    row["speedup"] = base_tpot / row["spec_tpot_s"]
    return row


_WARNED: set = set()  # (model class, reason) pairs already warned about in this process


def engine_runner(model: torch.nn.Module, max_seq: int, *, required: bool = False):
    """The engine's single-sequence runner for ``model`` (``Engine.from_hf(model, max_batch=1,
    max_seq).runner(0)``). Where the engine cannot take the model (an architecture or setting it
    does not reproduce) it returns the :class:`HFRunner` reference (transformers' forward, slower)
    and warns once per model class and reason, saying why; with ``required`` (the caller asked for
    the fast loop) it raises ValueError with the reason instead."""
    try:
        return Engine.from_hf(model, max_batch=1, max_seq=max_seq).runner(0)
    except (ValueError, NotImplementedError, AttributeError, KeyError) as e:
        reason = f"{type(e).__name__}: {e}"
        name = type(model).__name__
        if required:
            raise ValueError(f"loop='device' asks for the engine, which cannot run {name} ({reason}); use "
                             "loop='auto' or 'reference' to run it on the HF reference runner") from e
        if (name, reason) not in _WARNED:
            _WARNED.add((name, reason))
            warnings.warn(f"{name} runs on the HF reference runner (transformers' forward: slower, and its "
                          f"timings are not the engine's) because the engine cannot take it: {reason}",
                          UserWarning, stacklevel=3)
        return HFRunner(model)


def runner_kind(runner) -> str:
    """``"engine"`` (a :class:`SlotRunner`), ``"hf"`` (:class:`HFRunner`) or the runner's class name:
    the ``target_runner`` / ``draft_runner`` columns of :func:`run_spec`."""
    if callable(getattr(runner, "propose", None)):
        return "proposer"
    return "engine" if isinstance(runner, SlotRunner) else "hf" if isinstance(runner, HFRunner) else type(runner).__name__


def default_runners(target, drafts: dict, prompts: pd.DataFrame, configs, runner_factory=None, loop: str = "auto"):
    """``(target_runner, {name: draft_runner})``: modules wrapped by ``runner_factory`` (default
    :func:`engine_runner`, the engine with its KV cache sized for these prompts and configs, or,
    with a warning saying why, ``HFRunner`` for models it does not cover; ``loop="device"`` asks for
    the engine and raises instead); runners are used as given.
    ``drafts``: ``{name: module | Runner | (module, info)}``."""
    if runner_factory is None:
        need = max(len(p) for p in prompts["prompt_ids"]) + max(c.max_new_tokens + c.k_max for c in configs) + 2
        runner_factory = lambda m: engine_runner(m, max_seq=need, required=loop == "device")
    wrap = lambda m: runner_factory(m) if isinstance(m, torch.nn.Module) else m
    return wrap(target), {name: wrap(d[0] if isinstance(d, tuple) else d) for name, d in drafts.items()}


WARMUP_TOKENS = 4  # new tokens of each untimed warm-up decode


def _warm_up(t_run, d_runs: dict, prompts: pd.DataFrame, configs, loop: str, stop_token_ids) -> int:
    """One short untimed plain decode, and one short speculative decode per (draft, k, policy, greedy or
    sampled) on the first prompt, so first-call costs (CUDA graph capture, Triton compilation, kernel
    tuning) land in no timed run. Without it the first plain decode of a sweep, the baseline every draft
    of its sampling setting is divided by, carried them: on an H200 notebook 02's greedy baselines read
    about 10x their steady-state time and its greedy speedups up to 6.7x. Returns the decodes run."""
    ids = prompts["prompt_ids"].iloc[0]
    n, seen = 0, set()
    for cfg in configs:
        short = dataclasses.replace(cfg, max_new_tokens=min(cfg.max_new_tokens, WARMUP_TOKENS))
        if not n:
            autoregressive_generate(t_run, ids, config=short, stop_token_ids=stop_token_ids)
            n += 1
        for name, d_run in d_runs.items():
            key = (name, cfg.k, cfg.policy, cfg.temperature == 0)
            if key not in seen:
                seen.add(key)
                speculative_generate(t_run, d_run, ids, config=short, loop=loop, stop_token_ids=stop_token_ids)
                n += 1
    return n


def run_spec(target, drafts: dict, prompts: pd.DataFrame, configs, *, runner_factory=None,
             stop_token_ids=(), progress: bool = False, clock=None, loop: str = "auto",
             cache: SpecCache | None = None, warmup: bool | None = None) -> pd.DataFrame:
    """Run every (prompt, draft, config); return one row each.

    Args:
        target: module or Runner. drafts: ``{name: module | Runner | (module, info)}``.
        prompts: DataFrame with ``prompt_id, category, prompt_ids`` (see :func:`encode_prompts`).
        configs: one :class:`SpecConfig` or a list.
        runner_factory: module -> Runner (see :func:`default_runners`: the engine, or the HF reference
            runner with a warning saying why). Runners given directly are used as they are.
        clock: timer for every timing (default ``time.perf_counter``; ``time.process_time`` = CPU time
            of this process, robust to other jobs on a shared CPU, for CPU runs only).
        loop: speculative loop (``speculative_generate``): ``"auto"`` takes the device loop for engine
            runners; column ``loop`` says which ran. ``"device"`` also asks for the engine's runners:
            ValueError (with the reason) for a model the engine cannot take.
        cache: a :class:`SpecCache` shared between calls (baselines and alignment computed once).
        warmup: run :func:`_warm_up` first (short untimed decodes); default: when the target runner is not
            on the CPU (where first calls cost nothing extra, so CPU numbers stay as they were).

    Returns:
        DataFrame: config fields (``acceptance`` among them: ``"synthetic"`` rows are a timing what-if),
        ``draft, loop, target_runner, draft_runner`` (``"engine"`` or ``"hf"``, :func:`runner_kind`),
        ``prompt_id, category, n_prompt, n_new``, the counters of
        ``SpecDecodingStats.summary()``, list columns ``tokens_per_step``, ``draft_tokens_per_step``,
        ``accepted_per_pos``, ``drafted_per_pos``, ``tested_per_pos``; alignment means ``kl_pq, kl_qp,
        tv, alpha_pred`` along the baseline (target) trajectory; times ``baseline_tpot_s`` (plain
        decode per token), ``spec_tpot_s``, ``draft_step_s`` (per draft forward), ``verify_s`` (per
        verify step); ratios ``c`` = draft_step_s / baseline_tpot_s, ``verify_cost`` = verify_s /
        baseline_tpot_s, ``speedup`` = baseline_tpot_s / spec_tpot_s. Neither prints nor saves.
    """
    configs = [configs] if isinstance(configs, SpecConfig) else list(configs)
    if any(getattr(c, "acceptance", "rejection") != "synthetic" for c in configs):  # synthetic: a timing what-if
        require_trained(target, "speculative decoding's alignment and acceptance (alpha, tau)")
    timer = {} if clock is None else {"clock": clock}
    t_run, d_runs = default_runners(target, drafts, prompts, configs, runner_factory, loop)
    warm = not str(getattr(t_run, "device", "cpu")).startswith("cpu") if warmup is None else warmup
    if warm and len(prompts):
        _warm_up(t_run, d_runs, prompts, configs, loop, stop_token_ids)
    cache = cache if cache is not None else SpecCache(max_baselines=1)
    groups: dict = {}
    for cfg in configs:
        groups.setdefault(sampling_key(cfg), []).append(cfg)
    it = list(prompts.itertuples(index=False))
    rows = []
    for pr in tqdm(it, desc="prompts", disable=not progress):
        for group in groups.values():
            base = cache.baseline(t_run, pr.prompt_id, pr.prompt_ids, group[0], stop_token_ids, timer)
            for name, d_run in d_runs.items():
                align = cache.align(name, d_run, pr.prompt_id, pr.prompt_ids, base, group[0])
                for cfg in group:
                    out = speculative_generate(t_run, d_run, pr.prompt_ids, config=cfg, loop=loop,
                                               stop_token_ids=stop_token_ids, **timer)
                    rows.append(_row(cfg, name, pr, base, align, out, (runner_kind(t_run), runner_kind(d_run))))
    return pd.DataFrame(rows)


def _ratio_ci(num: np.ndarray, den: np.ndarray, n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """sum(num) / sum(den) with a 95% percentile bootstrap CI resampling rows (prompts: the clusters)."""
    est = num.sum() / den.sum()
    if len(num) < 2:
        return est, est, est
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(num), (n_boot, len(num)))
    boots = num[idx].sum(1) / np.maximum(den[idx].sum(1), 1e-12)
    return float(est), float(np.quantile(boots, 0.025)), float(np.quantile(boots, 0.975))


def summarize_spec(df: pd.DataFrame, by=("draft", "temperature", "top_p", "policy", "k")) -> pd.DataFrame:
    """Pool ``run_spec`` rows per group: one row each with

    ``n_prompts, n_steps, n_tested, n_accepted, n_draft_tokens`` (counts, so groups can be pooled
    again), ``alpha`` (n_accepted / n_tested drafts) with ``alpha_lo, alpha_hi`` (cluster bootstrap over
    prompts, 95%), ``tau`` (1 + accepted / drafts, bonus included) with ``tau_lo, tau_hi``,
    ``draft_acceptance_rate``, alignment means ``kl_pq, kl_qp, tv, alpha_pred``, ``c`` and
    ``verify_cost`` (pooled times), ``speedup`` (realized: pooled baseline per-token time / pooled
    speculative per-token time), ``tau_theory`` and ``speedup_theory`` (Leviathan et al. 2023
    Eq. 1 and Theorem 3.8 at the measured alpha and c; static policy only, else NaN),
    ``tau_theory_pred`` (Eq. 1 at the *predicted* alpha from alignment: an independent check) and
    ``speedup_theory_verify`` (same with the measured verify cost in place of 1).

    ``acceptance`` and ``synthetic_alpha`` (when present) always join ``by``, so synthetic-acceptance
    rows (a timing what-if) are never pooled with real ones and stay labelled in the summary.
    """
    by = list(by) + [c for c in ("acceptance", "synthetic_alpha") if c in df and c not in by]
    out = []
    for key, g in df.groupby(by, sort=True, dropna=False):
        acc = g["num_accepted_tokens"].to_numpy(float)
        rej = g["num_rejections"].to_numpy(float)
        drafts = g["num_drafts"].to_numpy(float)
        alpha, a_lo, a_hi = _ratio_ci(acc, acc + rej)
        r_tau, t_lo, t_hi = _ratio_ci(acc + drafts, drafts)
        base_t = g["baseline_decode_s"].sum() / (g["baseline_n_new"] - 1).clip(lower=1).sum()
        c = g["draft_s"].sum() / g["num_draft_tokens"].sum() / base_t
        verify_cost = g["target_s"].sum() / g["num_drafts"].sum() / base_t
        row = dict(zip(by, key if isinstance(key, tuple) else (key,)))
        row.update(n_prompts=g["prompt_id"].nunique(), n_steps=int(drafts.sum()), n_tested=int((acc + rej).sum()),
                   n_accepted=int(acc.sum()), n_draft_tokens=int(g["num_draft_tokens"].sum()),
                   alpha=alpha, alpha_lo=a_lo,
                   alpha_hi=a_hi, tau=r_tau, tau_lo=t_lo, tau_hi=t_hi,
                   draft_acceptance_rate=acc.sum() / g["num_draft_tokens"].sum(),
                   **{m: g[m].mean() for m in ("kl_pq", "kl_qp", "tv", "alpha_pred")},
                   c=c, verify_cost=verify_cost,
                   speedup=base_t / (g["spec_decode_s"].sum() / g["n_new"].sum()))
        static = g["policy"].iloc[0] == "static"
        k = int(g["k"].iloc[0])
        a = min(max(alpha, 0.0), 1.0)
        row["tau_theory"] = expected_tokens_per_step(a, k) if static else np.nan
        row["tau_theory_pred"] = expected_tokens_per_step(float(np.clip(row["alpha_pred"], 0, 1)), k) \
            if static else np.nan
        row["speedup_theory"] = speedup(a, k, c) if static else np.nan
        row["speedup_theory_verify"] = speedup(a, k, c, verify_cost) if static else np.nan
        out.append(row)
    return pd.DataFrame(out)


__all__ = ["SpecCache", "default_runners", "encode_prompts", "run_spec", "sampling_key", "summarize_spec"]
