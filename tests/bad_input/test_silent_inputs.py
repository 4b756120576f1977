"""Inputs that used to go through silently and now stop with an error naming the fix (or warn and say so in
the result): an architecture RTN does not know (0 layers quantized), an unsupported architecture in the
quantization sweep and the P/D study (a raw AttributeError), the speculative loop's silent fall-back to the
HF runner, a ``tokenizer=`` override of another vocabulary, and a results folder that cannot be written
(found out only after a point had been computed)."""

import warnings

import pandas as pd
import pytest
import torch

from workbench.models import TokenizerMismatchError, load_model
from workbench.models.random_init import byte_tokenizer


def _gpt2(seed: int = 0, vocab: int = 300):
    """A tiny GPT-2: its matmuls are transformers' Conv1D, not nn.Linear, and its config has no
    intermediate_size (GPT-2 writes n_inner)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=vocab, n_positions=64, bos_token_id=256,
                     eos_token_id=257)
    return GPT2LMHeadModel(cfg).eval()


def test_rtn_on_an_architecture_without_linears_names_it():
    from workbench.quant import QuantConfig, quantize

    with pytest.raises(ValueError, match=r"GPT2LMHeadModel \(model_type 'gpt2'\): no torch.nn.Linear to quantize "
                                         r"outside skip=\('lm_head',\), so 0 layers .* Conv1D x4.*QuantConfig.skip"):
        quantize(_gpt2(), QuantConfig(method="rtn", bits=4, group_size=32))


def test_unsupported_architecture_in_the_quant_sweep_and_the_pd_study():
    """The quantization sweep (weight footprint) and notebook 03 (ModelSpec of the profiled model) read
    Llama-family config fields; GPT-2 has none of intermediate_size: a ValueError naming the families."""
    from workbench.arch import ModelSpec
    from workbench.pd.profile import make_runner
    from workbench.quant import QuantConfig
    from workbench.studies.quant_sweep import run_quant_sweep

    model = _gpt2()
    families = r"model_type='gpt2': the config has no \['intermediate_size'\].*\('llama', 'qwen2', 'mistral'\)"
    with pytest.raises(ValueError, match=families):
        run_quant_sweep(model, byte_tokenizer(), [QuantConfig(bits=4, group_size=32)], text="the quick fox " * 40,
                        n_tokens=128, seq_len=32, n_questions=0, speed=False, progress=False)
    with pytest.raises(ValueError, match=families):
        ModelSpec.from_hf_config(model.config, name="gpt2")
    with pytest.raises(ValueError, match=r"model_type='gpt2' is not supported; the engine runs"):
        make_runner(model, 2, 32)


def test_speculative_loop_says_when_it_falls_back_to_the_hf_runner():
    """GPT-2 is not an engine architecture: run_spec warns once with the reason and every row says the HF
    runner ran; asking for the device loop (the engine's) is an error instead."""
    from workbench.spec import SpecConfig
    from workbench.spec.run import run_spec

    target, draft = _gpt2(0), _gpt2(1)
    prompts = pd.DataFrame({"prompt_id": [0, 1], "category": ["a", "b"], "prompt_ids": [[5, 6, 7], [8, 9]]})
    cfg = SpecConfig(k=2, max_new_tokens=4)
    with pytest.warns(UserWarning, match=r"GPT2LMHeadModel runs on the HF reference runner .* because the engine "
                                         r"cannot take it: ValueError: model_type='gpt2' is not supported") as got:
        rows = run_spec(target, {"d": draft}, prompts, cfg)
    assert len([w for w in got if "HF reference runner" in str(w.message)]) == 1  # once, not per model or prompt
    assert len(rows) == 2 and set(rows["target_runner"]) == {"hf"} and set(rows["draft_runner"]) == {"hf"}
    with pytest.raises(ValueError, match=r"loop='device' asks for the engine, which cannot run GPT2LMHeadModel"):
        run_spec(target, {"d": draft}, prompts, cfg, loop="device")


def _llama(seed: int = 0, vocab: int = 300):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=2)).eval()


def test_engine_rows_say_engine():
    from workbench.spec import SpecConfig
    from workbench.spec.run import run_spec

    prompts = pd.DataFrame({"prompt_id": [0], "category": ["a"], "prompt_ids": [[5, 6, 7]]})
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no fall-back warning for an engine architecture
        rows = run_spec(_llama(0), {"d": _llama(1)}, prompts, SpecConfig(k=2, max_new_tokens=4))
    assert rows[["target_runner", "draft_runner"]].drop_duplicates().values.tolist() == [["engine", "engine"]]


def _tiny_llama_folder(path, vocab: int):
    _llama(0, vocab).save_pretrained(path)
    return str(path)


def test_tokenizer_override_of_another_vocabulary_is_refused(tmp_path):
    """The byte-level tokenizer (258 tokens) for a model of 4,096 rows (another vocabulary) and for one of
    200 rows (ids past the last row): refused, naming both sizes; for 320 rows (62 rows of padding, as
    checkpoints pad their embeddings) accepted."""
    tok = byte_tokenizer()
    with pytest.raises(TokenizerMismatchError, match=r"the tokenizer has 258 tokens but .* has 4,096 vocabulary "
                                                      r"rows: they are different vocabularies. Fix: pass the tokenizer"):
        load_model(_tiny_llama_folder(tmp_path / "big", 4096), device="cpu", tokenizer=tok)
    with pytest.raises(TokenizerMismatchError, match=r"has 200 vocabulary rows: its ids past the last row"):
        load_model(_tiny_llama_folder(tmp_path / "small", 200), device="cpu", tokenizer=tok)
    model, got = load_model(_tiny_llama_folder(tmp_path / "padded", 320), device="cpu", tokenizer=tok)
    assert got is tok and model.get_input_embeddings().num_embeddings == 320


def test_results_folder_that_cannot_be_written_fails_before_any_point(tmp_path):
    """The results root lies under a regular file (as an unwritable mount would refuse it; the tests run as
    root, so permissions cannot show it): sweep raises before computing a point, naming the folder."""
    from workbench.results import sweep

    (tmp_path / "file").write_text("")
    calls = []
    with pytest.raises(OSError, match=r"the results folder .*file/results cannot be written .*WORKBENCH_RESULTS"):
        sweep("x", [{"a": 1}, {"a": 2}], lambda c: calls.append(c) or {"y": 1}, root=tmp_path / "file" / "results",
              progress=False)
    assert calls == []  # nothing computed, nothing lost
