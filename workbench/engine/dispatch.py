"""Which kernel runs each matmul of an engine step with few token rows, with the step's small operations fused in.

For a step of ``M = B * T`` token rows the engine either runs the *unfused* path (add + RMSNorm, SiLU * up and the
RoPE / KV write as separate kernels of :mod:`workbench.engine.ops`, matmuls through ``Dense`` / ``Int4Linear``
``__call__``) or, when every matmul of the model has a fused kernel for ``M`` rows, the *fused* path of
:class:`FusedMatmuls`, where the residual stream is carried by the matmuls themselves:

=====================  ==========================================  ===========================================
weights                M = 1 (decode at batch 1, draft steps)       2 <= M <= 64 (decode batches, verify steps)
=====================  ==========================================  ===========================================
bf16 / fp16 ``Dense``  :func:`workbench.kernels.gemv.gemv` (CUDA    :func:`workbench.kernels.rows.gemm`
                       cores; qkv: :func:`~workbench.kernels.gemv.  (tensor cores); qkv, then
                       gemv_qkv_rope`)                              ``ops.qkv_rope_cache``
W4A16 ``Int4Linear``   :meth:`Int4Linear.fused` =                   :meth:`Int4Linear.fused` =
(``triton`` backend,   :func:`workbench.kernels.w4a16.gemv_fused`   :func:`workbench.kernels.rows.gemm_int4`
G = 128, 256, ...)     (CUDA cores; qkv with the RoPE epilogue)     (tensor cores); qkv, then
                                                                    ``ops.qkv_rope_cache``
W4A16 ``Int4Linear``   :func:`workbench.kernels.w4a16.gemv_fused`   no fused kernel: these steps run unfused
(``triton``, G a       (as above)                                   (``max_rows`` is 1)
power of two >= 32,
not a multiple of 128)
=====================  ==========================================  ===========================================

Where the CUDA W4A16 kernel applies (:mod:`workbench.kernels.w4a16_mma`, ``Int4Linear.mma``) it takes 1..16 rows of a
weight the tensor-core GEMM takes (G = 128, ...) and 2..64 rows of one it does not (G = 64; one row stays on the fused
CUDA-core GEMV there): the engine then runs RMSNorm and the qkv RoPE + KV write as their own kernels before and
after it (it has a residual epilogue, and on gate_up a SwiGLU epilogue: :meth:`FusedMatmuls.mlp`,
``Int4Linear.swiglu``, kernel variant ``w4a16-mma-swiglu``, in the unfused path too), and one-row steps of a
G = 128 model take the unfused path (``Int4Linear.one_row_gemv`` is False for such a weight).

with RMSNorm as the prologue of qkv, gate_up and lm_head, SwiGLU as the prologue of down, and the residual add as
the epilogue of o and down. Steps of more rows (prefill) and models with a matmul no fused kernel takes (an o_proj
bias, another INT4 backend) run the unfused path; an AWQ input scale left on o (GQA; the engine folds the
others, :func:`workbench.engine.weights._quantized_layer`) runs as its own division before the fused o call.

Which rows take the fused path by default follows the H200 measurements (``benchmarks/RESULTS.md``, kernels
section): bf16 models only ``M = 1`` (for 2..64 rows the engine's cuBLAS path measured faster than the fused
tensor-core GEMMs: 4.63 vs 5.28 ms at batch 16, verify T = 5 4.99 vs 5.61 ms, Qwen2-7B); W4A16 models ``2 <= M <=
64``, with the INT4 prologues as their own kernels (:data:`INT4_PROLOGUES`). The fused one-row W4A16 path (the
same CUDA-core INT4 GEMV as the unfused path, faster than the tensor-core GEMM at ``M = 1`` on every Qwen2-7B /
Llama-3-8B shape, with RMSNorm / SwiGLU inside it, :data:`INT4_GEMV_PROLOGUES`, and the residual add and the qkv
RoPE + KV write as its epilogue: fewer launches per layer than the unfused path) is on by default only
where a model has no fused multi-row path (faster on SmolLM2-135M g64, slower on Qwen2-7B g128); with it on, ``max_rows`` is cut to 1 where a matmul has only the one-row kernel (group 64). ``Engine.set_fused_gemv(on, max_rows, min_rows)``
overrides the range (``min_rows=1``: one-row W4A16 steps fused).
"""

from __future__ import annotations

import os
import warnings

import torch

from workbench.engine.int4 import Int4Linear
from workbench.engine.runtime import InputScaled
from workbench.engine.weights import Dense

