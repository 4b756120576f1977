"""The prefill/decode study (notebook 03): a timing profile here against the roofline, the serving simulator
checked against a real continuous-batching loop, and a projection of colocated, chunked-prefill (Sarathi-Serve,
arXiv 2403.02310) and disaggregated (DistServe arXiv 2401.09670, Splitwise arXiv 2311.18677) deployments of a
7B-class model on a datasheet GPU at equal GPU count.

``run`` returns a :class:`Result`:

* ``hardware``: the bandwidth and matmul rate measured here; ``profile``: prefill ms vs tokens and decode ms vs
  batch with their roofline floors; ``cost``: the fitted :class:`~workbench.pd.CostModel` and ``residuals``;
* ``real``, ``drift``, ``sim_vs_real``: the real loop's requests, the profile re-timed after it, and the
  simulator's prediction beside the measurement (error = sim / real - 1, flagged where the machine drifted);
* ``quantiles``, ``summary``: the simulated projection (TTFT / TPOT quantiles, goodput, SLO attainment per
  deployment, workload and rate); ``verdict``: colocated against disaggregated on the same requests;
  ``capacity``: the highest rate at which >= 90% of requests meet the SLOs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from functools import partial

import pandas as pd

from workbench.studies.base import as_model, check_size, presets, provenance, resolve_store, slug
from workbench.studies.engines import resolve_engine

__all__ = ["PREDICT_SYSTEMS", "Config", "Result", "predictions", "run"]

# the systems notebook 03 asks AIConfigurator about by default (workbench.predict.systems() lists them all)
PREDICT_SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm", "l40s")


@dataclass(frozen=True)
class Config:
    """One P/D study; ``__post_init__`` raises ``ValueError`` naming the field."""

    size: str = "demo"  # smoke | demo | full
    device: str = "auto"  # where the profile and the real loop run
    dtype: str = "auto"  # auto: bfloat16 on CUDA, float32 on the CPU
    threads: int = 1  # torch threads on the CPU: one makes this process's CPU time the step's compute
    profile: str = "device"  # "device": ProfileConfig.for_device; "smoke": a few points
    real_loop: bool = True  # run the real serving loop and compare the simulator with it
    loop_requests: int = 12  # real-loop requests (24 on CUDA)
    loop_rate: float = 0.3  # real-loop arrivals, req/s
    loop_prompt: int = 64  # real-loop prompt tokens
    loop_output_max: int = 24  # real-loop output tokens ~ uniform(4, this)
    vllm_loads: tuple = (0.25, 0.6, 1.0)  # engine="vllm": Poisson loads, fractions of the simulated saturation rate
    vllm_max_num_seqs: int = 16  # engine="vllm": the server's --max-num-seqs (the simulator's max_batch)
    vllm_max_num_batched_tokens: int = 128  # engine="vllm": --max-num-batched-tokens (the chunk budget)
    preset_model: str = "qwen2-7b"  # the projected model (workbench.pd.ModelSpec.from_name)
    preset_hw: str = "h200"  # the projected GPU (workbench.pd.HardwareSpec.from_name)
    slo_ttft_ms: float = 400.0  # the "chat" SLO preset
    slo_tpot_ms: float = 40.0
    workloads: tuple = ("chat", "long-prompt")  # workbench.pd.sim.WORKLOAD_PRESETS
    n_requests: int = 3000  # simulated requests per point
    rates: tuple = (5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 120)  # req/s
    splits: tuple = ((1, 1), (1, 2), (2, 1), (1, 3))  # (n_prefill, n_decode) GPUs
    chunk_budgets: tuple = (256, 512, 2048)  # chunked-prefill token budgets
    link_gbs: tuple = (25.0, None)  # KV link GB/s; None: the preset GPU's own link
    copy_mb: int | None = None  # bandwidth-measurement buffer (None: 64 MiB on the CPU, 1 GiB on a GPU)
    seed: int = 0

    def __post_init__(self):
        check_size(self.size)
        for f, cast in (("workloads", str), ("rates", float), ("chunk_budgets", int), ("vllm_loads", float)):
            v = getattr(self, f)
            v = tuple(x.strip() for x in v.split(",")) if isinstance(v, str) else v
            object.__setattr__(self, f, tuple(cast(x) for x in v))
        object.__setattr__(self, "splits", tuple(tuple(int(x) for x in s) for s in self.splits))
        if self.profile not in ("device", "smoke"):
            raise ValueError(f"Config.profile={self.profile!r}: 'device' (ProfileConfig.for_device) or 'smoke'")
        if self.loop_requests < 1 or self.loop_rate <= 0 or self.n_requests < 1 or not self.rates:
            raise ValueError("Config.loop_requests and n_requests must be >= 1, loop_rate > 0, rates non-empty")
        if min(self.rates) <= 0 or self.slo_ttft_ms <= 0 or self.slo_tpot_ms <= 0:
            raise ValueError("Config.rates and the SLOs must be positive")
        if not self.vllm_loads or min(self.vllm_loads) <= 0:
            raise ValueError(f"Config.vllm_loads={self.vllm_loads!r}: positive fractions of the saturation rate, e.g. "
                             "(0.25, 0.6, 1.0)")

    @classmethod
    def from_name(cls, size: str = "demo", device="auto", **overrides) -> Config:
        """``smoke``: a few profile points, 4 real-loop requests, 300 simulated requests at 10/40/80 req/s, one
        split; ``demo``: the device's profile (3 timed runs per point on the CPU), 12 real-loop requests on the
        CPU, 24 on CUDA, 3,000 simulated requests at 12 rates, four splits, three chunk budgets, two links;
        ``full``: the demo's grid. Raises ``ValueError`` for an unknown size, device or field."""
        from workbench.device import resolve_device

        cuda = resolve_device(device).type == "cuda"
        demo = {"loop_requests": 24 if cuda else 12}
        table = {"smoke": {"profile": "smoke", "loop_requests": 4, "loop_prompt": 32, "loop_output_max": 8, "n_requests": 300,
                               "rates": (10, 40, 80), "workloads": ("chat",), "splits": ((1, 1),), "chunk_budgets": (512,),
                               "link_gbs": (None,), "copy_mb": 16},
                 "demo": demo, "full": demo}
        return presets(cls, size, device, table, overrides)

    def profile_config(self, device):
        """The :class:`workbench.pd.profile.ProfileConfig` of :attr:`profile` on ``device``."""
        from workbench.pd.profile import ProfileConfig

        if self.profile == "smoke":
            return ProfileConfig(prompt_lens=(8, 32), prefill_batches=(1, 2), decode_batches=(1, 2, 4),
                                 context_lens=(16,), repeats=2)
        return ProfileConfig.for_device(device)


