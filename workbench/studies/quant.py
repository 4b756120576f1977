"""The quantization study (notebook 01): RTN, AWQ, GPTQ (and the float formats) on one model -- real bytes,
fidelity to the full-precision model (KL(p_fp || p_q), top-1 agreement, perplexity on WikiText-2 test), MMLU with
95% intervals, and speed on the engine (decode ms per token at each batch, prefill, peak memory).

``run(config, *, model, data, engine, store)`` returns a :class:`Result`:

* ``grid``: one row per quantization point (:func:`workbench.studies.quant_sweep.run_quant_point`'s columns), the
  full-precision point first;
* ``layers``: the per-layer weight error of ``config.layer_configs`` (where the error lands);
* ``takeaways``: :func:`workbench.quant.takeaways` of the grid (paired differences with 95% intervals);
* ``timing``: on a GPU, the W4A16 runtimes timed on a published 7B shape with random weights (speed and memory
  only, ``weights`` says so), else ``None``.

AWQ (Lin et al. 2023, arXiv 2306.00978) and GPTQ (Frantar et al. 2022, arXiv 2210.17323) calibrate on WikiText-2
valid; every fidelity figure is on WikiText-2 test.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from workbench.studies.base import as_model, check_size, presets, provenance, resolve_store, slug
from workbench.studies.engines import resolve_engine

__all__ = ["DEMO_SUBJECTS", "Config", "Data", "Result", "load_data", "run", "speed_takeaways"]

# ten MMLU subjects from all four categories (STEM, humanities, social sciences, other), for the CPU demo
DEMO_SUBJECTS = ("abstract_algebra", "business_ethics", "college_chemistry", "high_school_macroeconomics",
                 "high_school_us_history", "logical_fallacies", "marketing", "moral_disputes", "professional_law",
                 "us_foreign_policy")
TIMING_SHAPE_MIN_GIB = 40  # GPU memory for the 7B timing shape: the model, its quantized copy and an engine


@dataclass(frozen=True)
class Config:
    """Sizes of one quantization study; ``__post_init__`` raises ``ValueError`` naming the field."""

    size: str = "demo"  # smoke | demo | full
    device: str = "auto"  # auto (CUDA when present) | cpu | cuda | cuda:N
    dtype: str = "auto"  # auto: bfloat16 on CUDA, float32 on the CPU
    grid: str = "demo_cpu"  # a name in workbench.quant.GRIDS
    n_tokens: int = 1024  # WikiText-2 test tokens for KL, top-1 and perplexity
    seq_len: int = 256  # non-overlapping evaluation windows
    n_questions: int = 1  # MMLU questions per subject (0: no MMLU)
    formulation: str = "mmlu_continuation"  # lm-eval's cloze task (acc_norm) or "mmlu" (letters)
    n_shot: int = 0  # MMLU exemplars (lm-eval's mmlu_continuation default: 0)
    subjects: tuple | None = DEMO_SUBJECTS  # MMLU subjects; None: all 57
    n_calib: int = 4  # AWQ / GPTQ calibration windows
    calib_len: int = 128  # tokens per calibration window
    awq_tokens: int = 256  # tokens AWQ scores each scale on
    speed: bool = True  # time every point on the engine
    # the timed engines' compute dtype: auto = bfloat16 on CUDA and on a CPU with native bf16 (where torch's CPU
    # INT4 / INT8 kernels run; workbench.device.engine_dtype), else float32; quality uses the model's own dtype
    speed_dtype: str = "auto"
    prefill_tokens: int = 512  # prompt of the timed prefill
    timing_shape: str = ""  # "random:qwen2-7b": also time the W4A16 runtimes on that shape (GPU; "" off)
    layer_configs: tuple = ("rtn_int4_tensor_sym", "rtn_int4_g32")  # per-layer error maps of these presets
    # float formats (FP8_DYNAMIC, FP8, FP8_BLOCK, W8A8, NVFP4, MXFP4...): a name in workbench.quant.floatconfig.FLOAT_GRIDS
    # appended to the grid ("none": integer formats only); quality only, the sweep times no float kernel
    float_grid: str = "none"
    seed: int = 0  # MMLU sample

    def __post_init__(self):
        from workbench.quant import GRIDS

        check_size(self.size)
        if self.grid not in GRIDS:
            from workbench.registry import unknown_name_message

            raise ValueError(unknown_name_message("quantization grid", self.grid, GRIDS))
        if isinstance(self.subjects, str):
            object.__setattr__(self, "subjects", tuple(s.strip() for s in self.subjects.split(",") if s.strip()))
        from workbench.quant.floatconfig import FLOAT_GRIDS

        if self.float_grid not in FLOAT_GRIDS:
            from workbench.registry import unknown_name_message

            raise ValueError(unknown_name_message("float-format grid", self.float_grid, FLOAT_GRIDS))
        if self.formulation not in ("mmlu", "mmlu_continuation"):
            raise ValueError(f"Config.formulation={self.formulation!r}: use 'mmlu_continuation' or 'mmlu'")
        for f in ("n_tokens", "seq_len", "n_calib", "calib_len", "awq_tokens", "prefill_tokens"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"Config.{f}={v!r} must be an integer >= 1")
        if self.n_questions < 0 or not 0 <= self.n_shot <= 5:
            raise ValueError(f"Config.n_questions={self.n_questions} must be >= 0 and n_shot={self.n_shot} in 0..5")
        if self.timing_shape and not self.timing_shape.startswith("random:"):
            raise ValueError(f"Config.timing_shape={self.timing_shape!r}: a random-init published shape such as "
                             "'random:qwen2-7b' (speed only), or '' for none")

    @classmethod
    def from_name(cls, size: str = "demo", device="auto", **overrides) -> Config:
        """The named size on ``device``.

        * ``smoke``: two RTN points, 256 tokens, 2 x 2 MMLU questions, prefill of 64 tokens (CI).
        * ``demo``: on the CPU 6 points (RTN INT8 to INT3, AWQ and GPTQ INT4) and the 8 float formats (``float_grid``)
          on 1,024 tokens, MMLU one question
          from each of :data:`DEMO_SUBJECTS`, calibration 4 x 128 tokens; on CUDA 10 points on 4,096 tokens, 570
          MMLU questions, 32 x 256 calibration tokens, and, with >= 40 GiB of GPU memory, the W4A16 runtimes on
          the Qwen2-7B shape (random weights, speed only).
        * ``full``: all 26 points and the 8 float formats, 4,096 tokens, 570 MMLU questions, 32 x 256 calibration tokens.

        ``overrides`` replace fields (``None`` keeps the preset's). Raises ``ValueError`` for an unknown size,
        device or field."""
        from workbench.device import Placement

        p = Placement.resolve(device)
        big = {"n_tokens": 4096, "n_questions": 10, "subjects": None, "n_calib": 32, "calib_len": 256, "awq_tokens": 2048}
        table = {
            "smoke": {"grid": "smoke", "n_tokens": 256, "seq_len": 128, "n_questions": 2, "subjects": ("astronomy", "marketing"),
                          "prefill_tokens": 64, "layer_configs": ("rtn_int4_tensor_sym",)},
            "demo": dict(grid="demo", **big, float_grid="all",
                         timing_shape="random:qwen2-7b" if p.gpu_memory_gib() >= TIMING_SHAPE_MIN_GIB else "")
            if p.cuda else {"grid": "demo_cpu", "float_grid": "demo_cpu"},
            "full": dict(grid="full", **big, float_grid="all"),
        }
        return presets(cls, size, device, table, overrides)


@dataclass(frozen=True)
class Data:
    """Evaluation text (WikiText-2 test by default) and the MMLU questions and dev split (``None`` without MMLU)."""

    text: str = field(repr=False)
    questions: pd.DataFrame | None = field(default=None, repr=False)
    dev: pd.DataFrame | None = field(default=None, repr=False)


def load_data(config: Config) -> Data:
    """WikiText-2 test and ``config.n_questions`` MMLU questions per subject (none when 0)."""
    from workbench.data import load_text
    from workbench.studies.quant_sweep import _mmlu_data

    q, d = _mmlu_data(config.n_questions, config.subjects, config.seed) if config.n_questions else (None, None)
    return Data(load_text("wikitext-2", split="test"), q, d)


@dataclass(frozen=True)
class Result:
    """Frames of one quantization study (see the module docstring)."""

    grid: pd.DataFrame
    layers: pd.DataFrame
    takeaways: pd.DataFrame
    timing: pd.DataFrame | None
    config: Config
    provenance: dict = field(repr=False)


def run(config: Config, *, model, data: Data | None = None, engine="workbench", store=None,
        progress: bool = True) -> Result:
    """Quantize ``model`` (a ``load_model`` spec or a loaded pair) at every point of ``config.grid``, measure each
    point and store it as it finishes (a re-run computes only what is missing).

    Raises ``ValueError`` for a random-init model (fidelity and MMLU need trained weights; time such a shape
    with ``timing_shape``), an architecture the quantizer does not know, or an engine that is not available."""
    from workbench.quant import QuantConfig, quant_grid, quantize, takeaways
    from workbench.studies.quant_sweep import run_quant_sweep
    from workbench.studies.speed import SpeedConfig

    backend = resolve_engine(engine)
    m, tok = as_model(model, config)
    backend = _timed_in(backend, config, m)
    data = data or load_data(config)
    st = resolve_store(store)
    name = slug(f"quant_{_name(m)}_{config.grid}")
    speed = SpeedConfig.for_device(config.device if config.device != "auto" else m.device,
                                   prefill_tokens=config.prefill_tokens) if config.speed else False
    configs = quant_grid(config.grid, n_calib_samples=config.n_calib, calib_seq_len=config.calib_len,
                         awq_max_tokens=config.awq_tokens)
    prov = provenance(m, config, backend)
    if not backend.in_process:  # (the vLLM engine measures the integer grid; float formats: workbench engine only)
        grid = backend.run_quant(m, tok, configs, config, data=data, store=st, provenance=prov)
    else:
        # -- float formats (workbench.quant.floatconfig), after the integer points ---------------------------------
        from workbench.quant.floatconfig import float_grid

        configs = configs + float_grid(config.float_grid, n_calib_samples=config.n_calib, calib_seq_len=config.calib_len)
        grid = run_quant_sweep(m, tok, configs, text=data.text, n_tokens=config.n_tokens, seq_len=config.seq_len,
                               n_questions=config.n_questions, n_shot=config.n_shot, formulation=config.formulation,
                               subjects=list(config.subjects) if config.subjects else None, speed=speed,
                               name=name, root=st.root, progress=progress, engine=backend, mmlu_seed=config.seed)
    grid = grid.assign(engine=backend.name)
    layers = pd.concat([quantize(m, QuantConfig.from_name(c))[1].assign(config=QuantConfig.from_name(c).label)
                        for c in config.layer_configs], ignore_index=True) if config.layer_configs else pd.DataFrame()
    timing = None
    if config.timing_shape and backend.in_process:
        timing = _timing(config, speed, st, backend, progress)
    return Result(grid, layers, takeaways(grid), timing, config, prov)


def _timed_in(backend, config: Config, model):
    """``backend`` with its engines' compute dtype set from ``config.speed_dtype`` (the workbench engine only, and
    only where its ``EngineConfig`` leaves ``compute_dtype`` unset): the dtype is then in every timed point's
    provenance and results key."""
    from dataclasses import replace

    from workbench.device import dtype_name, engine_dtype
    from workbench.studies.engines import WorkbenchEngine

    if not (config.speed and isinstance(backend, WorkbenchEngine)) or backend.engine_config().compute_dtype:
        return backend
    dt = dtype_name(engine_dtype(config.speed_dtype, next(model.parameters()).device))
    return WorkbenchEngine(config=replace(backend.engine_config(), compute_dtype=dt))


def _timing(config: Config, speed, store, backend, progress: bool) -> pd.DataFrame:
    """The ``timing`` grid's W4A16 runtimes on ``config.timing_shape`` (random weights: speed and memory only)."""
    import torch

    from workbench.models import load_model
    from workbench.quant import quant_grid
    from workbench.studies.quant_sweep import run_quant_speed

    tmodel, ttok = load_model(config.timing_shape, dtype=config.dtype, device=config.device)
    try:
        return run_quant_speed(tmodel, ttok, quant_grid("timing", n_calib_samples=4, calib_seq_len=128,
                                                        awq_max_tokens=512, awq_grid=4),
                               speed=speed, name=slug(f"quant_speed_{config.timing_shape}"), root=store.root,
                               progress=progress, engine=backend)
    finally:
        del tmodel
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


