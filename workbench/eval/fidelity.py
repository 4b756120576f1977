"""Fidelity of a modified model (quantized, distilled...) to its full-precision reference, per token.

Metrics on the same held-out token windows, at every position:

* ``kl``: ``KL(p_fp || p_q) = sum_v p_fp(v) (log p_fp(v) - log p_q(v))`` in nats (the direction that
  weighs the tokens the reference model believes in);
* ``top1_agreement``: ``argmax p_fp == argmax p_q``;
* ``cosine``: cosine similarity of the two raw logit vectors;
* perplexity of each model: ``exp(mean NLL)`` of the next token over non-overlapping windows of
  ``seq_len`` tokens (the "non-overlapping chunks" estimate of the Hugging Face guide "Perplexity of
  fixed-length models"; each window's first token has no context and is not scored, so a window
  scores ``seq_len - 1`` tokens).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from workbench import divergence
from workbench.models import require_trained
from workbench.stats import t_interval
from workbench.validate import check_field_types

__all__ = ["FidelityConfig", "FidelityStats", "eval_windows", "run_fidelity", "t_interval", "token_metrics"]


@dataclass(frozen=True)
class FidelityConfig:
    """Sizes of a fidelity measurement, validated on construction; :func:`run_fidelity` builds one
    from its arguments (or from the ``windows`` it is given) and reads every size from it."""

    n_tokens: int = 4096  # held-out tokens (rounded down to whole windows)
    seq_len: int = 256  # window length; each window is scored independently
    batch_size: int = 4  # windows per forward pass

    def __post_init__(self):
        check_field_types(self)  # integer fields take integers; every error names its field
        for f in ("n_tokens", "seq_len", "batch_size"):
            if getattr(self, f) < (2 if f == "seq_len" else 1):
                raise ValueError(f"{f}={getattr(self, f)} is too small; use a positive size (seq_len >= 2)")
        if self.n_tokens < self.seq_len:
            raise ValueError(f"n_tokens={self.n_tokens} < seq_len={self.seq_len}: no full window; raise n_tokens")


def token_metrics(logits_p: torch.Tensor, logits_q: torch.Tensor,
                  targets: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Per-token metrics for reference logits ``logits_p`` and candidate ``logits_q`` ``[..., vocab]``.

    Returns float32 tensors of shape ``[...]``: ``kl`` (nats), ``top1`` (1.0 when the argmaxes agree),
    ``cosine`` (all from :mod:`workbench.divergence`); and, when ``targets`` ``[...]`` (int64 next tokens) is given, ``nll_p`` and ``nll_q``.
    """
    lp, lq = divergence.log_probs(logits_p), divergence.log_probs(logits_q)
    out = {"kl": divergence.kl(lp, lq).clamp(min=0),
           "top1": divergence.top1_agreement(logits_p, logits_q),
           "cosine": divergence.logit_cosine(logits_p, logits_q)}
    if targets is not None:
        t = targets.unsqueeze(-1)
        out["nll_p"] = -lp.gather(-1, t).squeeze(-1)
        out["nll_q"] = -lq.gather(-1, t).squeeze(-1)
    return out


@dataclass
class FidelityStats:
    """Accumulator of per-token metrics (``observe()`` a batch, ``summary()`` at the end)."""

    kl: list = field(default_factory=list)  # arrays of per-token KL (nats)
    top1: list = field(default_factory=list)
    cosine: list = field(default_factory=list)
    nll_p: list = field(default_factory=list)
    nll_q: list = field(default_factory=list)

    kl_window: list = field(default_factory=list)  # mean KL of each window (row of a batch), nats

    def observe(self, m: dict[str, torch.Tensor]) -> None:
        """Append a batch of per-token metrics, each ``[windows, positions]`` (or flat for one window)."""
        for k, v in m.items():
            getattr(self, k).append(v.detach().reshape(-1).cpu().numpy())
        if "kl" in m:
            kl = m["kl"].detach().float().cpu()
            self.kl_window.append(kl.reshape(kl.shape[0] if kl.dim() > 1 else 1, -1).mean(1).numpy())

    def summary(self) -> dict:
        """``kl_mean`` with a 95% Student-t interval over windows (``kl_mean_lo``, ``kl_mean_hi``; windows
        are independent stretches of text, tokens within one are not) and the window means themselves
        (``kl_windows``, for paired comparisons on the same windows); ``kl_p95``, ``kl_max``,
        ``top1_agreement``, ``cosine_mean``; perplexities when NLLs were observed."""
        kl = np.concatenate(self.kl)
        windows = np.concatenate(self.kl_window).astype(np.float64)
        lo, hi = t_interval(windows)
        row = {"n_scored": int(kl.size), "kl_mean": float(kl.mean()), "kl_mean_lo": lo, "kl_mean_hi": hi,
               "kl_windows": windows.tolist(), "kl_p95": float(np.quantile(kl, 0.95)),
               "kl_max": float(kl.max()), "top1_agreement": float(np.concatenate(self.top1).mean()),
               "cosine_mean": float(np.concatenate(self.cosine).mean())}
        if self.nll_p:
            row["ppl_fp"] = float(np.exp(np.concatenate(self.nll_p).mean()))
            row["ppl_q"] = float(np.exp(np.concatenate(self.nll_q).mean()))
        return row


