"""Divergences between two next-token distributions: the one place KL, TV, overlap (alpha) and top-1
agreement are computed.

Every function works on the last dimension (the vocabulary) and keeps the leading ones: inputs
``[..., V]``, outputs ``[...]`` float32. Logarithms are natural, so KL is in nats.

* ``log_probs``: ``log softmax(logits / T)`` in float32 (T = 1 unless given);
* ``kl``: ``KL(p || q) = sum_v p(v) (log p(v) - log q(v))`` (Cover & Thomas, *Elements of
  Information Theory*, eq. 2.26; ``torch.nn.functional.kl_div(log q, log p, log_target=True)``
  summed over the vocabulary gives the same value);
* ``total_variation``: ``TV(p, q) = 1/2 sum_v |p(v) - q(v)|``;
* ``overlap``: ``sum_v min(p(v), q(v)) = 1 - TV(p, q)``, the probability that speculative sampling
  accepts a draft token drawn from ``q`` (Leviathan et al. 2023, arXiv 2211.17192, Definition 3.1 and
  Corollary 3.6: alpha);
* ``top1_agreement``: 1.0 where ``argmax p == argmax q``;
* ``logit_cosine``: cosine similarity of the raw logit vectors.

Nothing here clamps: a KL of two equal distributions can come out as ``-1e-9`` from float rounding;
callers that report it clamp at 0 (:func:`kl_logits` does).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["kl", "kl_logits", "log_probs", "logit_cosine", "overlap", "top1_agreement", "total_variation"]


def log_probs(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``log softmax(logits / temperature)`` over the last dimension: ``[..., V]`` any float dtype ->
    ``[..., V]`` float32. ``temperature`` must be > 0 (callers map greedy decoding to 1)."""
    if not temperature > 0:
        raise ValueError(f"temperature={temperature} must be > 0 for a softmax; use 1.0 for greedy decoding")
    return F.log_softmax(logits.float() / temperature, dim=-1)


def kl(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """``KL(p || q)`` in nats from log-probabilities ``logp``, ``logq`` ``[..., V]`` float32 (e.g. from
    :func:`log_probs`): ``sum_v exp(logp) (logp - logq)``, shape ``[...]``. Differentiable in both
    arguments and not clamped (a distillation loss needs the raw value)."""
    return (logp.exp() * (logp - logq)).sum(-1)


def kl_logits(logits_p: torch.Tensor, logits_q: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``KL(p || q)`` in nats ``[...]`` float32 for ``p = softmax(logits_p / T)``, ``q = softmax(logits_q
    / T)`` (``[..., V]``), clamped at 0 against float rounding: the value to report."""
    return kl(log_probs(logits_p, temperature), log_probs(logits_q, temperature)).clamp(min=0)


def total_variation(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``TV(p, q) = 1/2 sum_v |p(v) - q(v)|`` for probabilities ``p``, ``q`` ``[..., V]``: ``[...]`` in [0, 1]."""
    return 0.5 * (p - q).abs().sum(-1)


def overlap(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``sum_v min(p(v), q(v)) = 1 - TV(p, q)`` for probabilities ``p``, ``q`` ``[..., V]``: ``[...]``; the
    speculative-sampling acceptance probability alpha of a draft ``q`` for a target ``p`` (Leviathan
    et al. 2023, Definition 3.1)."""
    return torch.minimum(p, q).sum(-1)


def top1_agreement(logits_p: torch.Tensor, logits_q: torch.Tensor) -> torch.Tensor:
    """float32 ``[...]``: 1.0 where the argmaxes of ``logits_p`` and ``logits_q`` ``[..., V]`` agree, else 0.0."""
    return (logits_p.argmax(-1) == logits_q.argmax(-1)).float()


def logit_cosine(logits_p: torch.Tensor, logits_q: torch.Tensor) -> torch.Tensor:
    """float32 ``[...]``: cosine similarity of the raw logit vectors ``[..., V]``
    (``torch.nn.functional.cosine_similarity``, eps 1e-8)."""
    return F.cosine_similarity(logits_p.float(), logits_q.float(), dim=-1)
