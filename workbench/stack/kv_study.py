"""KV-cache quantization: fidelity by context position, decode speed and KV bytes at long contexts.

For each window of real text (``[context]`` token ids, teacher-forced), a reference engine with the
compute-dtype cache and one engine per ``kv_dtype`` (:mod:`workbench.engine.kv_cache`; same weights)
prefill the window in chunks, in lockstep. At every position the next-token distributions are
compared (:func:`workbench.eval.fidelity.token_metrics`): ``kl`` = KL(p_ref || p_kv) in nats,
``top1`` = argmax agreement, and each model's NLL of the actual next token. Within a chunk the
queries read their own keys and values from the (quantized) cache, as decode steps do. After chunks
ending at the ``timed`` contexts, one decode step per engine is timed and rolled back.

:func:`by_bucket` pools the per-position rows into position buckets (``[0, 256)``, ``[256, 512)``...).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from workbench.engine import Engine
from workbench.eval.fidelity import token_metrics
from workbench.models import require_trained
from workbench.stats import binomial_ci

__all__ = ["KVStudyConfig", "by_bucket", "kv_speed", "run_kv_study", "run_kv_window"]


@dataclass(frozen=True)
class KVStudyConfig:
    """Sizes of the KV-cache study; ``__post_init__`` raises ValueError naming the field."""

    kv_dtypes: tuple = ("bfloat16", "fp8_e4m3", "int8")  # formats compared with the compute-dtype cache
    context: int = 2048  # tokens per window (the model's context limit for the full study)
    n_windows: int = 1  # windows of real text (each a separate point)
    chunk: int = 256  # tokens per prefill chunk (bounds the attention mask and logits memory)
    timed: tuple = (512, 2048)  # contexts after which one decode step per engine is timed
    repeats: int = 3  # timed decode steps per (engine, context), median kept

    def __post_init__(self):
        from workbench.engine.kv_cache import KV_DTYPES

        bad = [d for d in self.kv_dtypes if d not in KV_DTYPES]
        if bad or not self.kv_dtypes:
            raise ValueError(f"KVStudyConfig.kv_dtypes={self.kv_dtypes!r}: use names from {KV_DTYPES}")
        for f in ("context", "n_windows", "chunk", "repeats"):
            if int(getattr(self, f)) < 1:
                raise ValueError(f"KVStudyConfig.{f}={getattr(self, f)!r} must be >= 1")
        if any(t < 1 or t > self.context for t in self.timed):
            raise ValueError(f"KVStudyConfig.timed={self.timed!r} must lie in [1, context={self.context}]")
        object.__setattr__(self, "kv_dtypes", tuple(self.kv_dtypes))
        object.__setattr__(self, "timed", tuple(sorted(int(t) for t in self.timed)))


def _chunks(n: int, chunk: int, timed: tuple) -> list[tuple[int, int]]:
    """Chunk boundaries ``[(start, end)]`` covering ``[0, n)`` that also end at every timed context."""
    cuts = sorted(set(range(chunk, n, chunk)) | {t for t in timed if t < n} | {n})
    return list(zip([0, *cuts[:-1]], cuts))


@torch.no_grad()
def run_kv_window(model, window: torch.Tensor, config: KVStudyConfig, *, window_id: int = 0, device=None,
                  dtype=None, clock=time.perf_counter) -> pd.DataFrame:
    """Per-position fidelity of every ``config.kv_dtypes`` cache on one ``window`` ``[context]`` int64.

    ``model``: an HF ``*ForCausalLM`` the engine runs. Rows (one per kv dtype and position):
    ``window``, ``kv_dtype``, ``position`` (0-based; the distribution of the token after it),
    ``kl`` (nats), ``top1`` (0/1), ``nll_ref``, ``nll_kv`` (NaN at the last position), ``kv_bytes_per_token``
    (all layers, scales included), ``decode_ms`` (a decode step after ``position + 1`` cached tokens,
    at the timed contexts only, else NaN) and ``ref_decode_ms`` (the same for the reference cache).
    Raises ValueError when the window exceeds the model's context limit, RandomWeightsError for a
    random-init model (fidelity needs trained weights)."""
    require_trained(model, "KV-cache fidelity (KL, top-1 agreement by position)")
    limit = int(getattr(model.config, "max_position_embeddings", 1 << 30))
    n = int(window.numel())
    if n > limit:
        raise ValueError(f"window of {n} tokens exceeds the model's max_position_embeddings={limit}")
    kw = {"max_batch": 1, "max_seq": n + 2, "device": device, "dtype": dtype}
    ref = Engine.from_hf(model, **kw)
    engines = {kd: Engine(ref.spec, ref.w, ref.config, 1, n + 2, ref.dtype, ref.device, kv_dtype=kd)
               for kd in config.kv_dtypes}
    ids = window.reshape(-1).to(torch.int64)
    cols: dict = {kd: {"kl": [], "top1": [], "nll_ref": [], "nll_kv": []} for kd in engines}
    timings: dict = {kd: {} for kd in [*engines, "ref"]}
    for s, e in _chunks(n, config.chunk, config.timed):
        tok = ids[s:e]
        nxt = torch.cat([ids[s + 1:e + 1], torch.full((max(0, e + 1 - n),), -1)])[: e - s]
        lp = ref.runner(0).extend(tok)  # [T, V] on the engine's device
        nxt = nxt.to(lp.device)  # the window stays where the caller has it (the CPU); the metrics run on the device
        for kd, eng in engines.items():
            lq = eng.runner(0).extend(tok)
            m = token_metrics(lp, lq, nxt.clamp(min=0))
            last = nxt < 0
            for c, key in (("kl", "kl"), ("top1", "top1"), ("nll_ref", "nll_p"), ("nll_kv", "nll_q")):
                v = m[key].float()
                if c.startswith("nll"):
                    v = v.masked_fill(last, float("nan"))
                cols[kd][c].append(v.cpu().numpy())
        if e in config.timed:
            for kd, eng in [*engines.items(), ("ref", ref)]:
                timings[kd][e - 1] = _decode_ms(eng, e, config.repeats, clock)
    rows = []
    for kd, c in cols.items():
        df = pd.DataFrame({k: np.concatenate(v) for k, v in c.items()})
        df.insert(0, "position", np.arange(n))
        df.insert(0, "kv_dtype", kd)
        df.insert(0, "window", window_id)
        df["kv_bytes_per_token"] = float(engines[kd].kv_bytes_per_token())
        df["decode_ms"] = df["position"].map(timings[kd]).astype(float)
        df["ref_decode_ms"] = df["position"].map(timings["ref"]).astype(float)
        rows.append(df)
    return pd.concat(rows, ignore_index=True).assign(ref_kv_bytes_per_token=float(ref.kv_bytes_per_token()))


def _decode_ms(engine: Engine, length: int, repeats: int, clock) -> float:
    """One decode step after ``length`` cached tokens (rolled back after each run), median ms."""
    runner, ts = engine.runner(0), []
    tok = torch.zeros(1, dtype=torch.int64)
    for i in range(repeats + 1):
        engine.synchronize()
        t0 = clock()
        runner.extend(tok).argmax(-1).tolist()
        engine.synchronize()
        if i:
            ts.append(1e3 * (clock() - t0))
        runner.truncate(length)
    return float(np.median(ts))


def by_bucket(per_position: pd.DataFrame, edges=(0, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)) -> pd.DataFrame:
    """Pool per-position rows per ``kv_dtype`` and position bucket ``[lo, hi)``: ``kl_mean``,
    ``kl_p95``, ``top1_agreement`` with a 95% Wilson interval (``top1_lo``, ``top1_hi``; positions
    treated as independent, which they are not quite), ``ppl_ref``, ``ppl_kv`` (exp of the mean NLL),
    ``n_positions``. Buckets beyond the data are dropped."""
    df = per_position
    n_max = int(df["position"].max()) + 1
    edges = [e for e in edges if e < n_max] + [n_max]
    df = df.assign(bucket=pd.cut(df["position"], edges, right=False, labels=False))
    rows = []
    for (kd, b), g in df.groupby(["kv_dtype", "bucket"], sort=True):
        lo, hi = edges[int(b)], edges[int(b) + 1]
        agree, n = float(g["top1"].sum()), len(g)
        ci = binomial_ci(int(agree), n)
        rows.append({"kv_dtype": kd, "bucket": f"[{lo}, {hi})", "lo": lo, "hi": hi, "n_positions": n,
                     "kl_mean": float(g["kl"].mean()), "kl_p95": float(g["kl"].quantile(0.95)),
                     "top1_agreement": agree / n, "top1_lo": ci[0], "top1_hi": ci[1],
                     "ppl_ref": float(np.exp(g["nll_ref"].mean())), "ppl_kv": float(np.exp(g["nll_kv"].mean()))})
    return pd.DataFrame(rows)


def kv_speed(per_position: pd.DataFrame) -> pd.DataFrame:
    """Decode speed and KV bytes at the timed contexts: ``kv_dtype``, ``context`` (cached tokens),
    ``decode_ms``, ``ref_decode_ms``, ``slowdown`` (decode / reference), ``kv_mb`` (KV cache of one
    sequence at that context, MB), ``ref_kv_mb``, ``kv_saved_mb``; medians over windows."""
    t = per_position[per_position["decode_ms"].notna()]
    g = t.groupby(["kv_dtype", "position"], sort=True).agg(
        decode_ms=("decode_ms", "median"), ref_decode_ms=("ref_decode_ms", "median"),
        kv_bytes_per_token=("kv_bytes_per_token", "first"), ref_bpt=("ref_kv_bytes_per_token", "first")).reset_index()
    g["context"] = g.pop("position") + 1
    g["slowdown"] = g["decode_ms"] / g["ref_decode_ms"]
    g["kv_mb"] = g["kv_bytes_per_token"] * g["context"] / 1e6
    g["ref_kv_mb"] = g.pop("ref_bpt") * g["context"] / 1e6
    g["kv_saved_mb"] = g["ref_kv_mb"] - g["kv_mb"]
    return g[["kv_dtype", "context", "decode_ms", "ref_decode_ms", "slowdown", "kv_bytes_per_token", "kv_mb",
              "ref_kv_mb", "kv_saved_mb"]]


def run_kv_study(model, tok, config: KVStudyConfig, *, text: str | None = None, device=None, dtype=None,
                 clock=time.perf_counter, name: str | None = None, root=None, progress: bool = False) -> pd.DataFrame:
    """:func:`run_kv_window` on ``config.n_windows`` windows of ``config.context`` tokens of ``text``
    (default WikiText-2 test), one point per window; with ``name``, each finished window is stored
    through :func:`workbench.results.sweep` and a re-run resumes. Returns the per-position rows."""
    from dataclasses import asdict

    from workbench.eval.fidelity import eval_windows

    if text is None:
        from workbench.data import load_text

        text = load_text("wikitext-2", "test")
    windows = eval_windows(tok, text, config.context * config.n_windows, config.context)
    keys = [{"window": i, **asdict(config)} for i in range(windows.shape[0])]

    def fn(key: dict) -> pd.DataFrame:
        return run_kv_window(model, windows[key["window"]], config, window_id=key["window"], device=device,
                             dtype=dtype, clock=clock)

    if name is None:
        return pd.concat([fn(k) for k in keys], ignore_index=True)
    from workbench.results import collect_provenance, data_digest, sweep

    prov = collect_provenance(model, config=asdict(config), data={"windows": data_digest(windows)})
    return sweep(name, keys, fn, provenance=prov, root=root, progress=progress)
