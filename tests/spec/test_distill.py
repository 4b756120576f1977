"""distill_draft on a tiny target: KL falls, predicted alpha rises, head and embeddings are shared."""

import pytest
import torch

from workbench.spec.distill import distill_draft


def test_distillation_lowers_kl(toy):
    target = toy.tiny_llama(vocab=64, seed=7, layers=4)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    text = torch.randint(0, 64, (3000,), generator=torch.Generator().manual_seed(0))
    draft, curve = distill_draft(target, text=text, steps=60, n_layers=1, seq_len=32, batch_size=8,
                                 lr=3e-3, eval_every=20, init="random")
    assert list(curve.columns[:4]) == ["step", "loss", "kl", "alpha_pred"]
    assert curve.step.tolist() == [0, 20, 40, 60]
    assert curve.kl.iloc[-1] < 0.5 * curve.kl.iloc[0]
    assert curve.alpha_pred.iloc[-1] > curve.alpha_pred.iloc[0]
    assert draft.config.num_hidden_layers == 1
    assert draft.get_input_embeddings().weight.data_ptr() == target.get_input_embeddings().weight.data_ptr()
    assert draft.get_output_embeddings().weight.data_ptr() == target.get_output_embeddings().weight.data_ptr()
    assert not any(p.requires_grad for p in draft.parameters())
    for k, v in target.state_dict().items():  # the target is untouched
        torch.testing.assert_close(v, before[k])


def test_bad_config(toy):
    target = toy.tiny_llama()
    with pytest.raises(ValueError, match="hidden_size"):
        distill_draft(target, draft_config={"hidden_size": 48}, text=torch.zeros(1000, dtype=torch.long), steps=1)
    with pytest.raises(ValueError, match="init"):
        distill_draft(target, text=torch.zeros(1000, dtype=torch.long), steps=1, init="copy")
    with pytest.raises(ValueError, match="tokens"):
        distill_draft(target, text=torch.zeros(50, dtype=torch.long), steps=1)


def test_target_generations_match_greedy_decoding(toy):
    """Batched, left-padded HF generate (the data path) against our own one-token-at-a-time greedy
    decoding (workbench.spec.generate): the same continuations, token for token."""
    from workbench.spec.distill import target_generations
    from workbench.spec.generate import autoregressive_generate

    target = toy.tiny_llama(vocab=64, seed=3, layers=2)
    prompts = [[5, 9, 2, 33], [7], [11, 12, 13, 14, 15, 16, 17]]  # ragged: left padding is exercised
    ids = target_generations(target, prompts, max_new_tokens=6, batch_size=2, pad_token_id=0)
    expect = []
    for p in prompts:
        expect += p + autoregressive_generate(target, torch.tensor(p), temperature=0.0, max_new_tokens=6).tokens
    assert ids.dtype == torch.long and ids.tolist() == expect
    with pytest.raises(ValueError, match="samples=1"):
        target_generations(target, prompts, temperature=0.0, samples=2)


def test_target_generations_stop_at_eos(toy):
    from workbench.spec.distill import target_generations

    target = toy.tiny_llama(vocab=64, seed=3, layers=2)
    free = target_generations(target, [[5, 9]], max_new_tokens=8)[2:].tolist()
    eos = free[3]  # make the 4th generated token the stop token: generation ends after it
    stopped = target_generations(target, [[5, 9]], max_new_tokens=8, eos_token_id=eos)[2:].tolist()
    assert stopped == free[: free.index(eos) + 1]


def test_eval_text_is_used_for_the_curve(toy):
    """With eval_text the curve's step-0 KL is that of eval_text's windows (a known answer computed
    here directly), and all of text trains."""
    from workbench.spec.distill import _kl_and_alpha

    target = toy.tiny_llama(vocab=64, seed=7, layers=2)
    text = torch.randint(0, 64, (400,), generator=torch.Generator().manual_seed(0))
    ev = torch.randint(0, 64, (64,), generator=torch.Generator().manual_seed(1))
    draft, curve = distill_draft(target, text=text, eval_text=ev, steps=0, n_layers=1, seq_len=16,
                                 eval_windows=4, init="random")
    with torch.no_grad():
        kl, _ = _kl_and_alpha(target(input_ids=ev.view(4, 16)).logits, draft(input_ids=ev.view(4, 16)).logits)
    assert curve.kl.iloc[0] == pytest.approx(float(kl), rel=1e-5)
    with pytest.raises(ValueError, match="eval_text"):
        distill_draft(target, text=text, eval_text=ev[:10], steps=1, seq_len=16)


def test_distill_and_generations_leave_the_global_rng_alone(toy):
    """The caller's torch RNG state is the same before and after (the old code reseeded it with
    torch.manual_seed(seed)), and the results still depend only on ``seed``."""
    from workbench.spec.distill import target_generations

    target = toy.tiny_llama(vocab=64, seed=7, layers=2)
    text = torch.randint(0, 64, (600,), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(1234)
    torch.rand(3)
    state = torch.get_rng_state()
    d1, _ = distill_draft(target, text=text, steps=2, n_layers=1, seq_len=16, init="random", seed=5)
    sampled = target_generations(target, [[5, 9]], max_new_tokens=4, temperature=1.0, samples=2, seed=5)
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(99)  # another caller state: the same draft and samples
    d2, _ = distill_draft(target, text=text, steps=2, n_layers=1, seq_len=16, init="random", seed=5)
    assert torch.equal(target_generations(target, [[5, 9]], max_new_tokens=4, temperature=1.0, samples=2,
                                          seed=5), sampled)
    for a, b in zip(d1.parameters(), d2.parameters()):
        torch.testing.assert_close(a, b)


def test_bfloat16_target_gives_a_bfloat16_draft(toy):
    """A draft shares the target's embeddings, so it is built (and trained) in the target's dtype."""
    target = toy.tiny_llama(vocab=64, seed=7, layers=2).to(torch.bfloat16)
    text = torch.randint(0, 64, (600,), generator=torch.Generator().manual_seed(0))
    draft, curve = distill_draft(target, text=text, steps=2, n_layers=1, seq_len=16, init="spread")
    assert {p.dtype for p in draft.parameters()} == {torch.bfloat16} and curve.kl.notna().all()
