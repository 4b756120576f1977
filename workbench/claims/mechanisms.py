"""Mechanism checks for the claims ledger: small experiments that run on any machine in seconds.

Each function runs the workbench's own implementation on tiny hand-built models or matrices and
returns a dict of measurements (evidence for :mod:`workbench.claims.hooks`):

* :func:`spec_draft_requirements`: does speculative decoding need a draft of the target's
  architecture, or only its vocabulary? (a Qwen2-architecture draft for a Llama target);
* :func:`gptq_act_order`: is GPTQ activation-aware without ``desc_act`` (``act_order``)?
* :func:`awq_bit_widths`: which bit widths does an AWQ-quantized model store?
"""

from __future__ import annotations

import torch

__all__ = ["awq_bit_widths", "gptq_act_order", "spec_draft_requirements"]

_TINY = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "max_position_embeddings": 128}


def _perturbed(model, seed: int):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return model.eval()


def _tiny(arch: str, vocab: int, seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        if arch == "llama":
            m = LlamaForCausalLM(LlamaConfig(vocab_size=vocab, **_TINY))
        else:
            m = Qwen2ForCausalLM(Qwen2Config(vocab_size=vocab, **(_TINY | {"num_hidden_layers": 1})))
    return _perturbed(m, seed)


def spec_draft_requirements(seed: int = 0, n_new: int = 16, k: int = 3) -> dict:
    """Speculative decoding (greedy, exact) with a Llama target and a Qwen2 draft of the same
    vocabulary, and with a draft of another vocabulary size.

    Returns ``cross_arch_exact`` (the cross-architecture draft's output equals the target's own greedy
    decoding), ``cross_arch_alpha``, ``vocab_mismatch_refused`` (speculative decoding raised
    ValueError for drafts over another vocabulary) and the architectures used."""
    from workbench.engine import Engine
    from workbench.spec.generate import autoregressive_generate, speculative_generate

    target, draft = _tiny("llama", 96, seed), _tiny("qwen2", 96, seed + 1)
    t_run = Engine.from_hf(target, max_seq=96).runner(0)
    d_run = Engine.from_hf(draft, max_seq=96).runner(0)
    prompt = torch.randint(0, 96, (8,), generator=torch.Generator().manual_seed(seed)).tolist()
    plain = autoregressive_generate(t_run, prompt, max_new_tokens=n_new).tokens
    spec = speculative_generate(t_run, d_run, prompt, k=k, max_new_tokens=n_new)
    other = Engine.from_hf(_tiny("qwen2", 112, seed + 2), max_seq=96).runner(0)
    try:
        speculative_generate(t_run, other, prompt, k=k, max_new_tokens=4)
        refused = False
    except ValueError:
        refused = True
    return {"target_arch": "llama", "draft_arch": "qwen2", "cross_arch_exact": spec.tokens == plain,
            "cross_arch_alpha": float(spec.stats.alpha), "vocab_mismatch_refused": refused}


def gptq_act_order(seed: int = 0, out_f: int = 64, in_f: int = 128, n_tokens: int = 1024, bits: int = 4,
                   group_size: int = 32) -> dict:
    """Relative output error ``||X W^T - X W_hat^T||^2 / ||X W^T||^2`` of one linear layer quantized by
    RTN, GPTQ without ``act_order`` and GPTQ with it (Frantar et al. 2022, the ``desc_act`` flag of
    AutoGPTQ), on correlated calibration inputs ``X`` (rank ``in / 4`` plus noise, the structure GPTQ's
    Hessian exploits) with a few large-activation channels (as LLMs have; Dettmers et al. 2022,
    LLM.int8()). Returns ``err_rtn``, ``err_gptq``, ``err_gptq_act_order``."""
    from workbench.quant.gptq import gptq_quantize, hessian_update
    from workbench.quant.rtn import dequantize_codes, fake_quantize

    g = torch.Generator().manual_seed(seed)
    W = torch.randn(out_f, in_f, generator=g) * 0.05
    X = torch.randn(n_tokens, in_f // 4, generator=g) @ torch.randn(in_f // 4, in_f, generator=g)
    X += 0.1 * torch.randn(n_tokens, in_f, generator=g)
    X[:, torch.randperm(in_f, generator=g)[: in_f // 16]] *= 10.0  # outlier channels
    H, _ = hessian_update(None, X, 0)
    ref = X @ W.T

    def err(w_hat):
        return float(((ref - X @ w_hat.T) ** 2).sum() / (ref ** 2).sum())

    out = {"err_rtn": err(fake_quantize(W, bits, group_size, symmetric=False))}
    for key, act in (("err_gptq", False), ("err_gptq_act_order", True)):
        # act_order with groups needs static groups (groups in the original column order, no g_idx),
        # as AutoGPTQ's desc_act + static_groups
        q, s, z = gptq_quantize(W, H, bits, group_size, symmetric=False, act_order=act, static_groups=act)
        out[key] = err(dequantize_codes(q, s, z, torch.float32, group_size))
    return out | {"bits": bits, "group_size": group_size}


def awq_bit_widths(seed: int = 0) -> dict:
    """AWQ (Lin et al. 2023) on a tiny Llama with random calibration ids: the set of bit widths its
    quantized layers store (``bits``), how many layers carry an activation-aware input scale
    (``n_scaled``) out of ``n_layers``."""
    from workbench.quant import QuantConfig, QuantLinear, quantize

    model = _tiny("llama", 96, seed)
    calib = torch.randint(0, 96, (2, 32), generator=torch.Generator().manual_seed(seed))
    cfg = QuantConfig(method="awq", bits=4, group_size=16, n_calib_samples=2, calib_seq_len=32, awq_grid=4)
    qmodel, _ = quantize(model, cfg, calib)
    layers = [m for m in qmodel.modules() if isinstance(m, QuantLinear)]
    return {"bits": sorted({m.bits for m in layers}), "n_layers": len(layers),
            "n_scaled": sum(m.input_scale.numel() > 0 for m in layers)}
