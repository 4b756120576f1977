"""Pieces every Triton kernel module of :mod:`workbench.kernels` shares: the interpreter switch, programmatic
dependent launch, the split-K ticket counters, and the one-row store epilogue (plain, + residual, or qkv bias +
RoPE + KV-cache write) used by the bf16 GEMV (:mod:`~workbench.kernels.gemv`) and the few-row tensor-core GEMMs
(:mod:`~workbench.kernels.rows`).

Split-K in one kernel (the CUTLASS "serial split-K" semaphore pattern): each split stores a float32 partial, then
takes a ticket from an int32 counter per column block (``atomic_add``, acquire-release); the split that draws the
last ticket sums the partials and resets the counter to zero, so the counters are zero between launches and a
CUDA graph can replay the kernel. The counters are one buffer per device, shared by every kernel launched on it:
kernels of one stream run one after another; two split-K kernels running at once on different streams would race
on them (the engine runs one stream).
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

# programmatic dependent launch on; the engine sets it from EngineConfig.pdl around each step (engine._launch)
PDL_ENABLED = True


def interpret() -> bool:
    """Triton's CPU interpreter is on (``TRITON_INTERPRET=1``, read at call time)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


@functools.cache
def _pdl_capable(index: int) -> bool:
    return torch.cuda.get_device_capability(index) >= (9, 0)


@functools.cache
def sm_count(index: int) -> int:
    """Streaming multiprocessors of CUDA device ``index`` (cached)."""
    return torch.cuda.get_device_properties(index).multi_processor_count


def use_pdl(device: torch.device) -> bool:
    """Launch with programmatic dependent launch (CUDA, compute capability >= 9.0, not the interpreter;
    :data:`PDL_ENABLED`, which an engine sets from ``EngineConfig.pdl``, False turns it off). See ``griddepcontrol`` in the PTX ISA; Triton's
    ``gdc_wait``."""
    return (PDL_ENABLED and device.type == "cuda" and not interpret() and torch.version.hip is None
            and _pdl_capable(device.index if device.index is not None else torch.cuda.current_device()))


_LOCKS: dict = {}


def split_k_locks(device: torch.device, count: int) -> torch.Tensor:
    """Split-K tickets: ``count`` int32 counters (one per column block), zero between launches (the last split
    of each block resets its counter). One buffer per device, allocated outside graph capture and kept, or, if a
    capture needs a bigger one first, allocated (zeroed) inside the capture."""
    buf = _LOCKS.get(device)
    if buf is not None and buf.numel() >= count:
        return buf
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return torch.zeros(count, dtype=torch.int32, device=device)
    buf = torch.zeros(max(count, 1 << 16), dtype=torch.int32, device=device)
    _LOCKS[device] = buf
    return buf


@triton.jit
def rope_rows(pid_n, BLOCK_N: tl.constexpr, D: tl.constexpr):
    """Output rows of program ``pid_n`` for a RoPE epilogue: ``BLOCK_N // 2`` dims of the first half of one
    head and the same dims of its second half (the pairs RoPE rotates together, HF ``rotate_half`` layout).
    Returns ``(rows [BLOCK_N], head, d0)``; ``BLOCK_N`` divides ``D``."""
    HALFN: tl.constexpr = BLOCK_N // 2
    ii = tl.arange(0, BLOCK_N)
    head = pid_n // (D // BLOCK_N)
    d0 = (pid_n % (D // BLOCK_N)) * HALFN
    return head * D + d0 + (ii % HALFN) + (ii // HALFN) * (D // 2), head, d0


@triton.jit
def store_row(y, OUT, RES, rn, nmask, BIAS, COS, SIN, WPOS, SLOTS, KC, VC, n_q_heads, n_kv_heads, c_sb, c_sh, c_ss,
              head, d0, HAS_RES: tl.constexpr, ROPE: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_N: tl.constexpr,
              D: tl.constexpr):
    """Store the float32 row block ``y`` ``[BLOCK_N]`` of one token: plain (optionally + residual, HF's
    ``residual + linear(...)`` rounding), or, with ``ROPE`` (rows from :func:`rope_rows`), bias + RoPE + the
    KV-cache write (q to ``OUT`` in the grouped layout ``[1, KV, G, D]``, which for one token is the head order,
    k and v into the caches ``[max_batch, KV, S_cache, D]`` at ``(SLOTS[0], head, WPOS[0])``)."""
    ety = OUT.dtype.element_ty
    if ROPE:
        HALFN: tl.constexpr = BLOCK_N // 2
        if HAS_BIAS:
            y = y + tl.load(BIAS + rn).to(tl.float32)
        y = y.to(ety).to(tl.float32)  # the qkv Linear's output (bias included) in the activation dtype
        y2 = tl.reshape(y, [2, HALFN])
        sel = tl.arange(0, 2)[:, None]
        x1 = tl.sum(tl.where(sel == 0, y2, 0.0), axis=0)  # dims d0 .. d0 + HALFN of the first half
        x2 = tl.sum(tl.where(sel == 1, y2, 0.0), axis=0)  # the same dims of the second half
        dd = d0 + tl.arange(0, HALFN)
        pos = tl.load(WPOS).to(tl.int64)
        if head < n_q_heads + n_kv_heads:  # q and k: rotate (Su et al. 2021, RoFormer eq. 34)
            c = tl.load(COS + pos * D + dd)
            s = tl.load(SIN + pos * D + dd)
            o1 = x1 * c - x2 * s
            o2 = x2 * c + x1 * s
        else:
            o1 = x1
            o2 = x2
        if head < n_q_heads:
            dst = OUT + head * D
        else:
            slot = tl.load(SLOTS).to(tl.int64)
            kvh = head - n_q_heads
            cache = KC
            if kvh >= n_kv_heads:
                kvh -= n_kv_heads
                cache = VC
            dst = cache + slot * c_sb + kvh * c_sh + pos * c_ss
        tl.store(dst + dd, o1.to(ety))
        tl.store(dst + D // 2 + dd, o2.to(ety))
    else:
        if HAS_RES:
            y = y.to(ety).to(tl.float32) + tl.load(RES + rn, mask=nmask, other=0.0).to(tl.float32)
        tl.store(OUT + rn, y.to(ety), mask=nmask)


def rope_args(x: torch.Tensor, rope) -> tuple:
    """Kernel arguments ``(BIAS, COS, SIN, WPOS, SLOTS, KC, VC, n_q_heads, n_kv_heads, c_sb, c_sh, c_ss)`` for
    :func:`store_row` from ``rope = (bias, cos, sin, wpos, slots, k_cache, v_cache, n_heads, n_kv)``, or
    placeholders (``x``, zeros) when ``rope`` is None; with ``head_dim`` (2 when None) and the bias."""
    if rope is None:
        return (x,) * 7 + (0,) * 5, 2, None
    bias, cos, sin, wpos, slots, kc, vc, n_heads, n_kv = rope
    return ((bias if bias is not None else x, cos, sin, wpos, slots, kc, vc, n_heads, n_kv,
             kc.stride(0), kc.stride(1), kc.stride(2)), kc.shape[-1], bias)
