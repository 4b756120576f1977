"""The claims ledger: declarative claim records, evidence measured here, and a verdict per claim.

A record (one YAML file per claim under ``workbench/claims/records/``, in the manner of lm-eval's task
YAML + ``utils.py``) holds the claim's ``text``, its ``source`` figure, the ``claimed`` numbers, the
``measurement`` that tests it, the evidence keys it ``needs``, what cannot be tested here
(``untestable``) and a ``rule``: either declarative (one comparison, below) or ``!function
hooks.<name>``, a function of :mod:`workbench.claims.hooks` taking ``(evidence, record)``.

Declarative rule (``measured`` is a dotted path into the evidence, ``value`` a number or a dotted
path into ``claimed``)::

    rule: {measured: kv.int8.top1_after, op: ">=", value: 0.99}       # holds iff measured >= 0.99
    rule: {measured: spec.tau_ratio, op: within, value: claimed.gain, rel_tol: 0.05}

Verdicts: ``holds``, ``contradicted``, ``not testable here`` (evidence missing: the reason is the
record's ``untestable`` text plus the missing keys).
"""

from __future__ import annotations

import importlib
import math
import operator
from dataclasses import dataclass, field
from importlib import resources

import pandas as pd
import yaml

__all__ = [
    "CONTRADICTED",
    "HOLDS",
    "NOT_TESTABLE",
    "ClaimRecord",
    "Verdict",
    "evaluate",
    "load_records",
    "lookup",
    "run_rule",
]

HOLDS, CONTRADICTED, NOT_TESTABLE = "holds", "contradicted", "not testable here"
_OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq}


@dataclass(frozen=True)
class Verdict:
    """The ledger's answer for one claim: ``verdict``, the figure ``measured`` here, and ``why``."""

    verdict: str  # holds | contradicted | not testable here
    measured: str = ""  # the measured figure(s), formatted
    why: str = ""  # the rule's reasoning in one or two sentences

    def __post_init__(self):
        if self.verdict not in (HOLDS, CONTRADICTED, NOT_TESTABLE):
            raise ValueError(f"Verdict.verdict={self.verdict!r}; use {HOLDS!r}, {CONTRADICTED!r} or {NOT_TESTABLE!r}")


@dataclass(frozen=True)
class ClaimRecord:
    """One claim (see the module docstring for the fields)."""

    id: int
    name: str
    text: str
    source: str
    claimed: dict
    measurement: str
    needs: tuple = ()
    rule: dict | str = field(default_factory=dict)
    untestable: str = ""

    def __post_init__(self):
        if not isinstance(self.rule, (dict, str)) or not self.rule:
            raise ValueError(f"claim {self.id}: rule must be a declarative dict or '!function hooks.<name>'")
        if isinstance(self.rule, dict):
            missing = {"measured", "op", "value"} - set(self.rule)
            if missing or (self.rule["op"] not in _OPS and self.rule["op"] != "within"):
                raise ValueError(f"claim {self.id}: declarative rule needs measured, op (one of {sorted(_OPS)} "
                                 f"or 'within'), value; got {self.rule}")
        object.__setattr__(self, "needs", tuple(self.needs))


class _Loader(yaml.SafeLoader):
    """SafeLoader with lm-eval's ``!function module.name`` tag (kept as the string ``module.name``)."""


_Loader.add_constructor("!function", lambda loader, node: str(loader.construct_scalar(node)))


def load_records(package: str = "workbench.claims.records") -> list[ClaimRecord]:
    """Every ``*.yaml`` record in ``package``, sorted by id. Raises ValueError for a malformed record."""
    out = []
    for f in sorted(resources.files(package).iterdir(), key=lambda p: p.name):
        if f.name.endswith(".yaml"):
            d = yaml.load(f.read_text(encoding="utf-8"), Loader=_Loader)
            try:
                out.append(ClaimRecord(**d))
            except TypeError as e:
                raise ValueError(f"{f.name}: {e}") from None
    return sorted(out, key=lambda r: r.id)


def lookup(tree, path: str):
    """``tree["a"]["b"]`` for ``path = "a.b"``; KeyError naming the missing part."""
    cur = tree
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            raise KeyError(f"{path!r}: no {part!r}")
        cur = cur[part]
    return cur


def _fmt(x) -> str:
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def _declarative(rule: dict, evidence: dict, record: ClaimRecord) -> Verdict:
    measured = float(lookup(evidence, rule["measured"]))
    value = rule["value"]
    if isinstance(value, str):
        value = lookup({"claimed": record.claimed, **evidence}, value)
    value = float(value)
    if rule["op"] == "within":
        tol = float(rule.get("rel_tol", 0.1))
        ok = math.isfinite(measured) and abs(measured / value - 1.0) <= tol
        why = f"{rule['measured']} = {_fmt(measured)} is {'within' if ok else 'outside'} {tol:.0%} of {_fmt(value)}"
    else:
        ok = math.isfinite(measured) and _OPS[rule["op"]](measured, value)
        why = f"{rule['measured']} = {_fmt(measured)} {'satisfies' if ok else 'fails'} {rule['op']} {_fmt(value)}"
    return Verdict(HOLDS if ok else CONTRADICTED, _fmt(measured), why + (f". {rule['note']}" if "note" in rule else ""))


def run_rule(record: ClaimRecord, evidence: dict) -> Verdict:
    """The verdict of one record on ``evidence`` (a dict of measurements, see
    :func:`workbench.claims.evidence.collect_evidence`)."""
    missing = [k for k in record.needs if evidence.get(k) is None]
    if missing:
        return Verdict(NOT_TESTABLE, "", f"{record.untestable} Missing here: {', '.join(missing)}.".strip())
    if isinstance(record.rule, dict):
        return _declarative(record.rule, evidence, record)
    module, _, fn = record.rule.rpartition(".")
    hook = getattr(importlib.import_module(f"workbench.claims.{module}"), fn)
    return hook(evidence, record)


def evaluate(evidence: dict, records: list[ClaimRecord] | None = None) -> pd.DataFrame:
    """The ledger as a table: ``id``, ``claim``, ``source``, ``claimed``, ``measured``, ``verdict``,
    ``why``, ``measurement`` (what tests it), ``not_tested`` (what this machine cannot test)."""
    rows = []
    for r in records or load_records():
        v = run_rule(r, evidence)
        claimed = ", ".join(f"{k} {_fmt(x)}" for k, x in r.claimed.items())
        rows.append({"id": r.id, "claim": r.text.strip(), "source": r.source, "claimed": claimed,
                     "measured": v.measured, "verdict": v.verdict, "why": v.why, "measurement": r.measurement.strip(),
                     "not_tested": r.untestable.strip()})
    return pd.DataFrame(rows)
