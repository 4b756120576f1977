"""Serving workloads: arrival times and prompt/output lengths, generated from a seeded numpy Generator
or taken from a trace DataFrame.

Arrivals: ``poisson`` (exponential gaps, mean ``1 / rate``) or ``gamma`` (gamma gaps with the same mean
and coefficient of variation ``cv``: shape ``1 / cv^2``, scale ``1 / (rate * shape)``; ``cv > 1`` is
burstier than Poisson, ``cv = 1`` is Poisson), as in ``vllm bench serve --burstiness`` (= 1 / cv^2).
The first request arrives at t = 0 (the benchmark start), the next after the first gap.

Named presets (:data:`WORKLOAD_PRESETS`, :meth:`WorkloadConfig.from_name`) are shared by the
notebooks and ``benchmarks/``; a config's :attr:`WorkloadConfig.label` is computed from its fields.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from workbench.validate import check_field_types

__all__ = ["WORKLOAD_PRESETS", "LengthDist", "Workload", "WorkloadConfig", "generate_workload"]

_KINDS = ("fixed", "uniform", "lognormal", "data")


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution: ``fixed`` (= value), ``uniform`` (integers in [low, high]),
    ``lognormal`` (median ``value``, log-sd ``sigma``, clipped to [low, high]), or ``data`` (sampled
    with replacement from ``values``)."""

    kind: str = "fixed"  # one of fixed, uniform, lognormal, data
    value: int = 128  # fixed length, or lognormal median
    low: int = 1  # uniform lower bound / lognormal clip
    high: int = 4096  # uniform upper bound / lognormal clip
    sigma: float = 0.5  # lognormal log-standard deviation
    values: tuple[int, ...] = ()  # empirical lengths for kind="data"

    def __post_init__(self):
        check_field_types(self)  # integer fields take integers; every error names its field
        if self.kind not in _KINDS:
            raise ValueError(f"LengthDist.kind={self.kind!r}; choose one of {_KINDS}")
        if self.kind == "fixed" and self.value < 1:
            raise ValueError(f"LengthDist.value={self.value} must be >= 1 token")
        if self.kind in ("uniform", "lognormal") and not 1 <= self.low <= self.high:
            raise ValueError(f"LengthDist low={self.low}, high={self.high}: need 1 <= low <= high")
        if self.kind == "lognormal" and (self.value < 1 or self.sigma < 0):
            raise ValueError("LengthDist lognormal needs value (median) >= 1 and sigma >= 0")
        if self.kind == "data" and (len(self.values) == 0 or min(self.values) < 1):
            raise ValueError("LengthDist.values must be a non-empty tuple of lengths >= 1 for kind='data'")

    @property
    def short(self) -> str:
        """A few characters for labels: the length (fixed), the median (lognormal), ``low-high``
        (uniform), ``trace`` (data)."""
        return {"fixed": str(self.value), "lognormal": str(self.value), "uniform": f"{self.low}-{self.high}"}.get(
            self.kind, "trace")

    @property
    def max(self) -> int:
        """Largest length this distribution can produce."""
        return {"fixed": self.value, "data": max(self.values) if self.values else 0}.get(self.kind, self.high)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``[n]`` int64 lengths drawn with ``rng``."""
        if self.kind == "fixed":
            return np.full(n, self.value, dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(self.low, self.high + 1, size=n, dtype=np.int64)
        if self.kind == "lognormal":
            x = rng.lognormal(np.log(self.value), self.sigma, size=n)
            return np.clip(np.rint(x), self.low, self.high).astype(np.int64)
        return rng.choice(np.asarray(self.values, dtype=np.int64), size=n, replace=True)


@dataclass(frozen=True)
class WorkloadConfig:
    """A synthetic workload; ``generate_workload`` turns it into arrays (same seed, same arrays)."""

    n_requests: int = 1000  # requests in the run
    rate: float = 1.0  # mean arrival rate, requests/s
    arrival: str = "poisson"  # poisson | gamma
    cv: float = 1.0  # coefficient of variation of the gaps (gamma only); 1 = Poisson, >1 bursty
    prompt: LengthDist = field(default_factory=lambda: LengthDist("fixed", 512))  # prompt tokens
    output: LengthDist = field(default_factory=lambda: LengthDist("fixed", 128))  # output tokens
    seed: int = 0  # numpy Generator seed
    name: str = ""  # preset name, the head of the label ("chat"); empty for an ad-hoc workload

    def __post_init__(self):
        check_field_types(self)  # integer fields take integers; every error names its field
        if self.n_requests < 1:
            raise ValueError(f"WorkloadConfig.n_requests={self.n_requests} must be >= 1")
        if not self.rate > 0 or not np.isfinite(self.rate):
            raise ValueError(f"WorkloadConfig.rate={self.rate} must be a positive, finite requests/s")
        if self.arrival not in ("poisson", "gamma"):
            raise ValueError(f"WorkloadConfig.arrival={self.arrival!r}; choose 'poisson' or 'gamma' "
                             "(for a trace use Workload.from_trace)")
        if not self.cv > 0:
            raise ValueError(f"WorkloadConfig.cv={self.cv} must be > 0 (1 = Poisson)")

    @property
    def label(self) -> str:
        """``"chat: 512 in / 128 out"``: name, prompt and output lengths (medians where lognormal)."""
        lengths = f"{self.prompt.short} in / {self.output.short} out"
        return f"{self.name}: {lengths}" if self.name else lengths

    @classmethod
    def from_name(cls, name: str, **overrides) -> WorkloadConfig:
        """A preset from :data:`WORKLOAD_PRESETS` with fields replaced by ``overrides`` (``n_requests``,
        ``rate``, ``seed``, ...). Unknown names raise ``ValueError`` with a suggestion."""
        if name not in WORKLOAD_PRESETS:
            hint = difflib.get_close_matches(str(name), list(WORKLOAD_PRESETS), n=1)
            msg = f"unknown workload preset {name!r}; choose one of {sorted(WORKLOAD_PRESETS)}"
            raise ValueError(msg + (f" (did you mean {hint[0]!r}?)" if hint else ""))
        return replace(WORKLOAD_PRESETS[name], **overrides)


@dataclass
class Workload:
    """Arrays, one entry per request, sorted by arrival: ``arrival_s`` float64 [n] (s),
    ``prompt_len`` and ``output_len`` int64 [n] (tokens)."""

    arrival_s: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray

    def __post_init__(self):
        self.arrival_s = np.asarray(self.arrival_s, dtype=np.float64)
        self.prompt_len = np.asarray(self.prompt_len, dtype=np.int64)
        self.output_len = np.asarray(self.output_len, dtype=np.int64)
        n = len(self.arrival_s)
        if n == 0 or len(self.prompt_len) != n or len(self.output_len) != n:
            raise ValueError("Workload arrays must be non-empty and of equal length")
        if np.any(np.diff(self.arrival_s) < 0) or self.arrival_s[0] < 0:
            raise ValueError("Workload.arrival_s must be >= 0 and sorted ascending")
        if self.prompt_len.min() < 1 or self.output_len.min() < 1:
            raise ValueError("Workload prompt_len and output_len must be >= 1 token")

    def __len__(self) -> int:
        return len(self.arrival_s)

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame({"arrival_s": self.arrival_s, "prompt_len": self.prompt_len,
                             "output_len": self.output_len})

    @classmethod
    def from_trace(cls, df: pd.DataFrame) -> Workload:
        """From a trace with columns ``arrival_s``, ``prompt_len``, ``output_len`` (sorted here)."""
        missing = {"arrival_s", "prompt_len", "output_len"} - set(df.columns)
        if missing:
            raise ValueError(f"trace DataFrame lacks columns {sorted(missing)}")
        df = df.sort_values("arrival_s", kind="stable")
        return cls(df["arrival_s"].to_numpy(), df["prompt_len"].to_numpy(), df["output_len"].to_numpy())


# Lognormal lengths, clipped: a chat service (median 512 prompt tokens, 128 output tokens) and
# long-prompt requests (retrieval, summarisation) with the same outputs; this workbench's choices, not
# a published trace. Rate, size and seed are set per study (from_name overrides).
WORKLOAD_PRESETS: dict[str, WorkloadConfig] = {
    "chat": WorkloadConfig(name="chat", prompt=LengthDist("lognormal", 512, 16, 4096, 0.8),
                           output=LengthDist("lognormal", 128, 2, 2048, 0.8)),
    "long-prompt": WorkloadConfig(name="long prompt", prompt=LengthDist("lognormal", 2048, 64, 8192, 0.5),
                                  output=LengthDist("lognormal", 128, 2, 2048, 0.8)),
}


def generate_workload(config: WorkloadConfig) -> Workload:
    """Draw arrivals then prompt lengths then output lengths from ``np.random.default_rng(seed)``."""
    rng = np.random.default_rng(config.seed)
    n = config.n_requests
    if config.arrival == "poisson":
        gaps = rng.exponential(1.0 / config.rate, size=n)
    else:
        shape = 1.0 / config.cv**2
        gaps = rng.gamma(shape, 1.0 / (config.rate * shape), size=n)
    arrival = np.concatenate([[0.0], np.cumsum(gaps[:-1])])
    return Workload(arrival, config.prompt.sample(rng, n), config.output.sample(rng, n))
