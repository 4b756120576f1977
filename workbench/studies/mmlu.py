"""The MMLU study (notebook 00): a stratified sample of MMLU test questions scored k-shot in lm-eval's two
formulations (Hendrycks et al. 2021, arXiv 2009.03300), with binomial confidence intervals.

* ``mmlu`` (lm-eval's default): the question with lettered choices, "Answer:", the letter chosen by
  log-likelihood (``acc``);
* ``mmlu_continuation`` (cloze): each choice's own text scored as the continuation (``acc``; ``acc_norm``
  normalises by characters).

``run`` scores each ``(formulation, n_shot)`` of ``config.runs`` on the same questions, one results-store point
per run, on the workbench engine (the Hugging Face forward on the CPU, the engine's batched prefill on CUDA) or
on vLLM (prompt log-probs of the same requests).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from workbench.studies.base import as_model, check_size, presets, provenance, resolve_store, slug
from workbench.studies.engines import resolve_engine

__all__ = ["Config", "Data", "Result", "load_data", "run"]

FORMULATIONS = ("mmlu", "mmlu_continuation")
SMOKE_SUBJECTS = ("anatomy", "astronomy", "virology", "marketing")


@dataclass(frozen=True)
class Config:
    """Sizes of one MMLU study; ``__post_init__`` raises ``ValueError`` naming the field."""

    size: str = "demo"  # smoke | demo | full (from_name sets the fields below from it)
    device: str = "auto"  # auto (CUDA when present) | cpu | cuda | cuda:N
    dtype: str = "auto"  # auto: bfloat16 on CUDA, float32 on the CPU
    n_per_subject: int = 2  # questions per subject (x 57 subjects, or x len(subjects))
    runs: tuple = (("mmlu", 0), ("mmlu_continuation", 5))  # (formulation, n_shot) pairs, each one point
    subjects: tuple | None = None  # a subset of the 57 subjects; None: all
    batch_size: int = 8  # requests per forward
    seed: int = 0  # the question sample

    def __post_init__(self):
        check_size(self.size)
        runs = tuple((str(f), int(k)) for f, k in self.runs)
        bad = [f for f, k in runs if f not in FORMULATIONS]
        if bad or not runs or any(not 0 <= k <= 5 for _, k in runs):
            raise ValueError(f"Config.runs={self.runs!r}: each run is (formulation, n_shot) with formulation in "
                             f"{FORMULATIONS} and n_shot in 0..5 (MMLU's dev split has 5 exemplars per subject)")
        object.__setattr__(self, "runs", runs)
        if isinstance(self.subjects, str):
            object.__setattr__(self, "subjects", tuple(s.strip() for s in self.subjects.split(",") if s.strip()))
        for f in ("n_per_subject", "batch_size"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"Config.{f}={v!r} must be an integer >= 1")

    @classmethod
    def from_name(cls, size: str = "demo", device="auto", **overrides) -> Config:
        """The named size on ``device``: ``smoke`` 2 questions from each of 4 subjects; ``demo`` 2 per subject
        (114 questions) on the CPU, 4 (228) on CUDA, letters 0-shot and cloze 5-shot; ``full`` 10 per subject
        (570), both formulations at every shot count 0-5. ``overrides`` replace fields (``None`` keeps the
        preset's). Raises ``ValueError`` for an unknown size, device or field."""
        from workbench.device import resolve_device

        cuda = resolve_device(device).type == "cuda"
        table = {
            "smoke": {"n_per_subject": 2, "subjects": SMOKE_SUBJECTS},
            "demo": {"n_per_subject": 4 if cuda else 2},
            "full": {"n_per_subject": 10, "runs": tuple((f, k) for f in FORMULATIONS for k in range(6))},
        }
        return presets(cls, size, device, table, overrides)


@dataclass(frozen=True)
class Data:
    """The questions (``load_mmlu`` rows, sampled) and the dev split (few-shot exemplars)."""

    questions: pd.DataFrame = field(repr=False)
    dev: pd.DataFrame = field(repr=False)

    def identity(self) -> dict:
        from workbench.results import data_digest

        return {"mmlu_test": data_digest(self.questions), "mmlu_dev": data_digest(self.dev)}


def load_data(config: Config) -> Data:
    """``config.n_per_subject`` questions from each subject (of ``config.subjects``), seeded, and the dev split.
    Raises ``ValueError`` for an unknown subject (naming the close ones)."""
    from workbench.data import load_mmlu, sample_mmlu

    test = load_mmlu(split="test", subjects=list(config.subjects) if config.subjects else None)
    return Data(sample_mmlu(test, config.n_per_subject, seed=config.seed), load_mmlu(split="dev"))


@dataclass(frozen=True)
class Result:
    """``per_question``: one row per question and run (:func:`workbench.eval.mmlu.run_mmlu`'s columns plus
    ``engine``); ``summary``: :func:`workbench.eval.mmlu.summarize_mmlu` of it (``acc`` of both formulations,
    ``acc_norm`` of the cloze one), per subject, micro and macro, with 95% intervals and chance."""

    per_question: pd.DataFrame
    summary: pd.DataFrame
    config: Config
    provenance: dict = field(repr=False)

    def headline(self) -> pd.DataFrame:
        """The micro and macro rows of :attr:`summary`."""
        return self.summary[self.summary["subject"].isin(["micro", "macro"])].reset_index(drop=True)


def run(config: Config, *, model, data: Data | None = None, engine="workbench", store=None,
        progress: bool = True) -> Result:
    """Score ``config.runs`` on ``data`` (default :func:`load_data`) with ``model`` (a ``load_model`` spec or a
    loaded ``(model, tokenizer)`` pair) on ``engine``, storing each run as one point in ``store``.

    Raises ``ValueError`` for a random-init model (MMLU needs trained weights) or an engine that is not
    available (vLLM without ``.venv-vllm``)."""
    from workbench.eval.mmlu import summarize_mmlu

    backend = resolve_engine(engine)
    m, tok = as_model(model, config)
    data = data or load_data(config)
    prov = provenance(m, config, backend, data=data.identity())
    name = f"mmlu_{slug(_model_name(m))}"
    points = [{"formulation": f, "n_shot": k, "batch_size": config.batch_size} for f, k in config.runs]

    def score(point: dict) -> pd.DataFrame:
        if backend.in_process:
            from workbench.eval.mmlu import run_mmlu

            out = run_mmlu(m, tok, data.questions, data.dev, point["n_shot"], point["batch_size"],
                           formulation=point["formulation"], progress=False)
        else:
            out = backend.score_mmlu(m, tok, data.questions, data.dev, point["n_shot"],
                                     formulation=point["formulation"])
        return out.assign(engine=backend.name)

    per_q = resolve_store(store).sweep(name, points, score, provenance=prov, progress=progress)
    summary = summarize_mmlu(per_q, metric=["acc", "acc_norm"])
    summary = summary[(summary["metric"] == "acc") | (summary["formulation"] == "mmlu_continuation")]
    return Result(per_q, summary.reset_index(drop=True), config, prov)


def _model_name(model) -> str:
    from workbench.models import provenance_of

    p = provenance_of(model)
    return p.get("name") or p.get("model_id") or type(model).__name__
