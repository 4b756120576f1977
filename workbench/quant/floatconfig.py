"""``FloatConfig``: the weight-and-activation formats as llm-compressor names them, and their presets.

Schemes (compressed-tensors 0.19 ``quant_scheme.py``; the rules are in :mod:`workbench.quant.floatref`):

=============  ===========================================  ==============================================
scheme         weights                                      activations (every quantized Linear's input)
=============  ===========================================  ==============================================
``FP8_DYNAMIC``  E4M3, float32 scale per output channel     E4M3 per token, scale at run time
``FP8``          E4M3, one scale per tensor                  E4M3, one calibrated (static) scale per tensor
``FP8_BLOCK``    E4M3, one scale per 128 x 128 block         E4M3 per token and 128 inputs, at run time
``W8A8``         INT8 per channel after SmoothQuant          INT8 per token, at run time
``NVFP4``        E2M1, E4M3 scale per 16, FP32 global scale  same layout, local scales at run time, global calibrated
``NVFP4A16``     as NVFP4                                    none (weight-only)
``MXFP4``        E2M1, E8M0 scale per 32                     same layout, at run time
``MXFP4A16``     as MXFP4                                    none (weight-only)
=============  ===========================================  ==============================================

SmoothQuant (Xiao et al. 2023, arXiv 2211.10438, eq. 4): ``s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)`` per input
channel ``j``, ``X diag(s)^-1`` folded into the RMSNorm before q/k/v and gate/up and ``diag(s) W`` into those
Linears; computed as llm-compressor's ``SmoothQuantModifier`` computes it (``_calculate_smoothing_scales``: the
activation's channel range ``max - min`` for ``max|X_j|``, ``2 max|W_j|`` over the balanced Linears, a floor of 1e-5).

Preset names (``FloatConfig.from_name``) are the scheme names in lower case: ``fp8_dynamic``, ``fp8``,
``fp8_block``, ``w8a8``, ``nvfp4``, ``nvfp4a16``, ``mxfp4``, ``mxfp4a16``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass

from workbench.registry import did_you_mean as _did_you_mean

from .floatref import MX_RULES

__all__ = ["FLOAT_GRIDS", "FLOAT_PRESETS", "FLOAT_SCHEMES", "FloatConfig", "float_grid", "is_float_row"]

# scheme -> (weight kind, weight bits, group_size code, activation kind or None, activation bits, needs calibration)
FLOAT_SCHEMES: dict[str, tuple] = {
    "FP8_DYNAMIC": ("fp8_channel", 8, -1, "fp8_token", 8, False),
    "FP8": ("fp8_tensor", 8, 0, "fp8_static", 8, True),
    "FP8_BLOCK": ("fp8_block", 8, 128, "fp8_group128", 8, False),
    "W8A8": ("int8", 8, -1, "int8_token", 8, True),
    "NVFP4": ("nvfp4", 4, 16, "nvfp4", 4, True),
    "NVFP4A16": ("nvfp4", 4, 16, None, 16, False),
    "MXFP4": ("mxfp4", 4, 32, "mxfp4", 4, False),
    "MXFP4A16": ("mxfp4", 4, 32, None, 16, False),
}
_GRAN = {"fp8_channel": "per_channel", "fp8_tensor": "per_tensor", "fp8_block": "block", "int8": "per_channel",
         "nvfp4": "group", "mxfp4": "group"}
_ELEM = {"fp8_channel": "e4m3", "fp8_tensor": "e4m3", "fp8_block": "e4m3", "int8": "int8", "nvfp4": "e2m1",
         "mxfp4": "e2m1"}


@dataclass(frozen=True)
class FloatConfig:
    """One float (or W8A8 INT8) weight-and-activation format; ``__post_init__`` raises ``ValueError`` naming the
    field and the fix."""

    scheme: str = "FP8_DYNAMIC"  # an llm-compressor scheme name (FLOAT_SCHEMES)
    skip: tuple[str, ...] = ("lm_head",)  # modules left in full precision (llm-compressor's ignore=["lm_head"])
    smoothing_strength: float = 0.5  # SmoothQuant alpha (W8A8 only); 0.5 is the paper's and llm-compressor's default
    n_calib_samples: int = 32  # calibration windows (FP8 static scales, NVFP4 activation global scale, W8A8)
    calib_seq_len: int = 256  # tokens per calibration window
    mx_scale_rule: str = "llm-compressor"  # MXFP4 shared exponent: "llm-compressor" (vLLM) or "ocp" (MX v1.0 6.3)
    seed: int = 0  # calibration window sampling

    def __post_init__(self):
        if not isinstance(self.scheme, str) or self.scheme.upper() not in FLOAT_SCHEMES:
            raise ValueError(f"FloatConfig.scheme={self.scheme!r} is unknown; use one of {sorted(FLOAT_SCHEMES)}."
                             + _did_you_mean(str(self.scheme).upper(), FLOAT_SCHEMES))
        object.__setattr__(self, "scheme", self.scheme.upper())
        skip = (self.skip,) if isinstance(self.skip, str) else tuple(self.skip)
        if not all(isinstance(s, str) for s in skip):
            raise ValueError(f"FloatConfig.skip={self.skip!r} must be module names, e.g. ('lm_head',)")
        object.__setattr__(self, "skip", skip)
        a = self.smoothing_strength
        if isinstance(a, bool) or not isinstance(a, numbers.Real) or math.isnan(a) or not 0 <= a <= 1:
            raise ValueError(f"FloatConfig.smoothing_strength={a!r} must be in [0, 1] (SmoothQuant's alpha; 0.5)")
        for f in ("n_calib_samples", "calib_seq_len"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise ValueError(f"FloatConfig.{f}={v!r} must be an integer >= 1")
        if self.mx_scale_rule not in MX_RULES:
            raise ValueError(f"FloatConfig.mx_scale_rule={self.mx_scale_rule!r}: use one of {MX_RULES}")

    @property
    def weight_kind(self) -> str:
        return FLOAT_SCHEMES[self.scheme][0]

    @property
    def act_kind(self) -> str | None:
        return FLOAT_SCHEMES[self.scheme][3]

    @property
    def needs_calibration(self) -> bool:
        return FLOAT_SCHEMES[self.scheme][5]

    @property
    def label(self) -> str:
        """e.g. ``"FP8_DYNAMIC (W8A8 e4m3)"``, ``"NVFP4A16 (W4A16 e2m1)"``."""
        _, wb, _, _, ab, _ = FLOAT_SCHEMES[self.scheme]
        return f"{self.scheme} (W{wb}A{ab} {_ELEM[self.weight_kind]})"

    def to_row(self) -> dict:
        """Result columns, with the integer presets' names where they mean the same: ``method`` (the scheme in lower
        case), ``w_bits``, ``a_bits``, ``group_size`` (-1 per channel, 0 per tensor, 128 for 128 x 128 blocks),
        ``granularity``, ``symmetric`` (True), ``scheme``, ``label``, ``format`` (``"float"``: a float-format row),
        ``weight_format`` (``e4m3``, ``e2m1``, ``int8``), ``act_quant`` (the activation rule or ``"none"``)."""
        wk, wb, g, ak, ab, _ = FLOAT_SCHEMES[self.scheme]
        d = asdict(self)
        d["skip"] = ",".join(self.skip)
        d.update(method=self.scheme.lower(), w_bits=wb, a_bits=ab, group_size=g, granularity=_GRAN[wk],
                 symmetric=True, label=self.label, format="float", weight_format=_ELEM[wk], act_quant=ak or "none")
        return d

    @classmethod
    def from_name(cls, name: str, **overrides) -> FloatConfig:
        """The preset ``name`` (lower-case scheme name) with field overrides. Raises ``ValueError`` for an unknown
        name, with "did you mean"."""
        if not isinstance(name, str) or name.lower() not in FLOAT_PRESETS:
            raise ValueError(f"float preset {name!r} is unknown; use one of {sorted(FLOAT_PRESETS)}."
                             + _did_you_mean(str(name).lower(), FLOAT_PRESETS))
        return cls(**{**FLOAT_PRESETS[name.lower()], **overrides})


FLOAT_PRESETS: dict[str, dict] = {s.lower(): {"scheme": s} for s in FLOAT_SCHEMES}

# named lists of float presets the quantization study appends to its integer grid (Config.float_grid)
FLOAT_GRIDS: dict[str, tuple[str, ...]] = {
    "all": tuple(FLOAT_PRESETS),
    # the CPU demo: one point per question (FP8 against W4A16; W8A8 INT8; the 4-bit float formats with and
    # without activation quantization)
    "demo_cpu": ("fp8_dynamic", "fp8", "fp8_block", "w8a8", "nvfp4", "nvfp4a16", "mxfp4", "mxfp4a16"),
    "smoke": ("fp8_dynamic", "nvfp4a16"),
    "none": (),
}


def float_grid(name: str, **overrides) -> list[FloatConfig]:
    """The configs of float grid ``name`` (:data:`FLOAT_GRIDS`). Raises ``ValueError`` for an unknown name."""
    if name not in FLOAT_GRIDS:
        raise ValueError(f"float grid {name!r} is unknown; use one of {sorted(FLOAT_GRIDS)}."
                         + _did_you_mean(name, FLOAT_GRIDS))
    return [FloatConfig.from_name(p, **overrides) for p in FLOAT_GRIDS[name]]


def is_float_row(key: dict) -> bool:
    """Whether a sweep key / result row is a float-format point (it has ``scheme`` in :data:`FLOAT_SCHEMES` and
    no integer ``bits`` field)."""
    return "bits" not in key and str(key.get("scheme", "")).upper() in FLOAT_SCHEMES
