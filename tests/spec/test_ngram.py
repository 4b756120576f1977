"""The n-gram (prompt-lookup) draft: vLLM's rule on hand-worked cases, against a line-by-line port of vLLM's
KMP scan, and through the speculative loop (greedy equivalence, exact sampling, counters)."""

import numpy as np
import pytest
import torch

from workbench.spec import speculative_generate
from workbench.spec.config import SpecConfig
from workbench.spec.drafts import make_draft
from workbench.spec.generate import autoregressive_generate
from workbench.spec.ngram import NgramProposer, greedy_proposer_counts, ngram_propose, proposer_generate


@pytest.mark.parametrize("context,k,lo,hi,max_len,expected", [
    # the 3-gram [1,2,3] occurs at 0: the two tokens after it
    ([1, 2, 3, 4, 1, 2, 3], 2, 1, 3, None, [4, 1]),
    # [1,2] occurs at 0 and at 3: vLLM takes the earliest (9), not the most recent (8)
    ([1, 2, 9, 1, 2, 8, 1, 2], 2, 2, 2, None, [9, 1]),
    # longest first: the 3-gram [3,1,2] (at 4, followed by 8) beats the earlier 2-gram [1,2] (followed by 7)
    ([5, 1, 2, 7, 3, 1, 2, 8, 3, 1, 2], 3, 1, 3, None, [8, 3, 1]),
    # fewer than k tokens follow the match: the proposal stops at the end of the sequence
    ([1, 2, 3, 1, 2], 4, 2, 2, None, [3, 1, 2]),
    # a match may overlap the suffix (never be it): [7,7] at 0, two tokens follow
    ([7, 7, 7, 7], 3, 2, 2, None, [7, 7]),
    # no earlier occurrence of any n-gram in [2, 3]
    ([1, 2, 3, 4], 3, 2, 3, None, []),
    # context shorter than prompt_lookup_min
    ([1, 1], 3, 3, 4, None, []),
    # max_model_len 5 leaves room for one token
    ([1, 2, 1, 2], 3, 2, 2, 5, [1]),
    # ... and none at the limit
    ([1, 2, 1, 2], 3, 2, 2, 4, []),
    # prompt_lookup_max past the context: n starts at len - 1
    ([1, 1], 2, 1, 5, None, [1]),
    # the 1-gram [4] is only the suffix itself: no match
    ([1, 2, 3, 4], 2, 1, 1, None, []),
])
def test_hand_worked_cases(context, k, lo, hi, max_len, expected):
    assert ngram_propose(context, k, lo, hi, max_len) == expected


def _vllm_kmp(origin, min_ngram, max_ngram, max_model_len, k):
    """Line-by-line port of vLLM 0.32's ``_find_longest_matched_ngram_and_propose_tokens``
    (``vllm/v1/spec_decode/ngram_proposer.py``; numba removed): the second implementation to agree with."""
    total = len(origin)
    if total < min_ngram:
        return []
    k = min(k, max_model_len - total)
    if k <= 0:
        return []
    tokens = origin[::-1]
    lps = [0] * max_ngram
    longest, position, prev, i = 0, 0, 0, 1
    while i < total:
        if tokens[prev] == tokens[i]:
            prev += 1
            if prev >= longest:
                longest, position = prev, i
            if i < max_ngram:
                lps[i] = prev
            if prev == max_ngram:
                prev = lps[max_ngram - 1]
            i += 1
        elif prev != 0:
            prev = lps[prev - 1]
        else:
            i += 1
    if longest < min_ngram:
        return []
    start = total - 1 - position + longest
    return origin[start: start + min(k, total - start)]


@pytest.mark.parametrize("vocab,lo,hi,k", [(2, 1, 3, 4), (3, 2, 4, 3), (4, 1, 1, 5), (3, 3, 5, 2), (2, 5, 5, 4)])
def test_matches_vllm_kmp_port(vocab, lo, hi, k):
    """400 random contexts of 1-40 tokens per setting (small vocabularies: many matches, many ties and
    overlaps): the readable rule equals the port of vLLM's scan everywhere."""
    rng = np.random.default_rng(vocab * 100 + lo * 10 + hi)
    for _ in range(400):
        ctx = rng.integers(0, vocab, rng.integers(1, 41)).tolist()
        max_len = int(rng.integers(len(ctx), len(ctx) + 8))
        assert ngram_propose(ctx, k, lo, hi, max_len) == _vllm_kmp(ctx, lo, hi, max_len, k), ctx


