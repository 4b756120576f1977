"""GPU check of the split-KV decode-attention kernel (:mod:`workbench.kernels.attention`).

1. Engine logits with the kernel vs with SDPA (same weights, CUDA graphs, bf16) and both vs HF's
   forward, on small random Qwen2 (D 128, G 4) and SmolLM2-shaped (D 64, G 3) models:
   ``||a - b|| / ||b||`` and max abs difference.
2. Per-layer attention time (CUDA-graph replay) for Qwen2-7B shapes (28 heads, 4 KV heads, D 128,
   S_cache 2064) at context 128 and 1024: cuDNN/efficient SDPA over the whole row with an additive
   mask (what graph steps did) vs the kernel, over a few launch configurations.
3. Qwen2-7B (random init) decode ms per token at batch 1, SDPA vs kernel, after a 128 / 1024 prefill.

4. (``backends``) per-layer SDPA by backend at S_cache 208 and 2064 (context 128); (``maxseq``)
   Qwen2-7B decode at max_seq 200 (the bench_decode setting) and 2048, SDPA vs kernel.

``python -m benchmarks.check_decode_attention [logits attention decode backends maxseq]`` writes
``$OUT/decode_attention.json`` (default sections: logits attention decode). Results of 2026-11-30:
``benchmarks/results/decode_attention_h200.json``.
"""

from __future__ import annotations

import gc
import math

import torch
import torch.nn.functional as F

from benchmarks.bench_decode import engine_decode_ms_per_token
from benchmarks.common import QWEN2_7B, Recorder, environment, graph_ms, hf_model
from workbench.engine import Engine
from workbench.kernels.attention import decode_attention, decode_attention_ref

SMALL_QWEN2 = {"model_type": "qwen2", "vocab_size": 32000, "hidden_size": 1024, "intermediate_size": 2816,
               "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
               "max_position_embeddings": 4096, "rope_theta": 1e6, "tie_word_embeddings": False}
SMOL_SHAPE = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 576, "intermediate_size": 1536,
              "num_hidden_layers": 4, "num_attention_heads": 9, "num_key_value_heads": 3,
              "max_position_embeddings": 4096, "rope_theta": 1e5, "tie_word_embeddings": True}


def rel(a, b) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm())


