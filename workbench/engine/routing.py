"""Which kernel runs a matmul: one priority-ordered list of kernels per weight kind, as data.

Modelled on vLLM's ``choose_mp_linear_kernel`` (``vllm/model_executor/layers/quantization/kernels/
mixed_precision/__init__.py``): the kernels of a kind are tried in priority order; each answers
``can_implement(problem) -> (ok, why)``; the first that can, and that ``EngineConfig.disabled_kernels`` does not
name, runs the call. A weight's matmul object asks :func:`choose` once per row count (decode rows, verify rows,
prefill) and keeps the answer; :meth:`workbench.engine.Engine.route_table` lists them.

Kinds: ``"dense"`` (bf16 / fp16 / float32 weights), ``"w4a16"`` (INT4 codes, also W2 / W3), ``"w8a16"`` (W5-W8),
``"fp8"`` (empty: the float-format work registers its kernels here with :func:`register_kernel`).

Kernels measured as faster than another only in a range of rows say so in ``can_implement`` (a row condition),
so the order is the whole policy; a kernel whose choice depends on a timing on the machine (``dense-mma``,
the 17..64-row ``w4a16-mma`` calls) is chosen here as *eligible*, and the matmul object records the measured
outcome, which the route table shows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["KERNELS", "KINDS", "KernelEntry", "Problem", "choose", "kernel_names", "register_kernel"]

KINDS = ("dense", "w4a16", "w8a16", "fp8")


@dataclass(frozen=True)
class Problem:
    """One matmul call to route: ``y [rows, n] = x [rows, k] @ w_hat.T``.

    ``group_size``: quantization group (``k`` per channel, 0 for a float weight); ``dtype``: activation dtype;
    ``device``: ``"cpu"`` or ``"cuda"``; ``int_zero``: integer zero points (INT kernels whose dequantization adds a
    magic number need them); ``copy``: a dequantized copy of the weight is kept (CPU, ``quant_runtime="cached"``);
    ``tc``: the Triton tensor-core INT4 GEMM takes this weight (the MMA kernel then stops at
    ``EngineConfig.w4a16_mma_rows``)."""

    n: int
    k: int
    rows: int
    group_size: int = 0
    dtype: torch.dtype = torch.bfloat16
    device: str = "cpu"
    int_zero: bool = True
    copy: bool = False
    tc: bool = False


@dataclass(frozen=True)
class KernelEntry:
    """A kernel routing may choose: ``name`` (what ``WORKBENCH_DISABLED_KERNELS`` and the route table say),
    ``can_implement(problem, config) -> (ok, why)``, and a one-line ``doc``."""

    name: str
    can_implement: Callable
    doc: str = ""


KERNELS: dict[str, list[tuple[int, KernelEntry]]] = {k: [] for k in KINDS}


def register_kernel(kind: str, entry: KernelEntry, priority: int) -> None:
    """Add ``entry`` to ``kind``'s list (lower ``priority`` is tried first; equal priorities keep insertion
    order). Re-registering a name replaces it. Raises ``ValueError`` for an unknown kind."""
    if kind not in KERNELS:
        raise ValueError(f"kind {kind!r} is unknown; use one of {KINDS}")
    lst = [(p, e) for p, e in KERNELS[kind] if e.name != entry.name]
    lst.append((priority, entry))
    KERNELS[kind] = sorted(lst, key=lambda pe: pe[0])


FALLBACKS = ("torch-linear", "dequant")  # last resorts: every problem has one, so they cannot be disabled


# parts of a kernel that can be switched off on their own (they are not routed: the kernel's call uses them)
VARIANTS = {"w4a16-mma-swiglu": "SwiGLU as the epilogue of the gate_up w4a16-mma call (one launch less a layer)"}


def kernel_names() -> set[str]:
    """Every name ``EngineConfig.disabled_kernels`` takes: the registered kernels (all kinds) and :data:`VARIANTS`."""
    return {e.name for lst in KERNELS.values() for _, e in lst} | set(VARIANTS)


def choose(kind: str, problem: Problem, config) -> tuple[str, str]:
    """``(name, why)`` of the first kernel of ``kind`` that ``config`` (an ``EngineConfig``) enables and that can
    implement ``problem``; ``why`` lists the kernels skipped before it and their reasons. Raises ``ValueError``
    when none can (for ``"fp8"`` until its kernels are registered)."""
    skipped = []
    for _, e in KERNELS[kind]:
        if not config.enabled(e.name):
            skipped.append(f"{e.name}: disabled")
            continue
        ok, why = e.can_implement(problem, config)
        if ok:
            return e.name, "; ".join(skipped) if skipped else "first in priority"
        skipped.append(f"{e.name}: {why}")
    raise ValueError(f"no {kind} kernel can run {problem} ({'; '.join(skipped) or 'none registered'}); "
                     "re-enable a kernel in WORKBENCH_DISABLED_KERNELS")


# ----------------------------------------------------------------------------- the kernels of this package
def _cuda(p: Problem) -> tuple[bool, str]:
    return (True, "ok") if p.device == "cuda" else (False, f"{p.device}, not CUDA")


def _all(*checks) -> tuple[bool, str]:
    for ok, why in checks:
        if not ok:
            return ok, why
    return True, "ok"


def _low_precision(p: Problem) -> tuple[bool, str]:
    ok = p.dtype in (torch.bfloat16, torch.float16)
    return ok, "ok" if ok else f"{str(p.dtype).replace('torch.', '')} activations (needs bf16 / fp16)"


def _rows(p: Problem, lo: int, hi: int) -> tuple[bool, str]:
    ok = lo <= p.rows <= hi
    return ok, "ok" if ok else f"{p.rows} rows outside {lo}..{hi}"


def _w4_mma(p: Problem, cfg) -> tuple[bool, str]:
    groups = (64, 128, 256)
    lo, hi = (1, cfg.w4a16_mma_rows) if p.tc else (2, 64)  # tc: above it each call is routed by a timing
    return _all(_cuda(p), _low_precision(p), (p.group_size in groups, f"group {p.group_size} not in {groups}"),
                (p.int_zero, "float zero points"), (p.n % 16 == 0, f"out {p.n} not a multiple of 16"),
                _rows(p, lo, hi))


def _pow2_group(g: int, lo: int) -> bool:
    return g >= lo and not g & (g - 1)


def _w4_gemv(p: Problem, cfg) -> tuple[bool, str]:
    return _all(_cuda(p), _rows(p, 1, 1), (_pow2_group(p.group_size, 32), (f"group {p.group_size} not a power of "
                                                                           "two >= 32")))


def _w4_rows(p: Problem, cfg) -> tuple[bool, str]:
    return _all(_cuda(p), _rows(p, 1, 64), (p.tc, (f"group {p.group_size} / zeros not taken (power of two >= 128, "
                                                  "integer zeros)")))


def _tinygemm(p: Problem, cfg) -> tuple[bool, str]:
    return _all(_cuda(p), (p.dtype == torch.bfloat16, "needs bf16"), _rows(p, 2, 64),
                (p.group_size in (32, 64, 128, 256), f"group {p.group_size} not in 32..256"))


def _cpu_int4(p: Problem, cfg) -> tuple[bool, str]:
    from workbench.engine.cpu import cpu_int4_can_implement

    if p.device != "cpu":
        return False, f"{p.device}, not the CPU"
    if p.copy and p.rows > cfg.cpu_int_max_rows:
        return False, f"{p.rows} rows > cpu_int_max_rows={cfg.cpu_int_max_rows} (the dequantized copy is faster)"
    return cpu_int4_can_implement(p.n, p.k, p.group_size, p.dtype)


def _int8pack(p: Problem, cfg) -> tuple[bool, str]:
    if p.group_size != p.k:
        return False, f"groups of {p.group_size} (int8pack takes one scale per row)"
    if p.device == "cpu":
        if p.dtype != torch.bfloat16 and p.copy:
            return False, (f"{str(p.dtype).replace('torch.', '')} activations on the CPU: the dequantized copy is "
                           "faster (int8pack is fast with bfloat16 only)")
        if p.copy and p.rows > cfg.cpu_int_max_rows:
            return False, f"{p.rows} rows > cpu_int_max_rows={cfg.cpu_int_max_rows} (the dequantized copy is faster)"
    return True, "ok"


def _dense_mma(p: Problem, cfg) -> tuple[bool, str]:
    lo, hi = cfg.dense_mma_rows
    return _all(_cuda(p), _low_precision(p), _rows(p, lo, hi),
                (p.n % 16 == 0 and p.k % 64 == 0, f"[{p.n}, {p.k}] (needs out % 16 == 0, in % 64 == 0)"))


def _always(p: Problem, cfg) -> tuple[bool, str]:
    return True, "ok"


for _kind, _prio, _entry in (
    ("dense", 10, KernelEntry("dense-mma", _dense_mma, "hand-written CUDA tensor-core GEMM (kernels/w4a16_mma), "
                                                       "where a timing on this GPU beat cuBLAS for the shape")),
    ("dense", 20, KernelEntry("triton-gemv", lambda p, c: _all(_cuda(p), _rows(p, 1, 1)),
                              "Triton one-row GEMV with RMSNorm / SwiGLU / residual / RoPE fused (kernels/gemv)")),
    ("dense", 30, KernelEntry("triton-rows", lambda p, c: _all(_cuda(p), _rows(p, 2, 64)),
                              "Triton tensor-core GEMM, 2..64 rows, prologue / epilogue fused (kernels/rows)")),
    ("dense", 90, KernelEntry("torch-linear", _always, "F.linear (cuBLAS on CUDA, oneDNN / MKL on the CPU)")),
    ("w4a16", 10, KernelEntry("w4a16-mma", _w4_mma, "hand-written CUDA tensor-core W4A16 GEMM (kernels/w4a16_mma)")),
    ("w4a16", 20, KernelEntry("triton-w4-gemv", _w4_gemv, "Triton CUDA-core W4A16 GEMV, one row (kernels/w4a16)")),
    ("w4a16", 30, KernelEntry("triton-w4-rows", _w4_rows, "Triton tensor-core W4A16 GEMM, <= 64 rows (kernels/rows)")),
    ("w4a16", 40, KernelEntry("tinygemm", _tinygemm, "torch.ops.aten._weight_int4pack_mm (CUDA, bf16)")),
    ("w4a16", 50, KernelEntry("cpu-int4pack", _cpu_int4, "torch.ops.aten._weight_int4pack_mm_for_cpu (bf16)")),
    ("w4a16", 90, KernelEntry("dequant", _always, "dequantize, then F.linear (CPU: a copy made once; CUDA: per "
                                                  "call, for prefill)")),
    ("w8a16", 10, KernelEntry("int8pack", _int8pack, "torch.ops.aten._weight_int8pack_mm (per channel)")),
    ("w8a16", 90, KernelEntry("dequant", _always, "dequantize, then F.linear")),
):
    register_kernel(_kind, _entry, _prio)
