"""The ledger: every record loads and resolves its rule; declarative rules and missing evidence."""

import importlib

import pytest

from workbench.claims import CONTRADICTED, HOLDS, NOT_TESTABLE, ClaimRecord, evaluate, load_records
from workbench.claims.ledger import run_rule


def test_fourteen_records_with_resolvable_rules():
    recs = load_records()
    assert [r.id for r in recs] == list(range(1, 15))
    hooks = importlib.import_module("workbench.claims.hooks")
    for r in recs:
        assert r.text and r.source and r.claimed and r.measurement
        if isinstance(r.rule, str):
            assert r.rule.startswith("hooks.") and callable(getattr(hooks, r.rule.split(".", 1)[1]))


def _rec(**rule):
    return ClaimRecord(id=99, name="x", text="t", source="s", claimed={"gain": 0.27}, measurement="m",
                       needs=("spec",), rule=rule, untestable="No weights.")


@pytest.mark.parametrize("rule, value, verdict", [
    ({"measured": "spec.r", "op": ">=", "value": 0.99}, 0.995, HOLDS),
    ({"measured": "spec.r", "op": ">=", "value": 0.99}, 0.9, CONTRADICTED),
    ({"measured": "spec.r", "op": "within", "value": "claimed.gain", "rel_tol": 0.05}, 0.28, HOLDS),
    ({"measured": "spec.r", "op": "within", "value": "claimed.gain", "rel_tol": 0.05}, 0.25, CONTRADICTED),
    ({"measured": "spec.r", "op": "<", "value": 1.0}, float("nan"), CONTRADICTED),
])
def test_declarative_rules(rule, value, verdict):
    assert run_rule(_rec(**rule), {"spec": {"r": value}}).verdict == verdict


def test_missing_evidence_is_not_testable():
    v = run_rule(_rec(measured="spec.r", op=">=", value=1), {"spec": None})
    assert v.verdict == NOT_TESTABLE and "No weights." in v.why and "spec" in v.why


def test_malformed_rule_refused():
    with pytest.raises(ValueError, match="declarative rule"):
        _rec(measured="a", op="~", value=1)


def test_evaluate_without_measurements():
    """Arithmetic and mechanism claims have verdicts on any machine; study claims say what is missing."""
    from workbench.claims.evidence import PUBLISHED_VOCAB, memory_arithmetic

    ev = {"arith": memory_arithmetic(), "vocab": dict(PUBLISHED_VOCAB)}
    df = evaluate(ev).set_index("id")
    # claim 7's +25% is within its 2 points of +27% (this test once pinned "contradicted": a float-rounding flip);
    # claim 2's MMLU half is not measured, and its memory half fits one recipe only
    assert df.loc[7, "verdict"] == HOLDS and df.loc[7, "basis"] == "arithmetic"
    assert (df.loc[[1, 2, 5, 8, 9, 11, 12, 13, 14], "verdict"] == NOT_TESTABLE).all()
    assert (df.loc[[1, 2, 5, 8, 9, 11, 12, 13, 14], "basis"] == "").all()
    assert list(df.columns) == ["claim", "source", "claimed", "measured", "verdict", "basis", "why", "measurement",
                                "not_tested"]
