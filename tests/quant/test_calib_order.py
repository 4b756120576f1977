"""Which activations and weights each calibrated method reads, checked against oracles built from the
package's own primitives following the reference code step by step:

* GPTQ group parameters come from the lazily updated weights (GPTQ reference ``fasterquant``:
  ``find_params(W[:, j:j+g])`` reads ``W``, which the in-block updates never touch);
* GPTQ true-sequential: o_proj's Hessian is built on inputs produced with q/k/v already quantized;
* AWQ: every layer is calibrated on the full-precision model's activations (llm-awq ``run_awq``).

Each of the three fails on the code before this check existed (in-block-updated group parameters,
one capture per layer, AWQ inputs from the quantized layers); the planted-bug cases below show the
oracles can tell the variants apart.
"""

import pytest
import torch

from workbench.quant import QuantConfig, quantize
from workbench.quant.calib import capture_layer0_inputs, capture_linear_inputs
from workbench.quant.gptq import gptq_quantize, hessian_update
from workbench.quant.rtn import compute_qparams


def _correlated(n_tokens=512, d=256, out=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n_tokens, 16, generator=g) @ torch.randn(16, d, generator=g) + 0.1 * torch.randn(n_tokens, d, generator=g)
    return torch.randn(out, d, generator=g) * 0.05, hessian_update(None, X, 0)[0]


def test_gptq_dynamic_group_params_come_from_the_lazy_weights():
    W, H = _correlated()
    # one block covering every column: the lazy W is never updated, so each group's parameters are
    # plain RTN of the original weights, even though earlier columns' errors changed the block copy
    _, s, z = gptq_quantize(W, H, 4, 32, False, block=256)
    s_rtn, z_rtn = compute_qparams(W, 4, 32, False)
    assert torch.equal(s, s_rtn) and torch.equal(z, z_rtn)
    # with blocks of 128, the groups of the second block see the lazy update of the first block only
    _, s2, _ = gptq_quantize(W, H, 4, 32, False, block=128)
    assert torch.equal(s2[:, :4], s_rtn[:, :4]) and not torch.equal(s2[:, 4:], s_rtn[:, 4:])


def test_gptq_static_groups_are_rtn_params_of_the_original_weights():
    W, H = _correlated(seed=1)
    _, s, z = gptq_quantize(W, H, 4, 64, True, block=64, act_order=True, static_groups=True)
    s_rtn, z_rtn = compute_qparams(W, 4, 64, True)
    assert torch.equal(s, s_rtn) and torch.equal(z, z_rtn)
    with pytest.raises(ValueError, match="static_groups"):
        gptq_quantize(W, H, 4, 64, True, act_order=True)


def _gptq_oracle_o_proj(fp, ids, cfg: QuantConfig, requantize_qkv: bool) -> torch.Tensor:
    """o_proj codes of layer 0 built by hand: GPTQ q/k/v on the FP inputs, swap them in (or not, the
    planted bug), capture o_proj's inputs, GPTQ o_proj."""
    import copy

    m = copy.deepcopy(fp)
    layer = m.model.layers[0]
    inputs = capture_layer0_inputs(m, ids)
    q, _ = quantize(fp, cfg, ids)  # its q/k/v of layer 0 depend only on FP inputs
    if requantize_qkv:
        for p in ("q_proj", "k_proj", "v_proj"):
            setattr(layer.self_attn, p, q.model.layers[0].self_attn.get_submodule(p))
    st = [None, 0]

    def observe(_n, x):
        st[0], st[1] = hessian_update(st[0], x, st[1])

    capture_linear_inputs(layer, inputs, {"o": layer.self_attn.o_proj}, observe, full=False)
    codes, _, _ = gptq_quantize(layer.self_attn.o_proj.weight, st[0], cfg.bits, cfg.group_size, cfg.symmetric,
                                torch.float16, cfg.gptq_damp, cfg.gptq_block)
    return codes, q.model.layers[0].self_attn.o_proj.codes()


def test_gptq_true_sequential_o_proj_sees_quantized_qkv(tiny, calib_ids):
    cfg = QuantConfig(method="gptq", bits=3, group_size=32)
    want, got = _gptq_oracle_o_proj(tiny, calib_ids, cfg, requantize_qkv=True)
    assert torch.equal(got, want)
    planted, _ = _gptq_oracle_o_proj(tiny, calib_ids, cfg, requantize_qkv=False)  # one capture per layer
    assert (planted != got).float().mean() > 0.01
    off = quantize(tiny, QuantConfig(method="gptq", bits=3, group_size=32, true_sequential=False), calib_ids)[0]
    assert torch.equal(off.model.layers[0].self_attn.o_proj.codes(), planted)


def _x_mean(model, ids) -> torch.Tensor:
    """mean |x| over calibration tokens of the input of layer 1's q_proj when ``model`` runs ``ids``."""
    xs = []
    h = model.model.layers[1].self_attn.q_proj.register_forward_pre_hook(
        lambda _m, a: xs.append(a[0].reshape(-1, a[0].shape[-1]).detach()))
    with torch.no_grad():
        for i in range(0, ids.shape[0], 8):
            model(input_ids=ids[i:i + 8])
    h.remove()
    return torch.cat(xs).abs().mean(0)


def _awq_scale(x_mean, alpha):  # AWQ eq. 5 with the reference normalisation (auto_scale.py)
    s = x_mean.pow(alpha).clamp(min=1e-4)
    return s / (s.max() * s.min()).sqrt()


@pytest.mark.parametrize("mode", ["fp", "quantized"])
def test_awq_layer1_calibrated_on_the_chosen_activations(tiny, calib_ids, mode):
    with torch.no_grad():  # salient channels so that alpha > 0 and the scale depends on the inputs
        for layer in tiny.model.layers:
            layer.input_layernorm.weight[:4] *= 20
    q, rep = quantize(tiny, QuantConfig(method="awq", bits=3, group_size=32, awq_inputs=mode), calib_ids)
    alpha = float(rep.set_index("layer").loc["model.layers.1.self_attn.q_proj", "awq_alpha"])
    assert alpha > 0
    got = q.model.layers[1].self_attn.q_proj.input_scale
    fp_mean, q_mean = _x_mean(tiny, calib_ids), _x_mean(q, calib_ids)  # q: layer 0 quantized
    want, planted = (fp_mean, q_mean) if mode == "fp" else (q_mean, fp_mean)
    torch.testing.assert_close(got, _awq_scale(want, alpha), rtol=1e-4, atol=0)
    assert (got / _awq_scale(planted, alpha) - 1).abs().max() > 1e-3  # the other propagation differs
