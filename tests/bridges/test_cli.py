"""``python -m workbench.bridges``: the one-command bridges of the README."""

import pytest

from workbench.bridges.cli import main


def test_vllm_pd_commands(capsys):
    main(["vllm", "--model", "exports/m", "--policy", "disaggregated", "--pd", "1:2", "--draft", "d", "--k", "3",
          "--kv-cache-dtype", "fp8"])
    lines = capsys.readouterr().out.splitlines()
    serve = [ln for ln in lines if " vllm serve " in ln]
    assert len(serve) == 3 and "kv_producer" in serve[0] and all("kv_consumer" in ln for ln in serve[1:])
    assert all("--kv-cache-dtype fp8" in ln and '"num_speculative_tokens":3' in ln for ln in serve)
    assert sum(ln.startswith("# vllm.LLM(") for ln in lines) == 3


def test_vllm_refuses_article_flags():
    with pytest.raises(ValueError, match="--spec-tokens"):
        main(["vllm", "--model", "m", "--extra", "--speculative-draft-tokens", "4"])


@pytest.mark.slow
@pytest.mark.reference
def test_export_then_import_the_builtin_model(tmp_path, capsys):
    out = tmp_path / "w4a16"
    main(["export", "--model", "smollm2-135m", "--quant", "w4a16", "--set", "group_size=64", "--out", str(out)])
    text = capsys.readouterr().out
    assert f"vllm serve {out}" in text
    main(["import", str(out), "--dtype", "float32", "--max-new-tokens", "4"])
    assert "210 QuantLinear layers, RTN W4 g64 sym" in capsys.readouterr().out
