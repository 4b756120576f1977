"""The claims ledger: each published claim a declarative record (``records/*.yaml``), tested by the
workbench's own measurements (:mod:`workbench.claims.evidence`) with a stated rule
(:mod:`workbench.claims.hooks`), in the manner of lm-eval's task YAML + ``utils.py``.

``evaluate(collect_evidence(stack=..., kv=..., ...))`` -> one row per claim: claimed, measured,
verdict (holds / contradicted / not testable here) and why.
"""

from workbench.claims.evidence import collect_evidence
from workbench.claims.ledger import (
           CONTRADICTED,
           HOLDS,
           NOT_TESTABLE,
           ClaimRecord,
           Verdict,
           evaluate,
           load_records,
)

__all__ = ["CONTRADICTED", "HOLDS", "NOT_TESTABLE", "ClaimRecord", "Verdict", "collect_evidence", "evaluate",
           "load_records"]
