"""Measure prefill and decode step times of a loaded model through the runner protocol.

Every timing goes through :class:`workbench.engine.api.BatchRunner` (``extend_batch`` then
``synchronize`` before reading the clock), the same path the serving loop (:mod:`workbench.pd.loop`)
uses, so the fitted :class:`~workbench.pd.costmodel.CostModel` describes the steps that loop runs.

A timed step is: roll the slots back, ``extend_batch``, greedy next token to the host, ``synchronize``.

Rows (``run_profile``): ``phase`` (prefill | decode), ``batch`` (sequences in the step), ``seq_len``
(prompt length for prefill, cached context per sequence for decode), ``n_tokens`` (tokens the step
processes), ``attn_sq`` (sum of L^2 over prefilled sequences), ``kv_tokens`` (cached tokens read by a
decode step, summed over the batch), ``ms`` (median step time), ``ms_min``, ``ms_iqr``, ``repeats``.
"""

from __future__ import annotations

import inspect
import time
from dataclasses import asdict, dataclass
from functools import partial

import numpy as np
import pandas as pd
import torch

from workbench.arch import ModelSpec
from workbench.device import resolve_device
from workbench.pd.hardware import HardwareSpec
from workbench.validate import check_field_types

__all__ = ["ProfileConfig", "drift_check", "drift_rows", "extend", "make_runner", "run_profile", "with_floors"]


@dataclass(frozen=True)
class ProfileConfig:
    """Grid of the profile; every point is timed ``repeats`` times after ``warmup`` untimed runs."""

    prompt_lens: tuple[int, ...] = (16, 32, 64, 128, 256)  # prefill lengths, tokens
    prefill_batches: tuple[int, ...] = (1, 2, 4)  # prompts per prefill step
    decode_batches: tuple[int, ...] = (1, 2, 4, 8, 16)  # sequences per decode step
    context_lens: tuple[int, ...] = (32, 128, 256)  # cached tokens per sequence before the decode step
    repeats: int = 5  # timed runs per point (median reported)
    warmup: int = 1  # untimed runs per point (allocator, caches)
    seed: int = 0  # token ids are random (timing does not depend on their values)

    def __post_init__(self):
        check_field_types(self)  # integer fields take integers; every error names its field
        for f in ("prompt_lens", "prefill_batches", "decode_batches", "context_lens"):
            v = getattr(self, f)
            if len(v) == 0 or min(v) < 1:
                raise ValueError(f"ProfileConfig.{f}={v!r} must be a non-empty tuple of integers >= 1")
        if self.repeats < 1 or self.warmup < 0:
            raise ValueError("ProfileConfig.repeats must be >= 1 and warmup >= 0")

    @classmethod
    def for_device(cls, device="auto", **overrides) -> ProfileConfig:
        """The defaults on CUDA; on the CPU 3 timed runs per point instead of 5 (the median of 3 still
        drops one outlier; CPU time is scarce: notebook 03's profile is its largest cost). ``device``:
        a name or ``torch.device`` (``"auto"``: CUDA when present); ``overrides`` replace fields.
        Raises ``ValueError`` as :func:`workbench.device.resolve_device` and ``ProfileConfig`` do."""
        from_device = {} if resolve_device(device).type == "cuda" else {"repeats": 3}
        return cls(**{**from_device, **overrides})

    @property
    def max_batch(self) -> int:
        return max(max(self.prefill_batches), max(self.decode_batches))

    @property
    def max_seq(self) -> int:
        return max(max(self.prompt_lens), max(self.context_lens) + 1)


def make_runner(model, max_batch: int, max_seq: int):
    """The fast :class:`workbench.engine.Engine` (CPU fallback included) over an HF model's weights."""
    from workbench.engine import Engine

    return Engine.from_hf(model, max_batch=max_batch, max_seq=max_seq)


def extend(runner, slots: torch.Tensor, tokens: torch.Tensor, n_valid: torch.Tensor | None = None):
    """``runner.extend_batch`` asking for last-position logits only when the runner supports it
    (``Engine(logits="last")``: ``[B, vocab]``); otherwise ``[B, T, vocab]`` reduced to ``[B, vocab]``
    at each row's last valid token. float32. Servers compute only the last position's logits."""
    key = type(runner)
    if key not in _HAS_LAST:
        _HAS_LAST[key] = "logits" in inspect.signature(runner.extend_batch).parameters
    if _HAS_LAST[key]:
        return runner.extend_batch(slots, tokens, n_valid, logits="last")
    out = runner.extend_batch(slots, tokens, n_valid)
    last = (n_valid - 1) if n_valid is not None else torch.full((tokens.shape[0],), tokens.shape[1] - 1)
    return out[torch.arange(tokens.shape[0]), last.to(out.device)]


