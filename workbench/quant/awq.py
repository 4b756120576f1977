"""AWQ: activation-aware weight quantization (Lin et al. 2023, arXiv 2306.00978, section 3.2).

Salient input channels (large mean ``|x|``) are protected by scaling them up before quantization:
``y = x W^T = (x / s) (W * s)^T``; quantizing ``W * s`` with group RTN shrinks the relative rounding
error of the scaled-up columns. The paper (eq. 5) and the reference ``auto_scale.py`` search

    s = s_x ^ alpha,   s_x = mean_tokens |x|,   alpha in {0, 1/grid, ..., (grid-1)/grid}

(normalised by ``sqrt(max(s) * min(s))`` as the reference does) minimising the output error
``|| x W^T - (x / s) Q(W * s)^T ||^2`` on calibration activations, jointly for all Linears that read the
same input (q/k/v; gate/up). The activations are the full-precision model's, as in the reference
(``workbench.quant.calib``). Deviations from the reference, with their measured effect (against
llm-compressor's ``AWQModifier``, ``tests/quant/test_reference.py``: our decoder-layer-0 output error
0.84-0.88x of its, our model output KL 1.08-1.11x of its): the loss is on those Linears' outputs (not
on the enclosing attention / MLP block); the weight-clipping search (``auto_clip``) is not done; ``s`` is
kept inside ``QuantLinear`` (``input_scale``) and folded into the RMSNorm only by the engine's runtime
(exact in full precision, so only quantized values differ).
"""

from __future__ import annotations

import torch

from .rtn import fake_quantize

__all__ = ["awq_search", "output_error"]


def output_error(X: torch.Tensor, weights: list[torch.Tensor], qweights: list[torch.Tensor]) -> float:
    """Sum over Linears of the mean squared output error ``||X W^T - X W_hat^T||^2 / (n out)``.

    ``X`` ``[n_tokens, in]``; each ``W``, ``W_hat`` ``[out, in]`` (W_hat already divided by any AWQ scale).
    """
    X = X.float()
    return float(sum(((X @ (w.float() - wq.float()).T) ** 2).mean() for w, wq in zip(weights, qweights)))


@torch.no_grad()
def awq_search(X: torch.Tensor, weights: list[torch.Tensor], bits: int, group_size: int, symmetric: bool,
               scale_dtype: torch.dtype = torch.float32, grid: int = 20, x_mean: torch.Tensor | None = None,
               float_zero: bool = False):
    """Grid-search the AWQ exponent for Linears sharing the input ``X`` ``[n_tokens, in]``.

    ``weights``: list of ``[out_k, in]``; ``x_mean`` ``[in]`` (default ``X.abs().mean(0)``; pass one
    computed on more tokens than ``X`` if ``X`` is a subsample).

    Returns ``(s [in] float32, alpha, losses [grid])``; ``alpha = 0`` gives ``s = 1`` (plain RTN), so the
    chosen loss is never above RTN's on ``X``.
    """
    X = X.float()
    x_mean = (X.abs().mean(0) if x_mean is None else x_mean.float()).clamp(min=1e-8)
    ref = [X @ w.float().T for w in weights]
    losses, best = [], (float("inf"), None, None)
    for k in range(grid):
        alpha = k / grid
        s = x_mean.pow(alpha).clamp(min=1e-4)
        s = s / (s.max() * s.min()).sqrt()
        loss = 0.0
        for w, y in zip(weights, ref):
            wq = fake_quantize(w.float() * s, bits, group_size, symmetric, scale_dtype, float_zero) / s
            loss += float(((X @ wq.T - y) ** 2).mean())
        losses.append(loss)
        if loss < best[0]:
            best = (loss, alpha, s.clone())
    return best[2], best[1], losses
