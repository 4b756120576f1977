"""The stacked study (notebook 04): W4A16 x speculative decoding x P/D disaggregation on one target, the KV cache
in FP8 and INT8, and the claims ledger.

``run`` returns a :class:`Result`:

* ``stack``: :class:`workbench.stack.StackResult` of the 8 combinations (batch-1 decode tokens/s and E2E latency
  through the engine, peak memory, goodput under load from per-precision cost models, the multiplicativity
  table, the what-if grids);
* ``timing``: on a GPU with enough memory, the same 8 combinations on a published 7B shape with random weights
  (speed only; its acceptance is the built-in pair's measured alpha, labelled ``synthetic``), else ``None``;
* ``kv``, ``kv_speed``: KV-cache fidelity by context position and decode speed per cache format (trained
  weights only);
* ``vllm`` (``engine="vllm"``): the combinations vLLM runs on this build (base precision and W4A16, with and
  without n-gram drafting) at batch 1 on the same request (:meth:`VLLMEngine.run_stack
  <workbench.studies.vllm_backend.VLLMEngine.run_stack>`), to set beside ``stack``; else ``None``;
* ``ledger``: one row per published claim with the measurement that tests it and a verdict (or "not testable
  here" and why); ``evidence``: what the ledger read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from workbench.studies.base import as_model, check_size, presets, resolve_store, slug
from workbench.studies.engines import resolve_engine

__all__ = ["Config", "Result", "run"]


@dataclass(frozen=True)
class Config:
    """One stacked study; ``__post_init__`` raises ``ValueError`` naming the field."""

    size: str = "demo"  # smoke | demo | full
    device: str = "auto"  # auto (CUDA when present) | cpu | cuda | cuda:N
    dtype: str = "auto"  # auto: bfloat16 on CUDA, float32 on the CPU
    # the engines' compute dtype: auto = bfloat16 on CUDA and on a CPU with native bf16 (torch's CPU INT4 kernels
    # need bf16 activations; workbench.device.engine_dtype), else float32
    engine_dtype: str = "auto"
    threads: int = 1  # torch threads on the CPU: one makes this process's CPU time the step's compute
    draft: str = "int3"  # make_draft name: int3/int4/int8 self-draft, layers-N, a hub id
    quant: str = "rtn"  # W4A16 weights: rtn | awq | gptq
    group_size: int = 64  # must divide the model's widths (SmolLM2: 576)
    k: int = 4  # draft tokens per step
    alpha: float | None = None  # what-if acceptance (synthetic); None: the draft's real acceptance
    prompt_len: int = 64  # the fixed request's prompt tokens
    gen_len: int = 12  # ... and its generated tokens
    n_requests: int = 200  # per simulated load point
    slo_ttft_ms: float | None = None  # None: derived from the baseline
    slo_tpot_ms: float | None = None
    kv_context: int = 1024  # KV-cache study tokens (0: the model's context limit)
    timing_shape: str = ""  # "random:qwen2-7b": the 8 combinations on that shape too (speed only; GPU)
    timing_draft: str = "random:qwen2-0.5b"  # the draft of the timing shape
    ledger: bool = True  # evaluate the claims ledger
    seed: int = 0

    def __post_init__(self):
        check_size(self.size)
        if (self.slo_ttft_ms is None) != (self.slo_tpot_ms is None):
            raise ValueError("Config.slo_ttft_ms and slo_tpot_ms: set both (ms) or neither (derived SLOs)")
        if self.kv_context < 0:
            raise ValueError(f"Config.kv_context={self.kv_context} must be >= 0 (0: the model's context limit)")

    @classmethod
    def from_name(cls, size: str = "demo", device="auto", **overrides) -> Config:
        """``smoke``: a 4-layer truncated draft, a 32-token prompt, 4 new tokens, 60 simulated requests, a
        128-token KV study; ``demo``: the INT3 self-draft, a 64-token prompt, 12 new tokens on the CPU (16 on
        CUDA), 200 simulated requests, the KV study to 1,024 tokens on the CPU (the model's limit on CUDA) and, on
        a GPU with >= 40 GiB, the 7B timing shape; ``full``: the demo's. Raises ``ValueError`` for an unknown size,
        device or field."""
        from workbench.device import Placement
        from workbench.studies.quant import TIMING_SHAPE_MIN_GIB

        p = Placement.resolve(device)
        demo = {"gen_len": 16, "kv_context": 0} if p.cuda else {}
        if p.gpu_memory_gib() >= TIMING_SHAPE_MIN_GIB:
            demo["timing_shape"] = "random:qwen2-7b"
        table = {"smoke": {"draft": "layers-4", "prompt_len": 32, "gen_len": 4, "n_requests": 60, "kv_context": 128},
                 "demo": demo, "full": demo}
        return presets(cls, size, device, table, overrides)

    def stack_config(self, target: str, *, alpha: float | None = None, draft: str | None = None):
        """The :class:`workbench.stack.StackConfig` of this study for ``target`` (``alpha``, ``draft``: for the
        timing shape)."""
        from workbench.pd import SLO
        from workbench.pd.profile import ProfileConfig
        from workbench.pd.sim import LengthDist, WorkloadConfig
        from workbench.stack import StackConfig

        smoke = self.size == "smoke"
        profile = (ProfileConfig(prompt_lens=(16, 32, 48), prefill_batches=(1,), decode_batches=(1, 2, 4),
                                 context_lens=(32,), repeats=1, warmup=0) if smoke else
                   ProfileConfig(prompt_lens=(32, 64, 128), prefill_batches=(1,), decode_batches=(1, 2, 4),
                                 context_lens=(32, 96), repeats=2, warmup=0))
        p_med, o_med = (32, 8) if smoke else (64, 32)  # median prompt / output tokens under load
        workload = WorkloadConfig(self.n_requests, prompt=LengthDist("lognormal", p_med, 8, 4 * p_med, 0.5),
                                  output=LengthDist("lognormal", o_med, 2, 4 * o_med, 0.5), seed=self.seed)
        slo = SLO(self.slo_ttft_ms, self.slo_tpot_ms) if self.slo_ttft_ms is not None else None
        a = self.alpha if alpha is None else alpha
        return StackConfig(target=target, draft=draft or self.draft, quant_method=self.quant,
                           group_size=self.group_size, k=self.k, alpha=a, prompt_len=self.prompt_len,
                           gen_len=self.gen_len, workload=workload, slo=slo, profile=profile, seed=self.seed,
                           splits=((1, 1),) if smoke else ((1, 1), (1, 2), (2, 1)),
                           load_fractions=(0.5, 1.0) if smoke else (0.25, 0.5, 0.75, 1.0, 1.25),
                           table_load=0.5 if smoke else 0.75,
                           whatif_alphas=(0.6, 0.8) if smoke else (0.5, 0.6, 0.7, 0.8, 0.9),
                           whatif_ks=(self.k,) if smoke else (2, 4, 6))


@dataclass(frozen=True)
class Result:
    """Frames of one stacked study (see the module docstring)."""

    stack: object
    timing: object | None
    kv: pd.DataFrame | None
    kv_speed: pd.DataFrame | None
    ledger: pd.DataFrame | None
    evidence: dict | None = field(repr=False)
    config: Config = None
    vllm: pd.DataFrame | None = None  # engine="vllm": the combinations vLLM runs, beside the workbench's (run_stack)


def run(config: Config, *, model, data=None, engine="workbench", store=None, progress: bool = False) -> Result:
    """Measure and simulate the 8 combinations for ``model`` (the target: a ``load_model`` spec or a loaded pair;
    a random-init target needs ``config.alpha``), the KV-cache formats and the claims ledger. ``data``: the text
    the prompt, the KV study and the fidelity rows read (default WikiText-2 test).

    Raises ``ValueError`` for a random-init target without ``alpha``, a draft whose tokenizer differs from the
    target's, or an engine that is not available."""
    from workbench.data import load_text
    from workbench.device import clock_for
    from workbench.models import is_random
    from workbench.spec import make_draft
    from workbench.stack import run_stack
    from workbench.studies.base import placement

    backend = resolve_engine(engine)
    st = resolve_store(store)
    placement(config)  # torch threads
    target, tok = as_model(model, config)
    text = data if isinstance(data, str) else load_text("wikitext-2", "test")
    dev = str(next(target.parameters()).device)
    clock = clock_for(dev)[0]
    draft, _info = make_draft(target, config.draft, tok)
    prompt = tok(text[:20000], add_special_tokens=False)["input_ids"][:config.prompt_len]
    name = slug(f"stack_{_name(target)}")
    from workbench.device import engine_dtype

    res = run_stack(target, draft, config.stack_config(_name(target)), prompt, device=dev,
                    dtype=engine_dtype(config.engine_dtype, dev), clock=clock, name=name,
                    root=st.root, progress=progress)
    timing = _timing(config, res, prompt, st, clock) if config.timing_shape else None
    trained = not is_random(target)
    kv = kv_speed = None
    if trained:
        kv, kv_speed = _kv(target, tok, config, text, clock, st, dev)
    ledger = evidence = None
    if config.ledger:
        evidence, ledger = _ledger(target, tok, config, res, kv, text, st, dev, trained)
    vllm = None
    if not backend.in_process:  # vLLM beside the workbench engine: the combinations it runs, on the same request
        vllm = backend.run_stack(target, tok, config, prompt, store=st, progress=progress)
    return Result(res, timing, kv, kv_speed, ledger, evidence, config, vllm)


def _timing(config: Config, res, prompt, store, clock):
    """The 8 combinations on ``config.timing_shape`` with the built-in pair's measured alpha (synthetic)."""
    import torch

    from workbench.models import load_model
    from workbench.stack import run_stack

    alpha = _measured_alpha(res.points)
    tmodel, _ = load_model(config.timing_shape, dtype=config.dtype, device=config.device)
    draft, _ = load_model(config.timing_draft, dtype=config.dtype, device=config.device)
    match_vocab(draft, tmodel)
    try:
        cfg = config.stack_config(config.timing_shape, alpha=alpha, draft=config.timing_draft)
        return run_stack(tmodel, draft, cfg, prompt, device=config.device, clock=clock,
                         name=slug(f"stack_{config.timing_shape}"), root=store.root)
    finally:
        del tmodel, draft
        torch.cuda.empty_cache()


def match_vocab(draft, target) -> None:
    """Pad (or cut) a random-weight ``draft``'s embedding and LM head, in place, to ``target``'s vocabulary size.

    Real pairs share one tokenizer but not always one embedding size: Qwen2-0.5B has 151,936 rows and Qwen2-7B
    152,064 (padding rows no token maps to), so speculative decoding's check (one vocabulary, ``vocab_size``) refuses
    the timing shapes' pair. The timing pair has random weights and a synthetic acceptance, so resizing the draft
    (``transformers``' ``resize_token_embeddings``, which keeps tied weights tied) changes its LM head's cost by
    128 rows of 151,936 (0.08%) and nothing else. ``draft``, ``target``: HF causal LMs (``config.vocab_size``).
    Raises ``ValueError`` for a draft with real weights (not :func:`workbench.models.is_random`), whose vocabulary
    must match as it is."""
    from workbench.models import is_random

    n = int(target.config.vocab_size)
    if int(draft.config.vocab_size) == n:
        return
    if not is_random(draft):
        raise ValueError(f"draft vocab_size {draft.config.vocab_size} != target's {n}: pick a draft of the "
                         "target's tokenizer and embedding size (only random-weight timing drafts are resized)")
    draft.resize_token_embeddings(n, mean_resizing=False)


def _measured_alpha(points: pd.DataFrame) -> float:
    """The alpha the plain-precision speculative point measured (clipped into [0, 0.99])."""
    spec = points[points["speculative"].astype(bool) & ~points["quantized"].astype(bool)]
    a = float(spec["alpha"].iloc[0]) if len(spec) and "alpha" in spec else 0.7
    return min(max(a, 0.0), 0.99)


def _kv(target, tok, config: Config, text: str, clock, store, dev: str):
    from workbench.stack.kv_study import KVStudyConfig, by_bucket, kv_speed, run_kv_study

    context = config.kv_context or int(target.config.max_position_embeddings)
    kv_dtypes = ("bfloat16" if dev == "cpu" else "float16", "fp8_e4m3", "int8")
    kcfg = KVStudyConfig(kv_dtypes, context=context, chunk=64 if config.size == "smoke" else 1024,
                         timed=(context // 4, context // 2, context))
    rows = run_kv_study(target, tok, kcfg, text=text, clock=clock, name=slug(f"stack_kv_{_name(target)}"),
                        root=store.root)
    return by_bucket(rows), kv_speed(rows)


def _ledger(target, tok, config: Config, res, kv, text: str, store, dev: str, trained: bool):
    from workbench.claims import collect_evidence, evaluate
    from workbench.claims.evidence import kv_evidence, quant_evidence, spec_cost_evidence, stack_evidence
    from workbench.claims.serving import long_prompt_evidence, pd16_evidence, vllm_flags_evidence
    from workbench.pd import HardwareSpec
    from workbench.quant import QuantConfig
    from workbench.studies.quant_sweep import run_quant_sweep

    smoke = config.size == "smoke"
    qrows = None
    if trained:
        qcfgs = [QuantConfig(method="rtn", bits=4, group_size=64)]
        if not smoke:
            qcfgs += [QuantConfig.from_name("rtn_int4_tensor_sym"), QuantConfig.from_name("rtn_int8_channel")]
        cuda = dev.startswith("cuda")
        qrows = run_quant_sweep(target, tok, qcfgs, text=text, n_tokens=256 if smoke else 512,
                                seq_len=128 if smoke else 256, n_questions=None if smoke or cuda else 0,
                                speed=smoke or cuda, name=slug(f"stack_quant_{_name(target)}"), root=store.root,
                                progress=False)
    hw = HardwareSpec.measure(dev, copy_mb=16 if smoke else None)
    cfg = res.config if hasattr(res, "config") else config.stack_config(_name(target))
    ev = collect_evidence(
        stack=stack_evidence(res.table, res.multiplicative, res.points, target=_name(target), device=dev,
                             bandwidth_gbs=hw.hbm_gbs),
        spec_costs=spec_cost_evidence(res.points), kv=kv_evidence(kv) if kv is not None else None,
        quant=quant_evidence(qrows) if qrows is not None else None,
        long_prompt=long_prompt_evidence(res.points, cfg, res.mem_gb), pd16=pd16_evidence(res.points, cfg, res.mem_gb),
        vllm_flags=vllm_flags_evidence(), predictions=_predictions(), seed=config.seed)
    return ev, evaluate(ev)


def _predictions():
    """AIConfigurator's predictions for the claims made on hardware that is not here (claim 1: an RTX 4090, with
    the L40S's tables standing in), labelled as predictions in the ledger; None without AIConfigurator (those
    claims then say "not testable here")."""
    from workbench.predict import available, claim_predictions

    return claim_predictions() if available() else None


def _name(model) -> str:
    from workbench.studies.mmlu import _model_name

    return _model_name(model)
