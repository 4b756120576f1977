import torch
from transformers import LlamaConfig

from workbench.arch import ModelSpec, kv_bytes_per_token
from workbench.quant import QuantLinear, footprint


class Toy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 64)  # 10*64*4 = 2560 bytes
        self.head = torch.nn.Linear(64, 10, bias=False)
        self.head.weight = self.emb.weight  # tied: counted once
        codes = torch.randint(0, 16, (8, 64), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
        scales = torch.ones(8, 2, dtype=torch.float16)
        zeros = torch.full((8, 2), 8, dtype=torch.uint8)
        self.q = QuantLinear(codes, scales, zeros, bits=4, bias=torch.zeros(8))
        self.norm = torch.nn.LayerNorm(64)  # weight + bias: 2*64*4 = 512 bytes


def test_footprint_counts_bytes_by_hand():
    f = footprint(Toy())
    # QuantLinear: packed 8*64/2 = 256 + fp16 scales 8*2*2 = 32 + zeros 8*2 = 16 -> 304
    assert f["quant_bytes"] == 304
    # other: embedding 2560 (tied head counted once) + norm 512 + QuantLinear bias 8*4 = 32
    assert f["other_bytes"] == 2560 + 512 + 32
    assert f["linear_fp_bytes"] == 0
    assert f["weight_bytes"] == 304 + 3104
    assert f["n_weights_quantized"] == 512 and f["bits_per_weight_quantized"] == 304 * 8 / 512
    assert f["kv_bytes_per_token"] is None


def test_kv_bytes_per_token_formula():
    # SmolLM2-135M: 30 layers, 3 KV heads of 64 dims; K and V in float32 -> 2*30*3*64*4 = 46080
    cfg = LlamaConfig(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3)
    s = ModelSpec.from_hf_config(cfg, bytes_per_kv=4.0)
    assert kv_bytes_per_token(s.n_layers, s.n_kv_heads, s.head_dim, 4) == 46080 == s.kv_bytes_per_token
    assert kv_bytes_per_token(s.n_layers, s.n_kv_heads, s.head_dim, 2) == 23040


def test_footprint_of_quantized_model_shrinks(tiny):
    from workbench.quant import QuantConfig, quantize

    fp = footprint(tiny)
    q, _ = quantize(tiny, QuantConfig(bits=4, group_size=32))
    fq = footprint(q)
    n_lin = sum(m.weight.numel() for n, m in tiny.named_modules()
                if isinstance(m, torch.nn.Linear) and n != "lm_head")
    assert fq["n_weights_quantized"] == n_lin
    assert fq["quant_bytes"] == n_lin * 4.75 / 8  # codes + fp16 scales + uint8 zeros, g32
    assert fp["weight_bytes"] - fq["weight_bytes"] == n_lin * 4 - fq["quant_bytes"]
    assert fq["kv_bytes_per_token"] == fp["kv_bytes_per_token"] == 2 * 2 * 2 * 32 * 4
