"""Test settings: offline hub, one torch thread, the shared evaluation data, the default model once.

Markers set here, so no test file has to remember them:

* every test that uses the ``default_model`` fixture (it loads the built-in model, seconds) is
  ``slow``, so ``make test-fast`` (``-m "not slow and not reference"``) never loads it;
* every notebook item (``--nbmake``) is retried twice on failure (pytest-rerunfailures' ``flaky``
  marker): a headless kernel may stall now and then; a unit test that fails once has failed.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
import torch

# Without a GPU, Triton kernels run in its CPU interpreter. The variable must be set before any module
# decorates a kernel (``triton.jit`` reads it then), so here, before any test folder imports the package:
# set in one folder's conftest, kernels imported earlier by another folder stay compiled-mode and fail with
# "Cannot call @triton.jit'd outside of the scope of a kernel". CPU engines use Triton only when asked
# (``Engine.set_fused_gemv(True)``), so the other tests are unaffected.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

torch.set_num_threads(1)

MODEL_FIXTURES = {"default_model"}  # fixtures that load the built-in model
NOTEBOOK_RERUNS = 2


def _is_notebook(item) -> bool:
    return str(getattr(item, "path", "")).endswith(".ipynb")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        if _is_notebook(item) and item.get_closest_marker("flaky") is None:
            item.add_marker(pytest.mark.flaky(reruns=NOTEBOOK_RERUNS))


@pytest.fixture(scope="session")
def shared_data():
    """``../shared/data`` (MMLU, WikiText-2, Spec-Bench); tests needing it skip when it is absent."""
    from workbench.data import shared_data_dir

    d = shared_data_dir()
    if d is None:
        pytest.skip("../shared/data is not present")
    return d


@pytest.fixture(scope="session")
def default_model():
    """The built-in SmolLM2-135M-Instruct (float32, CPU), loaded once per session: ``(model, tokenizer)``."""
    from workbench.models import load_model

    return load_model("smollm2-135m")


@pytest.fixture(scope="session")
def mmlu_test(shared_data):
    from workbench.data import load_mmlu

    return load_mmlu(shared_data / "mmlu", split="test")


@pytest.fixture(scope="session")
def mmlu_dev(shared_data):
    from workbench.data import load_mmlu

    return load_mmlu(shared_data / "mmlu", split="dev")


# ---- a tiny random Llama and calibration ids (seeded), for the quantization and study tests -----------------
def tiny_llama(seed: int = 0, hidden: int = 128, inter: int = 256, layers: int = 2):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=256, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture
def tiny():
    return tiny_llama()


@pytest.fixture
def calib_ids():
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 256, (8, 64), generator=g)


@pytest.fixture
def make_tiny():
    """``tiny_llama`` itself, for tests that need other widths (e.g. the built-in model's 576)."""
    return tiny_llama
