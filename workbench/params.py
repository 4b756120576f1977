"""Notebook and script parameters read from ``WB_*`` environment variables, parsed one way everywhere.

Every notebook's first cell (tagged ``parameters``) reads its settings through these functions, so the same
notebook runs in JupyterLab, under papermill (``-p``) and under nbmake (which cannot inject parameters).

* :func:`env_flag` -- a boolean: ``1/0``, ``true/false``, ``yes/no``, ``on/off`` (any case); unset or empty gives
  the default; anything else raises ``ValueError`` naming the variable and the accepted values.
* :func:`env_int`, :func:`env_float`, :func:`env_str`, :func:`env_list` -- the same for numbers and strings.
* :func:`study_size` -- the study size every notebook starts from: ``WB_SIZE`` (``smoke`` | ``demo`` | ``full``),
  or the older switches ``WB_SMOKE=1`` / ``WB_FULL=1``; default ``demo``. Conflicting settings raise.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from workbench.registry import Registry

__all__ = ["SIZES", "env_flag", "env_float", "env_int", "env_list", "env_str", "parse_flag", "study_size"]

SIZES = ("smoke", "demo", "full")  # smoke: CI, minutes; demo: `make reports`; full: hours on a 2-core CPU
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def parse_flag(name: str, value: str | bool | int | None, default: bool = False) -> bool:
    """``value`` of parameter ``name`` as a bool: ``1/0``, ``true/false``, ``yes/no``, ``on/off`` in any case, a
    bool, or ``None`` / ``""`` (-> ``default``). Raises ``ValueError`` naming ``name`` for anything else."""
    if value is None or isinstance(value, bool):
        return default if value is None else value
    text = str(value).strip().lower()
    if text == "":
        return default
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{name}={value!r} is not a boolean: set it to one of {'/'.join(_TRUE)} or {'/'.join(_FALSE)} "
                     "(any case), or unset it")


def env_flag(name: str, default: bool = False, environ: Mapping[str, str] | None = None) -> bool:
    """Boolean parameter ``name`` from the environment (see :func:`parse_flag`)."""
    return parse_flag(name, _env(environ).get(name), default)


def _number(name: str, default, cast, environ):
    raw = _env(environ).get(name, "")
    if raw.strip() == "":
        return default
    try:
        return cast(raw.strip())
    except ValueError:
        kind = "an integer" if cast is int else "a number"
        raise ValueError(f"{name}={raw!r} is not {kind}; set it to {kind} (e.g. {name}={default!r}) or unset it") \
            from None


def env_int(name: str, default: int | None, environ: Mapping[str, str] | None = None) -> int | None:
    """Integer parameter ``name`` (unset or empty: ``default``). Raises ``ValueError`` naming it otherwise."""
    return _number(name, default, int, environ)


def env_float(name: str, default: float | None, environ: Mapping[str, str] | None = None) -> float | None:
    """Float parameter ``name`` (unset or empty: ``default``). Raises ``ValueError`` naming it otherwise."""
    return _number(name, default, float, environ)


def env_str(name: str, default: str | None, environ: Mapping[str, str] | None = None,
            choices: tuple[str, ...] | None = None) -> str | None:
    """String parameter ``name`` (unset or empty: ``default``); with ``choices`` an unknown value raises
    ``ValueError`` naming the parameter, the choices and the closest one."""
    raw = _env(environ).get(name, "").strip()
    value = raw or default
    if choices is not None and value is not None:
        Registry(name, dict.fromkeys(choices), case_sensitive=False).check(value, f"Set {name} to one of {choices}.")
        value = value.lower() if all(c == c.lower() for c in choices) else value
    return value


def env_list(name: str, default: tuple | list | None, cast=str, environ: Mapping[str, str] | None = None):
    """Comma-separated parameter ``name`` as a tuple of ``cast`` values (unset or empty: ``default``)."""
    raw = _env(environ).get(name, "").strip()
    if not raw:
        return None if default is None else tuple(default)
    try:
        return tuple(cast(x.strip()) for x in raw.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"{name}={raw!r}: expected a comma-separated list of {cast.__name__} values") from None


def study_size(environ: Mapping[str, str] | None = None) -> str:
    """The study size: ``WB_SIZE`` (``smoke`` | ``demo`` | ``full``), else ``WB_SMOKE`` / ``WB_FULL`` as booleans,
    else ``"demo"``. Raises ``ValueError`` for an unknown size or for ``WB_SIZE`` contradicting a switch that is on
    (or both switches on)."""
    env = _env(environ)
    smoke, full = env_flag("WB_SMOKE", False, env), env_flag("WB_FULL", False, env)
    size = env_str("WB_SIZE", None, env, choices=SIZES)
    if smoke and full:
        raise ValueError("WB_SMOKE and WB_FULL are both on: set WB_SIZE=smoke, demo or full instead")
    switch = "smoke" if smoke else "full" if full else None
    if size and switch and size != switch:
        raise ValueError(f"WB_SIZE={size} but WB_{switch.upper()} is on: unset one of them")
    return size or switch or "demo"
