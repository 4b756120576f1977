"""Read-bandwidth probes: how fast a decode step's weights can be streamed from device memory.

A decode step only reads its weights, and reads alone stream faster than a device-to-device copy (which reads and
writes, and whose bandwidth METHOD.md counts as bytes read + written), so the floor of a memory-bound step is
``bytes / max(read bandwidth, copy bandwidth)``. Three probes, each over buffers rotated so that L2 holds none of
them (timed under CUDA-graph replay, :func:`workbench.kernels.timing.cuda_graph_ms`):

* :func:`stream_read_bw` -- a streaming-read Triton kernel (each program sums ``BLOCK`` 16-byte vectors per step,
  several steps in flight, one float per program written), tuned over a few tile shapes;
* :func:`gemv_read_bw` -- a GEMV ``[1, K] @ W.T`` over a large weight, through cuBLAS (``F.linear``) or the
  engine's own bf16 GEMV (:func:`workbench.kernels.gemv.gemv`).

``measure_read_bw`` returns each probe and the best. Needs CUDA.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from workbench.kernels import gemv
from workbench.kernels.timing import cuda_graph_ms


@triton.jit
def _read_kernel(X, OUT, n_per_prog, BLOCK: tl.constexpr):
    """Program ``p`` sums int32 words ``[p * n_per_prog, (p + 1) * n_per_prog)`` (``n_per_prog`` a multiple of
    ``BLOCK``) and writes one value, so the compiler cannot drop the loads."""
    pid = tl.program_id(0)
    base = X + pid.to(tl.int64) * n_per_prog
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for i in range(0, n_per_prog, BLOCK):
        acc ^= tl.load(base + i + tl.arange(0, BLOCK), cache_modifier=".cg")
    tl.store(OUT + pid, tl.sum(acc, axis=0))


def stream_read_bw(nbytes: float = 2**31, configs=((4096, 8, 3), (8192, 8, 3), (4096, 4, 4), (16384, 16, 2)),
                   copies: int = 2) -> dict:
    """Bytes / s of the streaming-read kernel over ``copies`` buffers of ``nbytes`` each (best of ``configs`` =
    ``(BLOCK, num_warps, num_stages)``); returns ``{"Bps", "config", "all"}``."""
    words = int(nbytes) // 4
    progs = 132 * 8
    per = -(-words // progs)
    per = -(-per // 16384) * 16384  # a multiple of every BLOCK
    bufs = [torch.randint(-2**31, 2**31 - 1, (per * progs,), dtype=torch.int32, device="cuda") for _ in range(copies)]
    out = torch.empty(progs, dtype=torch.int32, device="cuda")
    res = {}
    for block, warps, stages in configs:
        state = [0]

        def run(block=block, warps=warps, stages=stages, state=state):
            x = bufs[state[0] % len(bufs)]
            state[0] += 1
            _read_kernel[(progs,)](x, out, per, BLOCK=block, num_warps=warps, num_stages=stages)

        ms = cuda_graph_ms(run, inner=2 * copies, reps=5)
        res[(block, warps, stages)] = per * progs * 4 / (ms * 1e-3)
    best = max(res, key=res.get)
    return {"Bps": res[best], "config": list(best), "all": {str(k): v for k, v in res.items()}}


def gemv_read_bw(kind: str = "cublas", n: int = 152064, k: int = 3584, copies: int = 4) -> dict:
    """Weight bytes / s of a one-row GEMV over ``copies`` bf16 weights ``[n, k]`` (default the Qwen2-7B lm_head,
    1.09 GB each): ``kind`` "cublas" (``F.linear``) or "engine" (:func:`workbench.kernels.gemv.gemv`, tuned)."""
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    state = [0]
    if kind == "engine":
        cfg = gemv.tune(x, ws[0], configs=gemv.CONFIGS[:6], l2_bytes=0)

        def run():
            state[0] += 1
            return gemv.gemv(x, ws[state[0] % copies], cfg=cfg)
    else:
        def run():
            state[0] += 1
            return F.linear(x, ws[state[0] % copies])
    ms = cuda_graph_ms(run, inner=2 * copies, reps=5)
    return {"Bps": n * k * 2 / (ms * 1e-3), "n": n, "k": k, "ms": ms}


def measure_read_bw() -> dict:
    """All three probes and ``read_bw_Bps``, the best of them (bytes read / s)."""
    out = {"stream": stream_read_bw(), "cublas_gemv": gemv_read_bw("cublas"), "engine_gemv": gemv_read_bw("engine")}
    best = max(("stream", "cublas_gemv", "engine_gemv"), key=lambda kk: out[kk]["Bps"])
    out["read_bw_Bps"], out["read_bw_probe"] = out[best]["Bps"], best
    return out
