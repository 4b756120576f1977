"""Draft-length policies: how many tokens to draft in the next step.

A policy answers three questions per step: ``next_k()`` (the draft budget), ``stop_drafting(q, x)``
(after each drafted token: stop early?) and ``update(num_accepted, num_drafted)`` (after verification).

* ``static``: always ``k`` (vLLM ``num_speculative_tokens``; Leviathan et al. 2023's fixed gamma).
* ``heuristic``: HF transformers' ``AssistedCandidateGenerator`` with
  ``num_assistant_tokens_schedule="heuristic"``: start at ``k``; after a step whose drafts were all
  accepted, ``k += 2``; otherwise ``k = max(1, k - 1)`` (here also capped at ``k_max``).
* ``confidence``: HF's ``assistant_confidence_threshold``: draft up to ``k`` tokens but stop after a
  token whose draft probability q(x) falls below the threshold (a low-confidence draft token is
  likely to be rejected, and everything after it is then wasted).
"""

from __future__ import annotations

import torch

from workbench.registry import did_you_mean
from workbench.spec.config import POLICY_NAMES, SpecConfig


class StaticK:
    """Always draft ``k`` tokens."""

    def __init__(self, config: SpecConfig):
        self.k = config.k

    def next_k(self) -> int:
        return self.k

    def stop_drafting(self, q: torch.Tensor, token: int) -> bool:
        return False

    def update(self, num_accepted: int, num_drafted: int) -> None:
        return None


class HeuristicK(StaticK):
    """HF's +2 / -1 schedule (``num_assistant_tokens_schedule="heuristic"``), bounded by [1, k_max]."""

    def __init__(self, config: SpecConfig):
        super().__init__(config)
        self.k_max = config.k_max

    def update(self, num_accepted: int, num_drafted: int) -> None:
        if num_accepted == num_drafted:
            self.k = min(self.k_max, self.k + 2)
        else:
            self.k = max(1, self.k - 1)


class ConfidenceK(StaticK):
    """Stop drafting once q(x) < ``confidence_threshold`` (HF ``assistant_confidence_threshold``)."""

    def __init__(self, config: SpecConfig):
        super().__init__(config)
        self.threshold = config.confidence_threshold

    def stop_drafting(self, q: torch.Tensor, token: int) -> bool:
        """``q`` ``[V]`` float32: the draft's sampling distribution; ``token``: the drafted id."""
        return float(q[token]) < self.threshold


POLICIES = {"static": StaticK, "heuristic": HeuristicK, "confidence": ConfidenceK}
assert tuple(POLICIES) == POLICY_NAMES


def make_policy(config: SpecConfig):
    """A fresh policy object for one generation. Raises ``ValueError`` for an unknown name."""
    if config.policy not in POLICIES:
        raise ValueError(f"policy={config.policy!r} is unknown; use one of {tuple(POLICIES)}."
                         + did_you_mean(config.policy, POLICIES))
    return POLICIES[config.policy](config)


__all__ = ["POLICIES", "ConfidenceK", "HeuristicK", "StaticK", "make_policy"]
