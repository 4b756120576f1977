"""speculative_generate: greedy equivalence, exact sampling through the real loop, KV rollback."""

import numpy as np
import pytest
import torch
from scipy import stats

from workbench.engine import HFRunner
from workbench.spec.drafts import truncated_draft
from workbench.spec.generate import autoregressive_generate, speculative_generate


@pytest.mark.slow
def test_greedy_matches_target_only_on_default_model(default_model):
    """64 greedy tokens from SmolLM2-135M with a 26-of-30-layer draft equal plain greedy decoding,
    and the draft really was rejected along the way."""
    model, tok = default_model
    ids = tok.apply_chat_template([{"role": "user", "content": "Tell me about the history of Rome."}],
                                  add_generation_prompt=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    plain = autoregressive_generate(model, ids, max_new_tokens=64)
    spec = speculative_generate(model, truncated_draft(model, 26), ids, k=3, max_new_tokens=64)
    assert len(plain.tokens) == 64
    assert spec.tokens == plain.tokens
    assert spec.stats.num_rejections > 0 and spec.stats.num_accepted_tokens > 0


def test_sampling_through_the_loop_matches_target(toy):
    """The full loop (caches, policy, truncation) with Markov-table runners: the first two emitted
    tokens follow the target's joint (chi-square p > 0.01 over 4,000 generations, 25 cells)."""
    p_logits, q_logits = toy.markov_tables(5, seed=3)
    t_run, d_run = toy.TableRunner(p_logits), toy.TableRunner(q_logits)
    g = torch.Generator().manual_seed(0)
    pairs = []
    for _ in range(4000):
        out = speculative_generate(t_run, d_run, [0], k=2, temperature=1.0, max_new_tokens=2, generator=g)
        pairs.append(out.tokens[0] * 5 + out.tokens[1])
    observed = np.bincount(pairs, minlength=25)
    expected = toy.markov_joint(p_logits, 2, 1.0).numpy() * len(pairs)
    assert stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue > 0.01


@pytest.mark.parametrize("policy", ["static", "heuristic", "confidence"])
def test_greedy_matches_for_every_policy(toy, policy):
    model = toy.tiny_llama(seed=1)
    draft = toy.tiny_llama(seed=2)  # unrelated weights: frequent rejections
    prompt = [3, 14, 15, 9, 2]
    plain = autoregressive_generate(model, prompt, max_new_tokens=20)
    spec = speculative_generate(model, draft, prompt, k=3, policy=policy, max_new_tokens=20)
    assert spec.tokens == plain.tokens
    assert spec.stats.num_rejections > 0


@pytest.mark.parametrize("offset,expected_first_accepted", [(0, 0), (3, 3)])
def test_kv_rollback_leaves_no_stale_entries(toy, offset, expected_first_accepted):
    """The draft is the target itself except one forced-wrong proposal at draft position 1 (offset 0)
    or k = 4 (offset 3) of the first step; the continuation must equal a fresh greedy run, and both
    caches must afterwards give the logits of a fresh forward over the committed sequence."""
    model = toy.tiny_llama(seed=4)
    prompt = [5, 7, 11, 13, 17]
    k = 4
    t_run = HFRunner(model)
    d_run = toy.ForcedDraftRunner(HFRunner(model), positions=[len(prompt) + offset])
    spec = speculative_generate(t_run, d_run, prompt, k=k, max_new_tokens=24)
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


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_caches_consistent_after_sampled_rejections(toy, temperature):
    model, draft = toy.tiny_llama(seed=5), toy.tiny_llama(seed=6)
    t_run, d_run = HFRunner(model), HFRunner(draft)
    prompt = [1, 2, 3]
    out = speculative_generate(t_run, d_run, prompt, k=4, temperature=temperature, max_new_tokens=30, seed=1)
    assert out.stats.num_rejections > 0 and len(out.tokens) == 30
    seq = prompt + out.tokens
    for runner, m in ((t_run, model), (d_run, draft)):
        ref = HFRunner(m).extend(torch.tensor(seq))
        tail = runner.extend(torch.tensor(seq[runner.length:]))
        torch.testing.assert_close(tail, ref[len(seq) - len(tail):], rtol=1e-4, atol=1e-4)


def test_stop_token_and_max_new_tokens(toy):
    model = toy.tiny_llama(seed=1)
    plain = autoregressive_generate(model, [3, 4], max_new_tokens=12)
    stop = plain.tokens[5]
    first = plain.tokens.index(stop)
    spec = speculative_generate(model, model, [3, 4], k=4, max_new_tokens=12, stop_token_ids=[stop])
    assert spec.tokens == plain.tokens[: first + 1]
    spec = speculative_generate(model, model, [3, 4], k=4, max_new_tokens=7)
    assert spec.tokens == plain.tokens[:7]


def test_fast_engine_runner_plugs_in(toy):
    """The same loop over ``workbench.engine.Engine`` slot runners gives the HFRunner's tokens (greedy
    and sampled with one seed)."""
    engine_mod = pytest.importorskip("workbench.engine")
    if not hasattr(engine_mod, "Engine"):
        pytest.skip("workbench.engine.Engine is not available")
    model, draft = toy.tiny_llama(seed=1), toy.tiny_llama(seed=2)
    et, ed = engine_mod.Engine.from_hf(model, max_seq=128), engine_mod.Engine.from_hf(draft, max_seq=128)
    for temperature in (0.0, 1.0):
        fast = speculative_generate(et.runner(0), ed.runner(0), [3, 4, 5], k=3, temperature=temperature,
                                    max_new_tokens=20, seed=3)
        ref = speculative_generate(HFRunner(model), HFRunner(draft), [3, 4, 5], k=3, temperature=temperature,
                                   max_new_tokens=20, seed=3)
        assert fast.tokens == ref.tokens and fast.stats.num_rejections > 0
