"""Where a study runs: device and dtype resolution shared by ``load_model`` and the notebooks.

``device="auto"`` takes the first CUDA device when ``torch.cuda.is_available()``, else the CPU.
``dtype=None`` (or ``"auto"``) takes bfloat16 on CUDA (what serving stacks run; the engine's kernels
are written for it) and float32 on the CPU (where bf16 matmuls are often emulated, and where every
earlier CPU result was measured, so the CPU path gives the same numbers as before).

Notebooks read ``WB_DEVICE`` (``auto`` | ``cpu`` | ``cuda`` | ``cuda:N``; default ``auto``) and
``WB_DTYPE`` (``auto`` | ``float32`` | ``bfloat16`` | ``float16`` and their short names; default
``auto``) in their parameters cell and pass them to :func:`resolve`; :func:`from_env` does both.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

from workbench.registry import Registry

__all__ = ["DTYPES", "CPUClock", "Placement", "clock_for", "cpu_has_bf16", "default_dtype", "describe", "dtype_name",
           "engine_dtype", "from_env", "resolve", "resolve_device", "resolve_dtype"]

DTYPES: Registry[torch.dtype] = Registry("dtype", {
    "float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16}, case_sensitive=False)
_DEVICE_KINDS = ("auto", "cpu", "cuda", "mps")


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """``torch.device`` for ``device``: ``"auto"``/``None`` -> ``cuda`` when available, else ``cpu``.

    Raises ``ValueError`` naming the fix for an unknown device kind (with "did you mean") and for
    ``"cuda"`` / ``"cuda:N"`` on a machine without that CUDA device.
    """
    if isinstance(device, torch.device):
        dev = device
    else:
        text = "auto" if device is None else str(device).strip().lower()
        if text in ("", "auto"):
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        kind = text.split(":")[0]
        if kind in ("gpu", "nvidia"):
            raise ValueError(f"device={device!r} is not a torch device name; pass 'cuda' (or 'cuda:N', or 'auto')")
        if kind not in _DEVICE_KINDS:
            Registry("device", dict.fromkeys(_DEVICE_KINDS)).check(kind, "Pass 'auto', 'cpu', 'cuda' or 'cuda:N'.")
        try:
            dev = torch.device(text)
        except RuntimeError as e:
            raise ValueError(f"device={device!r} is not a device ({e}); pass 'auto', 'cpu' or 'cuda:N'") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device={str(dev)!r} but CUDA is not available here (torch {torch.__version__}, "
                             f"CUDA build {torch.version.cuda}); pass device='auto' or 'cpu'")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device={str(dev)!r} but this machine has {torch.cuda.device_count()} CUDA "
                             f"device(s); pass 'cuda:0'..'cuda:{torch.cuda.device_count() - 1}'")
    return dev


def default_dtype(device: str | torch.device) -> torch.dtype:
    """bfloat16 on CUDA, float32 elsewhere (see the module docstring)."""
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def resolve_dtype(dtype: str | torch.dtype | None, device: str | torch.device = "cpu") -> torch.dtype:
    """``torch.dtype`` for ``dtype``; ``None``/``"auto"``/``""`` -> :func:`default_dtype` of ``device``.

    Raises ``ValueError`` (with "did you mean") for a name not in :data:`DTYPES`.
    """
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None or (isinstance(dtype, str) and dtype.strip().lower() in ("", "auto")):
        return default_dtype(device)
    if isinstance(dtype, str) and dtype.startswith("torch."):
        dtype = dtype[len("torch."):]
    return DTYPES.lookup(dtype.strip() if isinstance(dtype, str) else dtype,
                         "Pass dtype='auto' for bf16 on CUDA and float32 on the CPU.")


def cpu_has_bf16(cpuinfo: str | None = None) -> bool:
    """True when this CPU computes bf16 natively: the ``avx512_bf16`` or ``amx_bf16`` flag in ``/proc/cpuinfo``
    (``cpuinfo``: that file's text, for tests). There torch's CPU INT4 / INT8 kernels
    (``_weight_int4pack_mm_for_cpu``, ``_weight_int8pack_mm``) beat a dense float32 matmul at decode's few rows;
    with float32 activations they are slower (measured in :mod:`workbench.engine.cpu`). False where the file is
    missing (not Linux)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            return False
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[-1].split())
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def engine_dtype(name: str | None, device: str | torch.device) -> torch.dtype:
    """The compute dtype a study's timed engines run in: ``"auto"`` / ``None`` -> bfloat16 on CUDA and on a CPU
    with native bf16 (:func:`cpu_has_bf16`: what vLLM's CPU build runs, and what torch's CPU INT4 / INT8
    kernels need), else float32; any other name as :func:`resolve_dtype`. Quality is measured on the model's own
    dtype; only the timed engines take this one."""
    if name in (None, "auto"):
        dev = torch.device(device) if not isinstance(device, torch.device) else device
        return torch.bfloat16 if dev.type == "cuda" or (dev.type == "cpu" and cpu_has_bf16()) else torch.float32
    return resolve_dtype(name, device)