@pytest.mark.parametrize("kw,msg", [({"k": 0}, "k=0"), ({"prompt_lookup_min": 0}, "prompt_lookup_min=0"),
                                    ({"prompt_lookup_min": 3, "prompt_lookup_max": 2}, "prompt_lookup_max=2")])
def test_bad_settings_name_the_field(kw, msg):
    args = {"context": [1, 2], "k": 2, **kw}
    with pytest.raises(ValueError, match=msg):
        ngram_propose(**args)


def test_make_draft_names():
    prop, info = make_draft(torch.nn.Linear(1, 1), "ngram")
    assert (prop.prompt_lookup_min, prop.prompt_lookup_max) == (5, 5) and info["draft_kind"] == "ngram"
    prop, info = make_draft(torch.nn.Linear(1, 1), "ngram-2-4")
    assert prop.speculative_config(3) == {"method": "ngram", "num_speculative_tokens": 3,
                                          "prompt_lookup_min": 2, "prompt_lookup_max": 4}
    assert info["draft_key"] == {"draft": "ngram-2-4", "prompt_lookup_min": 2, "prompt_lookup_max": 4}
    with pytest.raises(ValueError, match="ngram-MIN-MAX"):
        make_draft(torch.nn.Linear(1, 1), "ngram-4")


def _repetitive_table(V=6, seed=0):
    """A Markov target that mostly cycles 0 -> 1 -> ... -> V-1 -> 0 (so n-grams recur) with some noise."""
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(V, V, generator=g)
    t[torch.arange(V), (torch.arange(V) + 1) % V] += 2.5
    return t


def _position_runner(toy, V=6, seed=0):
    """A Runner whose next-token logits depend on the last token and on the position mod 7 (a greedy path
    that mostly cycles but breaks the cycle now and then, so n-gram drafts are both accepted and rejected):
    conftest's ``TableRunner`` over a ``[V, 7, V]`` table."""

    class PositionRunner(toy.TableRunner):
        def extend(self, tokens):
            t = torch.as_tensor(tokens).reshape(-1)
            start = len(self.tokens)
            self.tokens += t.tolist()
            return self.table[t, (torch.arange(len(t)) + start) % 7]

    g = torch.Generator().manual_seed(seed)
    run = PositionRunner(_repetitive_table(V, seed)[:, None, :] + 1.5 * torch.randn(V, 7, V, generator=g))
    run.vocab_size = V
    return run


@pytest.mark.parametrize("k,lo,hi", [(1, 1, 1), (3, 1, 3), (4, 2, 2)])
def test_greedy_proposer_loop_equals_plain_decoding_and_replayed_counts(toy, k, lo, hi):
    """At temperature 0 the n-gram loop emits the target's greedy tokens, and its counters equal the
    token-level replay of vLLM's schedule on a continuation k tokens past the budget."""
    t_run, prop = _position_runner(toy), NgramProposer(lo, hi)
    prompt = [0, 1, 2, 3, 0, 1]
    plain = autoregressive_generate(t_run, prompt, max_new_tokens=40 + k)
    out = speculative_generate(t_run, prop, prompt, config=SpecConfig(k=k, max_new_tokens=40))
    assert out.loop == "proposer" and out.tokens == plain.tokens[:40]
    replay = greedy_proposer_counts(prompt, plain.tokens, prop, k, max_new_tokens=40)
    st = out.stats
    assert st.num_drafts > 5 and 0 < st.num_accepted_tokens < st.num_draft_tokens
    assert (st.num_drafts, st.num_draft_tokens, st.num_accepted_tokens, st.num_accepted_tokens_per_pos) == (
        replay.num_drafts, replay.num_draft_tokens, replay.num_accepted_tokens, replay.num_accepted_tokens_per_pos)


def test_replay_hand_worked():
    """prompt [1,2,3,1,2], proposer n in [2,2], k 2, output [3,1,2,9]: token 1 (3) from the prefill; step 1
    drafts after [..,2,3]: [2,3] occurs at 1 -> [1,2], both accepted, bonus 9; j = 4 = budget. One draft,
    2 tokens, 2 accepted, per position [1, 1]."""
    st = greedy_proposer_counts([1, 2, 3, 1, 2], [3, 1, 2, 9], NgramProposer(2, 2), 2)
    assert (st.num_drafts, st.num_draft_tokens, st.num_accepted_tokens, st.num_accepted_tokens_per_pos) == (
        1, 2, 2, [1, 1])
    with pytest.raises(ValueError, match="max_new_tokens \\+ k"):
        greedy_proposer_counts([1], [2, 3], NgramProposer(1, 1), 2, max_new_tokens=2)