ROWS_MAX = 64  # rows up to which the few-row kernels run (workbench.kernels.rows.ROWS_MAX)
# RMSNorm / SwiGLU run as their own kernel before a plain INT4 tensor-core GEMM (False), and inside the one-row
# CUDA-core INT4 GEMV (True): the faster of each pair on the H200 (benchmarks/results/h200_2026-12-01d/)
INT4_PROLOGUES = {"rmsnorm": False, "swiglu": False}
INT4_GEMV_PROLOGUES = {"rmsnorm": True, "swiglu": True}


class FusedMatmuls:
    """The fused calls of a step: ``linear`` (one matmul with prologue / epilogue) and ``qkv_rope``.

    Steps of ``min_rows`` to ``max_rows`` token rows use it (``max_rows`` 1: the one-row path only). ``ops``: the
    engine's op set, for the multi-row RoPE / KV write and the INT4 prologues run as their own kernels. Built by
    :func:`build`."""

    def __init__(self, gemv_mod, rows_mod, ops, max_rows: int, head_dim: int, min_rows: int = 1):
        self.gemv, self.rows, self.ops = gemv_mod, rows_mod, ops
        self.min_rows, self.max_rows = min_rows, max_rows
        self.rope_epilogue = head_dim % 64 == 0  # the tensor-core tile (>= 64 rows) must lie inside one head
        self.int4_prologues = dict(INT4_PROLOGUES)
        self.int4_gemv_prologues = dict(INT4_GEMV_PROLOGUES)

    def _int4_args(self, lin, x, prologue, norm_weight, eps):
        """The INT4 kernel's input and prologue: unchanged, or the prologue run first as its own kernel
        (:data:`INT4_GEMV_PROLOGUES` for a one-row GEMV call, :data:`INT4_PROLOGUES` for the tensor-core GEMM)."""
        inside = self.int4_gemv_prologues if x.shape[0] == 1 and lin.one_row_gemv() else self.int4_prologues
        if prologue == "none" or (inside[prologue] and not lin._mma_rows(x.shape[0])):  # MMA: no prologue
            return x, prologue
        if prologue == "rmsnorm":
            return self.ops.add_rmsnorm(x, None, norm_weight, eps)[0], "none"
        return self.ops.silu_mul(x), "none"

    def linear(self, lin, x: torch.Tensor, prologue: str = "none", norm_weight=None, eps: float = 1e-6,
               residual=None) -> torch.Tensor:
        """``f(x) @ W.T (+ residual)``: ``x`` ``[M, K]`` (``[M, 2K]`` for "swiglu"), ``residual`` ``[M, N]``.
        An AWQ input scale left on the matmul (:class:`~workbench.engine.runtime.InputScaled`: o_proj under GQA)
        divides ``f(x)`` first, with the prologue, as their own kernels."""
        if isinstance(lin, InputScaled):
            if prologue == "rmsnorm":
                x = self.ops.add_rmsnorm(x, None, norm_weight, eps)[0]
            elif prologue == "swiglu":
                x = self.ops.silu_mul(x)
            x, lin, prologue = x / lin.s, lin.inner, "none"
        if isinstance(lin, Int4Linear):
            x, prologue = self._int4_args(lin, x, prologue, norm_weight, eps)
            return lin.fused(x, prologue, norm_weight, eps, residual)
        if x.shape[0] == 1:
            return self.gemv.gemv(x, lin.w, prologue, norm_weight, eps, residual)
        return self.rows.gemm(x, lin.w, prologue, norm_weight, eps, residual)

    def mlp(self, wgu, wd, x: torch.Tensor, norm_weight, eps: float) -> torch.Tensor:
        """RMSNorm, gate_up, SwiGLU, down and the residual add: ``x`` ``[M, hidden]`` (the residual stream) ->
        the next ``x``. Where gate_up is an INT4 weight on the MMA kernel for these rows
        (:meth:`~workbench.engine.int4.Int4Linear.swiglu_epilogue`), RMSNorm runs first, SwiGLU is that kernel's
        epilogue, and down takes no prologue; otherwise SwiGLU is down's prologue (:meth:`linear`)."""
        if isinstance(wgu, Int4Linear) and wgu.swiglu_epilogue(x.shape[0]):
            h = self.ops.add_rmsnorm(x, None, norm_weight, eps)[0]
            return self.linear(wd, wgu.swiglu(h, self.ops.silu_mul), residual=x)
        return self.linear(wd, self.linear(wgu, x, "rmsnorm", norm_weight, eps), "swiglu", residual=x)

    def qkv_rope(self, lin, x, norm_weight, eps, bias, cos, sin, wpos, slots, t: int, k_cache, v_cache,
                 n_heads: int, n_kv: int) -> torch.Tensor:
        """RMSNorm + qkv matmul + bias + RoPE + KV-cache write; returns q ``[B, KV, G*T, D]`` (see
        :func:`workbench.engine.ops.qkv_rope_cache`). One row: one launch; more rows: the matmul, then
        ``ops.qkv_rope_cache``."""
        rope = (bias, cos, sin, wpos, slots, k_cache, v_cache, n_heads, n_kv)
        if x.shape[0] == 1 and isinstance(lin, Dense):
            return self.gemv.gemv_qkv_rope(x, lin.w, norm_weight, eps, *rope)
        inner = _scaled_inner(lin)
        mma = isinstance(inner, Int4Linear) and inner._mma_rows(x.shape[0])  # no RoPE epilogue there
        if x.shape[0] == 1 and not mma and (self.rope_epilogue or lin.one_row_gemv()):  # (GEMV: head_dim % 4 == 0)
            x, prologue = self._int4_args(lin, x, "rmsnorm", norm_weight, eps)
            return lin.fused(x, prologue, norm_weight, eps, rope=rope)
        qkv = self.linear(lin, x, "rmsnorm", norm_weight, eps)
        return self.ops.qkv_rope_cache(qkv, bias, cos, sin, wpos, slots, t, k_cache, v_cache, n_heads, n_kv)


