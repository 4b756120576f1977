"""``layer_draft_folder``: the truncated-layer draft saved as an HF folder vLLM loads (the vLLM draft-model agreement
test builds it). Reuse only a complete folder of the same build; a half-written one is rebuilt."""

import json

import torch

from workbench.models.provenance import PROVENANCE_FILE
from workbench.spec.drafts import truncated_draft
from workbench.spec.vllm_agreement import layer_draft_folder


def test_folder_is_the_truncated_draft_and_is_rebuilt_when_incomplete(tmp_path, default_model):
    model, tok = default_model
    src = tmp_path / "m"
    model.save_pretrained(src)
    tok.save_pretrained(src)
    out = layer_draft_folder(src, 2, dtype="float32", root=tmp_path / "drafts")
    from transformers import AutoModelForCausalLM

    got = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert got.config.num_hidden_layers == 2
    ids = torch.tensor([[1, 42, 7, 99]])
    with torch.no_grad():
        want = truncated_draft(model, 2)(ids).logits
        assert torch.allclose(got(ids).logits, want, atol=1e-5)
    stamp = (out / PROVENANCE_FILE).stat().st_mtime_ns
    assert layer_draft_folder(src, 2, dtype="float32", root=tmp_path / "drafts") == out  # reused
    assert (out / PROVENANCE_FILE).stat().st_mtime_ns == stamp
    (out / PROVENANCE_FILE).unlink()  # as a copy that stopped before its last file
    (out / "model.safetensors").write_bytes(b"junk")
    layer_draft_folder(src, 2, dtype="float32", root=tmp_path / "drafts")
    assert json.loads((out / PROVENANCE_FILE).read_text())["draft"] == "layers-2"
    assert AutoModelForCausalLM.from_pretrained(out).config.num_hidden_layers == 2  # the junk is gone
