"""Export of each float format as a compressed-tensors checkpoint (llm-compressor's layout) and its import by
transformers: the same logits, to the bit (4-bit formats: compressed-tensors decompresses their weights to bfloat16,
so the reference holds its weights rounded once to bfloat16 too)."""

import json

import pytest
import torch

from workbench.bridges.export_float import export_float_compressed_tensors, load_float_compressed_tensors
from workbench.quant.floatconfig import FLOAT_SCHEMES, FloatConfig
from workbench.quant.floatquant import quantize_float

FORMAT = {"FP8_DYNAMIC": "float-quantized", "FP8": "float-quantized", "FP8_BLOCK": "float-quantized",
          "W8A8": "int-quantized", "NVFP4": "nvfp4-pack-quantized", "NVFP4A16": "nvfp4-pack-quantized",
          "MXFP4": "mxfp4-pack-quantized", "MXFP4A16": "mxfp4-pack-quantized"}


@pytest.mark.parametrize("scheme", list(FLOAT_SCHEMES))
def test_export_round_trip_same_logits(tiny, calib_ids, tmp_path, scheme):
    q, _ = quantize_float(tiny, FloatConfig(scheme), calib_ids)
    info = export_float_compressed_tensors(q, tmp_path)
    assert info["format"] == FORMAT[scheme] and info["n_layers"] == 14
    qc = json.loads((tmp_path / "config.json").read_text())["quantization_config"]
    assert qc["quant_method"] == "compressed-tensors" and "lm_head" in qc["ignore"]
    r = load_float_compressed_tensors(tmp_path)
    if FLOAT_SCHEMES[scheme][1] == 4:
        for mod in q.modules():
            if hasattr(mod, "weight_kind"):
                mod._w = mod.effective_weight().bfloat16().float()
    with torch.no_grad():
        assert torch.equal(q(calib_ids[:2]).logits, r(calib_ids[:2]).logits)


def test_export_refuses_an_unquantized_model(tiny, tmp_path):
    with pytest.raises(ValueError, match="quantize_float"):
        export_float_compressed_tensors(tiny, tmp_path)
