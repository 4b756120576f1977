"""Named grids of speculative-decoding runs, shared by notebook 02 and ``benchmarks/spec_table.py``.

``SpecGrid.from_name(name, **overrides)``; names in :data:`SPEC_GRIDS`:

* ``"full"``: notebook 02 under ``WB_FULL=1`` -- static k in (1, 2, 4, 6), the heuristic and
  confidence policies at k = 4, greedy and T = 0.7, 24 new tokens on 12 Spec-Bench prompts, four drafts
  (RTN INT8/INT4/INT3 self-drafts and a 2-layer distilled draft, 150 steps).
* ``"demo"``: notebook 02's default on CUDA -- the same studies on a smaller grid: static k in
  (1, 2, 4), the policies at k = 4, both temperatures, 12 new tokens on 6 prompts, the INT8 and INT3
  self-drafts (alignment falling with bits) and a 50-step distilled draft (180 runs of 12 tokens
  against the full grid's 576 of 24).
* ``"demo_cpu"``: notebook 02's default on the CPU, sized for ``make reports`` on 2 cores (every
  notebook's demo together in 20 minutes): the demo's studies and drafts with static k in (1, 4) (the
  theory curves fill in k = 2), on 3 prompts (one results-store point per config and draft), 8 new
  tokens each, and a 30-step distilled draft (72 runs of 8 tokens).
  :class:`workbench.studies.spec.Config` picks ``"demo"`` or ``"demo_cpu"`` by device.
* ``"smoke"``: the same shape at CI size (k = 1 and 2, 6 new tokens, 2 prompts, INT4 and a 5-step
  distilled draft on 60,000 characters of WikiText-2).
* ``"spec-table"``: ``benchmarks/spec_table.py`` -- static k = 4 at T = 0 and 0.7, 32 new tokens on
  120 prompts (prompts cut to 192 tokens), the four drafts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from workbench.spec.config import POLICY_NAMES, SpecConfig, did_you_mean


@dataclass(frozen=True)
class SpecGrid:
    """A grid of :class:`SpecConfig` points and the data and drafts they run on.

    Raises ``ValueError`` naming the field: empty or non-positive ``ks``, ``k_policy < 1``, a policy
    that is not ``heuristic``/``confidence``, a negative temperature, an empty draft list, sizes < 1.
    """

    ks: tuple[int, ...] = (1, 2, 4, 6)  # static draft lengths (the theory-vs-k curve)
    k_policy: int = 4  # budget of the heuristic/confidence comparison; a static point runs at it too
    policies: tuple[str, ...] = ("heuristic", "confidence")  # compared against static at k_policy
    temperatures: tuple[float, ...] = (0.0, 0.7)  # greedy and one sampled setting
    max_new_tokens: int = 24  # new tokens per prompt (CPU time is scarce)
    n_prompts: int = 12  # Spec-Bench prompts, stratified by category
    max_prompt_tokens: int = 128  # prompt cut (CPU prefill budget)
    drafts: tuple[str, ...] = ("int8", "int4", "int3", "distilled")  # make_draft names
    distill_steps: int = 150  # AdamW steps of the distilled draft
    distill_chars: int = 0  # WikiText-2 valid characters for distillation; 0 = all of it
    seed: int = 0  # prompt sample, sampling RNG and distillation seed

    def __post_init__(self):
        if not self.ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in self.ks):
            raise ValueError(f"ks={self.ks!r} must be a non-empty tuple of integers >= 1")
        if not isinstance(self.k_policy, int) or self.k_policy < 1:
            raise ValueError(f"k_policy={self.k_policy!r} must be an integer >= 1")
        bad = [p for p in self.policies if p not in POLICY_NAMES or p == "static"]
        if bad:
            raise ValueError(f"policies={self.policies!r}: {bad[0]!r} is not a variable-k policy; use "
                             "'heuristic' and/or 'confidence' (static runs at ks and k_policy anyway)."
                             + did_you_mean(bad[0], ("heuristic", "confidence")))
        if not self.temperatures or any(t < 0 for t in self.temperatures):
            raise ValueError(f"temperatures={self.temperatures!r} must be a non-empty tuple of numbers >= 0")
        if not self.drafts:
            raise ValueError("drafts=() is empty; name at least one draft (see workbench.spec.make_draft)")
        for name in ("max_new_tokens", "n_prompts", "max_prompt_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r} must be >= 1")
        if self.distill_steps < 0 or self.distill_chars < 0:
            raise ValueError(f"distill_steps={self.distill_steps} and distill_chars={self.distill_chars} must be >= 0")

    def configs(self) -> list[SpecConfig]:
        """Static k over ``ks``, each policy at ``k_policy``, and static at ``k_policy`` if not in ``ks``;
        each at every temperature (temperature-major order)."""
        out = []
        for t in self.temperatures:
            kw = {"temperature": t, "max_new_tokens": self.max_new_tokens, "seed": self.seed}
            out += [SpecConfig(k=k, **kw) for k in self.ks]
            out += [SpecConfig(k=self.k_policy, policy=p, **kw) for p in self.policies]
            if self.k_policy not in self.ks:
                out.append(SpecConfig(k=self.k_policy, **kw))
        return out

    @classmethod
    def from_name(cls, name: str, **overrides) -> SpecGrid:
        """The preset ``name`` of :data:`SPEC_GRIDS` with ``overrides`` replacing fields (an override of
        ``None`` keeps the preset's value, so unset notebook parameters can be passed through). Raises
        ``ValueError`` for an unknown name (with "did you mean") or bad overrides."""
        if name not in SPEC_GRIDS:
            raise ValueError(f"spec grid {name!r} is unknown; use one of {sorted(SPEC_GRIDS)}."
                             + did_you_mean(name, SPEC_GRIDS))
        return replace(SPEC_GRIDS[name], **{k: v for k, v in overrides.items() if v is not None})


SPEC_GRIDS = {
    "full": SpecGrid(),
    "demo": SpecGrid(ks=(1, 2, 4), max_new_tokens=12, n_prompts=6, drafts=("int8", "int3", "distilled"),
                     distill_steps=50),
    "demo_cpu": SpecGrid(ks=(1, 4), max_new_tokens=8, n_prompts=3, drafts=("int8", "int3", "distilled"),
                         distill_steps=30),
    "smoke": SpecGrid(ks=(1, 2), k_policy=2, max_new_tokens=6, n_prompts=2, drafts=("int4", "distilled"),
                      distill_steps=5, distill_chars=60_000),  # two k values: the explorer's k slider moves
    "spec-table": SpecGrid(ks=(4,), k_policy=4, policies=(), max_new_tokens=32, n_prompts=120,
                           max_prompt_tokens=192),
}



__all__ = ["SPEC_GRIDS", "SpecGrid"]
