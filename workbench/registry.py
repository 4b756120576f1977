"""Names to objects, with "did you mean" errors: the one registry behind every named variant.

In the manner of lm-eval's ``lm_eval/api/registry.py`` (``register_model(*names)`` fills a dict,
``get_model(name)`` looks it up) and Vidur's ``vidur/types/base_registry.py`` (``BaseRegistry``:
``register(key, implementation)`` / ``get(key)``): a small explicit mapping that the module owning
the variants fills at import, looked up by name. An unknown name raises :class:`UnknownNameError`
(a ``ValueError``) that lists the known names and, when one is close, suggests it::

    POLICIES = Registry("SimConfig.policy", {"colocated": ..., "chunked": ...})
    POLICIES["chunkd"]   # UnknownNameError: SimConfig.policy='chunkd' is unknown; choose one of
                         # ['chunked', 'colocated']. Did you mean 'chunked'?

The suggestion is a name that starts with the value (``'h100'`` -> ``'h100-sxm'``), else
``difflib.get_close_matches`` (Ratcliff/Obershelp similarity >= 0.5) on the lower-cased names, so
``'GPTQ'`` and ``'gtpq'`` both find ``'gptq'``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Mapping
from typing import Generic, TypeVar

__all__ = ["Registry", "UnknownNameError", "close_matches", "did_you_mean", "lookup_in", "unknown_name_message"]

T = TypeVar("T")
_MISSING = object()
CUTOFF = 0.5  # difflib similarity needed for a suggestion


class UnknownNameError(ValueError, KeyError):
    """A name that no registry entry has; the message lists the known names and the closest one.

    Subclasses ``ValueError`` (a bad argument value) and ``KeyError`` (a failed mapping lookup), so
    existing ``except ValueError`` and ``except KeyError`` handlers both catch it.
    """

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0]) if self.args else ""


def close_matches(value, options: Iterable[str], n: int = 1, cutoff: float = CUTOFF) -> list[str]:
    """The ``n`` options closest to ``value``: those it is a prefix of (3+ characters), then the
    case-insensitive ``difflib`` matches with ratio >= ``cutoff``."""
    options = [str(o) for o in options]
    by_lower: dict[str, str] = {}
    for o in options:
        by_lower.setdefault(o.lower(), o)
    v = str(value).lower()
    prefixed = [o for o in by_lower if len(v) >= 3 and o.startswith(v) and o != v]
    hits = prefixed + [h for h in difflib.get_close_matches(v, list(by_lower), n=n, cutoff=cutoff) if h not in prefixed]
    return [by_lower[h] for h in hits[:n]]


def did_you_mean(value, options: Iterable[str]) -> str:
    """``" Did you mean 'x'?"`` for the option closest to ``value``, or ``""`` when none is close."""
    hit = close_matches(value, options)
    return f" Did you mean {hit[0]!r}?" if hit else ""


def unknown_name_message(what: str, value, options: Iterable[str], fix: str = "") -> str:
    """``"{what}={value!r} is unknown; choose one of [...].{fix} Did you mean 'x'?"``."""
    options = sorted(str(o) for o in options)
    return f"{what}={value!r} is unknown; choose one of {options}.{(' ' + fix) if fix else ''}" \
        + did_you_mean(value, options)


class Registry(Mapping[str, T], Generic[T]):
    """An explicit name -> object mapping whose failed lookups explain themselves.

    Args:
        what: how the error names the looked-up value, e.g. ``"SimConfig.policy"`` or
            ``"hardware preset"``.
        entries: initial ``{name: object}``.
        case_sensitive: when ``False``, names are stored and looked up lower-cased.

    ``registry[name]`` and :meth:`lookup` raise :class:`UnknownNameError`; ``name in registry``,
    ``len``, iteration and ``dict(registry)`` behave as for a dict. :meth:`register` adds an entry
    (directly or as a decorator) and refuses a duplicate name with ``ValueError``.
    """

    def __init__(self, what: str, entries: Mapping[str, T] | None = None, *, case_sensitive: bool = True):
        self.what = what
        self.case_sensitive = case_sensitive
        self._entries: dict[str, T] = {}
        for name, obj in (entries or {}).items():
            self.register(name, obj)

    def _key(self, name) -> str:
        return name if self.case_sensitive or not isinstance(name, str) else name.lower()

    def register(self, name: str, obj=_MISSING):
        """Add ``obj`` under ``name``; without ``obj``, return a decorator that adds its argument."""
        if obj is _MISSING:
            def deco(o: T) -> T:
                self.register(name, o)
                return o
            return deco
        key = self._key(name)
        if key in self._entries:
            raise ValueError(f"{self.what}: {name!r} is registered twice; pick another name")
        self._entries[key] = obj
        return obj

    def check(self, name, fix: str = "") -> str:
        """The stored form of ``name``; raises :class:`UnknownNameError` (with ``fix`` appended)."""
        key = self._key(name)
        if not isinstance(name, str) or key not in self._entries:
            raise UnknownNameError(unknown_name_message(self.what, name, self._entries, fix))
        return key

    def lookup(self, name, fix: str = "") -> T:
        """The object registered under ``name``; raises :class:`UnknownNameError` otherwise."""
        return self._entries[self.check(name, fix)]

    def __getitem__(self, name) -> T:
        return self.lookup(name)

    def __contains__(self, name) -> bool:
        return isinstance(name, str) and self._key(name) in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.what!r}, {self.names()})"


def lookup_in(mapping: Mapping[str, T], name, what: str, *, lower: bool = False, fix: str = "") -> T:
    """``mapping[name]`` (``name.lower()`` when ``lower``) or :class:`UnknownNameError` naming ``what``.

    For plain dicts that are not (yet) a :class:`Registry`.
    """
    key = name.lower() if lower and isinstance(name, str) else name
    if not isinstance(key, str) or key not in mapping:
        raise UnknownNameError(unknown_name_message(what, name, mapping, fix))
    return mapping[key]

