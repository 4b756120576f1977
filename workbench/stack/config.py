"""``StackConfig``: one stacked study of W4A16 x speculative decoding x P/D disaggregation.

Terms (DESIGN.md): ``W4A16`` (4-bit weights in groups of ``group_size``, 16-bit activations), ``k``
(draft tokens per step), ``alpha`` (acceptance rate), ``tau`` (mean acceptance length, bonus token
included), TTFT, TPOT, E2E latency, goodput (requests per second meeting every SLO). The study's
8 combinations are {base precision, W4A16} x {no spec, spec} x {colocated, disaggregated}; the base
precision is the model's compute dtype on the study device (bf16 on CUDA, float32 on the CPU).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from workbench.pd.profile import ProfileConfig
from workbench.pd.sim import SLO, LengthDist, WorkloadConfig

__all__ = ["COMBINATIONS", "StackConfig", "combo_label"]

# (quantized, speculative, disaggregated) in the waterfall's order: baseline -> +W4A16 -> +spec -> +P/D
COMBINATIONS = tuple((q, s, p) for p in (False, True) for s in (False, True) for q in (False, True))


def combo_label(quantized: bool, speculative: bool, disaggregated: bool, base: str = "bf16") -> str:
    """``"bf16"``, ``"W4A16 + spec"``, ``"W4A16 + spec + P/D"``...: the row label of a combination."""
    parts = ["W4A16" if quantized else base] + (["spec"] if speculative else []) + (["P/D"] if disaggregated else [])
    return " + ".join(parts)


def _small_profile() -> ProfileConfig:
    return ProfileConfig(prompt_lens=(32, 128), prefill_batches=(1, 2), decode_batches=(1, 2, 4, 8),
                         context_lens=(64, 192), repeats=3)


def _chat_workload() -> WorkloadConfig:
    return WorkloadConfig(n_requests=300, prompt=LengthDist("lognormal", 128, 16, 512, 0.5),
                          output=LengthDist("lognormal", 32, 4, 128, 0.5))


@dataclass(frozen=True)
class StackConfig:
    """Settings of one stacked study; ``__post_init__`` raises ValueError naming the field and the fix.

    The batch-1 measurement runs one fixed request (``prompt_len`` prompt tokens, ``gen_len`` greedy
    tokens) through the engine; the load measurement simulates ``workload`` at arrival rates
    ``load_fractions`` x the baseline's capacity, with step costs fitted to ``profile`` runs of each
    precision's engines.
    """

    target: str = "smollm2-135m"  # label of the target (load_model spec, or "random:<preset>")
    draft: str = "int4"  # workbench.spec.make_draft name or model id; for a random target, a label
    quant_method: str = "rtn"  # W4A16 weights: rtn (the engine's RTN) | awq | gptq (through workbench.quant)
    group_size: int = 128  # W4A16 group size; must divide every in_features (64 for SmolLM2's 576)
    quantize_draft: bool = False  # W4A16 combinations quantize the draft too (default: the draft stays as built)
    k: int = 4  # draft tokens per step (vLLM num_speculative_tokens)
    alpha: float | None = None  # what-if acceptance (acceptance="synthetic"); None = real drafts, real acceptance
    prompt_len: int = 64  # tokens of the fixed request's prompt
    gen_len: int = 32  # tokens the fixed request generates (greedy)
    repeats: int = 1  # batch-1 runs per combination (the median is kept)
    workload: WorkloadConfig = field(default_factory=_chat_workload)  # load workload (its rate is replaced)
    slo: SLO | None = None  # None: derived from the baseline (see workbench.stack.serving.derive_slo)
    load_fractions: tuple = (0.25, 0.5, 0.75, 1.0, 1.25)  # arrival rates / baseline capacity
    table_load: float = 0.75  # the load fraction the table reports (one of load_fractions)
    slo_scales: tuple = (0.5, 1.0, 2.0)  # SLOs x these factors, precomputed for the SLO slider
    whatif_alphas: tuple = (0.4, 0.6, 0.7, 0.8, 0.9)  # alpha grid of the what-if sliders
    whatif_ks: tuple = (2, 3, 4, 5, 6, 7)  # k grid of the what-if sliders (each k's verify step is timed)
    splits: tuple = ((1, 1),)  # (n_prefill, n_decode) GPUs; colocated gets n_prefill + n_decode; the first is the table's
    link_gbs: float = 450.0  # prefill -> decode KV link, GB/s per direction (NVLink 4); modelled, not measured
    link_latency_ms: float = 0.01  # link latency per transfer, ms
    mem_gb: float | None = None  # memory per instance for the KV capacity; None: the device's (host RAM on CPU)
    mem_util: float = 0.9  # fraction of memory the weights + KV cache may use (vLLM gpu_memory_utilization)
    profile: ProfileConfig = field(default_factory=_small_profile)  # step-time profile per precision
    seed: int = 0  # workload, random prompts and sampling

    def __post_init__(self):
        if self.quant_method not in ("rtn", "awq", "gptq"):
            raise ValueError(f"StackConfig.quant_method={self.quant_method!r}; use 'rtn', 'awq' or 'gptq'")
        if self.group_size < 32 or self.group_size & (self.group_size - 1):
            raise ValueError(f"StackConfig.group_size={self.group_size} must be a power of two >= 32 (the W4A16 "
                             "kernels' groups); 64 or 128 are usual")
        for f in ("k", "prompt_len", "gen_len", "repeats"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < (2 if f == "gen_len" else 1):
                raise ValueError(f"StackConfig.{f}={v!r} must be an integer >= {2 if f == 'gen_len' else 1}")
        if self.alpha is not None and not (isinstance(self.alpha, (int, float)) and 0 <= self.alpha < 1):
            raise ValueError(f"StackConfig.alpha={self.alpha!r} must be in [0, 1) (what-if acceptance rate) or None")
        if not self.load_fractions or min(self.load_fractions) <= 0 or any(map(math.isinf, self.load_fractions)):
            raise ValueError(f"StackConfig.load_fractions={self.load_fractions!r} must be positive finite numbers")
        if self.table_load not in self.load_fractions:
            raise ValueError(f"StackConfig.table_load={self.table_load!r} must be one of load_fractions="
                             f"{self.load_fractions}")
        if not self.slo_scales or min(self.slo_scales) <= 0:
            raise ValueError(f"StackConfig.slo_scales={self.slo_scales!r} must be positive factors")
        if not self.whatif_alphas or not all(0 <= a < 1 for a in self.whatif_alphas):
            raise ValueError(f"StackConfig.whatif_alphas={self.whatif_alphas!r} must lie in [0, 1)")
        if not self.whatif_ks or min(self.whatif_ks) < 1:
            raise ValueError(f"StackConfig.whatif_ks={self.whatif_ks!r} must be integers >= 1")
        if not self.splits or any(len(s) != 2 or min(s) < 1 for s in self.splits):
            raise ValueError(f"StackConfig.splits={self.splits!r} must be (n_prefill, n_decode) pairs of integers >= 1")
        if not self.link_gbs > 0 or self.link_latency_ms < 0:
            raise ValueError("StackConfig.link_gbs must be > 0 GB/s and link_latency_ms >= 0")
        if self.mem_gb is not None and not self.mem_gb > 0:
            raise ValueError(f"StackConfig.mem_gb={self.mem_gb!r} must be > 0 GB or None (the device's memory)")
        if not 0 < self.mem_util <= 1:
            raise ValueError(f"StackConfig.mem_util={self.mem_util!r} must be in (0, 1]")
        object.__setattr__(self, "splits", tuple(tuple(int(x) for x in s) for s in self.splits))
        for f, typ in (("load_fractions", float), ("slo_scales", float), ("whatif_alphas", float),
                       ("whatif_ks", int)):
            object.__setattr__(self, f, tuple(typ(x) for x in getattr(self, f)))

    @property
    def synthetic(self) -> bool:
        """True when acceptance is the what-if ``alpha`` rather than the draft's real one."""
        return self.alpha is not None

    @property
    def max_seq(self) -> int:
        """KV-cache length the batch-1 engines need: prompt + generated + one verify step."""
        return self.prompt_len + self.gen_len + self.k + 2

    def to_row(self) -> dict:
        """Scalar fields as result columns (nested configs and tuples flattened to strings)."""
        d = asdict(self)
        for f in ("workload", "profile", "slo", "splits", "load_fractions", "slo_scales", "whatif_alphas",
                  "whatif_ks"):
            d[f] = str(d[f])
        return d