@torch.no_grad()
def check_logits(cfg: dict) -> dict:
    torch.manual_seed(0)
    m = hf_model(cfg)
    for p in m.parameters():
        p.add_(torch.randn_like(p) * 0.02)
    ids = torch.randint(0, cfg["vocab_size"], (4, 48), device="cuda")
    ref = m(ids).logits.float()
    ker = Engine.from_hf(m, max_batch=4, max_seq=600)  # S_cache 608: the SDPA path masks 600 columns
    sdp = Engine(ker.spec, ker.w, ker.config, 4, 600, ker.dtype, ker.device)
    sdp.decode_attention = None
    assert ker.decode_attention is decode_attention
    res = {}
    outs = {}
    for name, e in (("kernel", ker), ("sdpa", sdp)):
        e.extend_batch([0, 1, 2, 3], ids[:, :32])  # eager prefill (T > 16): SDPA in both
        dec = torch.cat([e.extend_batch([0, 1, 2, 3], ids[:, 32 + i: 33 + i]) for i in range(8)], 1)  # graphs
        slots, nv = [3, 1, 0, 2], torch.tensor([5, 2, 8, 1])
        ver = e.extend_batch(slots, ids[slots, 40:48], nv)  # verify T = 8, ragged, gathered slots
        ver = [ver[i, : nv[i]] for i in range(4)]
        outs[name] = (dec, ver, [ref[s, 40: 40 + int(nv[i])] for i, s in enumerate(slots)])
    (dk, vk, vref), (ds, vs, _) = outs["kernel"], outs["sdpa"]
    res["decode_kernel_vs_sdpa_rel"] = rel(dk, ds)
    res["decode_kernel_vs_sdpa_maxabs"] = float((dk - ds).abs().max())
    res["decode_kernel_vs_sdpa_max_rel_elem"] = float((dk - ds).abs().max() / ds.abs().max())
    res["decode_kernel_vs_hf_rel"] = rel(dk, ref[:, 32:40])
    res["decode_sdpa_vs_hf_rel"] = rel(ds, ref[:, 32:40])
    res["verify_kernel_vs_sdpa_rel_max"] = max(rel(a, b) for a, b in zip(vk, vs))
    res["verify_kernel_vs_hf_rel_max"] = max(rel(a, b) for a, b in zip(vk, vref))
    res["verify_sdpa_vs_hf_rel_max"] = max(rel(a, b) for a, b in zip(vs, vref))
    res["finite"] = bool(torch.isfinite(dk).all() and all(torch.isfinite(v).all() for v in vk))
    # the kernel alone in bf16 vs the fp32 reference, on the engine's layout
    q = torch.randn(2, 4, 7 * 3, 128, device="cuda", dtype=torch.bfloat16)
    kc = torch.randn(3, 4, 2064, 128, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    slots_t = torch.tensor([2, 0], device="cuda")
    qpos = torch.tensor([[0, 0, 0], [1500, 1501, 1502]], device="cuda", dtype=torch.int32)
    r = decode_attention_ref(q.float(), kc.float(), vc.float(), slots_t, qpos)
    res["unit_bf16_vs_fp32_ref_maxabs"] = float((decode_attention(q, kc, vc, slots_t, qpos).float() - r).abs().max())
    del m, ker, sdp
    return res


def time_attention(batch: int, t: int, ctx: int, s_cache: int = 2064, heads: int = 28, kvh: int = 4, d: int = 128):
    g = heads // kvh
    dt = torch.bfloat16
    q = torch.randn(batch, kvh, g * t, d, device="cuda", dtype=dt)
    kc = torch.randn(batch, kvh, s_cache, d, device="cuda", dtype=dt)
    vc = torch.randn_like(kc)
    slots = torch.arange(batch, device="cuda")
    pos = ctx - t + torch.arange(t, device="cuda")  # last query at position ctx - 1
    qpos = pos.view(1, t).expand(batch, t).contiguous().to(torch.int32)
    key = torch.arange(s_cache, device="cuda")
    mask = (key.view(1, 1, -1) <= pos.view(1, t, 1)).unsqueeze(1).repeat(batch, 1, g, 1)
    mask = torch.zeros(mask.shape, dtype=dt, device="cuda").masked_fill_(~mask, float("-inf"))
    scale = 1 / math.sqrt(d)
    row = {"batch": batch, "t": t, "ctx": ctx, "s_cache": s_cache}
    row["sdpa_full_row_us"] = 1e3 * graph_ms(lambda: F.scaled_dot_product_attention(q, kc, vc, attn_mask=mask, scale=scale))
    ref = F.scaled_dot_product_attention(q, kc, vc, attn_mask=mask, scale=scale).float()
    best = None
    for block_s in (32, 64):
        for splits in (None, 8, 16, 32):
            for warps in (4,):
                def fn(splits=splits, block_s=block_s, warps=warps):
                    return decode_attention(q, kc, vc, slots, qpos, scale, splits, block_s, warps)

                err = float((fn().float() - ref).abs().max())
                us = 1e3 * graph_ms(fn)
                row[f"kernel_bs{block_s}_sp{splits or 'auto'}_w{warps}_us"] = us
                if err > 2e-2:
                    row[f"kernel_bs{block_s}_sp{splits or 'auto'}_w{warps}_ERR"] = err
                if best is None or us < best[0]:
                    best = (us, f"bs{block_s}_sp{splits or 'auto'}_w{warps}")
    row["kernel_default_us"] = row["kernel_bs32_spauto_w4_us"]
    row["kernel_best"] = best
    return row


def sdpa_backends(s_cache: int, ctx: int = 128) -> dict:
    """Per-layer SDPA time (Qwen2-7B shapes, batch 1, T 1) by backend, masked to ``ctx`` of
    ``s_cache`` columns; the kernel for comparison."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(1, 4, 7, 128, device="cuda", dtype=torch.bfloat16)
    kc = torch.randn(1, 4, s_cache, 128, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    key = torch.arange(s_cache, device="cuda")
    mask = torch.zeros(1, 1, 7, s_cache, device="cuda", dtype=torch.bfloat16).masked_fill_(key >= ctx, float("-inf"))
    row = {"s_cache": s_cache, "ctx": ctx}
    for name, be in (("default", None), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                     ("efficient", SDPBackend.EFFICIENT_ATTENTION), ("math", SDPBackend.MATH)):
        def fn(be=be):
            return F.scaled_dot_product_attention(q, kc, vc, attn_mask=mask, scale=128 ** -0.5)
        try:
            if be is None:
                row[f"sdpa_{name}_us"] = 1e3 * graph_ms(fn)
            else:
                with sdpa_kernel([be]):
                    row[f"sdpa_{name}_us"] = 1e3 * graph_ms(fn)
        except RuntimeError as e:
            row[f"sdpa_{name}_us"] = f"unavailable: {str(e)[:80]}"
    qpos = torch.full((1, 1), ctx - 1, device="cuda", dtype=torch.int32)
    slots = torch.zeros(1, dtype=torch.int64, device="cuda")
    row["kernel_us"] = 1e3 * graph_ms(lambda: decode_attention(q, kc, vc, slots, qpos))
    return row


def decode_vs_max_seq(ctx: int = 128) -> dict:
    """Qwen2-7B decode ms/token at batch 1 after a ``ctx`` prefill, SDPA vs kernel, for the
    benchmark's max_seq (prompt + 72 = 200, S_cache 208) and the engine default 2048 (S_cache 2064)."""
    big = Engine.from_config(QWEN2_7B, max_batch=1, max_seq=2048)
    res = {}
    for max_seq in (200, 2048):
        eng = big if max_seq == 2048 else Engine(big.spec, big.w, big.config, 1, max_seq, big.dtype, big.device)
        for name, fn in (("sdpa", None), ("kernel", decode_attention)):
            eng.decode_attention = fn
            eng._graphs.clear()
            res[f"maxseq{max_seq}_ctx{ctx}_{name}_ms"] = engine_decode_ms_per_token(eng, 1, prompt_len=ctx, n_steps=64)
    return res


def main(sections=("logits", "attention", "decode")):
    rec = Recorder(name="decode_attention.json")
    rec.put("env", environment())
    if "logits" in sections:
        rec.put("logits_qwen2_small", check_logits(SMALL_QWEN2))
        rec.put("logits_smollm2_shape", check_logits(SMOL_SHAPE))
    if "attention" in sections:
        rows = [time_attention(1, 1, 128), time_attention(1, 1, 1024), time_attention(1, 5, 1024),
                time_attention(8, 1, 1024)]
        rec.put("attention_us_qwen2_7b", rows)
    if "backends" in sections:
        rec.put("sdpa_backends", [sdpa_backends(208), sdpa_backends(2064)])
    if "decode" in sections:
        gc.collect()
        torch.cuda.empty_cache()
        eng = Engine.from_config(QWEN2_7B, max_batch=1, max_seq=2048)
        steps = {}
        for ctx in (128, 1024):
            for name, fn in (("sdpa", None), ("kernel", decode_attention)):
                eng.decode_attention = fn
                eng._graphs.clear()
                steps[f"ctx{ctx}_{name}_ms"] = engine_decode_ms_per_token(eng, 1, prompt_len=ctx, n_steps=64)
        rec.put("qwen2_7b_decode_b1", steps)
        del eng
    if "maxseq" in sections:
        gc.collect()
        torch.cuda.empty_cache()
        rec.put("qwen2_7b_decode_b1_vs_max_seq", decode_vs_max_seq())


if __name__ == "__main__":
    import sys

    main(tuple(sys.argv[1:]) or ("logits", "attention", "decode"))
