"""CUDA-graph timing shared by kernel tuning (:func:`workbench.kernels.w4a16.tune`) and the benchmarks."""

from __future__ import annotations

import statistics

import torch


def cuda_graph_ms(fn, inner: int = 20, reps: int = 10) -> float:
    """Median time (ms) of one ``fn()`` call, replayed from a CUDA graph of ``inner`` calls and timed
    with device events over ``reps`` replays (launch gaps as small as in a captured decode step).

    ``fn`` runs once eagerly and once on a side stream before capture (compilation, allocator warm-up).
    Needs CUDA; call outside graph capture."""
    fn()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(inner):
            fn()
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / inner)
    return statistics.median(ts)