_HAS_LAST: dict = {}


def _time(runner, fn, repeats: int, warmup: int, clock) -> np.ndarray:
    for _ in range(warmup):
        fn()
    runner.synchronize()
    ts = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        runner.synchronize()
        ts.append((clock() - t0) * 1e3)
    return np.asarray(ts)


def _step(runner, slots: torch.Tensor, tokens: torch.Tensor, start: int) -> None:
    """Roll ``slots`` back to ``start`` cached tokens, append ``tokens`` ``[B, T]`` and pick the next
    token per row (greedy, to the host), as every step of :func:`workbench.pd.loop.run_serving` does."""
    for s in slots.tolist():
        runner.truncate_slot(s, start)
    extend(runner, slots, tokens).argmax(-1).tolist()


def graph_step(runner, tokens_per_row: int) -> bool:
    """Whether ``runner`` replays a CUDA graph for a step of ``tokens_per_row`` tokens per row
    (:class:`workbench.engine.Engine`: ``use_graphs`` and ``T <= graph_max_t``); False for a runner without graphs."""
    return bool(getattr(runner, "use_graphs", False)) and tokens_per_row <= int(getattr(runner, "graph_max_t", 0))


def _row(phase, batch, seq_len, n_tokens, attn_sq, kv_tokens, ts, graph: bool = False) -> dict:
    q75, q25 = np.percentile(ts, [75, 25])
    return {"phase": phase, "batch": batch, "seq_len": seq_len, "n_tokens": n_tokens, "attn_sq": attn_sq,
            "kv_tokens": kv_tokens, "ms": float(np.median(ts)), "ms_min": float(ts.min()),
            "ms_iqr": float(q75 - q25), "repeats": len(ts), "graph": bool(graph)}


def run_profile(runner, config: ProfileConfig = ProfileConfig(), *, progress: bool = False,
                clock=time.perf_counter) -> pd.DataFrame:
    """Time prefill steps over ``prompt_lens x prefill_batches`` and decode steps over
    ``decode_batches x context_lens`` on ``runner`` (a :class:`~workbench.engine.api.BatchRunner`
    with ``max_batch >= config.max_batch`` and ``max_seq >= config.max_seq``). One row per point,
    config fields as columns; ``graph`` says whether the step replayed a CUDA graph (:func:`graph_step`). Slots
    ``0..B-1`` are overwritten. ``clock`` (seconds) defaults to wall
    time; on a shared CPU pass ``time.process_time`` (see :class:`workbench.pd.loop.CPUClock`).
    Raises ``ValueError`` if the runner is too small."""
    if runner.max_batch < config.max_batch or runner.max_seq < config.max_seq:
        raise ValueError(f"runner has max_batch={runner.max_batch}, max_seq={runner.max_seq}; the profile "
                         f"needs >= {config.max_batch} and >= {config.max_seq}")
    g = torch.Generator().manual_seed(config.seed)
    points = [("prefill", b, L) for b in config.prefill_batches for L in config.prompt_lens]
    points += [("decode", b, L) for b in config.decode_batches for L in config.context_lens]
    it = points
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(points, desc="profile")
    df = pd.DataFrame([_time_point(runner, phase, b, L, config, clock, g) for phase, b, L in it])
    cfg = asdict(config)
    df["repeats_cfg"], df["warmup"], df["seed"] = cfg["repeats"], cfg["warmup"], cfg["seed"]
    return df


