"""lm-eval integration: ``--model workbench`` gives the log-likelihoods of ``--model hf`` on the same
model, in process and through the ``workbench-lm-eval`` command line (engine path, quantized)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

lm_eval = pytest.importorskip("lm_eval")

from workbench.bridges.lm_eval_model import WorkbenchLM

MC = [("What is the capital of France?", ["Paris", "Rome", "Berlin", "Madrid"], 0),
      ("Which animal barks?", ["cat", "dog", "fish", "bird"], 1),
      ("2 + 2 =", ["3", "4", "5", "22"], 1),
      ("The opposite of hot is", ["cold", "warm", "red", "fast"], 0)]
TEXTS = [("The river runs through the old town, past the market and the church, and on to the sea. "
          "In spring the water rises and the fishermen mend their nets on the stone quay."),
         ("Speculative decoding lets a small draft model propose several tokens that the large model "
          "then checks in a single forward pass, so that each step can emit more than one token.")]


@pytest.fixture(scope="module")
def tasks_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tasks")
    (d / "mc.jsonl").write_text("".join(json.dumps({"question": q, "choices": c, "answer": a}) + "\n" for q, c, a in MC))
    (d / "ppl.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    common = "dataset_path: json\ntest_split: test\n"
    (d / "wb_mc.yaml").write_text(
        f"task: wb_mc\n{common}dataset_kwargs:\n  data_files:\n    test: {d / 'mc.jsonl'}\n"
        "output_type: multiple_choice\ndoc_to_text: \"Question: {{question}}\\nAnswer:\"\n"
        "doc_to_choice: \"{{choices}}\"\ndoc_to_target: \"{{answer}}\"\nmetric_list:\n  - metric: acc\n")
    (d / "wb_ppl.yaml").write_text(
        f"task: wb_ppl\n{common}dataset_kwargs:\n  data_files:\n    test: {d / 'ppl.jsonl'}\n"
        "output_type: loglikelihood_rolling\ndoc_to_text: \"\"\ndoc_to_target: \"{{text}}\"\n"
        "metric_list:\n  - metric: word_perplexity\n")
    return d


def _logliks(samples_by_task: dict) -> dict[str, list[float]]:
    out = {}
    for task, samples in samples_by_task.items():
        vals = []
        for s in sorted(samples, key=lambda s: s["doc_id"]):
            for r in s["filtered_resps"]:
                vals.append(float(r[0] if isinstance(r, (list, tuple)) else r))
        out[task] = vals
    return out


def _evaluate(model, tasks_dir, model_args=None):
    from lm_eval.tasks import TaskManager

    res = lm_eval.simple_evaluate(model=model, model_args=model_args, tasks=["wb_mc", "wb_ppl"], device="cpu",
                                  batch_size=2, log_samples=True, verbosity="ERROR",
                                  task_manager=TaskManager(include_path=str(tasks_dir)))
    return _logliks(res["samples"])


@pytest.fixture(scope="module")
def hf_reference(tasks_dir):
    from workbench.models import cache_dir

    folder = cache_dir() / "models" / "smollm2-135m"
    if not folder.is_dir():
        pytest.skip("the built-in model's cache folder is absent")
    return _evaluate("hf", tasks_dir, f"pretrained={folder},dtype=float32")


@pytest.mark.slow
@pytest.mark.reference
def test_workbench_model_equals_hf(tasks_dir, hf_reference):
    got = _evaluate("workbench", tasks_dir, "model=smollm2-135m,device=cpu,engine=false")
    assert len(got["wb_mc"]) == 16 and len(got["wb_ppl"]) == 2
    for task in got:
        assert got[task] == pytest.approx(hf_reference[task], rel=1e-6, abs=1e-6), task


@pytest.mark.slow
@pytest.mark.reference
def test_cli_quantized_on_the_engine_equals_hflm_on_the_same_model(tasks_dir, tmp_path, default_model):
    """``python -m workbench.bridges.lm_eval_cli`` (the ``workbench-lm-eval`` script) with RTN W4A16 on
    the engine's batched prefill vs lm-eval's HFLM over ``workbench.quant.quantize`` of the same model."""
    from lm_eval.models.huggingface import HFLM

    from workbench.quant import QuantConfig, quantize

    cmd = [sys.executable, "-m", "workbench.bridges.lm_eval_cli", "--model", "workbench", "--model_args",
           "model=smollm2-135m,quant=w4a16_asym,quant_group_size=64,device=cpu,engine=true",
           "--tasks", "wb_mc,wb_ppl", "--include_path", str(tasks_dir), "--batch_size", "2",
           "--output_path", str(tmp_path), "--log_samples"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    samples = {t: [json.loads(ln) for f in tmp_path.rglob(f"samples_{t}_*.jsonl") for ln in f.read_text().splitlines()]
               for t in ("wb_mc", "wb_ppl")}
    got = _logliks(samples)
    model, tok = default_model
    q, _ = quantize(model, QuantConfig.from_name("w4a16_asym", group_size=64))
    want = _evaluate(HFLM(pretrained=q, tokenizer=tok, batch_size=2), tasks_dir)
    for task in got:
        assert got[task] == pytest.approx(want[task], rel=1e-4, abs=2e-3), task


def test_registered_and_on_the_command_line():
    from lm_eval.api.registry import get_model

    assert get_model("workbench") is WorkbenchLM
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    scripts = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, fn = scripts["workbench-lm-eval"].partition(":")
    import importlib

    assert callable(getattr(importlib.import_module(module), fn))


def test_model_args_win_over_cli_defaults():
    class Capture(WorkbenchLM):
        def __init__(self, **kw):  # records what lm-eval would pass
            self.kw = kw

    lm = Capture.create_from_arg_string("model=m,device=cpu,quant_group_size=64", {"device": "cuda:0",
                                                                                  "batch_size": 4, "x": None})
    assert lm.kw == {"model": "m", "device": "cpu", "quant_group_size": 64, "batch_size": 4}


def test_bad_engine_value():
    with pytest.raises(ValueError, match="engine"):
        WorkbenchLM(model="smollm2-135m", engine="sometimes")
