"""``SpecConfig``: how one speculative-decoding run drafts, verifies and samples.

Terms (DESIGN.md): ``k`` draft tokens proposed per step (vLLM ``num_speculative_tokens``); ``alpha``
acceptance rate; ``tau`` mean acceptance length (bonus token included). Policies: ``static`` (always
``k``), ``heuristic`` (HF ``num_assistant_tokens_schedule="heuristic"``: +2 after a fully accepted
step, -1 otherwise) and ``confidence`` (HF ``assistant_confidence_threshold``: stop drafting once the
draft's probability of its own token falls below the threshold).

Acceptance: ``rejection`` is the exact speculative-sampling rule (the output follows the target);
``synthetic`` is a timing what-if, as vLLM's ``SpeculativeConfig(rejection_sample_method="synthetic")``
with one conditional acceptance rate for every position: each tested draft token is accepted with
probability ``synthetic_alpha`` instead of min(1, p/q), independently, until the first rejection; the
recovered and bonus tokens are drawn as in the exact rule. It measures the realized speedup of a
draft/target pair (random weights included) at any alpha. Its tokens do not follow the target's
distribution; every row it produces says ``acceptance="synthetic"``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from workbench.registry import did_you_mean
from workbench.validate import check_field_types

POLICY_NAMES = ("static", "heuristic", "confidence")
ACCEPTANCE_NAMES = ("rejection", "synthetic")


@dataclass(frozen=True)
class SpecConfig:
    """Settings of one speculative (or plain) decoding run.

    Raises ``ValueError`` naming the field and the fix: ``k < 1``, ``temperature < 0`` (or not finite),
    ``top_p`` outside (0, 1], an unknown ``policy`` (with "did you mean"), ``confidence_threshold``
    outside [0, 1], ``k_max < k``, ``max_new_tokens < 1``.
    """

    k: int = 4  # draft tokens per step (start value for "heuristic", cap for "confidence")
    temperature: float = 0.0  # 0 = greedy (accept while argmaxes match); >0 scales logits for p and q
    top_p: float = 1.0  # nucleus mass kept in p and q before the acceptance rule; 1 keeps everything
    policy: str = "static"  # static | heuristic | confidence (see module docstring)
    k_max: int = 16  # upper bound for the "heuristic" schedule (HF has none; bounds the verify width)
    confidence_threshold: float = 0.4  # HF's default assistant_confidence_threshold
    max_new_tokens: int = 32  # generated tokens per prompt (short: CPU time is scarce)
    seed: int = 0  # torch.Generator seed for draft sampling, acceptance uniforms and resampling
    acceptance: str = "rejection"  # rejection (exact) | synthetic (timing what-if, see module docstring)
    synthetic_alpha: float | None = None  # P(accept) per draft token with acceptance="synthetic"

    def __post_init__(self):
        check_field_types(self)  # integer fields take integers; every error names its field
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"k={self.k!r} must be an integer >= 1 (draft tokens per step; vLLM "
                             "num_speculative_tokens)")
        if not isinstance(self.temperature, (int, float)) or not math.isfinite(self.temperature) \
                or self.temperature < 0:
            raise ValueError(f"temperature={self.temperature!r} must be a finite number >= 0 "
                             "(0 means greedy decoding)")
        if not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p={self.top_p!r} must be in (0, 1]; use 1.0 to disable nucleus sampling")
        if self.policy not in POLICY_NAMES:
            raise ValueError(f"policy={self.policy!r} is unknown; use one of {POLICY_NAMES}."
                             + did_you_mean(self.policy, POLICY_NAMES))
        if not isinstance(self.k_max, int) or self.k_max < self.k:
            raise ValueError(f"k_max={self.k_max!r} must be an integer >= k={self.k}")
        if not 0 <= self.confidence_threshold <= 1:
            raise ValueError(f"confidence_threshold={self.confidence_threshold!r} must be in [0, 1] "
                             "(HF's default is 0.4)")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={self.max_new_tokens!r} must be an integer >= 1")
        if self.acceptance not in ACCEPTANCE_NAMES:
            raise ValueError(f"acceptance={self.acceptance!r} is unknown; use one of {ACCEPTANCE_NAMES}."
                             + did_you_mean(self.acceptance, ACCEPTANCE_NAMES))
        if self.acceptance == "synthetic":
            a = self.synthetic_alpha
            if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0 <= a <= 1:
                raise ValueError(f"synthetic_alpha={a!r} must be a number in [0, 1] with acceptance='synthetic' "
                                 "(the probability that each draft token is accepted)")
        elif self.synthetic_alpha is not None:
            raise ValueError(f"synthetic_alpha={self.synthetic_alpha!r} is only used with acceptance='synthetic'; "
                             "leave it None for the exact rejection sampler")

    @property
    def greedy(self) -> bool:
        """True for temperature 0 (argmax decoding)."""
        return self.temperature == 0

    def to_row(self) -> dict:
        """Config fields as result columns."""
        return asdict(self)


__all__ = ["ACCEPTANCE_NAMES", "POLICY_NAMES", "SpecConfig", "did_you_mean"]
