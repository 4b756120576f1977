"""Deployment configuration of the serving simulator."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.arch import ModelSpec
from workbench.pd.hardware import HardwareSpec
from workbench.pd.sim.policies import check_policy
from workbench.validate import check_field_types

__all__ = ["SimConfig"]


@dataclass(frozen=True)
class SimConfig:
    """One deployment: a policy (see :mod:`workbench.pd.sim.policies`) and its instances' limits.

    GPU count: ``n_instances`` for ``colocated`` and ``chunked``; ``n_prefill + n_decode`` for
    ``disaggregated``. Fields that a policy does not use are ignored by it.
    """

    policy: str = "colocated"  # colocated | chunked | disaggregated
    n_instances: int = 1  # colocated / chunked: identical instances, requests routed round-robin
    n_prefill: int = 1  # disaggregated: prefill instances (round-robin)
    n_decode: int = 1  # disaggregated: decode instances (round-robin in KV-arrival order)
    max_batch: int = 256  # running sequences per instance (vLLM max_num_seqs)
    max_prefill_tokens: int = 8192  # prompt tokens per prefill step (vLLM max_num_batched_tokens)
    max_prefill_batch: int = 256  # prompts per prefill step; 1 = one at a time (an M/D/1 server)
    chunk_budget: int = 512  # chunked: tokens per step, decodes first, rest prefill chunks (Sarathi)
    kv_capacity_tokens: int = 1_000_000  # KV cache slots per instance, tokens
    kv_bytes_per_token: float = 131072.0  # KV bytes moved per prompt token (Llama-3-8B bf16)
    link_gbs: float = 450.0  # prefill -> decode link bandwidth, GB/s per direction (NVLink 4)
    link_latency_ms: float = 0.01  # link latency per transfer, ms

    def __post_init__(self):
        check_field_types(self)  # integer fields take integers; every error names its field
        check_policy(self.policy)
        for f in ("n_instances", "n_prefill", "n_decode", "max_batch", "max_prefill_tokens",
                  "max_prefill_batch", "chunk_budget"):
            if int(getattr(self, f)) < 1:
                raise ValueError(f"SimConfig.{f}={getattr(self, f)!r} must be >= 1")
        if self.kv_capacity_tokens < 2:
            raise ValueError(f"SimConfig.kv_capacity_tokens={self.kv_capacity_tokens} must hold at least "
                             "one request (prompt + output tokens); raise it")
        if not self.kv_bytes_per_token > 0:
            raise ValueError(f"SimConfig.kv_bytes_per_token={self.kv_bytes_per_token} must be > 0")
        if not self.link_gbs > 0:
            raise ValueError(f"SimConfig.link_gbs={self.link_gbs} must be > 0 GB/s")
        if self.link_latency_ms < 0:
            raise ValueError(f"SimConfig.link_latency_ms={self.link_latency_ms} must be >= 0")

    @property
    def label(self) -> str:
        """``"colocated x2"``, ``"chunked x2 budget 512"``, ``"disaggregated 1P+1D link 450"``: the
        deployment as tables and legends name it, from its fields."""
        if self.policy == "colocated":
            return f"colocated x{self.n_instances}"
        if self.policy == "chunked":
            return f"chunked x{self.n_instances} budget {self.chunk_budget}"
        return f"disaggregated {self.n_prefill}P+{self.n_decode}D link {self.link_gbs:g}"

    @property
    def n_gpus(self) -> int:
        return self.n_prefill + self.n_decode if self.policy == "disaggregated" else self.n_instances

    def transfer_ms(self, prompt_tokens):
        """KV transfer time of a prompt: ``bytes / bandwidth + latency`` (DistServe sec. 4.3), ms."""
        return prompt_tokens * self.kv_bytes_per_token / (self.link_gbs * 1e6) + self.link_latency_ms

    @classmethod
    def for_hardware(cls, model: ModelSpec, hw: HardwareSpec, *, mem_util: float = 0.9,
                     **kw) -> SimConfig:
        """KV capacity ``(mem_gb * mem_util - weights) / kv_bytes_per_token`` (vLLM
        ``gpu_memory_utilization``), KV bytes per token from ``model``, link from ``hw``."""
        free = hw.mem_gb * 1e9 * mem_util - model.weight_bytes
        if free <= 0:
            raise ValueError(f"{model.name} weights ({model.weight_bytes / 1e9:.1f} GB) do not fit in "
                             f"{hw.name} ({hw.mem_gb} GB x mem_util {mem_util}); use a larger part")
        base = {"kv_capacity_tokens": int(free // model.kv_bytes_per_token),
                    "kv_bytes_per_token": model.kv_bytes_per_token, "link_gbs": hw.link_gbs,
                    "link_latency_ms": hw.link_latency_us / 1e3}
        return cls(**(base | kw))
