"""Engine (CPU path) against the Hugging Face forward: logits, slot semantics, greedy decoding."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from workbench.engine import BatchRunner, Engine, HFRunner, Runner

SMALL = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256}
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64}


def _perturbed(model, seed=0):
    """HF zero-inits biases and sets norms to 1: perturb every parameter so each term matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return model.eval()


def small_models():
    torch.manual_seed(0)
    return {
        "llama": _perturbed(LlamaForCausalLM(LlamaConfig(**SMALL))),
        "llama-gqa1-llama3rope": _perturbed(LlamaForCausalLM(LlamaConfig(
            **{**SMALL, "num_key_value_heads": 1}, rope_scaling=LLAMA3_ROPE, rope_theta=500000.0))),
        "qwen2-tied": _perturbed(Qwen2ForCausalLM(Qwen2Config(**SMALL, tie_word_embeddings=True))),
    }


MODELS = small_models()


@pytest.fixture(params=sorted(MODELS))
def small(request):
    return MODELS[request.param]


def test_protocols(small):
    e = Engine.from_hf(small, max_batch=2, max_seq=32)
    assert isinstance(e, BatchRunner)
    assert isinstance(e.runner(1), Runner)
    assert e.device.type == "cpu" and not e.use_graphs


def test_logits_equal_hf(small):
    ids = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = small(ids).logits
    e = Engine.from_hf(small, max_batch=2, max_seq=32)
    out = e.extend_batch([0, 1], ids)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)
    assert e.lengths().tolist() == [24, 24]


def test_incremental_and_ragged_equal_fresh(small):
    """Ragged extend (different lengths and n_valid per row, slots out of order) == one fresh run per row."""
    g = torch.Generator().manual_seed(2)
    seqs = [torch.randint(0, 256, (n,), generator=g) for n in (20, 13, 7)]
    with torch.no_grad():
        refs = [small(s.view(1, -1)).logits[0] for s in seqs]
    e = Engine.from_hf(small, max_batch=4, max_seq=32)
    # first chunk: ragged prefill of 5, 9, 3 tokens into slots 3, 1, 0 (right-padded)
    first = [5, 9, 3]
    slots = [3, 1, 0]
    toks = torch.zeros(3, 9, dtype=torch.int64)
    for i, (s, n) in enumerate(zip(seqs, first)):
        toks[i, :n] = s[:n]
    out = e.extend_batch(slots, toks, torch.tensor(first))
    for i, n in enumerate(first):
        torch.testing.assert_close(out[i, :n], refs[i][:n], atol=2e-5, rtol=1e-4)
    # then one token at a time, rows with nothing left get n_valid = 0
    pos = list(first)
    while any(p < len(s) for p, s in zip(pos, seqs)):
        step = torch.tensor([[int(s[p]) if p < len(s) else 0] for p, s in zip(pos, seqs)])
        nv = torch.tensor([1 if p < len(s) else 0 for p, s in zip(pos, seqs)])
        last = e.extend_batch(slots, step, nv, logits="last")
        for i in range(3):
            if nv[i]:
                torch.testing.assert_close(last[i], refs[i][pos[i]], atol=2e-5, rtol=1e-4)
                pos[i] += 1
    assert e.lengths()[slots].tolist() == [20, 13, 7]


def test_truncate_and_copy_prefix(small):
    g = torch.Generator().manual_seed(3)
    prefix = torch.randint(0, 256, (10,), generator=g)
    tails = [torch.randint(0, 256, (4,), generator=g) for _ in range(3)]
    e = Engine.from_hf(small, max_batch=4, max_seq=32)
    e.extend_batch([0], prefix.view(1, -1))
    e.copy_prefix(0, [1, 2, 3], 10)
    assert e.lengths().tolist() == [10, 10, 10, 10]
    out = e.extend_batch([1, 2, 3], torch.stack(tails))
    with torch.no_grad():
        for i, t in enumerate(tails):
            ref = small(torch.cat([prefix, t]).view(1, -1)).logits[0, 10:]
            torch.testing.assert_close(out[i], ref, atol=2e-5, rtol=1e-4)
    # truncate = KV rollback: after dropping rejected tokens, extending again equals a fresh run
    r = e.runner(2)
    r.truncate(12)
    assert r.length == 12
    new = torch.randint(0, 256, (3,), generator=g)
    got = r.extend(new)
    with torch.no_grad():
        ref = small(torch.cat([prefix, tails[1][:2], new]).view(1, -1)).logits[0, 12:]
    torch.testing.assert_close(got, ref, atol=2e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="truncate length"):
        r.truncate(40)


def test_overflow_and_bad_slots_raise(small):
    e = Engine.from_hf(small, max_batch=2, max_seq=8)
    with pytest.raises(ValueError, match="overflow"):
        e.extend_batch([0], torch.zeros(1, 9, dtype=torch.int64))
    with pytest.raises(ValueError, match="distinct"):
        e.extend_batch([1, 1], torch.zeros(2, 1, dtype=torch.int64))


def test_random_init_from_config_dict():
    cfg = dict(model_type="qwen2", **SMALL)
    e = Engine.from_config(cfg, max_batch=1, max_seq=16, device="cpu")
    out = e.runner().extend(torch.arange(5))
    assert out.shape == (5, 256) and torch.isfinite(out).all()
    assert e.weight_bytes() > 0 and e.kv_bytes_per_token() == 2 * 2 * 2 * 16 * 4


def greedy(runner, prompt, n):
    logits = runner.extend(prompt)
    out = []
    for _ in range(n):
        tok = int(logits[-1].argmax())
        out.append(tok)
        logits = runner.extend(torch.tensor([tok]))
    return out


def test_greedy_equals_hf_generate():
    m = MODELS["llama"]
    prompt = torch.randint(0, 256, (6,), generator=torch.Generator().manual_seed(4))
    ref = m.generate(prompt.view(1, -1), max_new_tokens=12, do_sample=False, pad_token_id=0)[0, 6:].tolist()
    e = Engine.from_hf(m, max_batch=1, max_seq=32)
    assert greedy(e.runner(), prompt, 12) == ref
    assert greedy(HFRunner(m), prompt, 12) == ref


def test_default_model_logits(default_model):
    model, tok = default_model
    ids = tok("The capital of France is Paris. The capital of Italy is", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        ref = model(ids).logits[0]
    e = Engine.from_hf(model, max_batch=1, max_seq=64)
    out = e.runner().extend(ids[0])
    err = (out - ref).abs().max() / ref.abs().max()
    assert err < 1e-3, float(err)
    assert torch.equal(out.argmax(-1), ref.argmax(-1))


def test_greedy_speculative_through_engine_equals_plain():
    """Leviathan et al. 2023: at temperature 0 speculative decoding emits exactly the target's greedy
    tokens, whatever the draft; here both models run on the engine (draft = another small model)."""
    gen = pytest.importorskip("workbench.spec.generate")
    target = Engine.from_hf(MODELS["llama"], max_batch=1, max_seq=64).runner()
    draft = Engine.from_hf(MODELS["llama-gqa1-llama3rope"], max_batch=2, max_seq=64).runner(1)
    prompt = torch.randint(0, 256, (5,), generator=torch.Generator().manual_seed(5))
    plain = gen.autoregressive_generate(target, prompt, max_new_tokens=20).tokens
    spec = gen.speculative_generate(target, draft, prompt, k=3, max_new_tokens=20).tokens
    assert spec == plain == greedy(HFRunner(MODELS["llama"]), prompt, 20)
