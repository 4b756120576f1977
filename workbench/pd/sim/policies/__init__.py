"""Serving policies by name: a small explicit registry (one file per policy, as Vidur's
``scheduler/replica_scheduler/*``). Each module has ``NAME`` and
``run(workload, config, costs: PoolCosts, record=False) -> dict`` of per-request arrays (``first_ms``,
``finish_ms``, ``n_preempt``, ``n_tokens``, ``instance``; times in ms)."""

from __future__ import annotations

import difflib
import importlib

__all__ = ["POLICIES", "check_policy", "get_policy"]

POLICIES: dict[str, str] = {
    "colocated": "workbench.pd.sim.policies.colocated",
    "chunked": "workbench.pd.sim.policies.chunked",
    "disaggregated": "workbench.pd.sim.policies.disaggregated",
}


def check_policy(name: str) -> None:
    """Raise ``ValueError`` with a "did you mean" hint for an unknown policy name."""
    if name not in POLICIES:
        hint = difflib.get_close_matches(str(name), list(POLICIES), n=1)
        msg = f"SimConfig.policy={name!r} is unknown; choose one of {sorted(POLICIES)}"
        raise ValueError(msg + (f" (did you mean {hint[0]!r}?)" if hint else ""))


def get_policy(name: str):
    """The policy's ``run`` function."""
    check_policy(name)
    return importlib.import_module(POLICIES[name]).run
