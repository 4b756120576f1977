"""CUDA-graph timing shared by kernel tuning (:func:`workbench.kernels.w4a16.tune`) and the benchmarks."""

from __future__ import annotations

import statistics

import torch


def weight_copies(tensors: tuple, l2_bytes: float = 128e6) -> list:
    """``tensors`` (a weight and its companions: scales, zeros) followed by clones of them, enough copies of the
    first tensor to exceed ``l2_bytes`` (at least one), so that a timing loop rotating over them reads from DRAM as a
    decode step does. Returns a list of tuples (``[tensors, clone_1, ...]``)."""
    copies = max(1, -(-int(l2_bytes) // tensors[0].nbytes))
    return [tuple(tensors)] + [tuple(t.clone() for t in tensors) for _ in range(copies - 1)]


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


@torch.no_grad()
def fastest_config(configs, run, weights: list, ref: torch.Tensor, timings: dict | None = None,
                   what: str = "kernel"):
    """The fastest of ``configs`` for ``run(weights_i, cfg)`` (a kernel launch returning a tensor),
    timed with :func:`cuda_graph_ms` while rotating over the weight copies ``weights`` (enough of them
    that L2 holds none, as in a decode step). A configuration whose result differs from ``ref`` by more
    than 1% (relative L2) or that fails to compile or launch is skipped; ``timings`` (optional dict)
    receives ``{cfg: ms}`` (NaN for a wrong result). Raises ``RuntimeError`` if none ran. Needs CUDA;
    call outside graph capture. Runs under ``torch.no_grad()`` (the weights of an HF model require grad; a tuner
    must not record a graph for autograd). Used by the GEMV tuners of :mod:`workbench.kernels.gemv` and
    :mod:`workbench.kernels.w4a16`."""
    best, best_t = None, float("inf")
    for cfg in configs:
        state = [0]

        def call(cfg=cfg, state=state):
            w = weights[state[0] % len(weights)]
            state[0] += 1
            return run(w, cfg)

        try:
            bad = float((call().float() - ref).norm()) > 1e-2 * float(ref.norm()) + 1e-6
            t = float("nan") if bad else cuda_graph_ms(call, inner=max(10, 2 * len(weights)), reps=5)
        except Exception:  # noqa: BLE001, S112 - a configuration that fails to compile or launch is skipped
            continue
        if timings is not None:
            timings[cfg] = t
        if t < best_t:
            best, best_t = cfg, t
    if best is None:
        raise RuntimeError(f"no {what} configuration ran")
    return best


def tuned_configs() -> dict:
    """What the CUDA tuners of this process chose, per kernel module: ``{"<module>.<cache>": {str(shape key):
    str(configuration)}}`` from the per-shape caches of :mod:`~workbench.kernels.w4a16_mma` (``_BEST``,
    ``_DENSE_BEST``), :mod:`~workbench.kernels.rows`, :mod:`~workbench.kernels.gemv` and
    :mod:`~workbench.kernels.w4a16` (empty caches and modules that do not import, e.g. without triton, are left
    out). For provenance: which variant of a kernel a timing ran (``benchmarks/engine_table.py`` records it)."""
    import importlib

    out = {}
    for mod, names in (("w4a16_mma", ("_BEST", "_DENSE_BEST")), ("rows", ("_BEST",)), ("gemv", ("_BEST",)),
                       ("w4a16", ("_BEST",))):
        try:
            m = importlib.import_module(f"workbench.kernels.{mod}")
        except ImportError:
            continue
        for name in names:
            if d := getattr(m, name, None):
                out[f"{mod}.{name}"] = {str(k): str(v) for k, v in d.items()}
    return out
