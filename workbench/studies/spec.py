"""The speculative-decoding study (notebook 02): will this draft pay off for this target?

Exact speculative sampling (Leviathan et al. 2023, arXiv 2211.17192; Chen et al. 2023, arXiv 2302.01318) over a
grid of drafts, ``k``, policies and temperatures on Spec-Bench prompts. ``run`` returns a :class:`Result`:

* ``runs``: one row per prompt and point (:func:`workbench.spec.run.run_spec`'s columns: ``alpha``, ``tau`` with
  the bonus token as vLLM counts it, ``draft_acceptance_rate``, per-position acceptance, ``c``, speedup...);
* ``summary``: :func:`workbench.spec.summarize_spec` per draft, temperature, policy and ``k`` (bootstrap CIs);
* ``by_draft``: the same per draft and temperature (alignment: KL, TV, predicted and measured alpha);
* ``best_k``: :func:`workbench.spec.theory.best_k_table` (a best speedup below 1: do not speculate here);
* ``by_category``: tau per Spec-Bench category;
* ``distill``: the distilled draft's training curve (``None`` without one).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from workbench.studies.base import as_model, check_size, presets, provenance, resolve_store, slug
from workbench.studies.engines import resolve_engine

__all__ = ["Config", "Data", "Result", "load_data", "run"]


@dataclass(frozen=True)
class Config:
    """One speculative-decoding study: a named grid (:data:`workbench.spec.SPEC_GRIDS`) and overrides of it."""

    size: str = "demo"  # smoke | demo | full
    device: str = "auto"  # auto (CUDA when present) | cpu | cuda | cuda:N
    dtype: str = "auto"  # auto: bfloat16 on CUDA, float32 on the CPU
    grid: str = "demo_cpu"  # a name in workbench.spec.SPEC_GRIDS
    n_prompts: int | None = None  # each of these, when set, replaces the grid's value
    max_new_tokens: int | None = None
    ks: tuple | None = None  # static draft lengths
    drafts: tuple | None = None  # make_draft names ("int8", "int3", "distilled", "layers-N", a hub id, "ngram")
    distill_steps: int | None = None
    prompts_per_point: int = 4  # prompts per results-store point (the resume grain)
    seed: int = 0

    def __post_init__(self):
        check_size(self.size)
        for f, cast in (("ks", int), ("drafts", str)):
            v = getattr(self, f)
            if isinstance(v, str):
                object.__setattr__(self, f, tuple(cast(x.strip()) for x in v.split(",") if x.strip()))
            elif v is not None:
                object.__setattr__(self, f, tuple(v))
        if self.prompts_per_point < 1:
            raise ValueError(f"Config.prompts_per_point={self.prompts_per_point} must be >= 1")
        self.spec_grid()  # validates the grid name and the overrides

    def spec_grid(self):
        """The :class:`workbench.spec.SpecGrid` of this config."""
        from workbench.spec import SpecGrid

        return SpecGrid.from_name(self.grid, n_prompts=self.n_prompts, max_new_tokens=self.max_new_tokens,
                                  ks=self.ks, drafts=self.drafts, distill_steps=self.distill_steps, seed=self.seed)

    @classmethod
    def from_name(cls, size: str = "demo", device="auto", **overrides) -> Config:
        """``smoke``: the ``smoke`` grid; ``demo``: ``demo`` on CUDA (6 prompts of 12 tokens, k 1/2/4, the INT8 and
        INT3 self-drafts and a 50-step distilled draft), ``demo_cpu`` on the CPU (3 prompts of 8 tokens, k 1/4, a
        30-step distilled draft); ``full``: the ``full`` grid (12 prompts, four drafts, k up to 6). Raises
        ``ValueError`` for an unknown size, device or field."""
        from workbench.device import resolve_device

        cuda = resolve_device(device).type == "cuda"
        table = {"smoke": {"grid": "smoke"}, "demo": {"grid": "demo" if cuda else "demo_cpu"}, "full": {"grid": "full"}}
        return presets(cls, size, device, table, overrides)


@dataclass(frozen=True)
class Data:
    """Spec-Bench prompts (unencoded: ``prompt_id, category, text``...) and the distillation text."""

    prompts: pd.DataFrame = field(repr=False)
    distill_text: str = field(repr=False)


def load_data(config: Config) -> Data:
    """``n_prompts`` Spec-Bench prompts stratified by category (seeded) and WikiText-2 valid (cut to the grid's
    ``distill_chars``)."""
    from workbench.data import load_prompts, load_text

    g = config.spec_grid()
    text = load_text("wikitext-2", "valid")
    return Data(load_prompts("spec-bench", n=g.n_prompts, seed=g.seed), text[: g.distill_chars] if g.distill_chars
                else text)


@dataclass(frozen=True)
class Result:
    """Frames of one speculative-decoding study (see the module docstring)."""

    runs: pd.DataFrame
    summary: pd.DataFrame
    by_draft: pd.DataFrame
    best_k: pd.DataFrame
    by_category: pd.DataFrame
    distill: pd.DataFrame | None
    config: Config
    provenance: dict = field(repr=False)


def run(config: Config, *, model, data: Data | None = None, engine="workbench", store=None) -> Result:
    """Build the drafts for ``model`` (the target: a ``load_model`` spec or a loaded pair), run every point of the
    grid on every prompt and store each point as it finishes.

    Raises ``ValueError`` for a draft that does not match the target's tokenizer, or an engine that is not
    available."""
    from workbench.device import clock_for
    from workbench.spec import encode_prompts, make_draft, run_spec_sweep, summarize_spec, theory
    from workbench.spec.sweep import prompts_identity

    backend = resolve_engine(engine)
    target, tok = as_model(model, config)
    data = data or load_data(config)
    g = config.spec_grid()
    prompts = encode_prompts(tok, data.prompts, max_prompt_tokens=g.max_prompt_tokens)
    distill_kw = {"steps": g.distill_steps, "tokenizer": tok, "text": data.distill_text, "seed": g.seed,
                  "eval_every": max(1, g.distill_steps // 10)}
    built = {n: make_draft(target, n, tok, distill_kwargs=distill_kw) for n in g.drafts}
    prov = provenance({"target": target, **{n: d for n, (d, _) in built.items() if hasattr(d, "state_dict")}},
                      config, backend, data=prompts_identity(prompts))  # an n-gram draft has no weights
    name = slug(f"spec_{_name(target)}_{config.grid}")
    if backend.in_process:
        clock = clock_for(target.device)[0]
        runs = run_spec_sweep(target, built, prompts, g.configs(), name=name, root=resolve_store(store).root,
                              prompts_per_point=config.prompts_per_point, clock=clock, seed=g.seed, provenance=prov)
    else:
        runs = backend.run_spec(target, tok, built, prompts, g.configs(), store=resolve_store(store), name=name,
                                provenance=prov)
    runs = runs.assign(engine=backend.name)
    summary = summarize_spec(runs)
    static = runs[runs.policy == "static"]
    by_draft = summarize_spec(static, by=("draft", "temperature"))
    by_cat = summarize_spec(static, by=("draft", "temperature", "k", "category"))
    curve = built["distilled"][1]["curve"] if "distilled" in built else None
    return Result(runs, summary, by_draft, theory.best_k_table(by_draft), by_cat, curve, config, prov)


def _name(model) -> str:
    from workbench.studies.mmlu import _model_name

    return _model_name(model)