@dataclass(frozen=True)
class Result:
    """Frames of one P/D study (see the module docstring)."""

    hardware: object
    profile: pd.DataFrame
    cost: object
    residuals: pd.DataFrame
    real: pd.DataFrame | None
    drift: pd.DataFrame | None
    sim_vs_real: pd.DataFrame | None
    quantiles: pd.DataFrame
    summary: pd.DataFrame
    verdict: object
    capacity: pd.DataFrame
    deployments: dict = field(repr=False)
    projection: dict = field(repr=False)  # spec, hw, cost, slo, base SimConfig of the projection
    config: Config = None
    provenance: dict = field(default=None, repr=False)


def profile_here(model, config: Config, placement):
    """Profile ``model`` on the config's device: ``(hardware, profile with floors, runner, clock, sleep)``."""
    from workbench.pd import HardwareSpec, ModelSpec
    from workbench.pd.profile import make_runner, run_profile, with_floors

    hw = HardwareSpec.measure(placement.device, copy_mb=config.copy_mb)
    el = next(model.parameters()).element_size()
    spec = ModelSpec.from_hf_config(model.config, name=_name(model), bytes_per_param=el, bytes_per_kv=el)
    pcfg = config.profile_config(placement.device)
    runner = make_runner(model, max_batch=max(pcfg.max_batch, 8), max_seq=pcfg.max_seq + 64)
    clock, sleep = placement.clock()
    return hw, with_floors(run_profile(runner, pcfg, clock=clock), spec, hw), runner, clock, sleep


def real_loop(runner, profile, cost, config: Config, placement, clock, sleep):
    """The real continuous-batching loop (prefill first) on a Poisson workload, the drift check around it and the
    simulator's prediction beside it: ``(real, drift, sim_vs_real)``."""
    from workbench.pd.loop import compare_to_sim, run_serving, sim_config_for
    from workbench.pd.profile import drift_check
    from workbench.pd.sim import LengthDist, WorkloadConfig, generate_workload

    wl = generate_workload(WorkloadConfig(
        n_requests=config.loop_requests, rate=config.loop_rate, prompt=LengthDist("fixed", config.loop_prompt),
        output=LengthDist("uniform", low=4, high=config.loop_output_max), seed=config.seed))
    real = run_serving(runner, wl, max_prefill_batch=2, clock=clock, sleep=sleep)
    drift = drift_check(runner, profile, config.profile_config(placement.device), clock=clock)
    cmp = compare_to_sim(real, wl, cost, sim_config_for(runner, max_prefill_batch=2), drift=drift)
    return real, drift, cmp