def test_empty_proposals_are_plain_steps(toy):
    """A prompt with no repeats and a target that never repeats a 5-gram: no step carries drafts, so no
    draft is counted (vLLM counts requests with draft tokens only), and the tokens are still greedy."""
    t_run = toy.TableRunner(_repetitive_table())
    out = proposer_generate(t_run, NgramProposer(5, 5), [0, 1], SpecConfig(k=3, max_new_tokens=4))
    assert out.stats.num_drafts == 0 and len(out.tokens) == 4
    assert out.tokens == autoregressive_generate(t_run, [0, 1], max_new_tokens=4).tokens


N_TRIALS, N_TOK, V = 600, 3, 3


def _sampled_pvalue(toy, monkeypatch=None, bug=None):
    """Chi-square p of 3-token generations at T = 1 with the n-gram draft (prompt [0,1,2,0,1,2,0]: the
    drafts are mostly off the target's choice) against the Markov target's joint over 27 sequences."""
    from workbench.spec import ngram

    if bug is not None:
        monkeypatch.setattr(ngram, "one_hot_probs", bug)
    p_logits = toy.markov_tables(V, seed=5)[0]
    t_run, g = toy.TableRunner(p_logits), torch.Generator().manual_seed(0)
    prompt, idx, drafted = [0, 1, 2, 0, 1, 2, 0], [], 0
    for _ in range(N_TRIALS):
        out = proposer_generate(t_run, NgramProposer(1, 3), prompt, SpecConfig(k=2, temperature=1.0,
                                max_new_tokens=N_TOK), generator=g)
        drafted += out.stats.num_draft_tokens
        idx.append(sum(t * V ** (N_TOK - 1 - i) for i, t in enumerate(out.tokens)))
    assert drafted > N_TRIALS  # the drafts were really verified
    observed = np.bincount(idx, minlength=V ** N_TOK)
    return toy.chi2_pvalue(observed, toy.markov_joint(p_logits, N_TOK, 1.0, start=0).numpy())


def test_sampled_proposer_loop_follows_target(toy):
    """Threshold p > 0.01 (fixed seeds); the planted bug below (q(x) = 0.5 instead of 1: drafts accepted
    with min(1, 2 p(x))) fails it."""
    assert _sampled_pvalue(toy) > 0.01


def test_sampled_test_detects_wrong_draft_probability(toy, monkeypatch):
    from workbench.spec.ngram import one_hot_probs

    assert _sampled_pvalue(toy, monkeypatch, lambda t, v, d: 0.5 * one_hot_probs(t, v, d)) < 0.01


def test_run_spec_takes_the_ngram_draft(toy):
    """run_spec with an n-gram draft next to nothing else: rows with counters, the proposer loop, and NaN
    alignment (a proposer has no distribution to compare)."""
    import pandas as pd

    from workbench.spec import run_spec

    prompts = pd.DataFrame({"prompt_id": [0, 1], "category": ["a", "b"],
                            "prompt_ids": [[0, 1, 2, 3, 0, 1], [2, 3, 4, 5, 0, 1, 2]]})
    df = run_spec(_position_runner(toy), {"ngram-1-3": NgramProposer(1, 3)}, prompts, SpecConfig(k=3, max_new_tokens=24))
    assert len(df) == 2 and set(df.loop) == {"proposer"} and set(df.draft_runner) == {"proposer"}
    assert df.alpha_pred.isna().all() and (df.num_drafts > 0).all() and (df.n_new == 24).all()


def test_sweep_takes_the_ngram_draft(toy, tmp_path):
    """run_spec_sweep keys an n-gram point by its draft_key, stores it and resumes it (the second call reads
    the stored row)."""
    import pandas as pd

    from workbench.spec import run_spec_sweep

    prompts = pd.DataFrame({"prompt_id": [0], "category": ["a"], "prompt_ids": [[0, 1, 2, 3, 0, 1]]})
    drafts = {"ngram-1-3": make_draft(torch.nn.Linear(1, 1), "ngram-1-3")}
    kw = {"name": "ng", "root": tmp_path, "prompts_per_point": 1}
    df = run_spec_sweep(_position_runner(toy), drafts, prompts, [SpecConfig(k=2, max_new_tokens=12)], **kw)
    again = run_spec_sweep(_position_runner(toy), drafts, prompts, [SpecConfig(k=2, max_new_tokens=12)], **kw)
    assert len(df) == len(again) == 1 and df.num_drafts.iloc[0] == again.num_drafts.iloc[0] > 0
