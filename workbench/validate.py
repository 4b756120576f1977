"""Field checks shared by every frozen config: types from the annotations, errors that name the field.

``check_field_types(self)`` as the first line of a dataclass's ``__post_init__`` checks each field
against its annotation before the class's own range checks run, so those never meet a string or a
NaN:

* ``int`` fields take integers (``bool`` and fractional or integral floats are refused: a count is
  not ``2.5``, and ``1e4`` is spelled ``10000``); numpy integers are converted to ``int``;
* ``float`` fields take real numbers (``int`` or ``float``, numpy scalars converted), never NaN and
  never a string (a numeric string gets the number suggested);
* ``bool`` fields take ``True``/``False``; ``str`` fields take strings;
* ``X | None`` also takes ``None``; ``tuple[int, ...]`` checks each element (a list is converted to
  a tuple); a field annotated with a class (``LengthDist``) takes an instance of it.

Every error is a :class:`ConfigError` (a ``ValueError``) whose message starts ``Class.field=value``
and says what to pass instead.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import types
import typing

import numpy as np

__all__ = ["ConfigError", "check_field_types", "field_error"]


class ConfigError(ValueError):
    """A config field holds a value of the wrong type or outside its range; the message names it."""


def field_error(obj, name: str, value, need: str) -> ConfigError:
    """``ConfigError("Class.name=value must be <need>")``."""
    return ConfigError(f"{type(obj).__name__}.{name}={value!r} {need}")


@functools.cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _split_optional(tp) -> tuple[object, bool]:
    """``(inner type, None allowed)`` for ``X | None`` / ``Optional[X]``; other unions unchanged."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(args) < len(typing.get_args(tp)):
            return args[0], True
    return tp, False


def _numeric_hint(value) -> str:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return ""
    return f"; pass the number {int(x) if x.is_integer() else x} without quotes"


def _check_int(obj, name, value):
    if isinstance(value, (bool, np.bool_)):
        raise field_error(obj, name, value, "must be an integer, not a bool")
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
        raise field_error(obj, name, value, f"must be an integer (got a float); pass {int(value)}")
    if isinstance(value, (float, np.floating)):
        raise field_error(obj, name, value, "must be an integer; a count or size cannot be "
                          + ("fractional" if math.isfinite(value) else str(value)) + ": pass a whole number")
    raise field_error(obj, name, value, f"must be an integer (got {type(value).__name__})"
                      + _numeric_hint(value))


def _check_float(obj, name, value):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise field_error(obj, name, value, f"must be a number (got {type(value).__name__})"
                          + _numeric_hint(value))
    if isinstance(value, (np.floating, np.integer)):
        value = value.item()
    if math.isnan(value):
        raise field_error(obj, name, value, "is NaN; pass a number")
    return value


def _check_scalar(obj, name, value, tp):
    """The checked (possibly converted) value for a scalar or class annotation ``tp``."""
    if tp is int:
        return _check_int(obj, name, value)
    if tp is float:
        return _check_float(obj, name, value)
    if tp is bool:
        if isinstance(value, np.bool_):
            return bool(value)
        if not isinstance(value, bool):
            raise field_error(obj, name, value, f"must be True or False (got {type(value).__name__})")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise field_error(obj, name, value, f"must be a string (got {type(value).__name__})")
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp) and not isinstance(value, tp):
        raise field_error(obj, name, value, f"must be a {tp.__name__} (got {type(value).__name__}); "
                                            f"build one with {tp.__name__}(...)")
    return value


def _check_tuple(obj, name, value, tp):
    args = typing.get_args(tp)
    if not isinstance(value, (tuple, list)):
        return value  # left to the class (QuantConfig.skip also takes a single string)
    if len(args) == 2 and args[1] is Ellipsis and args[0] in (int, float, str, bool):
        value = tuple(_check_scalar(obj, f"{name}[{i}]", v, args[0]) for i, v in enumerate(value))
    return tuple(value)


def check_field_types(obj) -> None:
    """Check every field of the dataclass instance ``obj`` against its annotation (module docstring).

    Converts numpy scalars to Python scalars and lists to tuples in place (frozen dataclasses
    included). Raises :class:`ConfigError` naming ``Class.field`` and the value to pass instead.
    """
    hints = _hints(type(obj))
    for f in dataclasses.fields(obj):
        if f.name not in hints:
            continue
        value = getattr(obj, f.name)
        tp, optional = _split_optional(hints[f.name])
        if value is None:
            if optional:
                continue
            if tp in (int, float, bool, str):
                raise field_error(obj, f.name, value, f"must be {'a number' if tp is float else 'a ' + tp.__name__}"
                                  ", not None")
            continue
        if typing.get_origin(tp) is tuple or tp is tuple:
            new = _check_tuple(obj, f.name, value, tp)
        else:
            new = _check_scalar(obj, f.name, value, tp)
        if new is not value:
            object.__setattr__(obj, f.name, new)
