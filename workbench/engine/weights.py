"""Engine weights: fused per-layer tensors taken from an HF model, or random-initialised on device.

Per layer the engine keeps ``wqkv = [Wq; Wk; Wv]`` ``[(H+2*KV)*D, hidden]`` and
``wgu = [W_gate; W_up]`` ``[2*I, hidden]`` so one decode layer runs four matmuls. Each matmul is a
:class:`Dense` (float/bf16 weight) or an :class:`workbench.engine.int4.Int4Linear` (W4A16).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from workbench.engine.int4 import Int4Linear, quantize_rtn_int4


class Dense:
    """``y = x @ w.T`` for ``w`` ``[out, in]``."""

    def __init__(self, w: torch.Tensor):
        self.w = w

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.w)

    def nbytes(self) -> int:
        return self.w.numel() * self.w.element_size()


@dataclass
class LayerWeights:
    """One decoder block; ``bqkv``/``bo`` are None when the model has no attention bias."""

    ln1: torch.Tensor  # [hidden]
    wqkv: object  # Dense | Int4Linear, out (H+2KV)*D
    bqkv: torch.Tensor | None  # [(H+2KV)*D]
    wo: object  # out hidden, in H*D
    bo: torch.Tensor | None
    ln2: torch.Tensor  # [hidden]
    wgu: object  # out 2*I
    wd: object  # out hidden, in I


@dataclass
class ModelWeights:
    embed: torch.Tensor  # [vocab, hidden]
    layers: list
    norm: torch.Tensor  # [hidden]
    lm_head: object  # Dense | Int4Linear, out vocab

    def matmuls(self) -> list:
        """Every matmul weight (Dense or Int4Linear): per layer qkv, o, gate_up, down; then lm_head."""
        return [m for lw in self.layers for m in (lw.wqkv, lw.wo, lw.wgu, lw.wd)] + [self.lm_head]

    def nbytes_per_step(self) -> int:
        """Weight bytes one decode step reads: every matmul weight, norms, biases (not the embedding
        table, of which one row per token is read, unless lm_head is tied to it)."""
        total = self.lm_head.nbytes() + self.norm.numel() * self.norm.element_size()
        for lw in self.layers:
            for m in (lw.wqkv, lw.wo, lw.wgu, lw.wd):
                total += m.nbytes()
            for t in (lw.ln1, lw.ln2, lw.bqkv, lw.bo):
                total += 0 if t is None else t.numel() * t.element_size()
        return total


def make_linear(w: torch.Tensor, quant, dtype, backend: str, group_size: int):
    """A Dense for ``w``, or an Int4Linear from ``quant`` = ``(q, scales, zeros)`` / RTN of ``w``."""
    if quant == "rtn":
        quant = quantize_rtn_int4(w, group_size)
    if quant is None:
        return Dense(w.to(dtype))
    q, s, z = quant
    return Int4Linear.from_quantized(q, s, z, dtype, backend, w.device if w is not None else None,
                                     in_features=w.shape[1] if w is not None else None)


def _quant_entry(entry):
    if isinstance(entry, dict):
        return entry["qweight"], entry["scales"], entry["zeros"]
    return tuple(entry)


def _fused_quant(qdict, names, in_features):
    """Concatenate the (q, scales, zeros) of several Linears along the output dim."""
    if qdict is None or qdict == "rtn":
        return qdict
    have = [n in qdict for n in names]
    if not any(have):
        return None
    if not all(have):
        raise ValueError(f"w4a16 dict quantizes only some of {names}; quantize all or none of them")
    parts = []
    for n in names:
        q, s, z = _quant_entry(qdict[n])
        if q.shape[1] * 2 == in_features:
            from workbench.engine.int4 import unpack_int4

            q = unpack_int4(q.to(torch.uint8))
        parts.append((q.to(torch.uint8), s, z))
    return tuple(torch.cat([p[i] for p in parts], 0) for i in range(3))


def _dense(linear) -> torch.Tensor:
    """``[out, in]`` weight a Linear applies to its raw input: ``nn.Linear.weight``, or for a
    :class:`workbench.quant.QuantLinear` its dequantized ``W_hat / input_scale`` (``effective_weight``),
    so quantized drafts run through the engine with the numbers of their correctness path."""
    eff = getattr(linear, "effective_weight", None)
    return eff() if callable(eff) else linear.weight


def weights_from_hf(model, dtype, device, w4a16=None, backend="dequant", group_size=128,
                    quantize_lm_head=False) -> ModelWeights:
    """Copy (and fuse) the weights of an HF ``LlamaForCausalLM``/``Qwen2ForCausalLM``.

    ``w4a16``: None (dense), ``"rtn"`` (RTN-quantize every block Linear here), or a dict mapping HF
    module names (``"model.layers.0.self_attn.q_proj"``) to ``(qweight, scales, zeros)`` or to
    ``{"qweight", "scales", "zeros"}``; qweight ``[out, in]`` 0..15 or packed ``[out, in // 2]``.
    """
    base = model.model
    layers = []
    for i, blk in enumerate(base.layers):
        a, m = blk.self_attn, blk.mlp
        pre = f"model.layers.{i}."
        wqkv = torch.cat([_dense(a.q_proj), _dense(a.k_proj), _dense(a.v_proj)], 0).to(device, dtype)
        qn = [pre + f"self_attn.{p}_proj" for p in "qkv"]
        biases = [a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]
        bqkv = torch.cat(biases).to(device, dtype) if biases[0] is not None else None
        wgu = torch.cat([_dense(m.gate_proj), _dense(m.up_proj)], 0).to(device, dtype)
        wo = _dense(a.o_proj).to(device, dtype)
        wd = _dense(m.down_proj).to(device, dtype)
        layers.append(LayerWeights(
            ln1=blk.input_layernorm.weight.to(device, dtype),
            wqkv=make_linear(wqkv, _fused_quant(w4a16, qn, wqkv.shape[1]), dtype, backend, group_size),
            bqkv=bqkv,
            wo=make_linear(wo, _fused_quant(w4a16, [pre + "self_attn.o_proj"], wo.shape[1]), dtype, backend, group_size),
            bo=None if a.o_proj.bias is None else a.o_proj.bias.to(device, dtype),
            ln2=blk.post_attention_layernorm.weight.to(device, dtype),
            wgu=make_linear(wgu, _fused_quant(w4a16, [pre + "mlp.gate_proj", pre + "mlp.up_proj"], wgu.shape[1]),
                            dtype, backend, group_size),
            wd=make_linear(wd, _fused_quant(w4a16, [pre + "mlp.down_proj"], wd.shape[1]), dtype, backend, group_size),
        ))
    embed = base.embed_tokens.weight.to(device, dtype)
    lm_w = model.lm_head.weight.to(device, dtype)
    lm_q = None
    if quantize_lm_head and w4a16 is not None:
        lm_q = "rtn" if w4a16 == "rtn" else _fused_quant(w4a16, ["lm_head"], lm_w.shape[1])
    return ModelWeights(embed=embed, layers=layers, norm=base.norm.weight.to(device, dtype),
                        lm_head=make_linear(lm_w, lm_q, dtype, backend, group_size))


def random_weights(spec, dtype, device, qkv_bias=False, w4a16=False, backend="dequant", group_size=128,
                   quantize_lm_head=False, seed=0, std=0.02) -> ModelWeights:
    """Random N(0, std) weights (HF's ``initializer_range``) created directly on ``device`` in
    ``dtype``, layer by layer (a 7B model takes seconds on a GPU). Norm weights are 1 + N(0, 0.05)
    and biases N(0, std) so every term is exercised. With ``w4a16`` each block matmul is RTN-quantized
    as soon as it is drawn, so peak memory stays near the quantized size."""
    g = torch.Generator(device=device).manual_seed(seed)
    h, d, inter = spec.hidden_size, spec.head_dim, spec.intermediate_size

    def rnd(*shape, scale=std):
        return torch.randn(*shape, generator=g, device=device, dtype=torch.float32).mul_(scale).to(dtype)

    def norm_w():
        return (1 + rnd(h, scale=0.05).float()).to(dtype)

    def lin(out_f, in_f):
        return make_linear(rnd(out_f, in_f), "rtn" if w4a16 else None, dtype, backend, group_size)

    layers = []
    nq = (spec.n_heads + 2 * spec.n_kv_heads) * d
    for _ in range(spec.n_layers):
        layers.append(LayerWeights(ln1=norm_w(), wqkv=lin(nq, h), bqkv=rnd(nq) if qkv_bias else None,
                                   wo=lin(h, spec.n_heads * d), bo=None, ln2=norm_w(),
                                   wgu=lin(2 * inter, h), wd=lin(h, inter)))
    embed = rnd(spec.vocab_size, h)
    lm_w = embed if spec.tie_embeddings else rnd(spec.vocab_size, h)
    lm = make_linear(lm_w, "rtn" if (w4a16 and quantize_lm_head) else None, dtype, backend, group_size)
    return ModelWeights(embed=embed, layers=layers, norm=norm_w(), lm_head=lm)
