"""The split-KV decode-attention kernel (:mod:`workbench.kernels.attention`) against a plain-torch
softmax reference, and the engine with the kernel against the engine with SDPA, through Triton's CPU
interpreter (``tests/conftest.py`` sets ``TRITON_INTERPRET=1`` before triton is imported)."""

import pytest
import torch

pytest.importorskip("triton")

from transformers import LlamaConfig, LlamaForCausalLM

from workbench.engine import Engine
from workbench.kernels import common
from workbench.kernels.attention import decode_attention, decode_attention_ref

DEV = "cpu" if common.interpret() else "cuda"  # the compiled kernel on a GPU machine
if DEV == "cuda" and not torch.cuda.is_available():
    pytest.skip("no GPU and TRITON_INTERPRET is not set", allow_module_level=True)

KV, D, MAX_BATCH, S_CACHE = 2, 64, 3, 80


def _case(g, t, seed=0):
    """Two rows in slots [2, 0]: row 0 an empty slot getting one valid token (length 1 after the
    step), row 1 with 57 cached tokens; with t = 5 row 1 has n_valid = 3 (two padded queries, which
    the engine points at the last valid position). Columns no query may see hold NaN."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(2, KV, g * t, D, generator=gen)
    k = torch.randn(MAX_BATCH, KV, S_CACHE, D, generator=gen)
    v = torch.randn(MAX_BATCH, KV, S_CACHE, D, generator=gen)
    slots = torch.tensor([2, 0])
    lens, n_valid = torch.tensor([0, 57]), torch.tensor([1, min(t, 3)])
    pos = lens[:, None] + torch.arange(t)
    qpos = torch.minimum(pos, (lens + n_valid - 1)[:, None])
    for i, s in enumerate(slots.tolist()):
        k[s, :, int(qpos[i].max()) + 1:] = float("nan")
        v[s, :, int(qpos[i].max()) + 1:] = float("nan")
    k[1], v[1] = float("nan"), float("nan")  # slot not in the batch
    return q, k, v, slots, qpos


@pytest.mark.parametrize("splits", [1, 4])
@pytest.mark.parametrize("t", [1, 5])
@pytest.mark.parametrize("g", [1, 3])
def test_kernel_matches_reference(g, t, splits):
    q, k, v, slots, qpos = _case(g, t)
    ref = decode_attention_ref(q, k, v, slots, qpos)
    out = decode_attention(*(a.to(DEV) for a in (q, k, v, slots, qpos)), num_splits=splits).cpu()
    assert torch.isfinite(out).all()  # no NaN column was read
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)  # fp32: measured max error ~5e-7
    # the length-1 row attends to its single key: the output is that key's value
    torch.testing.assert_close(out[0], v[2, :, :1].expand(KV, g * t, D), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("splits", [1, 4])
@pytest.mark.parametrize("g,t", [(3, 5), (2, 1)])
def test_token_layout_is_the_o_projection_input(g, t, splits):
    # layout="tokens" writes row b*T + t, columns of head kv*G + g: the reference permuted as forward._attend did
    q, k, v, slots, qpos = _case(g, t)
    ref = decode_attention_ref(q, k, v, slots, qpos)  # [B, KV, G*T, D]
    want = ref.view(2, KV, g, t, D).permute(0, 3, 1, 2, 4).reshape(2 * t, KV * g * D)
    out = decode_attention(*(a.to(DEV) for a in (q, k, v, slots, qpos)), num_splits=splits, layout="tokens").cpu()
    assert out.shape == (2 * t, KV * g * D) and out.is_contiguous()
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="layout"):
        decode_attention(*(a.to(DEV) for a in (q, k, v, slots, qpos)), layout="bhsd")


def test_kernel_half_precision_close_to_fp32_reference():
    """float16, not bfloat16: Triton 3.6's interpreter multiplies bf16 dot operands as raw bits (the
    bf16 path is checked on the GPU by this file's CUDA tests)."""
    q, k, v, slots, qpos = _case(3, 5, seed=1)
    ref = decode_attention_ref(q, k, v, slots, qpos)
    out = decode_attention(*(a.to(DEV) for a in (q.half(), k.half(), v.half(), slots, qpos)), num_splits=3).cpu()
    assert out.dtype == torch.float16
    # inputs rounded to fp16 (rel. 2^-11), P rounded to fp16 before P @ V, fp32 accumulation
    torch.testing.assert_close(out.float(), ref, atol=5e-3, rtol=5e-3)


def test_engine_with_kernel_equals_engine_with_sdpa():
    """Ragged prefill (T = 9 <= graph_max_t, so the kernel runs), decode with an idle row
    (n_valid = 0), and a padded verify step (T = 5): logits at valid positions agree."""
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(cfg).eval().to(DEV)
    plain = Engine.from_hf(model, max_batch=3, max_seq=40, use_graphs=False)
    fast = Engine.from_hf(model, max_batch=3, max_seq=40, use_graphs=False)
    for e in (plain, fast):
        e.set_fused_gemv(False)  # the same matmuls in both: only attention differs
    plain.decode_attention = None  # SDPA with a mask
    fast.decode_attention = decode_attention
    gen = torch.Generator().manual_seed(1)
    slots = [2, 0]
    steps = [(torch.randint(0, 128, (2, 9), generator=gen), torch.tensor([9, 4])),
             (torch.randint(0, 128, (2, 1), generator=gen), torch.tensor([1, 0])),
             (torch.randint(0, 128, (2, 1), generator=gen), torch.tensor([1, 1])),
             (torch.randint(0, 128, (2, 5), generator=gen), torch.tensor([5, 2]))]
    for toks, nv in steps:
        a = plain.extend_batch(slots, toks, nv).cpu()
        b = fast.extend_batch(slots, toks, nv).cpu()
        for i in range(2):
            n = int(nv[i])
            torch.testing.assert_close(b[i, :n], a[i, :n], atol=1e-5, rtol=1e-5)
        assert torch.isfinite(b).all()
    assert fast.lengths().tolist() == plain.lengths().tolist() == [7, 0, 16]
