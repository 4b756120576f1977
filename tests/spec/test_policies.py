"""Draft-length policies: HF's +2/-1 schedule and the confidence stop, step by step."""

import torch

from workbench.spec.config import SpecConfig
from workbench.spec.generate import speculative_generate
from workbench.spec.policies import make_policy


def test_heuristic_schedule():
    pol = make_policy(SpecConfig(k=3, policy="heuristic", k_max=6))
    seen = []
    for accepted, drafted in [(3, 3), (5, 5), (2, 6), (0, 5), (0, 4), (0, 3), (0, 2), (0, 1), (1, 1)]:
        assert pol.next_k() == drafted
        pol.update(accepted, drafted)
        seen.append(pol.next_k())
    # +2 after full acceptance (capped at k_max=6), -1 otherwise (floored at 1)
    assert seen == [5, 6, 5, 4, 3, 2, 1, 1, 3]


def test_static_and_confidence():
    assert make_policy(SpecConfig(k=4)).next_k() == 4
    pol = make_policy(SpecConfig(k=4, policy="confidence", confidence_threshold=0.4))
    q = torch.tensor([0.3, 0.7])
    assert pol.stop_drafting(q, 0) and not pol.stop_drafting(q, 1)


def test_confidence_stops_drafting_in_the_loop(toy):
    """An uncertain draft (uniform over 5 tokens, q = 0.2 < 0.4) drafts one token per step."""
    t_run = toy.TableRunner(torch.randn(5, 5))
    d_run = toy.TableRunner(torch.zeros(5, 5))
    out = speculative_generate(t_run, d_run, [0], k=4, temperature=1.0, policy="confidence", max_new_tokens=10)
    assert set(out.stats.draft_tokens_per_step) == {1}
    out = speculative_generate(t_run, d_run, [0], k=4, temperature=1.0, policy="static", max_new_tokens=10)
    assert set(out.stats.draft_tokens_per_step) == {4}
