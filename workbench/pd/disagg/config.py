"""Configuration of a two-process disaggregated prefill/decode run, and where its two ranks run."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from workbench.pd.profile import ProfileConfig

__all__ = ["NCCL_ENV", "DisaggConfig", "placement", "set_nccl_env"]

# NVLink multicast (NVLS) stays off on every process started here: NCCL's NVLS algorithms, torch's
# symmetric-memory multicast and NVSHMEM's NVLS path.
NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def set_nccl_env(env=os.environ) -> None:
    """Write :data:`NCCL_ENV` into ``env`` (this process's environment by default); call before the
    process group is created (NCCL reads its settings at communicator init)."""
    env.update(NCCL_ENV)


@dataclass(frozen=True)
class DisaggConfig:
    """One prefill instance (rank 0) and one decode instance (rank 1), each an
    :class:`~workbench.engine.Engine` with random weights from ``model`` (identical on both ranks:
    same ``weight_seed``).

    Placement (``device="auto"``: CUDA when available): with two or more CUDA devices rank ``r`` runs on
    ``cuda:r`` and the KV cache moves over NCCL; with one, both ranks share ``cuda:0`` and the link is
    gloo through host memory (NCCL refuses two ranks on one GPU); on the CPU, gloo.
    """

    model: Any  # HF config object, or dict with "model_type" (Engine.from_config)
    decode_slots: int = 32  # decode instance: sequences decoded together (SimConfig.max_batch)
    max_prefill_batch: int = 1  # prompts per prefill step (prompts are right-padded: 1 pads nothing)
    max_prefill_tokens: int = 8192  # prompt tokens per prefill step (the first prompt always runs)
    max_seq: int = 2048  # KV positions per slot, both engines
    device: str = "auto"  # auto | cpu | cuda
    backend: str = "auto"  # auto | nccl | gloo
    dtype: torch.dtype | None = None  # default bfloat16 on CUDA, float32 on the CPU
    weight_seed: int = 0
    prompt_seed: int = 0  # random prompt token ids, as workbench.pd.loop.run_serving draws them
    profile: ProfileConfig | None = None  # measured before serving: prefill grid on rank 0, decode on rank 1
    probe_tokens: tuple | None = None  # link probe sizes in tokens; None: 1 and ~1 GiB (CUDA) / ~8 MiB (CPU)
    probe_repeats: int = 5
    record_kv: bool = False  # keep every sent and received KV cache on the host (tests)
    torch_threads: int | None = None  # per process; None: 1 on the CPU (two processes share the cores)
    timeout_s: float = 600.0  # process-group timeout: a stuck transfer fails after this long

    def __post_init__(self):
        for f in ("decode_slots", "max_prefill_batch", "max_prefill_tokens", "max_seq", "probe_repeats"):
            if int(getattr(self, f)) < 1:
                raise ValueError(f"DisaggConfig.{f}={getattr(self, f)!r} must be >= 1")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"DisaggConfig.device={self.device!r}; use 'auto', 'cpu' or 'cuda'")
        if self.backend not in ("auto", "nccl", "gloo"):
            raise ValueError(f"DisaggConfig.backend={self.backend!r}; use 'auto', 'nccl' or 'gloo'")
        if self.probe_tokens is not None and (len(self.probe_tokens) < 2 or min(self.probe_tokens) < 1):
            raise ValueError("DisaggConfig.probe_tokens needs >= 2 sizes >= 1 token (a small and a large one)")
        p = self.profile
        if p is not None:
            if max(p.decode_batches) > self.decode_slots:
                raise ValueError(f"DisaggConfig.profile.decode_batches reach {max(p.decode_batches)} > "
                                 f"decode_slots={self.decode_slots}; lower them or raise decode_slots")
            if p.max_seq > self.max_seq:
                raise ValueError(f"DisaggConfig.profile needs max_seq >= {p.max_seq}; raise max_seq")
        if self.timeout_s <= 0:
            raise ValueError(f"DisaggConfig.timeout_s={self.timeout_s} must be > 0")

    @property
    def prefill_slots(self) -> int:
        """Slots of the prefill engine: one per prompt of a prefill step (and of a profile step)."""
        return max(self.max_prefill_batch, max(self.profile.prefill_batches) if self.profile else 1)


def placement(config: DisaggConfig, rank: int) -> tuple[torch.device, str]:
    """``(device, backend)`` of ``rank`` (0 = prefill, 1 = decode) under ``config`` on this machine.
    Raises ValueError for ``device="cuda"`` without CUDA or ``backend="nccl"`` on fewer than two GPUs."""
    kind = config.device
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError("DisaggConfig.device='cuda' but CUDA is not available; use device='cpu'")
    n_gpu = torch.cuda.device_count() if kind == "cuda" else 0
    device = torch.device("cpu") if kind == "cpu" else torch.device("cuda", rank if n_gpu >= 2 else 0)
    backend = config.backend
    if backend == "auto":
        backend = "nccl" if n_gpu >= 2 else "gloo"
    if backend == "nccl" and n_gpu < 2:
        raise ValueError(f"backend='nccl' needs two CUDA devices (found {n_gpu}): NCCL refuses two ranks on one "
                         "GPU; use backend='gloo' (or 'auto')")
    return device, backend
