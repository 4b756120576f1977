"""Speculative decoding against a real vLLM (CPU build, .venv-vllm): the n-gram rule equals vLLM's own function,
and at temperature 0 the per-position accepted counts equal vLLM's, prompt by prompt, wherever both engines
emitted the same tokens (n-gram and a draft model). Short runs; the long ones are
``benchmarks/vllm_agreement.py spec``. Each test starts one vLLM process (about 40 s of model load on 2 cores)."""

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from workbench.spec import SpecConfig
from workbench.spec import vllm_agreement as va
from workbench.spec.ngram import NgramProposer, ngram_propose


def _python():
    try:
        return va.vllm_python()
    except FileNotFoundError as e:
        return pytest.skip(f"vLLM tests need .venv-vllm: {e}", allow_module_level=True)


PY = _python()
MODEL = Path.home() / ".cache" / "workbench" / "models" / "smollm2-135m"
pytestmark = [pytest.mark.vllm, pytest.mark.skipif(not MODEL.exists(), reason=f"built-in model folder {MODEL} "
                                                   "missing: load_model('smollm2-135m') once to cache it")]

_VLLM_NGRAM = """
import json, sys
import numpy as np
from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens as f
cases = json.load(open(sys.argv[1]))
print(json.dumps([f(np.array(c, dtype=np.int32), lo, hi, ml, k).tolist() for c, lo, hi, ml, k in cases]))
"""


def test_ngram_rule_equals_vllm_function(tmp_path):
    """600 random contexts (vocabularies of 2-4 tokens, 1-40 long, bounds and k varied): ngram_propose returns
    what vLLM 0.32's numba function returns."""
    rng = np.random.default_rng(0)
    cases = []
    for _ in range(600):
        lo = int(rng.integers(1, 4))
        ctx = rng.integers(0, int(rng.integers(2, 5)), int(rng.integers(1, 41))).tolist()
        cases.append([ctx, lo, lo + int(rng.integers(0, 3)), len(ctx) + int(rng.integers(0, 8)), int(rng.integers(1, 6))])
    (tmp_path / "c.json").write_text(json.dumps(cases))
    (tmp_path / "s.py").write_text(_VLLM_NGRAM)
    out = subprocess.run([str(PY), str(tmp_path / "s.py"), str(tmp_path / "c.json")], capture_output=True, text=True, check=False,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    theirs = json.loads(out.stdout.strip().splitlines()[-1])
    ours = [ngram_propose(c, k, lo, hi, ml) for c, lo, hi, ml, k in cases]
    assert sum(bool(x) for x in theirs) > 200  # most cases propose something
    assert ours == theirs


@pytest.fixture(scope="module")
def setup():
    from workbench.data import load_prompts
    from workbench.models import load_model
    from workbench.spec import encode_prompts

    target, tok = load_model(str(MODEL), dtype="bfloat16", device="cpu")
    prompts = encode_prompts(tok, load_prompts("spec-bench", n=4, seed=0), max_prompt_tokens=96)
    return target, prompts.assign(prompt_id=prompts.prompt_id.astype(str))


def _greedy(setup, draft, spec_config, k):
    target, prompts = setup
    cfg = SpecConfig(k=k, max_new_tokens=24)
    vl = va.vllm_frame(va.run_vllm(va.vllm_request(str(MODEL), prompts, cfg, spec_config)), prompts.prompt_id, k)
    ag = va.greedy_agreement(va.workbench_frame(target, draft, prompts, cfg), vl)
    same = ag[ag.same_tokens]
    assert len(same) >= 1, f"no prompt with the same greedy tokens on both engines: {ag.first_diff.tolist()}"
    assert same.counts_equal.all(), same.to_dict("records")
    return ag


def test_greedy_ngram_counts_equal_vllm(setup):
    """n-gram (2..4, k 3), 4 prompts x 24 tokens: every prompt with the same tokens has the same counters."""
    prop = NgramProposer(2, 4)
    _greedy(setup, prop, prop.speculative_config(3), 3)


def test_greedy_draft_model_counts_equal_vllm(setup):
    """The 16-layer draft (k 3), 4 prompts x 24 tokens: the same, with a model draft (vLLM method draft_model).
    The draft folder is built from the cached built-in model when missing (it skipped in CI until 2026-12-07)."""
    from workbench.models import load_model

    folder = va.layer_draft_folder(MODEL, 16)
    draft = load_model(str(folder), dtype="bfloat16", device="cpu")[0]
    assert draft.config.num_hidden_layers == 16
    _greedy(setup, draft, va.draft_speculative_config(str(folder), 3, 0.0), 3)
