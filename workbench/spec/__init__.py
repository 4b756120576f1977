"""Speculative decoding: exact speculative sampling, acceptance metrics, alignment, theory, drafts.

Entry points: :func:`speculative_generate` / :func:`autoregressive_generate` (any
:class:`workbench.engine.api.Runner`), :func:`run_spec` -> tidy DataFrame, :func:`summarize_spec`,
:func:`make_draft` / :func:`distill_draft`, and the closed forms in :mod:`workbench.spec.theory`.
"""

from workbench.spec.alignment import alignment_metrics
from workbench.spec.config import SpecConfig
from workbench.spec.distill import distill_draft, target_generations
from workbench.spec.drafts import build_drafts, make_draft, truncated_draft
from workbench.spec.generate import GenerationResult, autoregressive_generate, speculative_generate
from workbench.spec.metrics import SpecDecodingStats
from workbench.spec.rejection import rejection_sample
from workbench.spec.run import encode_prompts, run_spec, summarize_spec
from workbench.spec.theory import best_k, expected_tokens_per_step, speedup

__all__ = [
    "GenerationResult", "SpecConfig", "SpecDecodingStats", "alignment_metrics", "autoregressive_generate",
    "best_k", "build_drafts", "distill_draft", "encode_prompts", "expected_tokens_per_step", "make_draft",
    "rejection_sample", "run_spec", "speculative_generate", "speedup", "summarize_spec", "target_generations",
    "truncated_draft",
]
