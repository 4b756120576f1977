"""SpecDecodingStats counters on a hand-made sequence of steps."""

import math

import pytest

from workbench.spec.metrics import SpecDecodingStats


def _stats():
    s = SpecDecodingStats()
    s.observe(4, 4, draft_s=0.4, target_s=0.1)  # all accepted + bonus: 5 tokens
    s.observe(4, 1, draft_s=0.4, target_s=0.1)  # 1 accepted, rejected at position 2: 2 tokens
    s.observe(2, 0, draft_s=0.2, target_s=0.1)  # rejected at position 1: 1 token
    return s


def test_counters():
    s = _stats()
    assert (s.num_drafts, s.num_draft_tokens, s.num_accepted_tokens, s.num_rejections) == (3, 10, 5, 2)
    assert s.num_accepted_tokens_per_pos == [2, 1, 1, 1]
    assert s.num_drafts_per_pos == [3, 3, 2, 2]
    assert s.tau == pytest.approx(1 + 5 / 3)  # (5 + 2 + 1) / 3 tokens per step, bonus included
    assert s.tau == pytest.approx(sum(s.tokens_per_step) / 3)
    assert s.draft_acceptance_rate == pytest.approx(5 / 10)
    assert s.alpha == pytest.approx(5 / 7)  # 5 accepted out of 5 + 2 tested
    assert s.acceptance_per_pos == pytest.approx([2 / 3, 1 / 3, 1 / 3, 1 / 3])
    assert s.conditional_acceptance_per_pos == pytest.approx([2 / 3, 1 / 2, 1.0, 1.0])
    assert s.tokens_per_step_hist == {1: 1, 2: 1, 5: 1}
    assert s.summary()["draft_s"] == pytest.approx(1.0)


def test_merge_equals_observing_all():
    a, b = _stats(), _stats()
    m = a.merge(b)
    assert m.num_drafts == 6 and m.num_accepted_tokens_per_pos == [4, 2, 2, 2]
    assert m.tau == pytest.approx(a.tau) and m.alpha == pytest.approx(a.alpha)


def test_impossible_counts_raise():
    with pytest.raises(ValueError):
        SpecDecodingStats().observe(2, 3)
    with pytest.raises(ValueError):
        SpecDecodingStats().observe(0, 0)


def test_empty_is_nan():
    s = SpecDecodingStats()
    assert s.tau != s.tau and s.alpha != s.alpha


def test_conditional_acceptance_is_nan_where_nothing_was_tested():
    """Variable k: a 1-token step accepted, then a 3-token step rejected at position 0. Positions 1 and
    2 were drafted (by the second step) but never tested, so their conditional acceptance is NaN.
    (The old estimate min(reached, drafted) gave 0.0 at position 1.)"""
    s = SpecDecodingStats()
    s.observe(1, 1)
    s.observe(3, 0)
    assert s.num_tested_per_pos == [2, 0, 0]
    c = s.conditional_acceptance_per_pos
    assert c[0] == pytest.approx(0.5) and math.isnan(c[1]) and math.isnan(c[2])
    s.observe(3, 2)  # tests positions 0, 1, 2: accepted 0 and 1, rejected 2
    assert s.num_tested_per_pos == [3, 1, 1]
    assert s.conditional_acceptance_per_pos == pytest.approx([2 / 3, 1.0, 0.0])
