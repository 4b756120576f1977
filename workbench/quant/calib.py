"""Calibration data for AWQ and GPTQ, and layer-by-layer input capture.

Inputs are collected decoder layer by decoder layer. Which activations a layer is calibrated on
follows each reference (``workbench.quant.quantize`` applies it):

* GPTQ (reference ``llama_sequential``, AutoGPTQ, llm-compressor): the hidden states entering layer
  ``i`` come from layers ``0..i-1`` already quantized, and with ``true_sequential`` each sub-group of
  a layer (q/k/v, o, gate/up, down) sees the sub-groups quantized before it;
* AWQ (llm-awq ``run_awq``, AutoAWQ ``AwqQuantizer._get_input_feat``): from the full-precision
  model, since the next layer's inputs are the output of the layer computed before it is scaled or
  quantized (``QuantConfig.awq_inputs="quantized"`` opts into the GPTQ-style propagation).
"""

from __future__ import annotations

import torch

__all__ = ["calibration_ids", "capture_layer0_inputs", "capture_linear_inputs", "decoder_layers", "run_layer"]


def calibration_ids(tok, text: str | None = None, n_samples: int = 32, seq_len: int = 256,
                    seed: int = 0) -> torch.Tensor:
    """``n_samples`` random windows of ``seq_len`` tokens from ``text`` -> ``[n_samples, seq_len]`` int64.

    ``text`` defaults to WikiText-2's validation split (``workbench.data.load_text("wikitext-2",
    "valid")``; the test split is kept for evaluation). Windows start at seeded uniform random offsets
    (as GPTQ's ``get_wikitext2``). Raises ``ValueError`` on empty text or text shorter than one window.
    """
    if text is None:
        from workbench.data import load_text

        text = load_text("wikitext-2", split="valid")
    if not isinstance(text, str) or not text.strip():
        raise ValueError("calibration text is empty; pass calib= a non-empty string (or token ids "
                         "[n_samples, seq_len]), or leave it None for WikiText-2 valid")
    ids = torch.tensor(tok(text, add_special_tokens=False)["input_ids"], dtype=torch.long)
    if ids.numel() < seq_len + 1:
        raise ValueError(f"calibration text has {ids.numel()} tokens, fewer than calib_seq_len={seq_len}; "
                         "pass more text or lower calib_seq_len")
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, ids.numel() - seq_len, (n_samples,), generator=g)
    return torch.stack([ids[s:s + seq_len] for s in starts.tolist()])


def decoder_layers(model) -> torch.nn.ModuleList:
    """The stack of decoder layers (``model.model.layers`` for Llama/Qwen2/Mistral/SmolLM).

    Raises ``ValueError`` for architectures without one (AWQ/GPTQ need it; RTN does not).
    """
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList) or len(layers) == 0:
        raise ValueError(f"{type(model).__name__} has no model.layers decoder stack; AWQ/GPTQ calibration "
                         "supports Llama-like models, use method='rtn' for others")
    return layers


class _Stop(Exception):
    """Raised inside the first decoder layer's pre-hook to stop the forward once inputs are caught."""


@torch.no_grad()
def capture_layer0_inputs(model, ids: torch.Tensor, chunk: int = 8) -> list[tuple[torch.Tensor, dict]]:
    """Run the embeddings on ``ids`` ``[n, seq]`` in chunks of ``chunk`` rows and return, per chunk, the
    hidden states entering decoder layer 0 ``[chunk, seq, hidden]`` and that layer's keyword arguments
    (attention mask, position embeddings, ...)."""
    layer0 = decoder_layers(model)[0]
    caught: list[tuple[torch.Tensor, dict]] = []

    def hook(_mod, args, kwargs):
        hs = args[0] if args else kwargs.pop("hidden_states")
        kwargs = {k: v for k, v in kwargs.items() if k not in ("hidden_states", "past_key_values",
                                                                "past_key_value", "use_cache")}
        caught.append((hs.detach(), kwargs))
        raise _Stop

    h = layer0.register_forward_pre_hook(hook, with_kwargs=True)
    device = next(model.parameters()).device
    try:
        for i in range(0, ids.shape[0], chunk):
            try:
                model(input_ids=ids[i:i + chunk].to(device), use_cache=False)
            except _Stop:
                pass
    finally:
        h.remove()
    return caught


@torch.no_grad()
def run_layer(layer, inputs: list[tuple[torch.Tensor, dict]]) -> list[tuple[torch.Tensor, dict]]:
    """Apply one decoder layer to every captured chunk; returns the next layer's inputs."""
    out = []
    for hs, kw in inputs:
        y = layer(hs, **kw)
        out.append((y[0] if isinstance(y, tuple) else y, kw))
    return out


@torch.no_grad()
def capture_linear_inputs(layer, inputs: list[tuple[torch.Tensor, dict]], linears: dict[str, torch.nn.Module],
                          observe, full: bool = True) -> list[tuple[torch.Tensor, dict]] | None:
    """Run ``layer`` on every captured chunk and call ``observe(name, x)`` with the input ``x``
    ``[chunk, seq, in]`` of each module in ``linears`` (``{name: module}``) as it is reached.

    ``full=True`` returns the layer's outputs (the next layer's inputs); ``full=False`` stops each
    chunk's forward as soon as every module of ``linears`` has been seen (less work for the first
    sub-groups of a layer) and returns ``None``.
    """
    seen: set[str] = set()

    def make_hook(name):
        def hook(_mod, args):
            observe(name, args[0])  # the tensor itself: Linears reading one tensor share its id()
            seen.add(name)
            if not full and len(seen) == len(linears):
                raise _Stop
        return hook

    handles = [m.register_forward_pre_hook(make_hook(n)) for n, m in linears.items()]
    out = []
    try:
        for hs, kw in inputs:
            seen.clear()
            try:
                y = layer(hs, **kw)
            except _Stop:
                continue
            out.append((y[0] if isinstance(y, tuple) else y, kw))
    finally:
        for h in handles:
            h.remove()
    return out if full else None
