"""``GenerationResult``: what one plain or speculative generation returns."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from workbench.spec.metrics import SpecDecodingStats


@dataclass
class GenerationResult:
    """Output of one generation.

    ``tokens``: the new token ids (prompt excluded); ``prefill_s``: time to cache the prompt;
    ``decode_s``: time of the decoding loop; ``step_times_s``: per step (plain decoding: per token);
    ``stats``: speculative counters (``None`` for plain decoding); ``logits``: ``[n_new, V]`` float32
    target logits at each generated position (plain decoding with ``return_logits=True``);
    ``loop``: which speculative loop ran (``"reference"`` or ``"device"``; ``"plain"`` for plain
    decoding).
    """

    tokens: list[int]
    prefill_s: float
    decode_s: float
    step_times_s: list[float] = field(default_factory=list)
    stats: SpecDecodingStats | None = None
    logits: torch.Tensor | None = None
    loop: str = "plain"


__all__ = ["GenerationResult"]