def projection(config: Config, store, backend, progress: bool = True):
    """The simulated grid of the preset model on the preset GPU: ``(quantiles, summary, deployments, parts)``."""
    from workbench.pd import CostModel, HardwareSpec, ModelSpec
    from workbench.pd.sim import (
        SLO,
        SimConfig,
        WorkloadConfig,
        deployment_grid,
        grid_frames,
        grid_points,
        run_grid_point,
    )
    from workbench.results import collect_provenance

    spec, hw = ModelSpec.from_name(config.preset_model), HardwareSpec.from_name(config.preset_hw)
    cost = CostModel.from_roofline(spec, hw)
    slo = SLO(ttft_ms=config.slo_ttft_ms, tpot_ms=config.slo_tpot_ms)
    base = SimConfig.for_hardware(spec, hw)
    workloads = {w.label: w for w in (WorkloadConfig.from_name(n, n_requests=config.n_requests, seed=config.seed)
                                      for n in config.workloads)}
    grid = deployment_grid(base, splits=config.splits, chunk_budgets=config.chunk_budgets,
                           link_gbs=tuple(base.link_gbs if x is None else x for x in config.link_gbs))
    points = grid_points(workloads, grid, list(config.rates), cost, slo)
    prov = collect_provenance(None, seed=config.seed, data={"workloads": {k: asdict(w) for k, w in workloads.items()}},
                              engine={"name": "simulator"})
    rows = store.sweep(slug(f"pd_grid_{config.preset_model}_{config.preset_hw}"), points, partial(
        run_grid_point, workloads=workloads, deployments=grid, cost=cost, slo=slo), provenance=prov, progress=progress)
    quantiles, summary = grid_frames(rows, points)
    return quantiles, summary, grid, {"spec": spec, "hw": hw, "cost": cost, "slo": slo, "base": base,
                                      "workloads": workloads}


def run(config: Config, *, model, data=None, engine="workbench", store=None, progress: bool = True) -> Result:
    """Profile ``model`` here (a ``load_model`` spec or a loaded pair), fit its cost model, run the real loop
    against the simulator (``config.real_loop``), and simulate the projection grid, each point stored as it
    finishes. ``data`` is unused (the workloads are generated from the config's seed).

    Raises ``ValueError`` for a model the engine does not run (naming the supported families) or an engine that
    is not available."""
    from workbench.pd import CostModel
    from workbench.pd.sim import slo_capacity
    from workbench.pd.verdict import compare_deployments
    from workbench.studies.base import placement as placement_of

    backend = resolve_engine(engine)
    st = resolve_store(store)
    place = placement_of(config)
    m, _tok = as_model(model, config)
    real = drift = cmp = None
    if not backend.in_process:  # the server is profiled and checked over HTTP (VLLMEngine.run_pd)
        from workbench.pd import HardwareSpec, ModelSpec
        from workbench.pd.profile import with_floors

        hw = HardwareSpec.measure(place.device, copy_mb=config.copy_mb)
        got = backend.run_pd(m, _tok, config, store=st, progress=progress)
        prof, cost, real, drift, cmp = (got[k] for k in ("profile", "cost", "real", "drift", "sim_vs_real"))
        el = 4 if backend.dtype == "float32" else 2  # the server's weights and KV cache
        prof = with_floors(prof, ModelSpec.from_hf_config(m.config, name=_name(m), bytes_per_param=el,
                                                          bytes_per_kv=el), hw)
    else:
        hw, prof, runner, clock, sleep = profile_here(m, config, place)
        cost = CostModel.fit(prof)
        if config.real_loop:
            real, drift, cmp = real_loop(runner, prof, cost, config, place, clock, sleep)
    quantiles, summary, grid, parts = projection(config, st, backend, progress)
    w0 = next(iter(parts["workloads"]))
    base = parts["base"]
    colocated = replace(base, policy="colocated", n_instances=2).label
    disaggregated = replace(base, policy="disaggregated", n_prefill=1, n_decode=1).label
    s0 = summary[summary["workload"] == w0]
    verdict = compare_deployments(s0, colocated, disaggregated)
    prov = provenance(m, config, backend)
    return Result(hw, prof, cost, cost.residuals(prof), real, drift, cmp, quantiles, summary, verdict,
                  slo_capacity(s0), grid, parts, config, prov)


def _name(model) -> str:
    from workbench.studies.mmlu import _model_name

    return _model_name(model)


def predictions(config: Config, res, systems=PREDICT_SYSTEMS, *, engine: str = "vllm", total_gpus: int = 2,
                seed: int = 0) -> pd.DataFrame:
    """AIConfigurator's estimate for the study's projected model (``config.preset_model``) under the study's SLO,
    for each of ``systems`` in ``engine`` (:func:`workbench.predict.serving_table`: aggregated and disaggregated,
    TTFT, TPOT, goodput, the P:D split it would pick), at the median prompt and output lengths of the study's first
    workload (AIConfigurator models fixed lengths; the medians are in the ``isl`` / ``osl`` columns), on
    ``total_gpus`` GPUs like the simulated deployments. Every row is labelled "predicted for <system> in
    <engine>": a prediction from measured kernel tables, not a measurement here.

    Raises :class:`workbench.predict.PredictUnavailableError` (with the install command) without AIConfigurator,
    ``ValueError`` for a model or system it does not support."""
    import numpy as np

    from workbench.pd import SLO
    from workbench.predict import serving_table

    wl = next(iter(res.projection["workloads"].values()))
    rng = np.random.default_rng(seed)
    isl = int(np.median(wl.prompt.sample(rng, 2000)))
    osl = int(np.median(wl.output.sample(rng, 2000)))
    df = serving_table(config.preset_model, list(systems), engine, slo=SLO(config.slo_ttft_ms, config.slo_tpot_ms),
                       isl=isl, osl=osl, total_gpus=total_gpus)
    return df.assign(isl=isl, osl=osl)