def route(fz: FusedMatmuls, lin, m: int, plain: tuple) -> tuple[str, str]:
    """``(kernel, why)`` of matmul ``lin`` in a fused step of ``m`` rows (``plain``: its route outside them), for
    :meth:`workbench.engine.Engine.route_table`."""
    inner = _scaled_inner(lin)
    if isinstance(inner, Int4Linear):
        if inner._plain_mma(m):
            return plain if plain[0] == "w4a16-mma" else ("w4a16-mma", "fused step")
        if m == 1 and inner.one_row_gemv():
            return "triton-w4-gemv", "fused step: RMSNorm / SwiGLU / residual / RoPE inside the GEMV"
        return "triton-w4-rows", "fused step: the tensor-core GEMM with its prologue / epilogue"
    if isinstance(inner, Dense):
        if m == 1:
            return "triton-gemv", "fused step: RMSNorm / SwiGLU / residual / RoPE inside the GEMV"
        return "triton-rows", "fused step: the Triton tensor-core GEMM with its prologue / epilogue"
    return plain


def _scaled_inner(lin):
    """The matmul behind an AWQ input scale (:class:`InputScaled`: the fused path divides first), else ``lin``."""
    return lin.inner if isinstance(lin, InputScaled) else lin


def _max_rows(lin) -> int:
    lin = _scaled_inner(lin)
    if isinstance(lin, Int4Linear):
        return lin.fused_max_rows()
    return ROWS_MAX if isinstance(lin, Dense) else 0


def default_rows(weights, one_row: bool | None = None) -> tuple[int, int]:
    """``(min_rows, max_rows)`` of the fused path by default: for a model with a W4A16 matmul ``(2, 64)``, or
    ``(1, 64)`` where some INT4 weight has only the one-row fused kernel (``one_row`` None) or ``one_row`` is True;
    else ``(1, 1)`` (see the module docstring); :func:`build` cuts ``max_rows`` to what every matmul takes (1 for a
    model whose INT4 weights only the one-row GEMV takes)."""
    int4 = [m for m in map(_scaled_inner, weights.matmuls()) if isinstance(m, Int4Linear)]
    if int4:
        if one_row is None:  # a weight only the one-row GEMV takes among the Triton kernels (e.g. group 64)
            one_row = any(not m.tc and m.one_row_gemv() for m in int4) or min(m.fused_max_rows() for m in int4) <= 1
        return (1 if one_row else 2, ROWS_MAX)
    return (1, 1)


def build(engine, max_rows: int | None = None, tune: bool = True,
          min_rows: int | None = None) -> FusedMatmuls | None:
    """The fused calls for ``engine``'s weights, or None where they do not apply: off CUDA (unless
    ``TRITON_INTERPRET=1``, for tests), triton missing, an o_proj bias, a head_dim without a power-of-two divisor
    >= 4 (the one-row RoPE tile), or a matmul without a fused kernel. ``min_rows`` / ``max_rows`` (default
    :func:`default_rows`) bound the rows of the steps that use it; ``max_rows`` is cut to what every matmul takes. With ``tune`` on CUDA the one-row GEMVs
    (bf16, and the fused INT4 variants where one-row steps are fused) are timed for this model's shapes (outside
    graph capture, :func:`_tune_one_row`); if that fails the fused path is off (a warning says why)."""
    w, spec = engine.w, engine.spec
    if engine.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        return None
    if any(lw.bo is not None for lw in w.layers) or spec.head_dim % 4:
        return None
    lo, hi = default_rows(w)
    lo = lo if min_rows is None else max(1, min_rows)
    rows_cap = min([hi if max_rows is None else max_rows] + [_max_rows(m) for m in w.matmuls()])
    if rows_cap < lo:
        return None
    try:
        from workbench.kernels import gemv, rows
    except ImportError:
        return None
    fz = FusedMatmuls(gemv, rows, engine.ops, rows_cap, spec.head_dim, lo)
    if tune and engine.device.type == "cuda" and lo == 1:
        try:
            _tune_one_row(engine, gemv, fz)
        except Exception as e:  # noqa: BLE001 - a GPU/Triton combination it does not compile for
            warnings.warn(f"fused kernels off (the unfused path is used): tuning failed with "
                          f"{type(e).__name__}: {str(e)[:300]}", stacklevel=3)
            return None
    return fz


