"""Shared pieces of the benchmark scripts: model configs, timers, floors, environment record."""

from __future__ import annotations

import copy
import datetime
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from workbench.models.random_init import RANDOM_CONFIGS, build_random_model
from workbench.models.random_init import hf_config as _hf_config

# The published shapes live in the package (workbench.models.random_init.RANDOM_CONFIGS, also reachable
# as load_model("random:<name>")); these are copies, so a smoke run may shrink them in place.
QWEN2_7B = copy.deepcopy(dict(RANDOM_CONFIGS["qwen2-7b"]))
LLAMA3_8B = copy.deepcopy(dict(RANDOM_CONFIGS["llama3-8b"]))
QWEN2_0_5B = copy.deepcopy(dict(RANDOM_CONFIGS["qwen2-0.5b"]))
CONFIGS = {"qwen2-7b": QWEN2_7B, "llama3-8b": LLAMA3_8B, "qwen2-0.5b": QWEN2_0_5B}


def hf_config(d: dict):
    """An HF config object from one of the dicts above (:func:`workbench.models.random_init.hf_config`)."""
    return _hf_config(d)


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # CPU only for a smoke run of the scripts
DTYPE = torch.bfloat16 if DEVICE == "cuda" else torch.float32


def hf_model(d: dict, device=None, dtype=None, seed: int = 0):
    """HF ``AutoModelForCausalLM`` random-initialised directly on ``device`` in ``dtype``, from
    ``torch.manual_seed(seed)`` (same device, dtype and versions -> same weights, so separate runs,
    e.g. ``bench_mmlu --shard``, score the same model): the package's
    :func:`workbench.models.random_init.build_random_model`, which also refuses a shape that does
    not fit in the device's free memory."""
    return build_random_model(d, torch.device(device or DEVICE), dtype or DTYPE, seed)


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


class Stopwatch:
    """Device-event timer on CUDA (no host sync between start and stop), wall clock on CPU."""

    def start(self):
        sync()
        if DEVICE == "cuda":
            self.a, self.b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.a.record()
        else:
            self.t0 = time.perf_counter()
        return self

    def stop(self) -> float:
        """Milliseconds since :meth:`start` (synchronizes)."""
        if DEVICE == "cuda":
            self.b.record()
            sync()
            return self.a.elapsed_time(self.b)
        return (time.perf_counter() - self.t0) * 1e3


def wall_ms(fn, reps: int = 5, warmup: int = 1) -> float:
    """Median wall time (ms) of ``fn()`` with device syncs around each call."""
    for _ in range(warmup):
        fn()
    sync()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def graph_ms(fn, inner: int = 20, reps: int = 10) -> float:
    """Median time (ms) of one ``fn()`` call replayed from a CUDA graph of ``inner`` calls
    (:func:`workbench.kernels.timing.cuda_graph_ms`)."""
    from workbench.kernels.timing import cuda_graph_ms

    return cuda_graph_ms(fn, inner=inner, reps=reps)


def measure_floors(copy_gib: float = 4.0, n: int = 8192, read: bool = True) -> dict:
    """The ceilings (METHOD.md): device-to-device copy bandwidth counting bytes read plus written, the read
    bandwidth (best of a streaming-read Triton kernel, cuBLAS GEMV and the engine's bf16 GEMV over a 1.09 GB
    weight, each over rotating copies so L2 cannot help: :func:`workbench.kernels.bandwidth.measure_read_bw`),
    and the bf16 ``n x n x n`` matmul rate on random data (cuBLAS via torch). ``bw_Bps`` is the higher of the
    read and copy bandwidths (``bw_source`` says which): every decode floor divides by it."""
    if DEVICE != "cuda":
        copy_gib, n = 0.05, 512
    numel = int(copy_gib * 2**30) // 2
    x = torch.randn(numel, device=DEVICE, dtype=DTYPE)
    y = torch.empty_like(x)
    ms = wall_ms(lambda: y.copy_(x), reps=10, warmup=3)
    copy_bw = 2 * numel * 2 / (ms * 1e-3)
    x = y = None
    a = torch.randn(n, n, device=DEVICE, dtype=DTYPE)
    b = torch.randn(n, n, device=DEVICE, dtype=DTYPE)
    mm_ms = wall_ms(lambda: a @ b, reps=10, warmup=3)
    flops = 2 * n**3 / (mm_ms * 1e-3)
    out = {"copy_bw_Bps": copy_bw, "copy_ms": ms, "copy_bytes": 4 * numel, "matmul_flops": flops,
           "matmul_ms": mm_ms, "matmul_n": n, "bw_Bps": copy_bw, "bw_source": "copy"}
    if read and DEVICE == "cuda":
        from workbench.kernels.bandwidth import measure_read_bw

        rd = measure_read_bw()
        out.update(read_bw_Bps=rd["read_bw_Bps"], read_probes=rd)
        if rd["read_bw_Bps"] > copy_bw:
            out.update(bw_Bps=rd["read_bw_Bps"], bw_source=f"read ({rd['read_bw_probe']})")
    return out


def environment() -> dict:
    """Device, versions and date for RESULTS.md."""
    import transformers

    env = {"date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "device": torch.cuda.get_device_name(0) if DEVICE == "cuda" else "cpu", "torch": torch.__version__, "cuda": torch.version.cuda,
           "transformers": transformers.__version__, "python": platform.python_version()}
    for mod in ("triton",):
        try:
            env[mod] = __import__(mod).__version__
        except (ImportError, AttributeError):
            env[mod] = None
    return env


class Recorder:
    """Accumulates results and rewrites ``<out>/results.json`` after every section."""

    def __init__(self, out_dir: str | None = None, name: str = "results.json"):
        self.dir = Path(out_dir or os.environ.get("OUT", "data/results/benchmarks"))  # git-ignored
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / name
        self.data: dict = {}

    def put(self, key: str, value) -> None:
        self.data[key] = value
        self.path.write_text(json.dumps(self.data, indent=1, default=str))
        print(f"[{time.strftime('%H:%M:%S')}] {key}: {json.dumps(value, default=str)[:600]}", flush=True)
