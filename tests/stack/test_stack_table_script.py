"""benchmarks/stack_table.py at --smoke size on the CPU (the GPU run must not fail on a typo)."""

import json

import pytest


@pytest.mark.slow
def test_stack_table_smoke(tmp_path):
    from benchmarks.stack_table import main

    main(["--smoke", "--alpha", "0.7", "--out", str(tmp_path)])
    out = json.loads((tmp_path / "stack_table.json").read_text())
    assert len(out["table"]) == 9 and len(out["ledger"]) == 14 and out["alpha"]["alpha"] == 0.7
    assert {r["spec_timing"] for r in out["table"] if r["speculative"]} == {"synthetic"}
    assert "| label |" in (tmp_path / "stack_table.md").read_text()