def _tune_one_row(engine, gemv, fz: FusedMatmuls | None = None) -> None:
    """Time the launch configurations of the one-row GEMV calls of a step (random activations), outside graph
    capture, so that no timed step pays for it: the bf16 calls (:func:`workbench.kernels.gemv.tune`) and, through
    ``fz``, the fused INT4 GEMV calls (each variant as the step makes it, :func:`workbench.kernels.w4a16.tune_fused`
    via :meth:`Int4Linear.fused`). The qkv calls write k / v only into the cache's scratch column. The multi-row
    kernels use their default configurations unless ``workbench.kernels.rows.tune`` ran for the call."""
    s, lw, dev, dt = engine.spec, engine.w.layers[0], engine.device, engine.dtype
    hid = torch.randn(1, s.hidden, device=dev, dtype=dt)
    scratch = torch.tensor([engine.scratch], device=dev)  # the cache's scratch column, slot 0
    rope = (lw.bqkv, engine.cos, engine.sin, scratch, torch.zeros(1, dtype=torch.int64, device=dev),
            engine.k_cache[0], engine.v_cache[0], s.n_heads, s.n_kv_heads)
    if fz is not None:
        _tune_int4_one_row(engine, fz, hid, rope)
    with torch.no_grad():
        if isinstance(lw.wqkv, Dense):
            gemv.tune(hid, lw.wqkv.w, "rmsnorm", lw.ln1, s.rms_eps, rope=rope)
        if isinstance(lw.wo, Dense):
            gemv.tune(torch.randn(1, s.n_heads * s.head_dim, device=dev, dtype=dt), lw.wo.w, residual=hid)
        if isinstance(lw.wgu, Dense):
            gemv.tune(hid, lw.wgu.w, "rmsnorm", lw.ln2, s.rms_eps)
        if isinstance(lw.wd, Dense):
            gemv.tune(torch.randn(1, 2 * s.intermediate, device=dev, dtype=dt), lw.wd.w, "swiglu", residual=hid)
        if isinstance(engine.w.lm_head, Dense):
            gemv.tune(hid, engine.w.lm_head.w, "rmsnorm", engine.w.norm, s.rms_eps)


def _tune_int4_one_row(engine, fz: FusedMatmuls, hid: torch.Tensor, rope: tuple) -> None:
    """The fused one-row INT4 calls of layer 0 and the lm_head, once each through ``fz`` (so that every fused
    variant, prologue and AWQ division included, is tuned under the key the step looks up); ``rope`` as
    :func:`_tune_one_row` builds it (k / v into the scratch column)."""
    s, lw, dev, dt = engine.spec, engine.w.layers[0], engine.device, engine.dtype

    def one_row(lin) -> bool:
        inner = _scaled_inner(lin)
        return isinstance(inner, Int4Linear) and inner.one_row_gemv()

    if not any(map(one_row, (lw.wqkv, lw.wo, lw.wgu, lw.wd, engine.w.lm_head))):
        return
    with torch.no_grad():
        if one_row(lw.wqkv):
            fz.qkv_rope(lw.wqkv, hid, lw.ln1, s.rms_eps, *rope[:5], 1, *rope[5:])
        if one_row(lw.wo):
            fz.linear(lw.wo, torch.randn(1, s.n_heads * s.head_dim, device=dev, dtype=dt), residual=hid)
        if one_row(lw.wgu):
            fz.linear(lw.wgu, hid, "rmsnorm", lw.ln2, s.rms_eps)
        if one_row(lw.wd):
            fz.linear(lw.wd, torch.randn(1, 2 * s.intermediate, device=dev, dtype=dt), "swiglu", residual=hid)
        if one_row(engine.w.lm_head):
            fz.linear(engine.w.lm_head, hid, "rmsnorm", engine.w.norm, s.rms_eps)