SPEED_TOLERANCE = {"wall": 0.10, "process_time": 0.25}  # a ratio within 1 +- this is not read as a difference:
# the medians of 5 and 30 timed runs of one CUDA point differed by 4-9% (h200_2026-12-01d/repeats), and a single
# CPU-time run of the CPU demo moves by up to ~20% between runs on a shared 2-core machine


def speed_takeaways(grid: pd.DataFrame, batches=(1, 8)) -> list[str]:
    """One sentence per quantized point and batch: its decode ms per token against the full-precision row's, as
    "x faster" / "x slower" only where the ratio lies outside :data:`SPEED_TOLERANCE` for the row's clock, else
    "no difference read"; each sentence names the kernels that ran (``runtime``). Empty without timings."""
    out = []
    fp = grid[grid["method"] == "fp"] if "method" in grid else grid.iloc[:0]
    for b in batches:
        col = f"decode_ms_b{b}"
        if col not in grid or not len(fp) or pd.isna(fp[col].iloc[0]):
            continue
        base = float(fp[col].iloc[0])
        for r in grid[grid["method"] != "fp"].itertuples(index=False):
            ms = getattr(r, col)
            if pd.isna(ms):
                continue
            tol = SPEED_TOLERANCE.get(getattr(r, "speed_clock", "wall"), 0.25)
            ratio = base / float(ms)
            word = (f"{ratio:.2f}x faster" if ratio > 1 + tol else f"{1 / ratio:.2f}x slower" if ratio < 1 - tol
                    else f"no difference read (ratio {ratio:.2f}, tolerance +-{tol:.0%})")
            out.append(f"batch {b}: {r.label} {float(ms):.2f} ms/token vs FP {base:.2f}: {word} "
                       f"[{getattr(r, 'runtime', '?')}]")
    return out


def _name(model) -> str:
    from workbench.studies.mmlu import _model_name

    return _model_name(model)
