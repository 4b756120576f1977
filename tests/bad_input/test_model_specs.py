"""Model specs, dtypes and devices a user can get wrong: each gets one error of a named type whose
message says what was wrong and the fix (before: raw library errors, hub repo-id errors for plain
paths, a tokenizer hint for an empty spec, an assertion deep in torch for a missing GPU)."""

import pytest
import torch

from workbench.device import default_dtype, from_env, resolve, resolve_device, resolve_dtype
from workbench.models import InvalidModelSpecError, ModelFileError, ModelNotAvailableError, load_model
from workbench.models.errors import describe_exception
from workbench.models.load import classify_spec
from workbench.registry import UnknownNameError


def _spec(tmp_path, name):
    """Specs that need files: built in ``tmp_path`` on demand."""
    if name == "only-gguf":
        (tmp_path / "g").mkdir()
        (tmp_path / "g" / "model.Q4_0.gguf").write_bytes(b"GGUF")
        return str(tmp_path / "g")
    if name == "empty-folder":
        (tmp_path / "e").mkdir()
        return str(tmp_path / "e")
    if name in ("no-weights", "no-tokenizer"):
        (tmp_path / "m").mkdir()
        (tmp_path / "m" / "config.json").write_text('{"model_type": "llama"}')
        if name == "no-tokenizer":
            (tmp_path / "m" / "model.safetensors").write_bytes(b"")
        return str(tmp_path / "m")
    if name == "weights-file":
        (tmp_path / "w").mkdir()
        (tmp_path / "w" / "config.json").write_text("{}")
        (tmp_path / "w" / "model.safetensors").write_bytes(b"")
        return str(tmp_path / "w" / "model.safetensors")
    if name == "hf-cache-root":
        (tmp_path / "models--org--m" / "snapshots" / "abc").mkdir(parents=True)
        (tmp_path / "models--org--m" / "snapshots" / "abc" / "config.json").write_text("{}")
        return str(tmp_path / "models--org--m")
    if name == "near-path":
        (tmp_path / "checkpoint-100").mkdir()
        return str(tmp_path / "checkpont-100")
    return name


@pytest.mark.parametrize("spec,err,match", [
    ("", InvalidModelSpecError, "model spec is empty; pass a built-in name"),
    ("   ", InvalidModelSpecError, "model spec is empty"),
    (None, InvalidModelSpecError, "is of type NoneType, not a string"),
    (7, InvalidModelSpecError, "is of type int"),
    ("smolm2-135m", InvalidModelSpecError, "Did you mean 'smollm2-135m'"),
    ("smollm2", InvalidModelSpecError, "Did you mean 'smollm2-135m'"),
    ("random:qwen2-7", InvalidModelSpecError, "Did you mean 'random:qwen2-7b'"),
    ("random:", InvalidModelSpecError, r"choose one of \['random:llama3-8b'"),
    ("/nonexistent/model", ModelFileError, r"model path '/nonexistent/model' .* does not exist"),
    ("./checkpoints/run1", ModelFileError, "does not exist"),
    ("~/no-such-model-here", ModelFileError, "does not exist"),
    ("missing.gguf", ModelFileError, r"'missing\.gguf' .* does not exist"),
    ("near-path", ModelFileError, r"Did you mean '.*checkpoint-100'"),
    ("only-gguf", ModelFileError, r"no config\.json .* GGUF file\(s\) \['model\.Q4_0\.gguf'\].*load_model\("),
    ("empty-folder", ModelFileError, "not an HF model folder .*it is empty"),
    ("hf-cache-root", ModelFileError, r"model folders inside: pass one of \[.*snapshots/abc"),
    ("no-weights", ModelFileError, r"config\.json but no weights"),
    ("no-tokenizer", ModelFileError, r"no tokenizer files.*tokenizer="),
    ("weights-file", ModelFileError, r"is a file but not a \.gguf model file; pass its folder"),
    ("not a model!", InvalidModelSpecError, "not a local path and not an HF hub id"),
    ("org/not-cached-model", ModelNotAvailableError,
     r"HF_HUB_OFFLINE is set and 'org/not-cached-model' is not in the local HF cache.*Fix:"),
])
def test_bad_specs(tmp_path, spec, err, match):
    with pytest.raises(err, match=match):
        load_model(_spec(tmp_path, spec), device="cpu")


@pytest.mark.parametrize("spec,kind", [("random:QWEN2-7B", "random"), ("SmolLM2-135M", "builtin"),
                                       ("Qwen/Qwen2.5-0.5B-Instruct", "hub"), ("gpt2", "hub")])
def test_good_specs_are_recognised(spec, kind):
    assert classify_spec(spec)[0] == kind


@pytest.mark.parametrize("kw,err,match", [
    ({"dtype": "fp8"}, UnknownNameError, r"dtype='fp8' is unknown; choose one of \['bf16'"),
    ({"dtype": "bfloat"}, UnknownNameError, "Did you mean 'bfloat16'"),
    ({"dtype": 16}, UnknownNameError, "dtype=16 is unknown"),
    ({"device": "gpu"}, ValueError, "pass 'cuda'"),
    ({"device": "cdua"}, UnknownNameError, "Did you mean 'cuda'"),
    ({"device": "cuda:x"}, ValueError, "not a device"),
])
def test_bad_dtype_and_device_fail_before_any_loading(kw, err, match):
    with pytest.raises(err, match=match):
        load_model("/nonexistent/but-never-reached", **kw)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_without_cuda_fails_up_front():
    # before: the model loaded (a minute here), then torch asserted "Torch not compiled with CUDA enabled"
    with pytest.raises(ValueError, match="CUDA is not available here.*pass device='auto' or 'cpu'"):
        load_model("smollm2-135m", device="cuda")


def test_device_and_dtype_defaults():
    want = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == want and resolve_device(None).type == want
    assert default_dtype("cpu") == torch.float32 and default_dtype(torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("auto", "cpu") == torch.float32 and resolve_dtype("BF16") == torch.bfloat16
    assert resolve_dtype("torch.float16") == torch.float16
    assert from_env({}) == (resolve_device("auto"), default_dtype(resolve_device("auto")))
    assert from_env({"WB_DEVICE": "cpu", "WB_DTYPE": "bfloat16"}) == (torch.device("cpu"), torch.bfloat16)
    assert resolve("cpu", None) == (torch.device("cpu"), torch.float32)
    with pytest.raises(UnknownNameError, match="Did you mean 'float16'"):
        from_env({"WB_DEVICE": "cpu", "WB_DTYPE": "flaot16"})


def test_error_details_are_not_cut_mid_sentence():
    long = "First sentence says what failed. " + "Detail " * 300 + "end. Last sentence says the fix."
    text = describe_exception(OSError(long), limit=200)
    assert text.startswith("OSError: First sentence says what failed.") and text.endswith("[...]")
    assert "Detail Detail" not in text  # cut at the sentence end, not inside the run of details
    short = describe_exception(ValueError("A whole message. With two sentences."))
    assert short == "ValueError: A whole message. With two sentences."

