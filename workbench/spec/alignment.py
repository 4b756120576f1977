"""Draft/target alignment along the target's own trajectory: KL, total variation, predicted alpha.

For target logits ``p`` and draft logits ``q`` at the same positions of a sequence the target
generated, per token:

* ``kl_pq`` = KL(p || q) = sum_x p(x) (log p(x) - log q(x))  (the distillation loss; nats)
* ``kl_qp`` = KL(q || p)                                        (nats)
* ``tv`` = TV(p, q) = 1/2 sum_x |p(x) - q(x)|
* ``alpha_pred`` = sum_x min(p(x), q(x)) = 1 - TV on the *sampling* distributions (temperature and
  top-p applied): the probability that speculative sampling accepts a draft token at this position
  (Leviathan et al. 2023, arXiv 2211.17192, Definition 3.1 / Corollary 3.6). At temperature 0 it is
  1 when the argmaxes agree, else 0.

KL and TV use softmax(logits / T) without top-p (T = 1 when decoding is greedy), so they stay finite
and comparable across decoding settings. The formulas live in :mod:`workbench.divergence`.
"""

from __future__ import annotations

import pandas as pd
import torch

from workbench import divergence
from workbench.spec.sampling import probs_from_logits


def alignment_metrics(target_logits: torch.Tensor, draft_logits: torch.Tensor,
                      temperature: float = 1.0, top_p: float = 1.0) -> pd.DataFrame:
    """Per-position metrics from logits ``[N, V]`` (any float dtype) of target and draft.

    Returns a DataFrame with one row per position: ``pos, kl_pq, kl_qp, tv, alpha_pred,
    argmax_match``. Raises ``ValueError`` when the shapes differ.
    """
    if target_logits.shape != draft_logits.shape:
        raise ValueError(f"target logits {tuple(target_logits.shape)} and draft logits "
                         f"{tuple(draft_logits.shape)} must have the same shape [N, V]")
    t_soft = temperature if temperature > 0 else 1.0
    logp = divergence.log_probs(target_logits, t_soft)  # [N, V]
    logq = divergence.log_probs(draft_logits, t_soft)
    kl_pq, kl_qp = divergence.kl(logp, logq), divergence.kl(logq, logp)  # [N]
    tv = divergence.total_variation(logp.exp(), logq.exp())
    ps = probs_from_logits(target_logits, temperature, top_p)
    qs = probs_from_logits(draft_logits, temperature, top_p)
    alpha_pred = divergence.overlap(ps, qs)
    return pd.DataFrame({
        "pos": range(target_logits.shape[0]),
        "kl_pq": kl_pq.clamp_min(0).tolist(), "kl_qp": kl_qp.clamp_min(0).tolist(),
        "tv": tv.tolist(), "alpha_pred": alpha_pred.clamp(0, 1).tolist(),
        "argmax_match": divergence.top1_agreement(target_logits, draft_logits).bool().tolist(),
    })


@torch.inference_mode()
def score_positions(runner, prompt_ids, new_tokens) -> torch.Tensor:
    """Logits ``[n_new, V]`` (float32) that ``runner`` gives for each token of ``new_tokens`` after
    ``prompt_ids`` (teacher forcing: one forward over prompt + new tokens; the runner is reset)."""
    prompt = torch.as_tensor(prompt_ids).reshape(-1).tolist()
    new = list(new_tokens)
    runner.reset()
    logits = runner.extend(torch.tensor(prompt + new))  # [T, V]
    runner.reset()
    return logits[len(prompt) - 1: len(prompt) - 1 + len(new)]


__all__ = ["alignment_metrics", "score_positions"]
