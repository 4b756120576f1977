"""Evidence for the claims ledger: measurements of this workbench turned into the dict the rules read.

``collect_evidence(...)`` takes what a study measured (the stacked study, the KV-cache study, a
quantization sweep) and adds what is always available: arithmetic from published model configs
(:data:`PUBLISHED_VOCAB`, :data:`workbench.pd.roofline.MODEL_PRESETS`) and the mechanism checks of
:mod:`workbench.claims.mechanisms`. A key left out (``None``) makes the claims that need it "not
testable here". Every value is a plain dict of numbers and strings.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from workbench.arch import ModelSpec
from workbench.engine.kv_cache import kv_bytes_per_element
from workbench.spec.theory import speedup

__all__ = ["PUBLISHED_VOCAB", "collect_evidence", "kv_evidence", "memory_arithmetic", "quant_evidence",
           "spec_cost_evidence", "stack_evidence", "weight_gb"]

# vocab_size of each model's config.json on the Hugging Face hub (Qwen/Qwen2-7B, Qwen/Qwen2-0.5B,
# Qwen/Qwen2-1.5B, microsoft/Phi-3-mini-4k-instruct): the rows of the embedding and of lm_head
PUBLISHED_VOCAB = {"qwen2-7b": 152064, "qwen2-0.5b": 151936, "qwen2-1.5b": 151936, "phi-3-mini": 32064}


def weight_gb(spec: ModelSpec, bits: int = 16, group_size: int = 128, quantize_embeddings: bool = False) -> float:
    """Weight bytes (GB, 1e9) of ``spec`` with ``bits``-bit block matmul weights in groups of
    ``group_size`` (a 16-bit scale and zero per group, as W4A16 checkpoints store them), 16-bit norms,
    and the embedding / LM head in 16 bits unless ``quantize_embeddings``."""
    if bits >= 16:
        return spec.n_params * 2 / 1e9
    per = bits / 8 + 2 * 2 / group_size
    emb = spec.vocab * spec.hidden * (1 if spec.tie_embeddings else 2)
    norms = spec.n_layers * 2 * spec.hidden + spec.hidden
    return (spec.block_matmul_params * per + emb * (per if quantize_embeddings else 2) + norms * 2) / 1e9


def memory_arithmetic() -> dict:
    """Weight and KV-cache sizes from published architectures: Llama-3-8B in bf16 and W4A16 g128
    (standard recipe: embeddings and LM head in 16 bits; and everything 4-bit), Qwen2-7B's bf16 vs
    INT8 KV cache per token and at 2,048 / 8,192 / 32,768 tokens, and the context at which their
    difference is 0.3 GB (batch 1)."""
    llama, qwen = ModelSpec.from_name("llama-3-8b"), ModelSpec.from_name("qwen2-7b")
    per_tok = {kd: 2 * qwen.n_layers * qwen.n_kv_heads * qwen.head_dim * kv_bytes_per_element(kd, qwen.head_dim)
               for kd in ("bfloat16", "int8", "fp8_e4m3")}
    diff = per_tok["bfloat16"] - per_tok["int8"]
    return {"llama3_8b": {"bf16_gb": weight_gb(llama), "w4a16_gb": weight_gb(llama, 4, 128),
                          "w4a16_all_gb": weight_gb(llama, 4, 128, quantize_embeddings=True)},
            "qwen2_7b": {"bf16_gb": weight_gb(qwen), "w4a16_gb": weight_gb(qwen, 4, 128)},
            "qwen2_7b_kv": {"bytes_per_token": per_tok,
                            "fp16_minus_int8_gb": {c: c * diff / 1e9 for c in (2048, 8192, 32768)},
                            "context_for_0.3gb": 0.3e9 / diff}}


def _device_name(device: str) -> str:
    """``torch.cuda.get_device_name`` for a CUDA device that is present, else the device string."""
    import torch

    if str(device).startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return str(device)


def stack_evidence(table: pd.DataFrame, multiplicative: pd.DataFrame, points: pd.DataFrame, *, target: str,
                   device: str, bandwidth_gbs: float, device_name: str | None = None) -> dict:
    """The stacked study's headline numbers: combined (W4A16 + spec + P/D) decode speedup, E2E
    change and memory ratio over the baseline, ``combined / product`` of the batch-1 decode gains,
    and the bandwidth efficiency of each precision (weight bytes per decode step / TPOT over
    ``bandwidth_gbs``, the copy bandwidth measured on the study device); and the setting they were
    measured in: ``target``, ``device`` and ``device_name`` (default: the CUDA device's name, e.g.
    "NVIDIA H100 80GB HBM3"), ``dtype`` (the baseline's compute dtype), ``weights`` ("random" for a
    ``random:`` target, else "trained") and ``acceptance`` (the speculative rows': "real" or the
    what-if's description)."""
    full = table[table["quantized"] & table["speculative"] & table["disaggregated"] & ~table["mixed"]].iloc[0]
    base = table.iloc[0]
    eff = {}
    for q in (False, True):
        r = points[(points["quantized"].astype(bool) == q) & ~points["speculative"].astype(bool)].iloc[-1]
        eff["W4A16" if q else "base"] = float(r["weight_bytes_per_step"]) / (float(r["tpot_ms"]) / 1e3) / (bandwidth_gbs * 1e9)
    spec_gain = {("W4A16" if q else "base"): float(table[(table["quantized"] == q) & table["speculative"]
                                                         & ~table["disaggregated"]].iloc[0]["decode_speedup"]
                                                   / table[(table["quantized"] == q) & ~table["speculative"]
                                                           & ~table["disaggregated"]].iloc[0]["decode_speedup"])
                 for q in (False, True)}
    mult = multiplicative.set_index("metric")
    plain = points[~points["quantized"].astype(bool) & ~points["speculative"].astype(bool)]
    spec = points[points["speculative"].astype(bool)]
    acc = sorted({str(a) for a in spec["acceptance"]}) if "acceptance" in spec else []
    return {"target": target, "device": device, "device_name": device_name or _device_name(device),
            "dtype": str(plain["compute_dtype"].iloc[0]) if "compute_dtype" in plain and len(plain) else "",
            "weights": "random" if str(target).startswith("random:") else "trained",
            "acceptance": acc[0] if len(acc) == 1 else ", ".join(acc) or "not recorded",
            "base_tok_s": float(base["decode_tok_s"]),
            "combined_tok_s": float(full["decode_tok_s"]), "decode_speedup": float(full["decode_speedup"]),
            "e2e_change": float(full["e2e_change"]), "mem_ratio": float(base["peak_mem_gb"] / full["peak_mem_gb"]),
            "base_mem_gb": float(base["peak_mem_gb"]), "combined_mem_gb": float(full["peak_mem_gb"]),
            "mem_source": str(base["mem_source"]), "bandwidth_efficiency": eff, "spec_gain": spec_gain,
            "combined_over_product": float(mult.loc["batch-1 decode tokens/s", "combined / product"])}


def spec_cost_evidence(points: pd.DataFrame, k_range=range(1, 9)) -> dict:
    """alpha, c and verify costs of the base-precision speculative point, and the theoretical speedup
    (Leviathan et al. 2023 Theorem 3.8, with the verify cost measured at each k where timed, else at
    the study's k) for each k in ``k_range``; ``best_k``; ``acceptance`` ("real" or the what-if's
    description) and ``draft``. An alpha that was not measured stays NaN, with no speedups and
    ``best_k`` None."""
    sp = points[~points["quantized"].astype(bool) & points["speculative"].astype(bool)].iloc[-1]
    t_ms = float(sp["target_step_ms_whatif"])
    c = float(sp["draft_step_ms_whatif"]) / t_ms
    alpha = float(sp["alpha"])
    vc_default = float(sp["verify_ms_k" + str(int(sp["k"]))]) / t_ms
    vc = {k: float(sp[f"verify_ms_k{k}"]) / t_ms if f"verify_ms_k{k}" in sp and pd.notna(sp[f"verify_ms_k{k}"])
          else vc_default for k in k_range}
    s = ({k: float(speedup(min(max(alpha, 0.0), 1.0), k, c, vc[k])) for k in k_range} if np.isfinite(alpha)
         else {})
    return {"alpha": alpha, "c": c, "verify_cost": vc, "speedup_by_k": s, "best_k": max(s, key=s.get) if s else None,
            "acceptance": str(sp.get("acceptance", "")), "draft": str(sp.get("draft", ""))}


def kv_evidence(buckets: pd.DataFrame, at: int = 2048) -> dict:
    """Per KV dtype: top-1 agreement and mean KL before and beyond position ``at`` (pooled over the
    buckets on each side, weighted by positions), and the last position measured."""
    out = {"max_position": int(buckets["hi"].max()), "at": at}
    for kd, g in buckets.groupby("kv_dtype"):
        before, after = g[g["hi"] <= at], g[g["lo"] >= at]

        def pooled(part, col):
            return float(np.average(part[col], weights=part["n_positions"])) if len(part) else float("nan")

        out[kd] = {"top1_before": pooled(before, "top1_agreement"), "top1_after": pooled(after, "top1_agreement"),
                   "kl_before": pooled(before, "kl_mean"), "kl_after": pooled(after, "kl_mean")}
    return out


def quant_evidence(rows: pd.DataFrame) -> dict:
    """Quantization fidelity rows (from :func:`workbench.quant.run_quant_sweep`): per label the
    ``cosine_mean``, ``top1_agreement``, ``kl_mean``, perplexity ratio to the FP model, ``w_bits``
    (None where the rows lack it) and ``weights`` ("trained" or the random-init label)."""
    fp = rows[rows["label"] == "FP"]
    ppl_fp = float(fp["ppl"].iloc[0]) if len(fp) else float("nan")
    out = {}
    for r in rows[rows["label"] != "FP"].to_dict("records"):
        bits = r.get("w_bits")
        out[str(r["label"])] = {"cosine": float(r["cosine_mean"]), "top1": float(r["top1_agreement"]),
                                "kl": float(r["kl_mean"]), "ppl_ratio": float(r["ppl"]) / ppl_fp,
                                "w_bits": int(bits) if bits is not None and pd.notna(bits) else None,
                                "weights": str(r.get("weights", "trained"))}
    return out


def collect_evidence(*, stack: dict | None = None, spec_costs: dict | None = None, kv: dict | None = None,
                     quant: dict | None = None, long_prompt: dict | None = None, pd16: dict | None = None,
                     vllm_flags: dict | None = None, validated_policies: dict | None = None,
                     predictions: pd.DataFrame | None = None, mmlu_drops: dict | None = None,
                     mechanisms: bool = True, seed: int = 0) -> dict:
    """The evidence dict of :func:`workbench.claims.ledger.evaluate`: the given study results (each
    from the ``*_evidence`` functions here or in :mod:`workbench.claims.serving`), the arithmetic of
    :func:`memory_arithmetic` and :data:`PUBLISHED_VOCAB`, and (``mechanisms``) the mechanism checks.

    ``validated_policies``: ``{policy: (max_rel_err_mean, max_rel_err_p99, source_file)}``, the serving
    simulator's policies checked against a real run (:func:`workbench.claims.serving.sim_validation`);
    without one, the simulated verdicts are "not testable here". ``predictions``: estimates for
    hardware that is not here (columns :data:`workbench.claims.support.PREDICTION_COLUMNS`, from
    ``workbench.predict``), checked here (ValueError naming missing columns). ``mmlu_drops``:
    ``{"model", "per_tensor", "awq_g128", "source"}``, MMLU drops in points of a real model."""
    if predictions is not None:
        from workbench.claims.support import check_predictions

        check_predictions(predictions)
    ev = {"stack": stack, "spec_costs": spec_costs, "kv": kv, "quant": quant, "long_prompt": long_prompt,
          "pd16": pd16, "vllm_flags": vllm_flags, "validated_policies": validated_policies or {},
          "predictions": predictions, "mmlu_drops": mmlu_drops, "arith": memory_arithmetic(),
          "vocab": dict(PUBLISHED_VOCAB)}
    if mechanisms:
        from workbench.claims.mechanisms import awq_bit_widths, gptq_act_order, spec_draft_requirements

        ev |= {"spec_draft": spec_draft_requirements(seed), "gptq": gptq_act_order(seed), "awq": awq_bit_widths(seed)}
    return ev
