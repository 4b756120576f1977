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

Verdicts: ``holds``, ``contradicted``, ``not testable here`` (evidence missing, or evidence that
cannot support the claim: the reason says which). Each verdict names its ``basis``: ``measured``
here, ``arithmetic`` on published figures, ``mechanism`` (a small experiment on tiny models),
``simulated``, ``predicted (...)`` (another tool's estimate), or ``what-if`` (a synthetic input).

Rounding rule for every tolerance (:data:`DECIMALS`): the difference being tested (``measured /
claimed - 1`` for a relative tolerance, ``measured - claimed`` otherwise) is rounded to 6 decimal
places (Python's ``round``) before it is compared with the tolerance. Claims state their figures to
two or three significant digits, so this removes binary floating-point error (about 1e-16: 3.5 / 2.8 -
1 - 0.27 = 0.020000000000000018) without moving any verdict by more than the claims' own precision.
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
    "within_abs",
    "within_rel",
]

HOLDS, CONTRADICTED, NOT_TESTABLE = "holds", "contradicted", "not testable here"
_OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq}
DECIMALS = 6  # tolerances compare differences rounded to this many decimal places (module docstring)


def within_rel(measured: float, claimed: float, rel_tol: float) -> bool:
    """``|measured / claimed - 1| <= rel_tol`` on the difference rounded to :data:`DECIMALS` places;
    False for a non-finite ``measured`` or a zero ``claimed``."""
    if not math.isfinite(measured) or claimed == 0:
        return False
    return round(abs(measured / claimed - 1.0), DECIMALS) <= rel_tol


def within_abs(measured: float, claimed: float, tol: float) -> bool:
    """``|measured - claimed| <= tol`` on the difference rounded to :data:`DECIMALS` places; False for
    a non-finite ``measured``."""
    return math.isfinite(measured) and round(abs(measured - claimed), DECIMALS) <= tol


@dataclass(frozen=True)
class Verdict:
    """The ledger's answer for one claim: ``verdict``, the figure ``measured`` here, ``why``, and the
    ``basis`` the verdict rests on (see the module docstring; empty for "not testable here")."""

    verdict: str  # holds | contradicted | not testable here
    measured: str = ""  # the measured figure(s), formatted
    why: str = ""  # the rule's reasoning in one or two sentences
    basis: str = "measured"  # measured | arithmetic | mechanism | simulated | predicted (...) | what-if

    def __post_init__(self):
        if self.verdict not in (HOLDS, CONTRADICTED, NOT_TESTABLE):
            raise ValueError(f"Verdict.verdict={self.verdict!r}; use {HOLDS!r}, {CONTRADICTED!r} or {NOT_TESTABLE!r}")
        if self.verdict == NOT_TESTABLE:
            object.__setattr__(self, "basis", "")


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
        ok = within_rel(measured, value, tol)
        why = f"{rule['measured']} = {_fmt(measured)} is {'within' if ok else 'outside'} {tol:.0%} of {_fmt(value)}"
    else:  # the comparison on the difference rounded to DECIMALS places (module docstring)
        ok = math.isfinite(measured) and _OPS[rule["op"]](round(measured - value, DECIMALS), 0.0)
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
    ``basis`` (what the verdict rests on), ``why``, ``measurement`` (what tests it), ``not_tested`` (what
    this machine cannot test)."""
    rows = []
    for r in records or load_records():
        v = run_rule(r, evidence)
        claimed = ", ".join(f"{k} {_fmt(x)}" for k, x in r.claimed.items())
        rows.append({"id": r.id, "claim": r.text.strip(), "source": r.source, "claimed": claimed,
                     "measured": v.measured, "verdict": v.verdict, "basis": v.basis, "why": v.why, "measurement": r.measurement.strip(),
                     "not_tested": r.untestable.strip()})
    return pd.DataFrame(rows)
