"""Speculative decoding: exact speculative sampling, acceptance metrics, alignment, theory, drafts.

Entry points: :func:`speculative_generate` / :func:`autoregressive_generate` (any
:class:`workbench.engine.api.Runner`; ``loop="device"`` is the device-resident fast path of
:mod:`workbench.spec.fast`), :func:`run_spec` -> tidy DataFrame, :func:`run_spec_sweep` (the same
through the results store, resumable), :func:`summarize_spec`, named grids :class:`SpecGrid`,
:func:`make_draft` / :func:`distill_draft`, and the closed forms in :mod:`workbench.spec.theory`.
"""

from workbench.spec.alignment import alignment_metrics
from workbench.spec.config import SpecConfig
from workbench.spec.distill import distill_draft, target_generations
from workbench.spec.drafts import build_drafts, make_draft, truncated_draft
from workbench.spec.fast import device_speculative_generate, rejection_sample_fast
from workbench.spec.generate import GenerationResult, autoregressive_generate, speculative_generate
from workbench.spec.metrics import SpecDecodingStats
from workbench.spec.presets import SPEC_GRIDS, SpecGrid
from workbench.spec.rejection import rejection_sample
from workbench.spec.run import SpecCache, encode_prompts, run_spec, summarize_spec
from workbench.spec.sweep import run_spec_sweep
from workbench.spec.theory import best_k, best_k_table, expected_tokens_per_step, speedup

__all__ = [
    "SPEC_GRIDS", "GenerationResult", "SpecCache", "SpecConfig", "SpecDecodingStats", "SpecGrid",
    "alignment_metrics", "autoregressive_generate", "best_k", "best_k_table", "build_drafts",
    "device_speculative_generate", "distill_draft", "encode_prompts", "expected_tokens_per_step",
    "make_draft", "rejection_sample", "rejection_sample_fast", "run_spec", "run_spec_sweep",
    "speculative_generate", "speedup", "summarize_spec", "target_generations", "truncated_draft",
]
