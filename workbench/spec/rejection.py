"""The exact speculative-sampling rule (Leviathan et al. 2023, arXiv 2211.17192, Algorithm 1;
Chen et al. 2023, arXiv 2302.01318, Algorithm 2), batched over independent sequences.

One readable reference function in the style of vLLM ``v1/sample/rejection_sampler.py`` and
gpt-fast ``generate.py`` (``speculative_decode``). Any fast path must be tested against it.
"""

from __future__ import annotations

import torch

PLACEHOLDER = -1  # output slots after the emitted tokens (vLLM's PLACEHOLDER_TOKEN_ID)


def rejection_sample(
    draft_tokens: torch.Tensor,  # [B, k] int64, x_i ~ q_i
    draft_probs: torch.Tensor,  # [B, k, V] q_i(.), the distributions the drafts were sampled from
    target_probs: torch.Tensor,  # [B, k+1, V] p_i(.), from one target forward over the k drafts
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify ``k`` draft tokens per row; return ``(output_tokens [B, k+1] int64, num_accepted [B] int64)``.

    Row b emits ``num_accepted[b] + 1`` tokens: the accepted drafts, then one token drawn from the
    residual distribution at the first rejection, or the bonus token from p_{k+1} when all k were
    accepted. Slots after them hold ``PLACEHOLDER`` (-1).

    The rule (Leviathan 2023, Theorem 3.5: the output is distributed exactly as p):

    * accept x_i with probability min(1, p_i(x_i) / q_i(x_i)), i.e. when ``u_i * q_i(x_i) < p_i(x_i)``
      with u_i ~ U[0, 1); stop at the first rejection;
    * at the first rejected position i, draw from norm(max(0, p_i - q_i));
    * if all k are accepted, draw the bonus token from p_{k+1}. Padding q with q_{k+1} = 0 makes this
      the same formula: norm(max(0, p_{k+1} - 0)) = p_{k+1}.

    Greedy decoding is the special case of one-hot p and q (see ``sampling.probs_from_logits``):
    accept while the argmaxes match, then emit the target's argmax.
    """
    B, k = draft_tokens.shape
    V = target_probs.shape[-1]
    if draft_probs.shape != (B, k, V) or target_probs.shape != (B, k + 1, V):
        raise ValueError(f"shapes disagree: draft_tokens {tuple(draft_tokens.shape)}, draft_probs "
                         f"{tuple(draft_probs.shape)}, target_probs {tuple(target_probs.shape)}; "
                         "expected [B, k], [B, k, V], [B, k+1, V]")
    x = draft_tokens.unsqueeze(-1)  # [B, k, 1]
    p_x = target_probs[:, :k].gather(-1, x).squeeze(-1)  # [B, k] p_i(x_i)
    q_x = draft_probs.gather(-1, x).squeeze(-1)  # [B, k] q_i(x_i) > 0 since x_i ~ q_i
    u = torch.rand(B, k, generator=generator, device=p_x.device)
    accepted = u * q_x < p_x  # [B, k] u < p/q  <=>  accepted with probability min(1, p/q)
    num_accepted = accepted.long().cumprod(dim=1).sum(dim=1)  # [B] length of the leading run

    # Residual at position num_accepted (0-based): max(0, p - q), with q_{k+1} = 0 for the bonus.
    q_pad = torch.cat([draft_probs, draft_probs.new_zeros(B, 1, V)], dim=1)  # [B, k+1, V]
    rows = torch.arange(B, device=p_x.device)
    residual = (target_probs[rows, num_accepted] - q_pad[rows, num_accepted]).clamp_min(0)  # [B, V]
    total = residual.sum(-1, keepdim=True)
    # total == 0 only if p <= q everywhere at a rejected position, which has probability 0;
    # fall back to p there so float round-off never yields an all-zero row.
    residual = torch.where(total > 0, residual / total.clamp_min(1e-30), target_probs[rows, num_accepted])
    extra = torch.multinomial(residual, 1, generator=generator).squeeze(-1)  # [B]

    out = torch.full((B, k + 1), PLACEHOLDER, dtype=torch.long, device=p_x.device)
    keep = torch.arange(k, device=p_x.device) < num_accepted.unsqueeze(1)  # [B, k]
    out[:, :k] = torch.where(keep, draft_tokens, torch.full_like(draft_tokens, PLACEHOLDER))
    out[rows, num_accepted] = extra
    return out, num_accepted


__all__ = ["PLACEHOLDER", "rejection_sample"]
