"""``EngineConfig``: every setting that changes which kernel runs a matmul, as one frozen value.

It replaces the kernel environment switches and module constants of earlier versions
(``WORKBENCH_INT4_MMA``, ``WORKBENCH_DENSE_MMA``, ``WORKBENCH_INT4_MMA_ROWS_TC``, ``WB_PDL``, ``WORKBENCH_W4MMA``,
...). Users set one variable,
``WORKBENCH_DISABLED_KERNELS`` (a comma list of kernel names from :data:`workbench.engine.routing.KERNELS`,
e.g. ``w4a16-mma,dense-mma``), read by :meth:`EngineConfig.from_env`. An engine keeps its config
(``Engine.config``); its :meth:`~workbench.engine.Engine.route_table` says which kernel each matmul got, and
:meth:`to_dict` goes into every timed row's provenance and the results key (``engine_key``), so a timing made
with other kernels is never reused. The pattern is vLLM's ``VllmConfig`` (one frozen config object handed to the
model runner) with its kernel choice ``choose_mp_linear_kernel`` (``vllm/model_executor/layers/quantization/
kernels/mixed_precision/__init__.py``), which skips kernels named in ``VLLM_DISABLED_KERNELS``.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, fields, replace

import torch

__all__ = ["DISABLED_KERNELS_ENV", "EngineConfig"]

DISABLED_KERNELS_ENV = "WORKBENCH_DISABLED_KERNELS"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class EngineConfig:
    """The engine's kernel settings. Validated on construction (``ValueError`` naming the field and the fix)."""

    # kernel names routing skips (workbench.engine.routing.KERNELS); sorted, so equal sets give equal keys
    disabled_kernels: tuple[str, ...] = ()
    # activation / weight dtype of the engine ("float32", "bfloat16", "float16"); None: the model's own.
    # On a CPU with AVX-512 BF16, "bfloat16" is what lets W4A16 / W8A16 run torch's CPU INT kernels
    compute_dtype: str | None = None
    # CPU: calls of at most this many token rows take the INT4 / INT8 kernel where a dequantized copy is kept
    # (prefill takes the copy); 8 is the measured crossover against bf16 F.linear (workbench.engine.cpu)
    cpu_int_max_rows: int = 8
    # CUDA: rows up to which the W4A16 MMA kernel runs where the Triton tensor-core GEMM also takes the weight
    # (H200, Qwen2-7B: it won the engine step up to 16 rows; above, each call is routed by measurement)
    w4a16_mma_rows: int = 16
    # CUDA: rows (lo, hi) for which a bf16 weight may take the dense MMA kernel (routed by measurement per shape)
    dense_mma_rows: tuple[int, int] = (2, 8)
    # CUDA, compute capability >= 9.0: the package's kernels launch with programmatic dependent launch (a kernel's
    # prologue overlaps the previous kernel's tail; PTX ``griddepcontrol``); False launches them plain (an A/B)
    pdl: bool = True

    def __post_init__(self):
        from workbench.engine.routing import FALLBACKS, kernel_names  # the registry lives beside the kernels

        if isinstance(self.disabled_kernels, str):
            raise TypeError(f"disabled_kernels={self.disabled_kernels!r} is a string; pass a tuple of names")
        names = tuple(sorted({str(n).strip() for n in self.disabled_kernels if str(n).strip()}))
        unknown = [n for n in names if n not in kernel_names()]
        if unknown:
            raise ValueError(f"disabled_kernels names unknown kernels {unknown}; known: {sorted(kernel_names())} "
                             f"(check {DISABLED_KERNELS_ENV})")
        if set(names) & set(FALLBACKS):
            raise ValueError(f"{sorted(set(names) & set(FALLBACKS))} cannot be disabled: they are the last resort "
                             f"of every route; remove them from {DISABLED_KERNELS_ENV}")
        object.__setattr__(self, "disabled_kernels", names)
        if self.compute_dtype is not None and self.compute_dtype not in _DTYPES:
            raise ValueError(f"compute_dtype={self.compute_dtype!r}; use one of {sorted(_DTYPES)} or None")
        if self.cpu_int_max_rows < 0:
            raise ValueError(f"cpu_int_max_rows={self.cpu_int_max_rows} must be >= 0 (0: prefill copy only)")
        if not 0 <= self.w4a16_mma_rows <= 64:
            raise ValueError(f"w4a16_mma_rows={self.w4a16_mma_rows} must be in 0..64")
        lo, hi = (int(v) for v in self.dense_mma_rows)
        if not 1 <= lo <= hi <= 64:
            raise ValueError(f"dense_mma_rows={self.dense_mma_rows} must satisfy 1 <= lo <= hi <= 64")
        object.__setattr__(self, "dense_mma_rows", (lo, hi))
        if not isinstance(self.pdl, bool):
            raise TypeError(f"pdl={self.pdl!r} must be True or False")

    @classmethod
    def from_env(cls, **overrides) -> EngineConfig:
        """The defaults with ``WORKBENCH_DISABLED_KERNELS`` (comma list; unset or empty: none) and ``overrides``
        applied. Raises ``ValueError`` for an unknown kernel name (listing the known ones)."""
        env = os.environ.get(DISABLED_KERNELS_ENV, "")
        disabled = tuple(n for n in env.split(",") if n.strip())
        if "disabled_kernels" in overrides:
            disabled = tuple(overrides.pop("disabled_kernels")) + disabled
        return cls(disabled_kernels=disabled, **overrides)

    def enabled(self, name: str) -> bool:
        """Whether routing may choose kernel ``name``."""
        return name not in self.disabled_kernels

    def dtype(self, default: torch.dtype) -> torch.dtype:
        """:attr:`compute_dtype` as a torch dtype, else ``default``."""
        return default if self.compute_dtype is None else _DTYPES[self.compute_dtype]

    def with_(self, **changes) -> EngineConfig:
        """A copy with ``changes`` (validated)."""
        return replace(self, **changes)

    def to_dict(self) -> dict:
        """JSON-able fields (tuples as lists), for provenance and the results key."""
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v) for f in fields(self)}

    def key(self) -> str:
        """Short digest of :meth:`to_dict` (12 hex digits)."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True, default=str).encode()).hexdigest()[:12]