def resolve(device: str | torch.device | None = "auto",
            dtype: str | torch.dtype | None = "auto") -> tuple[torch.device, torch.dtype]:
    """``(resolve_device(device), resolve_dtype(dtype, that device))``."""
    dev = resolve_device(device)
    return dev, resolve_dtype(dtype, dev)


def from_env(environ=None) -> tuple[torch.device, torch.dtype]:
    """:func:`resolve` of ``WB_DEVICE`` (default ``auto``) and ``WB_DTYPE`` (default ``auto``)."""
    env = os.environ if environ is None else environ
    return resolve(env.get("WB_DEVICE", "auto"), env.get("WB_DTYPE", "auto"))


def dtype_name(dtype: torch.dtype) -> str:
    """``"float32"`` for ``torch.float32`` (the provenance spelling)."""
    return str(dtype).replace("torch.", "")


def describe(device: str | torch.device, dtype: torch.dtype | None = None) -> str:
    """One line naming the device (GPU model and memory, or CPU threads) and the dtype."""
    dev = torch.device(device)
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        where = f"{dev} ({props.name}, {props.total_memory / 2**30:.0f} GiB)"
    else:
        where = f"{dev} ({torch.get_num_threads()} torch threads, {os.cpu_count()} cores)"
    return f"device: {where}" + (f", dtype {dtype_name(dtype)}" if dtype is not None else "")


class CPUClock:
    """A virtual clock for a shared CPU: this process's CPU time (``time.process_time``, s) plus the
    idle time the loop *would* have slept, which it adds instead of sleeping.

    On a machine where other processes take turns on the cores, wall-clock step times measure the
    scheduler; CPU time measures the work (with one torch thread, the step's compute). The serving
    loop then runs in the virtual time a dedicated core would have given it. Use on CPU only: a GPU
    step's time is not this process's CPU time.
    """

    def __init__(self):
        self.offset = 0.0

    def __call__(self) -> float:
        return time.process_time() + self.offset

    def sleep(self, dt: float) -> None:
        self.offset += max(0.0, dt)


def clock_for(device) -> tuple:
    """``(clock, sleep)`` to time steps on ``device`` (a ``torch.device`` or its name): on the CPU a
    :class:`CPUClock` and its ``sleep`` (this process's CPU time: robust to other jobs on a shared
    machine); elsewhere wall time, ``(time.perf_counter, time.sleep)``: a GPU step's time is not this
    process's CPU time (the profile and the loop synchronize the device before reading the clock)."""
    if str(device).startswith("cpu"):
        c = CPUClock()
        return c, c.sleep
    return time.perf_counter, time.sleep


@dataclass(frozen=True)
class Placement:
    """Where and how a study runs: ``device``, ``dtype`` and torch ``threads`` (``None``: torch's default), resolved
    once per notebook or study by :meth:`resolve`; :meth:`clock` gives the matching step clock."""

    device: torch.device
    dtype: torch.dtype
    threads: int | None = None

    @classmethod
    def resolve(cls, device="auto", dtype="auto", threads: int | None = None) -> Placement:
        """:func:`resolve` of ``device`` and ``dtype``; ``threads`` (>= 1) is applied with
        ``torch.set_num_threads``. Raises ``ValueError`` as :func:`resolve` does, or for ``threads < 1``."""
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads={threads!r} must be an integer >= 1 or None (torch's default)")
        dev, dt = resolve(device, dtype)
        if threads is not None:
            torch.set_num_threads(threads)
        return cls(dev, dt, threads)

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def clock(self) -> tuple:
        """``(clock, sleep)`` of :func:`clock_for` for this device (a fresh :class:`CPUClock` on the CPU)."""
        return clock_for(self.device)

    def describe(self) -> str:
        """:func:`describe` of this placement."""
        return describe(self.device, self.dtype)

    def gpu_memory_gib(self) -> float:
        """Total memory of the CUDA device in GiB (0 off CUDA)."""
        return torch.cuda.get_device_properties(self.device).total_memory / 2**30 if self.cuda else 0.0
