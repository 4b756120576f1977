"""Accelerator specs for the roofline: datasheet presets and values measured on the spot.

Terms: *HBM bandwidth* is the device memory bandwidth in GB/s (10^9 bytes/s); *matmul FLOP/s* the dense
(no 2:4 sparsity) matmul rate in ``flops_dtype``: the datasheet bf16 tensor rate for the presets, the
rate measured in the model's dtype for :meth:`HardwareSpec.measure` (float32 on a CPU); *interconnect* the per-direction link bandwidth between two
instances of the same kind (NVLink where the part has it, else PCIe) plus a one-way latency, used
for the KV cache transfer of disaggregated serving (DistServe, arXiv 2401.09670, sec. 4.3).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import torch

from workbench.registry import lookup_in
from workbench.validate import check_field_types

__all__ = ["PRESETS", "HardwareSpec"]


@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator (one instance of the serving simulator runs on one of these).

    Raises ``ValueError`` (naming the field) for a non-positive bandwidth, rate or memory.
    """

    name: str
    hbm_gbs: float  # device memory bandwidth, GB/s: bounds every decode step (weights are read once per step)
    matmul_flops: float  # dense matmul FLOP/s in flops_dtype: bounds prefill (2 FLOPs per parameter per token)
    mem_gb: float  # device memory, GB: weights + KV cache must fit
    link_gbs: float  # interconnect per direction, GB/s: KV transfer prefill -> decode instance
    link_latency_us: float = 10.0  # one-way link latency, us (order of magnitude; not a datasheet value)
    flops_dtype: str = "bfloat16"  # dtype of matmul_flops: bfloat16 (datasheets), the measured dtype otherwise
    source: str = ""  # where the numbers come from (datasheet URL or "measured")
    extra: dict = field(default_factory=dict, compare=False, hash=False)  # raw measurements

    def __post_init__(self):
        check_field_types(self)  # numbers, not strings or NaN; every error names its field
        for f in ("hbm_gbs", "matmul_flops", "mem_gb", "link_gbs"):
            v = getattr(self, f)
            if not v > 0:
                raise ValueError(f"HardwareSpec.{f}={v!r} must be > 0; pass the datasheet or measured value")
        if self.link_latency_us < 0:
            raise ValueError(f"HardwareSpec.link_latency_us={self.link_latency_us!r} must be >= 0")

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity (FLOP/byte) where compute and bandwidth bounds meet (Williams et al. 2009)."""
        return self.matmul_flops / (self.hbm_gbs * 1e9)

    @classmethod
    def from_name(cls, name: str) -> HardwareSpec:
        """A datasheet preset by name (case-insensitive); unknown names raise ``ValueError`` with a suggestion."""
        return lookup_in(PRESETS, name, "hardware preset", lower=True)

    @classmethod
    def measure(cls, device: str | torch.device = "cpu", *, copy_mb: int | None = None, matmul_n: int | None = None,
                repeats: int = 5, dtype: torch.dtype | None = None,
                link_gbs: float | None = None, link_latency_us: float = 10.0) -> HardwareSpec:
        """Measure memory bandwidth and matmul rate on ``device`` now (best of ``repeats``).

        * bandwidth: ``dst.copy_(src)`` of ``copy_mb`` MiB, counting read + write bytes (STREAM "copy");
          default 64 MiB on the CPU, 1024 MiB on CUDA (far above a GPU's L2 cache: 60 MiB on an H100/H200,
          where a 64 MiB copy measures partly the cache and the launch);
        * FLOP/s: an ``[n, n] @ [n, n]`` matmul (``n = matmul_n``, default 1024 on the CPU, 8192 on CUDA,
          where a 1024^3 matmul is launch-bound), ``2 n^3`` FLOPs, in ``dtype`` (default bf16 on CUDA,
          float32 on CPU where bf16 GEMMs are often not the fast path), stored in ``matmul_flops`` with
          ``flops_dtype`` naming that dtype;
        * memory: CUDA total memory, or the host's physical memory on CPU;
        * link: ``link_gbs`` if given, else the measured copy bandwidth (same host: the "link" is memory).
        """
        device = torch.device(device)
        gpu = device.type == "cuda"
        copy_mb = copy_mb if copy_mb is not None else (1024 if gpu else 64)
        matmul_n = matmul_n if matmul_n is not None else (8192 if gpu else 1024)
        if dtype is None:
            dtype = torch.bfloat16 if device.type == "cuda" else torch.float32

        def sync():
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        def best(fn) -> float:
            fn()
            sync()
            ts = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                fn()
                sync()
                ts.append(time.perf_counter() - t0)
            return min(ts)

        n_bytes = copy_mb * 2**20
        src = torch.empty(n_bytes // 4, dtype=torch.float32, device=device).fill_(1.0)
        dst = torch.empty_like(src)
        t_copy = best(lambda: dst.copy_(src))
        bw = 2 * n_bytes / t_copy / 1e9
        a = torch.randn(matmul_n, matmul_n, device=device).to(dtype)
        b = torch.randn(matmul_n, matmul_n, device=device).to(dtype)
        t_mm = best(lambda: a @ b)
        flops = 2 * matmul_n**3 / t_mm
        if device.type == "cuda":
            props = torch.cuda.get_device_properties(device)
            mem_gb, dev_name = props.total_memory / 1e9, props.name
        else:
            mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
            dev_name = f"cpu x{torch.get_num_threads()} threads"
        return cls(name=f"measured {dev_name}", hbm_gbs=bw, matmul_flops=flops, mem_gb=mem_gb,
                   link_gbs=link_gbs or bw, link_latency_us=link_latency_us, flops_dtype=str(dtype)[6:],
                   source=f"measured: copy {copy_mb} MiB, matmul {matmul_n}^3 {str(dtype)[6:]}, best of {repeats}",
                   extra={"copy_s": t_copy, "matmul_s": t_mm, "device": str(device)})


# Datasheet values (dense bf16, no sparsity; SXM parts unless noted). Link: NVLink per direction
# where present (NVLink 3: 600 GB/s total = 300 per direction; NVLink 4: 900 total = 450 per direction),
# else PCIe (Gen4 x16: 32 GB/s per direction).
PRESETS: dict[str, HardwareSpec] = {
    "a100-80g": HardwareSpec(
        "A100-80G", hbm_gbs=2039, matmul_flops=312e12, mem_gb=80, link_gbs=300, link_latency_us=10,
        source="NVIDIA A100 datasheet (nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
               "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf): A100 80GB SXM"),
    "h100-sxm": HardwareSpec(
        "H100-SXM", hbm_gbs=3350, matmul_flops=989.4e12, mem_gb=80, link_gbs=450, link_latency_us=10,
        source="NVIDIA H100 datasheet (nvidia.com/en-us/data-center/h100/): H100 SXM, bf16 1979 TFLOPS "
               "with sparsity -> 989 dense"),
    "h200": HardwareSpec(
        "H200", hbm_gbs=4800, matmul_flops=989.4e12, mem_gb=141, link_gbs=450, link_latency_us=10,
        source="NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200/): H200 SXM, 4.8 TB/s HBM3e, "
               "141 GB, bf16 1979 TFLOPS with sparsity -> 989 dense"),
    "l40s": HardwareSpec(
        "L40S", hbm_gbs=864, matmul_flops=362.05e12, mem_gb=48, link_gbs=32, link_latency_us=20,
        source="NVIDIA L40S datasheet (nvidia.com/en-us/data-center/l40s/): 864 GB/s GDDR6, 48 GB, "
               "bf16 733 TFLOPS with sparsity -> 362 dense; PCIe Gen4 x16, no NVLink"),
    "rtx-4090": HardwareSpec(
        "RTX 4090", hbm_gbs=1008, matmul_flops=165.2e12, mem_gb=24, link_gbs=32, link_latency_us=20,
        source="NVIDIA Ada Lovelace architecture whitepaper v2.1, Appendix A: RTX 4090 1008 GB/s "
               "GDDR6X, 24 GB, bf16 tensor 165.2 TFLOPS with FP32 accumulate (dense); PCIe Gen4 x16"),
}
