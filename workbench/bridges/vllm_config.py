"""A deployment chosen in the workbench as ``vllm serve`` command lines and ``vllm.LLM(...)`` kwargs.

:class:`VllmDeployment` holds the choices the notebooks make -- a (quantized) checkpoint, a draft
model and ``k``, chunked prefill and its token budget, the KV-cache dtype, a prefill/decode pair --
in vLLM's own names, for the release :data:`workbench.bridges.vllm_source.VLLM_VERSION`. Every
flag, ``vllm.LLM`` kwarg, config field and value used here is checked against that release's
source in ``tests/bridges/test_vllm_config.py`` (see :mod:`workbench.bridges.vllm_source`).

Mapping of the workbench's terms (DESIGN.md) to vLLM:

* ``k`` -> ``speculative_config.num_speculative_tokens`` with ``method="draft_model"``; sampled
  drafts (temperature > 0) -> ``draft_sample_method="probabilistic"`` (vLLM's default ``"greedy"``
  treats draft probabilities as one-hot, which is not the Leviathan et al. rule the workbench runs);
* simulator ``colocated`` -> ``--no-enable-chunked-prefill``, ``--max-num-batched-tokens
  max_prefill_tokens``; ``chunked`` -> ``--enable-chunked-prefill``, ``--max-num-batched-tokens
  chunk_budget``; ``max_batch`` -> ``--max-num-seqs``; ``disaggregated`` -> ``n_prefill`` prefill
  and ``n_decode`` decode instances, each with ``--kv-transfer-config`` (``NixlConnector``,
  ``kv_role`` ``kv_producer`` / ``kv_consumer``: vLLM 0.33 deprecates ``kv_both`` for NIXL);
* KV cache ``fp8`` -> ``--kv-cache-dtype fp8``, ``int8`` -> ``int8_per_token_head``.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from workbench.bridges.vllm_source import VLLM_VERSION

__all__ = ["ARTICLE_FLAGS", "KV_CACHE_DTYPES", "VllmDeployment", "refuse_invented_flags"]

# flags that articles about vLLM use but that no vLLM release has, with the real equivalent
ARTICLE_FLAGS = {
    "--speculative-draft-tokens": "--speculative-config '{\"num_speculative_tokens\": K, ...}' "
                                  "(or its shorthand --spec-tokens K)",
    "--enable-prefill-preemption": "--enable-chunked-prefill with --max-num-batched-tokens N (decodes are "
                                   "scheduled first and prompts fill the rest of the token budget) or "
                                   "--scheduling-policy priority (a higher-priority request preempts)",
    "--speculative-metrics": "no flag: with --speculative-config vLLM always exports the counters "
                             "vllm:spec_decode_num_drafts, vllm:spec_decode_num_draft_tokens, "
                             "vllm:spec_decode_num_accepted_tokens and vllm:spec_decode_num_accepted_tokens_per_pos"
                             " on /metrics; --per-request-spec-decode-metrics summary adds them per response",
}

# workbench KV-cache dtype names -> vLLM CacheDType values (vllm/config/cache.py)
KV_CACHE_DTYPES = {"auto": "auto", "bf16": "auto", "bfloat16": "bfloat16", "float16": "float16",
                   "fp16": "float16", "fp8": "fp8", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2",
                   "int8": "int8_per_token_head"}


def refuse_invented_flags(args) -> None:
    """Raise ``ValueError`` naming the real equivalent for any flag of ``args`` in :data:`ARTICLE_FLAGS`."""
    for a in args:
        flag = str(a).split("=", 1)[0]
        if flag in ARTICLE_FLAGS:
            raise ValueError(f"{flag} is not a vLLM flag (in no release; vLLM {VLLM_VERSION} refuses it). "
                             f"Use {ARTICLE_FLAGS[flag]}.")


@dataclass(frozen=True)
class VllmDeployment:
    """One vLLM deployment in vLLM's names (``EngineArgs`` fields). Raises ``ValueError`` naming the
    field on bad values, and for the constraints ``SchedulerConfig.verify_max_model_len`` enforces."""

    model: str  # hub id or local folder, e.g. a compressed-tensors checkpoint from export_compressed_tensors
    served_model_name: str | None = None  # name clients and /metrics labels use (default: model)
    dtype: str = "auto"  # activation dtype; "auto" = the checkpoint's torch_dtype
    quantization: str | None = None  # None: vLLM reads quantization_config from config.json
    kv_cache_dtype: str = "auto"  # workbench name (fp8, int8, ...) or a vLLM CacheDType value
    max_model_len: int | None = None  # longest prompt + output, tokens (None: the model's)
    gpu_memory_utilization: float = 0.9  # share of GPU memory for weights + KV cache (SimConfig mem_util)
    max_num_seqs: int | None = None  # running sequences per instance (SimConfig.max_batch)
    max_num_batched_tokens: int | None = None  # tokens per scheduler step (chunk budget / prefill budget)
    enable_chunked_prefill: bool | None = None  # None keeps vLLM's default (on)
    draft_model: str | None = None  # draft for speculative decoding (same tokenizer as the target)
    num_speculative_tokens: int | None = None  # k
    draft_sample_method: str = "probabilistic"  # probabilistic = Leviathan et al.; greedy = argmax drafts
    tensor_parallel_size: int = 1  # GPUs per instance
    disaggregated: bool = False  # separate prefill and decode instances joined by a KV connector
    n_prefill: int = 1  # prefill instances (disaggregated)
    n_decode: int = 1  # decode instances (disaggregated)
    kv_connector: str = "NixlConnector"  # KVConnectorFactory name moving KV from prefill to decode
    port: int = 8000  # first instance's HTTP port; further instances count up
    nixl_side_channel_port: int = 5600  # VLLM_NIXL_SIDE_CHANNEL_PORT of the first instance
    extra_args: tuple[str, ...] = ()  # more `vllm serve` flags, passed through (article flags refused)

    def __post_init__(self):
        if not self.model:
            raise ValueError("VllmDeployment.model is empty; pass a hub id or a checkpoint folder")
        kv = KV_CACHE_DTYPES.get(self.kv_cache_dtype, self.kv_cache_dtype)
        object.__setattr__(self, "kv_cache_dtype", kv)
        object.__setattr__(self, "extra_args", tuple(self.extra_args))
        refuse_invented_flags(self.extra_args)
        for f in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "num_speculative_tokens"):
            v = getattr(self, f)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"VllmDeployment.{f}={v!r} must be a positive integer or None")
        for f in ("tensor_parallel_size", "n_prefill", "n_decode"):
            if not isinstance(getattr(self, f), int) or getattr(self, f) < 1:
                raise ValueError(f"VllmDeployment.{f}={getattr(self, f)!r} must be an integer >= 1")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"VllmDeployment.gpu_memory_utilization={self.gpu_memory_utilization} must be in (0, 1]")
        if (self.draft_model is None) != (self.num_speculative_tokens is None):
            raise ValueError("VllmDeployment: set draft_model and num_speculative_tokens (k) together, or neither")
        if self.draft_sample_method not in ("greedy", "probabilistic"):
            raise ValueError(f"VllmDeployment.draft_sample_method={self.draft_sample_method!r}: use 'greedy' or "
                             "'probabilistic' (vLLM DraftSampleMethod)")
        b, n = self.max_num_batched_tokens, self.max_num_seqs
        if self.enable_chunked_prefill is False and b is not None and self.max_model_len and b < self.max_model_len:
            raise ValueError(f"max_num_batched_tokens={b} < max_model_len={self.max_model_len} without chunked "
                             "prefill: vLLM rejects longer prompts; raise max_num_batched_tokens or enable "
                             "chunked prefill")
        if b is not None and n is not None and b < n:
            raise ValueError(f"max_num_batched_tokens={b} must be >= max_num_seqs={n} (vLLM SchedulerConfig)")

    # -- construction from the workbench's configs ---------------------------------------------------
    @classmethod
    def from_workbench(cls, model: str, *, sim=None, spec=None, draft_model: str | None = None,
                       kv_cache_dtype: str = "auto", mem_util: float = 0.9, **overrides) -> VllmDeployment:
        """Deployment for ``model`` with the choices of the workbench's studies.

        ``sim``: a :class:`workbench.pd.sim.SimConfig` (policy, batch and token budgets, P/D pair);
        ``spec``: a :class:`workbench.spec.SpecConfig` with ``draft_model`` (``k``, sampling);
        ``kv_cache_dtype``: ``auto``, ``fp8``, ``int8``...; ``overrides``: any field.
        Raises ``ValueError`` for a speculative policy vLLM has no equivalent of (only ``static`` k).
        """
        kw: dict = {"gpu_memory_utilization": mem_util, "kv_cache_dtype": kv_cache_dtype}
        if sim is not None:
            kw["max_num_seqs"] = sim.max_batch
            if sim.policy == "chunked":
                kw |= {"enable_chunked_prefill": True, "max_num_batched_tokens": sim.chunk_budget}
            elif sim.policy == "colocated":
                kw |= {"enable_chunked_prefill": False, "max_num_batched_tokens": sim.max_prefill_tokens}
            else:
                kw |= {"disaggregated": True, "n_prefill": sim.n_prefill, "n_decode": sim.n_decode,
                       "enable_chunked_prefill": False, "max_num_batched_tokens": sim.max_prefill_tokens}
        if spec is not None:
            if draft_model is None:
                raise ValueError("from_workbench: spec= needs draft_model= (the draft's hub id or folder)")
            if spec.policy != "static":
                raise ValueError(f"SpecConfig.policy={spec.policy!r} has no vLLM equivalent: vLLM drafts a fixed "
                                 "num_speculative_tokens per step; use policy='static'")
            kw |= {"draft_model": draft_model, "num_speculative_tokens": spec.k,
                   "draft_sample_method": "greedy" if spec.greedy else "probabilistic"}
        return cls(model=model, **(kw | overrides))

    # -- outputs ---------------------------------------------------------------------------------------
    def speculative_config(self) -> dict | None:
        """The ``--speculative-config`` JSON / ``speculative_config=`` dict (SpeculativeConfig fields)."""
        if self.draft_model is None:
            return None
        return {"method": "draft_model", "model": self.draft_model,
                "num_speculative_tokens": self.num_speculative_tokens,
                "draft_sample_method": self.draft_sample_method}

    def kv_transfer_config(self, role: str) -> dict | None:
        """``--kv-transfer-config`` for ``role`` ``prefill`` / ``decode`` (KVTransferConfig fields)."""
        if not self.disaggregated:
            return None
        kv_role = {"prefill": "kv_producer", "decode": "kv_consumer"}[role]
        return {"kv_connector": self.kv_connector, "kv_role": kv_role}

    def instances(self) -> list[dict]:
        """One dict per ``vllm serve`` process: ``role`` (``serve``, ``prefill``, ``decode``), ``port``,
        ``gpus`` (CUDA_VISIBLE_DEVICES indices), ``env`` and ``kv_transfer_config``."""
        roles = ["prefill"] * self.n_prefill + ["decode"] * self.n_decode if self.disaggregated else ["serve"]
        out, tp = [], self.tensor_parallel_size
        for i, role in enumerate(roles):
            gpus = list(range(i * tp, (i + 1) * tp))
            env = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))} if self.disaggregated else {}
            if self.disaggregated and self.kv_connector.startswith("Nixl"):
                env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(self.nixl_side_channel_port + i)
            out.append({"role": role, "port": self.port + i, "gpus": gpus, "env": env,
                        "kv_transfer_config": self.kv_transfer_config(role) if self.disaggregated else None})
        return out

    def serve_args(self, instance: dict | None = None) -> list[str]:
        """argv of one ``vllm serve`` process (default: the first instance)."""
        inst = instance or self.instances()[0]
        a = ["vllm", "serve", self.model, "--port", str(inst["port"])]
        opt = [("--served-model-name", self.served_model_name), ("--dtype", None if self.dtype == "auto" else self.dtype),
               ("--quantization", self.quantization),
               ("--kv-cache-dtype", None if self.kv_cache_dtype == "auto" else self.kv_cache_dtype),
               ("--max-model-len", self.max_model_len), ("--gpu-memory-utilization", self.gpu_memory_utilization),
               ("--tensor-parallel-size", None if self.tensor_parallel_size == 1 else self.tensor_parallel_size),
               ("--max-num-seqs", self.max_num_seqs), ("--max-num-batched-tokens", self.max_num_batched_tokens)]
        for flag, v in opt:
            if v is not None:
                a += [flag, str(v)]
        if self.enable_chunked_prefill is not None:
            a.append("--enable-chunked-prefill" if self.enable_chunked_prefill else "--no-enable-chunked-prefill")
        if (sc := self.speculative_config()) is not None:
            a += ["--speculative-config", json.dumps(sc, separators=(",", ":"))]
        if inst["kv_transfer_config"] is not None:
            a += ["--kv-transfer-config", json.dumps(inst["kv_transfer_config"], separators=(",", ":"))]
        return a + list(self.extra_args)

    def serve_commands(self) -> list[str]:
        """Shell command lines, one per instance (environment variables first)."""
        cmds = []
        for inst in self.instances():
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in inst["env"].items())
            cmds.append((env + " " if env else "") + shlex.join(self.serve_args(inst)))
        return cmds

    def llm_kwargs(self, role: str = "serve") -> dict:
        """Keyword arguments of ``vllm.LLM(**kwargs)`` equivalent to the ``role`` instance's flags."""
        kw = {"model": self.model, "dtype": self.dtype, "kv_cache_dtype": self.kv_cache_dtype,
              "gpu_memory_utilization": self.gpu_memory_utilization,
              "tensor_parallel_size": self.tensor_parallel_size}
        for f in ("served_model_name", "quantization", "max_model_len", "max_num_seqs", "max_num_batched_tokens",
                  "enable_chunked_prefill"):
            if getattr(self, f) is not None:
                kw[f] = getattr(self, f)
        if (sc := self.speculative_config()) is not None:
            kw["speculative_config"] = sc
        if self.disaggregated:
            if role not in ("prefill", "decode"):
                raise ValueError(f"role={role!r}: a disaggregated deployment has 'prefill' and 'decode' instances")
            kw["kv_transfer_config"] = self.kv_transfer_config(role)
        return kw
