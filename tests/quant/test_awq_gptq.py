"""AWQ and GPTQ lower the layer-output error against RTN on calibration data."""

import pytest
import torch

from workbench.quant import QuantConfig, quantize
from workbench.quant.awq import awq_search, output_error
from workbench.quant.gptq import gptq_quantize, hessian_update
from workbench.quant.rtn import compute_qparams, fake_quantize, quantize_codes


def _acts(n=512, d=128, seed=0):
    """Activations with a few salient channels (x100 magnitude), as observed in LLMs (AWQ fig. 2)."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g)
    X[:, :4] *= 30.0
    W = torch.randn(96, d, generator=g) * 0.05
    return X, W


def test_awq_beats_rtn_on_salient_channels():
    X, W = _acts()
    rtn = output_error(X, [W], [fake_quantize(W, 4, 32, False)])
    s, alpha, losses = awq_search(X, [W], bits=4, group_size=32, symmetric=False)
    awq = output_error(X, [W], [fake_quantize(W * s, 4, 32, False) / s])
    assert losses[0] == pytest.approx(rtn, rel=1e-4)  # alpha = 0 is plain RTN
    assert alpha > 0 and awq < 0.8 * rtn  # threshold: at least 20% lower output MSE


def test_gptq_with_diagonal_hessian_is_rtn():
    # H diagonal -> U = chol(H^-1) diagonal: no error is propagated, GPTQ reduces to RTN
    W = torch.randn(32, 64, generator=torch.Generator().manual_seed(2))
    H = torch.diag(torch.rand(64, generator=torch.Generator().manual_seed(3)) + 0.5)
    for gs in (-1, 16):
        codes, s, z = gptq_quantize(W, H, 4, gs, False)
        s_r, z_r = compute_qparams(W, 4, gs, False)
        assert torch.equal(s, s_r) and torch.equal(z, z_r)
        assert torch.equal(codes, quantize_codes(W, s_r, z_r, 4))


@pytest.mark.parametrize("act_order", [False, True])
def test_gptq_beats_rtn_on_correlated_inputs(act_order):
    g = torch.Generator().manual_seed(4)
    X = torch.randn(1024, 16, generator=g) @ torch.randn(16, 128, generator=g) + 0.1 * torch.randn(1024, 128, generator=g)
    W = torch.randn(64, 128, generator=g) * 0.05
    H, n = hessian_update(None, X[:500], 0)
    H, n = hessian_update(H, X[500:], n)
    assert n == 1024 and torch.allclose(H, 2 * X.T @ X / 1024, rtol=1e-4, atol=1e-4)  # running mean == batch
    codes, s, z = gptq_quantize(W, H, 4, 32, False, act_order=act_order, static_groups=act_order)
    from workbench.quant.rtn import dequantize_codes

    gptq = output_error(X, [W], [dequantize_codes(codes, s, z)])
    rtn = output_error(X, [W], [fake_quantize(W, 4, 32, False)])
    assert gptq < 0.7 * rtn  # threshold: at least 30% lower output MSE on the calibration inputs


def _layer0_inputs(model, ids):
    """FP inputs of every Linear in decoder layer 0 (identical for all methods: nothing precedes it)."""
    X, hooks = {}, []

    def keep(n):
        def hook(_m, a, _o):
            X[n] = a[0].reshape(-1, a[0].shape[-1])  # returns None: the output is left alone
        return hook

    for n, m in model.model.layers[0].named_modules():
        if isinstance(m, torch.nn.Linear):
            hooks.append(m.register_forward_hook(keep(n)))
    with torch.no_grad():
        model(input_ids=ids)
    for h in hooks:
        h.remove()
    return X


@pytest.mark.parametrize("method", ["awq", "gptq"])
def test_model_level_layer_output_error_lower_than_rtn(tiny, calib_ids, method):
    with torch.no_grad():  # salient input channels, as in trained LLMs (AWQ sec. 3.1): 4 norm gains x20
        for layer in tiny.model.layers:
            layer.input_layernorm.weight[:4] *= 20
            layer.post_attention_layernorm.weight[:4] *= 20
    X = _layer0_inputs(tiny, calib_ids)
    cfg = {"bits": 3, "group_size": 32}
    q_rtn, _ = quantize(tiny, QuantConfig(method="rtn", **cfg))
    q_m, rep = quantize(tiny, QuantConfig(method=method, **cfg), calib_ids)
    assert rep["calibrated"].all()
    errs = {}
    for name, qm in (("rtn", q_rtn), (method, q_m)):
        layer = qm.model.layers[0]
        errs[name] = sum(output_error(X[n], [tiny.model.layers[0].get_submodule(n).weight.detach()],
                                      [layer.get_submodule(n).effective_weight()]) for n in X)
    assert errs[method] < 0.7 * errs["rtn"], errs  # threshold: 30% lower (measured ~0.3-0.45x)
    if method == "awq":  # per group, the chosen alpha never does worse than RTN (alpha = 0) on its tokens
        assert (rep["awq_loss"] <= rep["awq_loss_rtn"] + 1e-12).all()
        assert set(rep["awq_group"]) >= {"q_proj+k_proj+v_proj", "gate_proj+up_proj", "o_proj", "down_proj"}


@pytest.mark.parametrize("granularity,act_order", [("group", False), ("per_channel", False), ("group", True)])
def test_gptq_stacks_linears_of_one_input_into_one_column_loop(tiny, calib_ids, monkeypatch, granularity, act_order):
    """GPTQ quantizes q/k/v (and gate/up), which read the same input and so have bit-identical Hessians, as one
    stacked matrix: 4 column loops a layer instead of 7 (before: one per Linear), and the same codes, scales and
    zeros as each Linear alone, bit for bit on the CPU (GPTQ is row-separable; on a GPU the block updates' matmuls
    may sum in another order). Per-tensor scales are not per row: those Linears stay apart."""
    import importlib

    from workbench.quant import QuantConfig, quantize

    qz = importlib.import_module("workbench.quant.quantize")  # the module (the package exports its function)
    cfg = QuantConfig(method="gptq", bits=4, granularity=granularity, group_size=32, n_calib_samples=4,
                      calib_seq_len=32, act_order=act_order, static_groups=act_order)
    calls = []
    real = qz.gptq_quantize
    monkeypatch.setattr(qz, "gptq_quantize", lambda w, *a, **k: calls.append(w.shape[0]) or real(w, *a, **k))
    stacked = quantize(tiny, cfg, calib_ids)[0]
    n_layers = len(tiny.model.layers)
    assert len(calls) == 4 * n_layers
    ptrs = [t.untyped_storage().data_ptr() for m in stacked.modules() if hasattr(m, "effective_weight")
            for t in (m.scales, m.zeros) if t.numel()]
    assert len(ptrs) == len(set(ptrs))  # no Linear's buffers are views into another's (safetensors refuses those)
    monkeypatch.setattr(qz, "STACK_SHARED_HESSIAN", False)
    calls.clear()
    alone = quantize(tiny, cfg, calib_ids)[0]
    assert len(calls) == 7 * n_layers
    for (name, a), (_, b) in zip(stacked.named_modules(), alone.named_modules()):
        if hasattr(a, "effective_weight") and hasattr(b, "effective_weight"):  # bit-equal on the CPU
            for t in ("qweight", "scales", "zeros"):
                assert torch.equal(getattr(a, t), getattr(b, t)), (name, t)
    calls.clear()
    quantize(tiny, QuantConfig(method="gptq", bits=4, granularity="per_tensor", n_calib_samples=4,
                               calib_seq_len=32), calib_ids)
    assert len(calls) == 7 * n_layers