def eval_windows(tok, text: str, n_tokens: int, seq_len: int) -> torch.Tensor:
    """The first ``n_tokens`` tokens of ``text`` as non-overlapping windows ``[n_windows, seq_len]`` int64.

    Raises ``ValueError`` on empty text or fewer than ``seq_len`` tokens.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("evaluation text is empty; pass non-empty held-out text (e.g. WikiText-2 test)")
    ids = torch.tensor(tok(text, add_special_tokens=False)["input_ids"][:n_tokens], dtype=torch.long)
    n_win = ids.numel() // seq_len
    if n_win == 0:
        raise ValueError(f"text has {ids.numel()} tokens, fewer than seq_len={seq_len}; pass more text")
    return ids[: n_win * seq_len].reshape(n_win, seq_len)


@torch.no_grad()
def run_fidelity(fp_model, q_model, tok, text: str, n_tokens: int = 4096, seq_len: int = 256,
                 batch_size: int = 4, *, windows: torch.Tensor | None = None, progress: bool = False,
                 fp_cache: dict | None = None) -> pd.DataFrame:
    """Compare ``q_model`` with ``fp_model`` on held-out ``text`` (both causal LMs with one tokenizer).

    Args:
        text: held-out text (WikiText-2 test: ``workbench.data.load_text("wikitext-2", "test")``).
        n_tokens, seq_len, batch_size: see :class:`FidelityConfig`.
        windows: pre-tokenized ``[n_windows, seq_len]`` ids (overrides ``text``/``n_tokens``).
        fp_cache: optional dict; the reference logits are stored in it per batch and reused, so a
            sweep runs the full-precision model once (costs ``n_tokens * vocab * 4`` bytes).

    Returns:
        One-row DataFrame: ``n_tokens, seq_len, n_scored, kl_mean, kl_p95, kl_max`` (nats per token),
        ``top1_agreement`` (0-1), ``cosine_mean``, ``ppl_fp``, ``ppl_q``, ``wall_s``.
        Every position of each window enters the KL / agreement / cosine statistics; perplexity
        scores positions ``0..seq_len-2`` against the next token.

    Raises:
        ValueError: empty text, too few tokens, bad sizes.
    """
    import time

    require_trained(fp_model, "fidelity (KL, top-1 agreement, perplexity)")
    t0 = time.perf_counter()
    if windows is None:
        cfg = FidelityConfig(n_tokens, seq_len, batch_size)
        windows = eval_windows(tok, text, cfg.n_tokens, cfg.seq_len)
    else:  # the windows given are what is measured
        cfg = FidelityConfig(int(windows.numel()), int(windows.shape[1]), batch_size)
    dev_p = next(fp_model.parameters()).device
    dev_q = next(q_model.parameters()).device
    stats = FidelityStats()
    starts = range(0, windows.shape[0], cfg.batch_size)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="fidelity")
    for i in starts:
        ids = windows[i:i + cfg.batch_size]
        key = (i, tuple(ids.shape), int(ids.sum()))
        if fp_cache is not None and key in fp_cache:
            lp = fp_cache[key]
        else:
            lp = fp_model(input_ids=ids.to(dev_p), use_cache=False).logits.float().cpu()
            if fp_cache is not None:
                fp_cache[key] = lp
        lq = q_model(input_ids=ids.to(dev_q), use_cache=False).logits.float().cpu()
        m = token_metrics(lp, lq)
        nll = token_metrics(lp[:, :-1], lq[:, :-1], ids[:, 1:])
        stats.observe({k: m[k] for k in ("kl", "top1", "cosine")})
        stats.observe({"nll_p": nll["nll_p"], "nll_q": nll["nll_q"]})
    row = {"n_tokens": cfg.n_tokens, "seq_len": cfg.seq_len, **stats.summary(),
           "wall_s": time.perf_counter() - t0}
    return pd.DataFrame([row])