def _time_point(runner, phase: str, b: int, L: int, config: ProfileConfig, clock, g: torch.Generator) -> dict:
    """One profile row: a prefill step of ``b`` prompts of ``L`` tokens, or a decode step of ``b``
    sequences with ``L`` cached tokens each, timed ``config.repeats`` times."""
    vocab = runner.vocab_size
    # reversed slot order: the runner takes its general (gather) path, as a serving loop's
    # scattered slots make it do (an Engine reads slots 0..B-1 in order without a gather)
    slots = torch.arange(b).flip(0)
    if phase == "prefill":
        tok = torch.randint(0, vocab, (b, L), generator=g)
        ts = _time(runner, partial(_step, runner, slots, tok, 0), config.repeats, config.warmup, clock)
        return _row("prefill", b, L, b * L, b * L * L, 0, ts, graph_step(runner, L))
    for s in range(b):
        runner.truncate_slot(s, 0)
    extend(runner, slots, torch.randint(0, vocab, (b, L), generator=g))
    tok = torch.randint(0, vocab, (b, 1), generator=g)
    ts = _time(runner, partial(_step, runner, slots, tok, L), config.repeats, config.warmup, clock)
    return _row("decode", b, L, b, 0, b * L, ts, graph_step(runner, 1))


def drift_check(runner, profile: pd.DataFrame, config: ProfileConfig = ProfileConfig(), *,
                clock=time.perf_counter) -> pd.DataFrame:
    """Re-time the largest prefill point and the largest decode point of ``profile`` now, with the
    same repeats and clock: did the machine's speed move since the profile was measured (another
    job, a frequency change)? One row per point: ``phase``, ``batch``, ``seq_len``, ``ms_profile``,
    ``ms_now`` (medians) and ``drift_pct = 100 (ms_now / ms_profile - 1)``. Raises ``ValueError``
    when ``profile`` lacks a phase."""
    g = torch.Generator().manual_seed(config.seed + 1)
    return drift_rows(profile, lambda phase, ref: _time_point(runner, phase, int(ref["batch"]), int(ref["seq_len"]),
                                                              config, clock, g)["ms"])


def drift_rows(profile: pd.DataFrame, retime) -> pd.DataFrame:
    """The drift check's frame: for each phase, the profile's largest point (prefill by ``n_tokens``, decode by
    ``kv_tokens``, then ``batch``) re-timed by ``retime(phase, ref_row) -> ms``; columns ``phase``, ``batch``,
    ``seq_len``, ``ms_profile``, ``ms_now``, ``drift_pct = 100 (ms_now / ms_profile - 1)``. Shared by
    :func:`drift_check` (this engine) and :func:`workbench.pd.server.drift_check` (a server). Raises
    ``ValueError`` when ``profile`` lacks a phase."""
    rows = []
    for phase, size in (("prefill", "n_tokens"), ("decode", "kv_tokens")):
        part = profile[profile["phase"] == phase]
        if part.empty:
            raise ValueError(f"drift_check: the profile has no {phase} rows")
        ref = part.sort_values([size, "batch"]).iloc[-1]
        now = float(retime(phase, ref))
        rows.append({"phase": phase, "batch": int(ref["batch"]), "seq_len": int(ref["seq_len"]),
                     "ms_profile": float(ref["ms"]), "ms_now": now,
                     "drift_pct": 100.0 * (now / float(ref["ms"]) - 1.0)})
    return pd.DataFrame(rows)


def with_floors(profile: pd.DataFrame, model: ModelSpec, hw: HardwareSpec) -> pd.DataFrame:
    """Add roofline lower bounds per row: ``compute_floor_ms`` (FLOPs / ``hw.matmul_flops``),
    ``bandwidth_floor_ms`` (bytes / ``hw.hbm_gbs``) and ``floor_ms`` (their max), from
    :mod:`workbench.pd.roofline`. Prefill bytes: the weights once. Decode bytes: weights + KV read."""
    out = profile.copy()
    comp, bw = [], []
    for r in out.itertuples(index=False):
        if r.phase == "prefill":
            flops = model.prefill_flops(np.full(int(r.batch), int(r.seq_len)))
            nbytes = model.weight_bytes
        else:
            flops = model.decode_flops(int(r.batch), float(r.kv_tokens))
            nbytes = model.decode_bytes(int(r.batch), float(r.kv_tokens))
        comp.append(1e3 * flops / hw.matmul_flops)
        bw.append(1e3 * nbytes / (hw.hbm_gbs * 1e9))
    out["compute_floor_ms"], out["bandwidth_floor_ms"] = comp, bw
    out["floor_ms"] = np.maximum(out["compute_floor_ms"], out["bandwidth_floor_ms"])
    return out
