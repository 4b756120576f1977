"""lm-eval reference results, cached on disk by everything that determines them.

lm-eval scores each choice with a full forward of its whole prompt (no shared prefixes), so its run
over two whole subjects costs minutes on a CI core; our side is what is under test and always runs.
A reference run is stored under ``$WORKBENCH_CACHE/reference/lm_eval/<key>.json`` where the key is
the sha256 of: lm-eval, transformers and torch versions, the model's weights (sha256 of every
tensor), its tokenizer (``tokenizer.json``), the questions and dev exemplars, the shot count, the
formulation and the batch size. Any change recomputes it; ``WB_REFERENCE_CACHE=0`` always recomputes.
"""

import hashlib
import json
import os

import pandas as pd
import pytest
import torch


def _weights_sha256(model) -> str:
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(str(t.dtype).encode())
        h.update(t.detach().contiguous().cpu().view(-1).view(dtype=torch.uint8).numpy())
    return h.hexdigest()


def _key(model, tok, questions, dev, n_shot, formulation, batch_size, weights) -> str:
    import lm_eval
    import transformers

    subjects = sorted(questions["subject"].unique())
    d = dev[dev["subject"].isin(subjects)]
    blob = json.dumps({
        "versions": [getattr(lm_eval, "__version__", "?"), transformers.__version__, torch.__version__],
        "weights": weights, "tokenizer": hashlib.sha256(tok.backend_tokenizer.to_str().encode()).hexdigest(),
        "questions": questions[["subject", "question", "choices", "answer"]].astype(str).values.tolist(),
        "dev": d[["subject", "question", "choices", "answer"]].astype(str).values.tolist(),
        "n_shot": n_shot, "formulation": formulation, "batch_size": batch_size}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


@pytest.fixture(scope="session")
def lm_eval_reference(default_model):
    """``ref(questions, dev, n_shot, formulation)`` -> :func:`workbench.eval.lm_eval_ref.lm_eval_mmlu`
    rows on the built-in model, from the cache when the same inputs were scored before."""
    pytest.importorskip("lm_eval")
    from workbench.eval.lm_eval_ref import lm_eval_mmlu
    from workbench.models import cache_dir

    model, tok = default_model
    weights = _weights_sha256(model)
    root = cache_dir() / "reference" / "lm_eval"
    use_cache = os.environ.get("WB_REFERENCE_CACHE", "1") not in ("0", "false", "False")

    def ref(questions: pd.DataFrame, dev: pd.DataFrame, n_shot: int, formulation: str, batch_size: int = 8):
        path = root / f"{_key(model, tok, questions, dev, n_shot, formulation, batch_size, weights)}.json"
        if use_cache and path.exists():
            return pd.DataFrame(json.loads(path.read_text()))
        out = lm_eval_mmlu(model, tok, questions, dev, n_shot=n_shot, batch_size=batch_size, formulation=formulation)
        root.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(out.to_dict(orient="list")))  # floats as repr: exact round trip
        tmp.replace(path)
        return out

    return ref


SAMPLE_SUBJECTS = ["abstract_algebra", "virology", "world_religions"]


@pytest.fixture(scope="session")
def mmlu_sample(mmlu_test):
    """Three questions from each of three subjects (5-shot checks that need few questions)."""
    from workbench.data import sample_mmlu

    return sample_mmlu(mmlu_test[mmlu_test.subject.isin(SAMPLE_SUBJECTS)], 3, seed=0)


@pytest.fixture(scope="session")
def hf_sample_run(default_model, mmlu_sample, mmlu_dev):
    """``run(formulation)``: run_mmlu 5-shot on ``mmlu_sample`` through the HF reference path, computed
    once per formulation and shared by the tests that compare other paths with it."""
    from workbench.eval.mmlu import run_mmlu

    model, tok = default_model
    done = {}

    def run(formulation: str) -> pd.DataFrame:
        if formulation not in done:
            done[formulation] = run_mmlu(model, tok, mmlu_sample, mmlu_dev, 5, 4, progress=False,
                                         formulation=formulation, backend="hf")
        return done[formulation]

    return run
