"""speculative_generate: greedy equivalence, exact sampling through the real loop, KV rollback."""

import numpy as np
import pytest
import torch

from workbench.engine import Engine, HFRunner
from workbench.spec import generate
from workbench.spec.config import SpecConfig
from workbench.spec.drafts import truncated_draft
from workbench.spec.generate import autoregressive_generate, speculative_generate
from workbench.spec.rejection import rejection_sample


@pytest.mark.slow
def test_greedy_matches_target_only_on_default_model(default_model):
    """64 greedy tokens from SmolLM2-135M with a 26-of-30-layer draft equal plain greedy decoding,
    and the draft really was rejected along the way; the device loop on the engine too."""
    model, tok = default_model
    ids = tok.apply_chat_template([{"role": "user", "content": "Tell me about the history of Rome."}],
                                  add_generation_prompt=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    plain = autoregressive_generate(model, ids, max_new_tokens=64)
    draft = truncated_draft(model, 26)
    spec = speculative_generate(model, draft, ids, k=3, max_new_tokens=64)
    assert len(plain.tokens) == 64 and spec.loop == "reference"
    assert spec.tokens == plain.tokens
    assert spec.stats.num_rejections > 0 and spec.stats.num_accepted_tokens > 0
    # the device loop on the engine (float32, CPU), with a cheaper 8-layer draft: the same tokens
    et = Engine.from_hf(model, max_seq=len(ids) + 80).runner(0)
    ed = Engine.from_hf(truncated_draft(model, 8), max_seq=len(ids) + 80).runner(0)
    fast = speculative_generate(et, ed, ids, k=3, max_new_tokens=40)
    assert fast.loop == "device" and fast.tokens == plain.tokens[:40] and fast.stats.num_rejections > 0


LOOP_V, LOOP_K, LOOP_N, LOOP_TRIALS = 3, 2, 3, 600


def _loop_pvalue(toy, loop, temperature=1.0, top_p=1.0):
    """Chi-square p of LOOP_N-token generations through the full loop (caches, policy, truncation) with
    Markov-table runners, against the target's joint (27 cells, expected counts < 5 pooled)."""
    p_logits, q_logits = toy.markov_tables(LOOP_V, seed=3)
    t_run, d_run = toy.TableRunner(p_logits), toy.TableRunner(q_logits)
    g = torch.Generator().manual_seed(0)
    idx = []
    for _ in range(LOOP_TRIALS):
        out = speculative_generate(t_run, d_run, [0], k=LOOP_K, temperature=temperature, top_p=top_p,
                                   max_new_tokens=LOOP_N, generator=g, loop=loop)
        assert out.loop == loop
        idx.append(sum(t * LOOP_V ** (LOOP_N - 1 - i) for i, t in enumerate(out.tokens)))
    observed = np.bincount(idx, minlength=LOOP_V ** LOOP_N)
    return toy.chi2_pvalue(observed, toy.markov_joint(p_logits, LOOP_N, temperature, top_p).numpy())


@pytest.mark.parametrize("loop", ["reference", "device"])
@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_sampling_through_the_loop_matches_target(toy, loop, temperature, top_p):
    """3 tokens with k = 2: the first step's bonus token (position 3) is inside the window.
    Threshold p > 0.01 (fixed seeds; measured 0.23 and 0.82); the planted bugs below fail it."""
    assert _loop_pvalue(toy, loop, temperature, top_p) > 0.01


def _bonus_uniform(x, q, p, g):
    """Planted bug: after k acceptances the bonus is uniform over the vocabulary."""
    out, n = rejection_sample(x, q, p, g)
    if int(n[0]) == x.shape[1]:
        out[0, -1] = torch.randint(0, p.shape[-1], (1,), generator=g)[0]
    return out, n


def _bonus_wrong_position(x, q, p, g):
    """Planted bug: after k acceptances the bonus is drawn from p_k instead of p_{k+1}."""
    out, n = rejection_sample(x, q, p, g)
    if int(n[0]) == x.shape[1]:
        out[0, -1] = torch.multinomial(p[0, -2], 1, generator=g)[0]
    return out, n


@pytest.mark.parametrize("mutant", [_bonus_uniform, _bonus_wrong_position], ids=lambda f: f.__name__)
def test_loop_test_detects_bonus_bugs(toy, monkeypatch, mutant):
    """Power check of the loop test: a bonus drawn uniformly or from the wrong position now fails it
    (measured p = 2e-25 and 1e-11; with 2 new tokens and k = 2 the bonus was never in the window)."""
    monkeypatch.setattr(generate, "rejection_sample", mutant)
    assert _loop_pvalue(toy, "reference") < 1e-6


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_device_loop_draws_what_the_reference_loop_draws(toy, temperature, top_p):
    """From one seed the device loop emits the reference loop's tokens, step counts included: the same
    uniforms, the same acceptance test, and torch.multinomial's one-sample path is the exponential race
    of ``sample_race`` (engine runners, CPU, float32)."""
    model, draft = toy.tiny_llama(seed=1), toy.tiny_llama(seed=2)
    et, ed = Engine.from_hf(model, max_seq=96), Engine.from_hf(draft, max_seq=96)
    rejections = 0
    for seed in range(3):
        kw = {"k": 3, "temperature": temperature, "top_p": top_p, "max_new_tokens": 24, "seed": seed}
        ref = speculative_generate(et.runner(0), ed.runner(0), [3, 4, 5], loop="reference", **kw)
        dev = speculative_generate(et.runner(0), ed.runner(0), [3, 4, 5], loop="device", **kw)
        assert (ref.loop, dev.loop) == ("reference", "device")
        assert dev.tokens == ref.tokens and dev.stats.tokens_per_step == ref.stats.tokens_per_step
        rejections += ref.stats.num_rejections
    assert rejections > 0


@pytest.mark.parametrize("loop", ["reference", "device"])
@pytest.mark.parametrize("policy", ["static", "heuristic", "confidence"])
def test_greedy_matches_for_every_policy(toy, policy, loop):
    """Greedy speculative decoding emits plain greedy decoding's tokens, HF runners for the reference
    loop, engine runners (float32, CPU) for the device loop."""
    model = toy.tiny_llama(seed=1)
    draft = toy.tiny_llama(seed=2)  # unrelated weights: frequent rejections
    prompt = [3, 14, 15, 9, 2]
    plain = autoregressive_generate(model, prompt, max_new_tokens=20)
    if loop == "device":
        model, draft = Engine.from_hf(model, max_seq=64).runner(0), Engine.from_hf(draft, max_seq=64).runner(0)
    spec = speculative_generate(model, draft, prompt, k=3, policy=policy, max_new_tokens=20, loop=loop)
    assert spec.tokens == plain.tokens and spec.loop == loop
    assert spec.stats.num_rejections > 0


@pytest.mark.parametrize("loop", ["reference", "device"])
@pytest.mark.parametrize("offset,expected_first_accepted", [(0, 0), (3, 3)])
def test_kv_rollback_leaves_no_stale_entries(toy, offset, expected_first_accepted, loop):
    """The draft is the target itself except one forced-wrong proposal at draft position 1 (offset 0)
    or k = 4 (offset 3) of the first step; the continuation must equal a fresh greedy run, and both
    caches must afterwards give the logits of a fresh forward over the committed sequence."""
    model = toy.tiny_llama(seed=4)
    prompt = [5, 7, 11, 13, 17]
    k = 4
    t_run = HFRunner(model)
    d_run = toy.ForcedDraftRunner(HFRunner(model), positions=[len(prompt) + offset])
    spec = speculative_generate(t_run, d_run, prompt, k=k, max_new_tokens=24, loop=loop)
    fresh = autoregressive_generate(HFRunner(model), prompt, max_new_tokens=24)
    assert spec.tokens == fresh.tokens
    assert spec.stats.tokens_per_step[0] == expected_first_accepted + 1
    assert spec.stats.num_rejections == 1  # only the forced one; every other draft matched
    seq = prompt + spec.tokens
    ref = HFRunner(model).extend(torch.tensor(seq))  # [T, V] fresh forward
    for runner in (t_run, d_run.inner):
        assert runner.length <= len(seq) - 1
        tail = runner.extend(torch.tensor(seq[runner.length:]))
        torch.testing.assert_close(tail[-1], ref[-1], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("loop", ["reference", "device"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_caches_consistent_after_sampled_rejections(toy, temperature, loop):
    model, draft = toy.tiny_llama(seed=5), toy.tiny_llama(seed=6)
    t_run, d_run = HFRunner(model), HFRunner(draft)
    prompt = [1, 2, 3]
    out = speculative_generate(t_run, d_run, prompt, k=4, temperature=temperature, max_new_tokens=30, seed=1,
                               loop=loop)
    assert out.stats.num_rejections > 0 and len(out.tokens) == 30
    seq = prompt + out.tokens
    for runner, m in ((t_run, model), (d_run, draft)):
        ref = HFRunner(m).extend(torch.tensor(seq))
        tail = runner.extend(torch.tensor(seq[runner.length:]))
        torch.testing.assert_close(tail, ref[len(seq) - len(tail):], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("loop", ["reference", "device"])
def test_stop_token_and_max_new_tokens(toy, loop):
    model = toy.tiny_llama(seed=1)
    plain = autoregressive_generate(model, [3, 4], max_new_tokens=12)
    stop = plain.tokens[5]
    first = plain.tokens.index(stop)
    spec = speculative_generate(model, model, [3, 4], k=4, max_new_tokens=12, stop_token_ids=[stop], loop=loop)
    assert spec.tokens == plain.tokens[: first + 1]
    spec = speculative_generate(model, model, [3, 4], k=4, max_new_tokens=7, loop=loop)
    assert spec.tokens == plain.tokens[:7]


def test_fast_engine_runner_plugs_in(toy):
    """The reference loop over ``Engine`` slot runners gives the HFRunner's tokens (greedy and sampled
    with one seed); ``loop="auto"`` takes the device loop for engine runners, the reference for others."""
    model, draft = toy.tiny_llama(seed=1), toy.tiny_llama(seed=2)
    et, ed = Engine.from_hf(model, max_seq=128), Engine.from_hf(draft, max_seq=128)
    for temperature in (0.0, 1.0):
        fast = speculative_generate(et.runner(0), ed.runner(0), [3, 4, 5], k=3, temperature=temperature,
                                    max_new_tokens=20, seed=3, loop="reference")
        ref = speculative_generate(HFRunner(model), HFRunner(draft), [3, 4, 5], k=3, temperature=temperature,
                                   max_new_tokens=20, seed=3)
        assert fast.tokens == ref.tokens and fast.stats.num_rejections > 0 and ref.loop == "reference"
    assert speculative_generate(et.runner(0), ed.runner(0), [3, 4], max_new_tokens=4).loop == "device"
    assert speculative_generate(et.runner(0), HFRunner(draft), [3, 4], max_new_tokens=4).loop == "reference"


def test_loop_names_and_synthetic_acceptance(toy):
    """Unknown loop names are refused with "did you mean"; acceptance="synthetic" runs in the device
    loop only (auto picks it), and its tau follows the i.i.d. model at alpha (a timing what-if)."""
    model = toy.tiny_llama(seed=1)
    with pytest.raises(ValueError, match="Did you mean 'device'"):
        speculative_generate(model, model, [3, 4], loop="devic")
    cfg = SpecConfig(k=3, acceptance="synthetic", synthetic_alpha=0.6, max_new_tokens=200)
    with pytest.raises(ValueError, match="loop='device'"):
        speculative_generate(model, model, [3, 4], config=cfg, loop="reference")
    t_run = toy.TableRunner(torch.randn(8, 8, generator=torch.Generator().manual_seed(0)))
    out = speculative_generate(t_run, toy.TableRunner(torch.zeros(8, 8)), [0], config=cfg)
    assert out.loop == "device" and len(out.tokens) == 200
    # E[tau] = (1 - a^4) / (1 - a) = 2.176 at a = 0.6; over ~90 steps the standard error is ~0.1
    assert abs(out.stats.tau - (1 - 0.6 ** 4) / 0.4) < 0.4
    assert abs(out.stats.alpha - 0.6) < 0.15
