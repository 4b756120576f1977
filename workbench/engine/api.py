"""The runner protocol every timing and every decoding loop in the workbench goes through.

A *runner* owns one model plus its KV cache and exposes the few operations that prefill, plain
decode, speculative decode (draft and verify) and serving need. Two families implement it:

* :class:`workbench.engine.hf_runner.HFRunner` -- the plain Hugging Face forward with a
  ``DynamicCache``: the correctness reference, runs anywhere, slow on GPU (host overhead).
* ``workbench.engine.Engine`` -- the fast path: own forward for Llama/Qwen2/SmolLM, static KV cache,
  CUDA graphs for the decode and verify steps, W4A16 kernels; a CPU fallback with the same interface.

Terms: a *slot* is one row of the KV cache (one sequence); ``length(slot)`` counts the tokens whose
keys/values are cached. ``extend`` appends tokens after the cached ones and returns their logits.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class Runner(Protocol):
    """Single-sequence view (slot 0) used by decoding loops such as speculative decoding."""

    vocab_size: int
    device: torch.device

    def reset(self) -> None:
        """Forget every cached token (length becomes 0)."""

    @property
    def length(self) -> int:
        """Number of tokens currently in the KV cache."""

    def extend(self, tokens: torch.Tensor) -> torch.Tensor:
        """Append ``tokens`` ``[T]`` or ``[1, T]`` (int64) to the cache; return logits ``[T, vocab]``
        (float32) for those positions. ``T == 1`` is a decode step, ``T == k + 1`` a verify step."""

    def truncate(self, length: int) -> None:
        """Drop cached positions ``>= length`` (KV rollback after rejected draft tokens)."""

    def synchronize(self) -> None:
        """Wait for queued device work (``torch.cuda.synchronize`` on GPU); call before reading a clock."""


@runtime_checkable
class BatchRunner(Protocol):
    """Many-slot view used by serving loops, batched MMLU scoring and the P/D profile."""

    vocab_size: int
    device: torch.device
    max_batch: int
    max_seq: int

    def lengths(self) -> torch.Tensor:
        """Cached tokens per slot, ``[max_batch]`` int64 (CPU tensor)."""

    def extend_batch(self, slots: torch.Tensor, tokens: torch.Tensor,
                     n_valid: torch.Tensor | None = None) -> torch.Tensor:
        """Append ``tokens`` ``[B, T]`` (right-padded; ``n_valid`` ``[B]`` real tokens per row, default
        T) to slots ``slots`` ``[B]``; return logits ``[B, T, vocab]`` (float32; padded positions
        undefined). Each row's positions continue from that slot's own length."""

    def truncate_slot(self, slot: int, length: int) -> None:
        """Drop slot ``slot``'s cached positions ``>= length``."""

    def copy_prefix(self, src: int, dst: list[int] | torch.Tensor, length: int) -> None:
        """Copy the first ``length`` cached positions of slot ``src`` into each of ``dst`` (shared
        few-shot prefixes); each destination's length becomes ``length``."""

    def synchronize(self) -> None:
        """Wait for queued device work."""
