"""Probability processing shared by target and draft: temperature, top-p, sampling.

Speculative sampling is exact for whatever distributions p and q it is given, so the warpers are
applied to *both* before the acceptance rule (as vLLM's ``RejectionSampler`` does with its
``SamplingMetadata``): the output then follows the warped target distribution.
"""

from __future__ import annotations

import torch


def validate_sampling(temperature: float, top_p: float) -> None:
    """Raise ``ValueError`` for ``temperature < 0`` or ``top_p`` outside (0, 1]."""
    if not temperature >= 0:
        raise ValueError(f"temperature={temperature!r} must be >= 0 (0 means greedy)")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p={top_p!r} must be in (0, 1]; use 1.0 to disable nucleus sampling")


def probs_from_logits(logits: torch.Tensor, temperature: float = 1.0, top_p: float = 1.0) -> torch.Tensor:
    """Turn logits ``[..., V]`` into the sampling distribution ``[..., V]`` (float32, rows sum to 1).

    * ``temperature == 0``: one-hot at the argmax (greedy). With one-hot p and q the speculative rule
      min(1, p(x)/q(x)) accepts exactly when the argmaxes match, and the residual max(0, p - q) is the
      target's argmax: greedy speculative decoding is the same rule.
    * ``temperature > 0``: softmax(logits / temperature).
    * ``top_p < 1``: keep the smallest set of most probable tokens whose mass reaches ``top_p``
      (Holtzman et al. 2020, arXiv 1904.09751; as HF ``TopPLogitsWarper``), renormalize.

    Raises ``ValueError`` for bad ``temperature`` / ``top_p``.
    """
    validate_sampling(temperature, top_p)
    logits = logits.float()
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1:
        sorted_p, idx = probs.sort(dim=-1, descending=True)
        mass_before = sorted_p.cumsum(-1) - sorted_p  # mass of strictly more probable tokens
        keep_sorted = mass_before < top_p  # the first token always stays (mass_before = 0)
        keep = torch.zeros_like(keep_sorted).scatter(-1, idx, keep_sorted)
        probs = torch.where(keep, probs, torch.zeros_like(probs))
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row from ``probs`` ``[..., V]``; returns int64 ``[...]``."""
    flat = probs.reshape(-1, probs.shape[-1])
    out = torch.multinomial(flat, 1, generator=generator).squeeze(-1)
    return out.reshape(probs.shape[:-1])


def sample_race(weights: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row from the unnormalised ``weights`` ``[..., V]`` (>= 0, each row with a
    positive entry) without ``torch.multinomial``; returns int64 ``[...]`` on their device.

    The exponential race: with E_x ~ Exp(1) i.i.d., ``argmax_x w(x) / E_x`` is x with probability
    w(x) / sum w (E_x / w(x) ~ Exp(w(x)), and the minimum of independent exponentials is the one with
    rate w(x) with probability proportional to it; the Gumbel-max trick in another form). It is
    gpt-fast's ``multinomial_sample_one_no_sync`` and vLLM's recovered-token sampler
    (``v1/sample/rejection_sampler.py``, ``sample_recovered_tokens``): argmax needs no host
    synchronization and no normalisation. Zero weights are never drawn (E is clamped away from 0).
    """
    e = torch.empty_like(weights, dtype=torch.float32).exponential_(generator=generator)
    return (weights.float() / e.clamp_min_(torch.finfo(torch.float32).tiny)).argmax(-1)


def make_generator(generator: torch.Generator | None, seed: int, device) -> torch.Generator:
    """``generator`` if given, else a new ``torch.Generator`` on ``device`` seeded with ``seed``.

    Sampling stays on the device the logits live on; a CUDA generator draws a different stream than
    a CPU one with the same seed (the same distribution, other tokens)."""
    if generator is not None:
        return generator
    return torch.Generator(device=device).manual_seed(seed)


__all__ = ["make_generator", "probs_from_logits", "sample", "sample_race", "validate_sampling"]
