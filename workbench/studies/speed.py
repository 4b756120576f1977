"""Measured speed and memory of a (quantized) model on the engine, on the model's device.

Timing goes through :func:`workbench.pd.profile.run_profile` on the engine that
:func:`workbench.quant.convert_for_runtime` builds (with the backend's ``EngineConfig``) (the quantized matmuls; the FP model on its dense
weights), so a quantization point is timed exactly as the serving loop runs it: one step = roll the
slots back, ``extend_batch``, greedy token to the host, synchronize.

* ``decode_ms_b{B}``: median time of one decode step of ``B`` sequences, each holding ``context``
  cached tokens: the time per output token of every sequence (TPOT at batch ``B``), ms;
* ``prefill_ms_{T}``: median time to prefill one prompt of ``T`` tokens, ms;
* ``peak_mem_bytes``: on CUDA measured, ``torch.cuda.max_memory_allocated`` during the timing minus
  the allocation before the engine was built (weights, KV cache, activations, CUDA graphs); on the CPU
  the footprint model (the engine's weight tensors + KV cache), ``mem_source`` says which;
* ``speed_device`` (``"cuda:0 NVIDIA H200"``, ``"cpu"``), ``speed_clock`` (wall time on CUDA; this
  process's CPU time on the CPU, as :class:`workbench.device.CPUClock`, since other processes share
  the cores), ``runtime`` (the matmuls that ran, :func:`workbench.quant.runtime.runtime_label`),
  ``engine_weight_bytes`` (bytes a decode step reads, :meth:`Engine.weight_bytes`), ``route_table`` (JSON:
  which kernel ran each matmul at each row count, :meth:`Engine.route_table`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from workbench.engine import Engine
from workbench.engine.weights import Dense
from workbench.pd.profile import ProfileConfig, run_profile
from workbench.quant.runtime import convert_for_runtime, runtime_label

__all__ = ["SpeedConfig", "measure_speed"]


def _positive_ints(cfg, name: str) -> None:
    v = getattr(cfg, name)
    vals = v if isinstance(v, tuple) else (v,)
    if not vals or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in vals):
        raise ValueError(f"SpeedConfig.{name}={v!r} must be {'a tuple of ' if isinstance(v, tuple) else 'an '}"
                         "integer(s) >= 1")


@dataclass(frozen=True)
class SpeedConfig:
    """What :func:`measure_speed` times (one row per model); validated on construction."""

    decode_batches: tuple[int, ...] = (1, 8)  # sequences per timed decode step
    prefill_tokens: int = 512  # prompt length of the timed prefill
    context: int = 128  # cached tokens per sequence before the timed decode step
    repeats: int = 5  # timed runs per point (median); for_device: 30 on CUDA, 1 on the CPU
    warmup: int = 1  # untimed runs per point (CUDA graph capture, allocator)

    def __post_init__(self):
        if isinstance(self.decode_batches, list):
            object.__setattr__(self, "decode_batches", tuple(self.decode_batches))
        for f in ("decode_batches", "prefill_tokens", "context", "repeats"):
            _positive_ints(self, f)
        if not isinstance(self.warmup, int) or isinstance(self.warmup, bool) or self.warmup < 0:
            raise ValueError(f"SpeedConfig.warmup={self.warmup!r} must be an integer >= 0")

    @classmethod
    def for_device(cls, device, **overrides) -> SpeedConfig:
        """On CUDA 30 timed runs per point (a step costs milliseconds; on the H200 the medians of 5 runs of a
        random-init Qwen2-7B came out 4-9% above those of 30 and moved more between runs: RTN W4A16 batch 1
        3.009 / 3.079 ms at 5 against 2.802 / 2.774 at 30, ``benchmarks/results/h200_2026-12-01d/repeats/``);
        on the CPU one timed run, no warm-up (nothing to capture or compile) and 32 cached tokens per
        sequence (CPU time is scarce: the batch-8 context is prefilled first). ``overrides`` replace
        fields."""
        dev = {"repeats": 30} if torch.device(device).type == "cuda" else {"repeats": 1, "warmup": 0, "context": 32}
        return cls(**{**dev, **overrides})


def _device_label(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{device.type}:{device.index or 0} {torch.cuda.get_device_name(device)}"
    return f"cpu ({torch.get_num_threads()} thread{'s' if torch.get_num_threads() > 1 else ''})"


def _footprint_bytes(eng: Engine) -> int:
    """Engine weights (matmuls, norms, biases, embedding unless the lm_head shares it) + KV cache."""
    tied = isinstance(eng.w.lm_head, Dense) and eng.w.lm_head.w.data_ptr() == eng.w.embed.data_ptr()
    embed = 0 if tied else eng.w.embed.numel() * eng.w.embed.element_size()
    kv = sum(t.numel() * t.element_size() for t in (eng.k_cache, eng.v_cache))
    return eng.weight_bytes() + embed + kv


def measure_speed(model, config: SpeedConfig | None = None, engine_config=None) -> dict:
    """Time ``model`` (an HF model, quantized by :func:`workbench.quant.quantize` or not) on the
    engine on its own device and dtype, built with ``engine_config`` (an ``EngineConfig``; ``None``: the
    defaults). Returns one row as a dict (columns in the module docstring).

    Raises ``ValueError`` if the model's architecture is not one the engine runs (Llama / Qwen2 /
    Mistral) or the prompt does not fit its context.
    """
    p = next(model.parameters())
    device = p.device
    config = config or SpeedConfig.for_device(device)
    cuda = device.type == "cuda"
    max_seq = max(config.prefill_tokens, config.context + 1)
    if cuda:
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
    eng = convert_for_runtime(model, max_batch=max(config.decode_batches), max_seq=max_seq, config=engine_config)
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    prof = run_profile(eng, ProfileConfig(prompt_lens=(config.prefill_tokens,), prefill_batches=(1,),
                                          decode_batches=config.decode_batches, context_lens=(config.context,),
                                          repeats=config.repeats, warmup=config.warmup),
                       clock=time.perf_counter if cuda else time.process_time)
    row = {"speed_device": _device_label(device), "speed_clock": "wall" if cuda else "process_time",
           "runtime": runtime_label(eng), "engine_weight_bytes": int(eng.weight_bytes())}
    row["route_key"] = eng.route_key()  # which kernel ran each matmul (Engine.route_table), as a short string
    row["route_table"] = eng.route_table().to_json(orient="records")
    for r in prof.itertuples(index=False):
        key = f"prefill_ms_{r.seq_len}" if r.phase == "prefill" else f"decode_ms_b{r.batch}"
        row[key] = float(r.ms)
    if cuda:
        torch.cuda.synchronize(device)
        row["peak_mem_bytes"] = int(torch.cuda.max_memory_allocated(device) - base)
        row["mem_source"] = "cuda max_memory_allocated"
    else:
        row["peak_mem_bytes"] = int(_footprint_bytes(eng))
        row["mem_source"] = "footprint model (weights + KV cache)"
    del eng
    return row
