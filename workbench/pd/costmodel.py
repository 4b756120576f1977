"""Step-time cost model of one serving instance, fitted to a measured profile or built from the roofline.

Form (linear in the work of a step, as in Vidur, arXiv 2405.05465, and Sarathi-Serve, arXiv 2403.02310,
whose hybrid batches cost about the sum of their parts)::

    prefill_ms = a + b * tokens + c * attn_sq        attn_sq = sum over sequences of L^2
    decode_ms  = d + e * batch  + f * kv_tokens      kv_tokens = cached tokens summed over the batch
    mixed_ms   = max(a, d) + b * tokens + c * attn_sq + e * batch + f * kv_tokens

A prefill chunk of ``n`` tokens after ``p`` cached ones contributes ``n * (2 p + n)`` to ``attn_sq``
(its query-key pairs times two, so that a whole prompt contributes ``L^2``).

Each line may carry a second *floor* line with the same features; the time is the larger of the two.
``from_roofline`` uses it for ``max(compute bound, bandwidth bound)``; ``fit`` leaves it at zero.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from workbench.arch import ModelSpec
from workbench.pd.hardware import HardwareSpec

__all__ = ["CostModel", "PoolCosts", "speculative_decode_cost"]

_PREFILL = ("a", "b", "c")
_DECODE = ("d", "e", "f")


@dataclass(frozen=True)
class CostModel:
    """Coefficients in ms (``b`` per prefill token, ``c`` per squared token, ``e`` per sequence, ``f``
    per cached token). ``floor`` holds the six coefficients of the second line, in the order a..f."""

    a: float  # fixed cost of a prefill step (launches, LM head, host work), ms
    b: float  # per prefill token (dense matmuls), ms
    c: float  # per squared prompt token (causal attention), ms
    d: float  # fixed cost of a decode step (reading the weights once), ms
    e: float  # per sequence in the decode batch, ms
    f: float  # per cached token read by a decode step, ms
    floor: tuple[float, float, float, float, float, float] = (0.0,) * 6  # second line, max'ed with the first
    source: str = ""  # "fit to <n> points" or "roofline <model> on <hw>"

    def __post_init__(self):
        vals = (self.a, self.b, self.c, self.d, self.e, self.f) + tuple(self.floor)
        if len(self.floor) != 6:
            raise ValueError(f"CostModel.floor must have 6 coefficients (a..f), got {len(self.floor)}")
        if any((not np.isfinite(v)) or v < 0 for v in vals):
            raise ValueError(f"CostModel coefficients must be finite and >= 0, got {vals}")
        if self.decode_ms(1, 1) <= 0 or self.prefill_ms(1, 1) <= 0:
            raise ValueError("CostModel gives zero time for a one-token step; set a/b (prefill) and d/e (decode)")

    # ---- evaluation (scalars or numpy arrays) -----------------------------------------------------
    def prefill_ms(self, tokens, attn_sq, n_seq=1):
        """Time of a prefill step over ``tokens`` prompt tokens with ``attn_sq = sum L^2``; ms."""
        del n_seq
        a2, b2, c2 = self.floor[:3]
        return np.maximum(self.a + self.b * tokens + self.c * attn_sq, a2 + b2 * tokens + c2 * attn_sq)

    def decode_ms(self, batch, kv_tokens):
        """Time of a decode step for ``batch`` sequences holding ``kv_tokens`` cached tokens; ms."""
        d2, e2, f2 = self.floor[3:]
        return np.maximum(self.d + self.e * batch + self.f * kv_tokens, d2 + e2 * batch + f2 * kv_tokens)

    def mixed_ms(self, tokens, attn_sq, batch, kv_tokens):
        """Time of a hybrid step (prefill chunk(s) + decodes, Sarathi-Serve); reduces to the pure forms.
        Python scalars (see :meth:`mixed_step`)."""
        return self.mixed_step()(tokens, attn_sq, batch, kv_tokens)

    def mixed_step(self):
        """:meth:`mixed_ms` as a function with the coefficients bound, for event loops that call it
        once per step: ``max(fix + b tokens + c attn_sq + e batch + f kv_tokens)`` over the two lines,
        ``fix`` = the larger of the fixed costs of the phases present."""
        a, b, c, d, e, f = self.a, self.b, self.c, self.d, self.e, self.f
        a2, b2, c2, d2, e2, f2 = self.floor

        def step_ms(tokens, attn_sq, batch, kv_tokens):
            has_p, has_d = tokens > 0, batch > 0
            fix1 = max(a if has_p else 0.0, d if has_d else 0.0)
            fix2 = max(a2 if has_p else 0.0, d2 if has_d else 0.0)
            t1 = fix1 + b * tokens + c * attn_sq + e * batch + f * kv_tokens
            t2 = fix2 + b2 * tokens + c2 * attn_sq + e2 * batch + f2 * kv_tokens
            return max(t1, t2)

        return step_ms

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in _PREFILL + _DECODE} | {"floor": list(self.floor),
                                                                  "source": self.source}

    # ---- constructors -----------------------------------------------------------------------------
    @classmethod
    def from_roofline(cls, model: ModelSpec, hw: HardwareSpec, *, compute_efficiency: float = 1.0,
                      bandwidth_efficiency: float = 1.0, overhead_ms: float = 0.0) -> CostModel:
        """Roofline lower bound (see :mod:`workbench.pd.roofline`), optionally derated.

        Compute line: ``b = (2 N_block + 2 n_layers d_attn) / F``, ``c = 2 n_layers d_attn / F`` (causal
        pairs ``L (L+1) / 2`` at ``4 n_layers d_attn`` FLOPs each), ``a`` = one LM-head row,
        ``e = 2 (N_block + vocab * hidden) / F``, ``f = 4 n_layers d_attn / F``. Bandwidth line:
        ``a = d = weight_bytes / BW``, ``f = kv_bytes_per_token / BW``. ``F`` and ``BW`` are the peak
        rates times the efficiencies (model FLOP and bandwidth utilisation, 0 < eff <= 1).
        """
        if not (0 < compute_efficiency <= 1 and 0 < bandwidth_efficiency <= 1):
            raise ValueError("compute_efficiency and bandwidth_efficiency must be in (0, 1]")
        if overhead_ms < 0:
            raise ValueError(f"overhead_ms={overhead_ms} must be >= 0")
        flop_ms = 1e3 / (hw.matmul_flops * compute_efficiency)  # ms per FLOP
        byte_ms = 1e3 / (hw.hbm_gbs * 1e9 * bandwidth_efficiency)  # ms per byte
        nd = model.n_layers * model.d_attn
        lm_head = 2.0 * model.vocab * model.hidden
        o = overhead_ms
        return cls(
            a=o + lm_head * flop_ms, b=(2.0 * model.block_matmul_params + 2.0 * nd) * flop_ms,
            c=2.0 * nd * flop_ms, d=o, e=(2.0 * model.block_matmul_params + lm_head) * flop_ms,
            f=4.0 * nd * flop_ms,
            floor=(o + model.weight_bytes * byte_ms, 0.0, 0.0, o + model.weight_bytes * byte_ms, 0.0,
                   model.kv_bytes_per_token * byte_ms),
            source=f"roofline {model.name} on {hw.name} (eff compute {compute_efficiency:g}, "
                   f"bandwidth {bandwidth_efficiency:g}, overhead {overhead_ms:g} ms)")

    @classmethod
    def fit(cls, profile: pd.DataFrame, *, relative: bool = True) -> CostModel:
        """Non-negative least squares (``scipy.optimize.nnls``) of the two lines to a profile.

        ``profile`` columns: ``phase`` ("prefill" | "decode"), ``ms`` (step time), and for prefill
        rows ``n_tokens`` and ``attn_sq``; for decode rows ``batch`` and ``kv_tokens`` (the output of
        :func:`workbench.pd.profile.run_profile`). ``relative=True`` weights each row by ``1 / ms``, so
        the fit minimises squared *relative* error (short and long steps count alike).

        Prefill rows with ``graph`` True (a CUDA-graph replay: the engine's steps of up to ``graph_max_t`` tokens
        per row, :func:`workbench.pd.profile.graph_step`) are left out of the prefill line when the profile has at
        least 3 eager prefill rows: a replayed step skips the host's launch work, so on a GPU it costs a different
        line (SmolLM2-135M on an H200: 1.1-1.3 ms at 16 tokens against 9.1-11.1 ms eager at 32-256 tokens, where one
        line fitted to both was 70-85% under every eager step); serving prefills are longer than ``graph_max_t``.
        Raises ``ValueError`` when a phase has fewer than 3 rows.
        """
        from scipy.optimize import nnls

        coefs, left_out = {}, 0
        for phase, cols, names in (("prefill", ("n_tokens", "attn_sq"), _PREFILL),
                                   ("decode", ("batch", "kv_tokens"), _DECODE)):
            rows = profile[profile["phase"] == phase]
            # a profile without the column (or rows of one without it, NaN) counts every row as eager
            graph = rows["graph"].fillna(False).astype(bool) if "graph" in rows else None
            if phase == "prefill" and graph is not None and graph.any() and (~graph).sum() >= 3:
                left_out = int(graph.sum())
                rows = rows[~graph]
            if len(rows) < 3:
                raise ValueError(f"CostModel.fit needs >= 3 {phase} rows in the profile, got {len(rows)}")
            x = np.column_stack([np.ones(len(rows))] + [rows[c].to_numpy(float) for c in cols])
            y = rows["ms"].to_numpy(float)
            w = 1.0 / y if relative else np.ones_like(y)
            sol, _ = nnls(x * w[:, None], y * w)
            coefs.update({k: float(v) for k, v in zip(names, sol)})
        note = f" ({left_out} graph-replayed prefill points left out)" if left_out else ""
        return cls(**coefs, source=f"nnls fit to {len(profile) - left_out} profile points{note}")

    def residuals(self, profile: pd.DataFrame) -> pd.DataFrame:
        """The profile with ``pred_ms`` and ``rel_err`` (pred / ms - 1) columns added."""
        out = profile.copy()
        pre = out["phase"] == "prefill"
        pred = np.empty(len(out))
        pred[pre.to_numpy()] = self.prefill_ms(out.loc[pre, "n_tokens"].to_numpy(float),
                                               out.loc[pre, "attn_sq"].to_numpy(float))
        pred[~pre.to_numpy()] = self.decode_ms(out.loc[~pre, "batch"].to_numpy(float),
                                               out.loc[~pre, "kv_tokens"].to_numpy(float))
        out["pred_ms"] = pred
        out["rel_err"] = pred / out["ms"] - 1.0
        return out


@dataclass(frozen=True)
class PoolCosts:
    """Step-time models per instance pool, e.g. a bf16 prefill pool and a W4A16 (or speculative)
    decode pool, each a :class:`CostModel` fitted to a profile measured at its own precision.

    * disaggregated: prefill instances time their steps with ``prefill`` (coefficients a, b, c);
      decode instances with ``decode`` (all six: d, e, f for decode steps, a, b, c for the prompt
      recomputed after a preemption on the decode instance);
    * colocated and chunked: one instance runs both phases, so its prefill terms come from ``prefill``
      and its decode terms from ``decode`` (:meth:`combined`).

    With ``prefill == decode`` every policy gives exactly the single-model results. A study measuring
    each precision passes ``PoolCosts(prefill=CostModel.fit(profile_bf16), decode=CostModel.fit(
    profile_w4a16))`` wherever a single :class:`CostModel` is accepted. Raises ``TypeError`` when a
    pool is not a :class:`CostModel`.
    """

    prefill: CostModel  # prefill instances / the prefill terms (a, b, c and their floor)
    decode: CostModel  # decode instances / the decode terms (d, e, f and their floor)

    def __post_init__(self):
        for f in ("prefill", "decode"):
            if not isinstance(getattr(self, f), CostModel):
                raise TypeError(f"PoolCosts.{f} must be a CostModel, got {type(getattr(self, f)).__name__}")

    @classmethod
    def of(cls, cost: CostModel | PoolCosts) -> PoolCosts:
        """``cost`` itself, or one :class:`CostModel` for both pools."""
        if isinstance(cost, PoolCosts):
            return cost
        if not isinstance(cost, CostModel):
            raise TypeError(f"cost must be a CostModel or PoolCosts, got {type(cost).__name__}")
        return cls(cost, cost)

    def combined(self) -> CostModel:
        """One instance running both phases: prefill terms of ``prefill``, decode terms of ``decode``
        (``prefill`` itself when the two are the same model)."""
        p, d = self.prefill, self.decode
        if p == d:
            return p
        return CostModel(a=p.a, b=p.b, c=p.c, d=d.d, e=d.e, f=d.f, floor=tuple(p.floor[:3]) + tuple(d.floor[3:]),
                         source=f"prefill: {p.source}; decode: {d.source}")


def speculative_decode_cost(cost: CostModel, *, tau: float, k: int, draft_ratio: float,
                            verify_ratio: float = 1.0) -> CostModel:
    """A decode pool with speculative decoding, as a per-emitted-token :class:`CostModel`.

    One speculative step runs ``k`` draft steps (each ``draft_ratio`` = c times a target decode
    step) and one target verify step over ``k + 1`` positions (``verify_ratio`` times a target decode
    step, measured: above 1 where the extra positions cost), and emits ``tau`` tokens per sequence on
    average (mean acceptance length, bonus token included). Time per emitted token is therefore
    ``(k c + verify_ratio) / tau`` target decode steps: Leviathan et al. 2023 (arXiv 2211.17192),
    Theorem 3.8, walltime improvement ``tau / (k c + 1)`` with ``tau = (1 - alpha^(k+1)) / (1 - alpha)``
    (their eq. 1), here with a measured verify cost instead of 1. The decode coefficients d, e, f
    (and their floor) are scaled by that factor; prefill terms are unchanged.

    Fluid approximation: every step emits one token at the mean cost, so means of TPOT and E2E are
    right in expectation, while the burstiness of ITL (``tau`` tokens at once) is not modelled.
    Raises ``ValueError`` for ``k < 1``, ``tau`` outside ``[1, k + 1]``, ``draft_ratio < 0`` or
    ``verify_ratio <= 0``.
    """
    if int(k) != k or k < 1:
        raise ValueError(f"speculative_decode_cost: k={k!r} must be an integer >= 1 (draft tokens per step)")
    if not 1.0 <= tau <= k + 1:
        raise ValueError(f"speculative_decode_cost: tau={tau!r} must be in [1, k + 1 = {k + 1}] "
                         "(tokens per target step, bonus included)")
    if not draft_ratio >= 0 or not verify_ratio > 0:
        raise ValueError(f"speculative_decode_cost: draft_ratio={draft_ratio!r} must be >= 0 and "
                         f"verify_ratio={verify_ratio!r} > 0")
    s = (k * draft_ratio + verify_ratio) / tau
    fl = cost.floor
    return CostModel(a=cost.a, b=cost.b, c=cost.c, d=cost.d * s, e=cost.e * s, f=cost.f * s,
                     floor=(fl[0], fl[1], fl[2], fl[3] * s, fl[4] * s, fl[5] * s),
                     source=f"speculative decode (k={k}, tau={tau:g}, c={draft_ratio:g}, verify x{verify_ratio:g}) "
                            f"over {cost.source}")
