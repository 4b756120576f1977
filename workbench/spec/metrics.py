"""Speculative-decoding counters, as vLLM's ``SpecDecodingStats`` (``v1/spec_decode/metrics.py``).

Terms (DESIGN.md):

* ``num_drafts``: verification steps; ``num_draft_tokens``: tokens proposed;
  ``num_accepted_tokens``: drafts accepted; ``num_accepted_tokens_per_pos[i]``: steps whose draft at
  position i (0-based) was accepted; ``num_tested_per_pos[i]``: steps that tested position i (drafted
  it and accepted every position before it).
* ``tau`` (mean acceptance length) = 1 + num_accepted_tokens / num_drafts: tokens emitted per
  target forward, **the bonus / resampled token included** (vLLM: "mean acceptance length includes
  the bonus token").
* ``draft_acceptance_rate`` = num_accepted_tokens / num_draft_tokens (vLLM's name). Drafts after a
  rejection are never tested, so this is *not* alpha.
* ``alpha`` = P(a tested draft token is accepted) = accepted / (accepted + rejections), counting only
  tested tokens; under Leviathan et al.'s i.i.d. model this is the maximum-likelihood estimate of
  alpha = E[sum_x min(p(x), q(x))], the quantity in E[tokens/step] = (1 - alpha^(k+1)) / (1 - alpha).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class SpecDecodingStats:
    """Accumulator over the steps of one or more generations; ``observe()`` once per step."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_rejections: int = 0  # steps that ended on a rejected draft (the others took a bonus token)
    num_accepted_tokens_per_pos: list[int] = field(default_factory=list)
    num_drafts_per_pos: list[int] = field(default_factory=list)  # steps that drafted position i
    num_tested_per_pos: list[int] = field(default_factory=list)  # steps that tested position i
    tokens_per_step: list[int] = field(default_factory=list)  # num_accepted + 1 per step
    draft_tokens_per_step: list[int] = field(default_factory=list)  # k used in each step
    draft_times_s: list[float] = field(default_factory=list)  # draft forwards + sampling, per step
    target_times_s: list[float] = field(default_factory=list)  # verify forward + rejection, per step

    def observe(self, num_draft_tokens: int, num_accepted_tokens: int,
                draft_s: float = 0.0, target_s: float = 0.0) -> None:
        """Record one verification step: ``num_draft_tokens`` proposed, ``num_accepted_tokens`` accepted
        (0 <= accepted <= drafted); times in seconds. Raises ``ValueError`` on impossible counts."""
        if not 0 <= num_accepted_tokens <= num_draft_tokens or num_draft_tokens < 1:
            raise ValueError(f"need 0 <= accepted ({num_accepted_tokens}) <= drafted ({num_draft_tokens}), "
                             "drafted >= 1")
        self.num_drafts += 1
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted_tokens
        self.num_rejections += int(num_accepted_tokens < num_draft_tokens)
        # a step tests positions 0..accepted (the first rejected one included), at most the drafted ones
        tested = min(num_accepted_tokens + 1, num_draft_tokens)
        for counts, n in ((self.num_drafts_per_pos, num_draft_tokens),
                          (self.num_accepted_tokens_per_pos, num_accepted_tokens),
                          (self.num_tested_per_pos, tested)):
            counts.extend([0] * (num_draft_tokens - len(counts)))
            for i in range(n):
                counts[i] += 1
        self.tokens_per_step.append(num_accepted_tokens + 1)
        self.draft_tokens_per_step.append(num_draft_tokens)
        self.draft_times_s.append(draft_s)
        self.target_times_s.append(target_s)

    def merge(self, other: SpecDecodingStats) -> SpecDecodingStats:
        """A new accumulator holding the steps of both (replayed through ``observe``)."""
        out = SpecDecodingStats()
        for s in (self, other):
            for d, t, ds, ts in zip(s.draft_tokens_per_step, s.tokens_per_step,
                                    s.draft_times_s, s.target_times_s):
                out.observe(d, t - 1, ds, ts)
        return out

    @property
    def alpha(self) -> float:
        """Acceptance rate over tested draft tokens: accepted / (accepted + rejections)."""
        tested = self.num_accepted_tokens + self.num_rejections
        return self.num_accepted_tokens / tested if tested else float("nan")

    @property
    def tau(self) -> float:
        """Mean acceptance length, bonus token included: 1 + accepted / drafts (vLLM)."""
        return 1 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else float("nan")

    @property
    def draft_acceptance_rate(self) -> float:
        """accepted / drafted tokens (vLLM's "draft acceptance rate")."""
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else float("nan")

    @property
    def acceptance_per_pos(self) -> list[float]:
        """vLLM's per-position acceptance rate: accepted at position i / num_drafts."""
        return [a / self.num_drafts for a in self.num_accepted_tokens_per_pos] if self.num_drafts else []

    @property
    def conditional_acceptance_per_pos(self) -> list[float]:
        """P(accept position i | position i tested) = accepted at i / steps that tested i, where a step
        tests i when it drafted i and accepted every position before it; NaN where no step tested i
        (e.g. with variable-k policies, a position drafted only in steps that rejected earlier)."""
        return [a / t if t else float("nan")
                for a, t in zip(self.num_accepted_tokens_per_pos, self.num_tested_per_pos)]

    @property
    def tokens_per_step_hist(self) -> dict[int, int]:
        """{tokens emitted in a step: number of steps}."""
        return dict(sorted(Counter(self.tokens_per_step).items()))

    def summary(self) -> dict:
        """Scalar counters and rates as a flat dict (for a DataFrame row)."""
        return {
            "num_drafts": self.num_drafts, "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens, "num_rejections": self.num_rejections,
            "alpha": self.alpha, "tau": self.tau, "draft_acceptance_rate": self.draft_acceptance_rate,
            "draft_s": sum(self.draft_times_s), "target_s": sum(self.target_times_s),
        }


__all__ = ["SpecDecodingStats"]
