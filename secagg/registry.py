"""Registry of mask protocols, so config names (and the seed framework's class names) resolve to classes.

An unknown name fails at config time with a message that lists what is registered.
"""

from __future__ import annotations

from collections.abc import Iterable

_PROTOCOLS: dict[str, type] = {}  # canonical name -> class
_ALIASES: dict[str, str] = {}  # alias -> canonical name


class UnknownProtocolError(ValueError):
    """A mask protocol name that nothing registered."""


def register(name: str, cls: type, aliases: Iterable[str] = ()) -> None:
    """Register `cls` under `name` and `aliases`; re-registering the same class is a no-op, and its new definition (a
    module reloaded, a notebook cell run again: the same module and qualified name) takes its names over, as in
    compression.register. A name or alias taken by another protocol, compared case-insensitively (lookup falls back
    to that), raises ValueError: `Dh` beside `dh` would take over the spelling `DH`."""
    aliases = tuple(aliases)
    owners = {**_PROTOCOLS, **{alias: _PROTOCOLS[target] for alias, target in _ALIASES.items()}}
    for key in (name, *aliases):
        for taken_key, taken in owners.items():
            if taken_key.casefold() == str(key).casefold() and not _same_definition(taken, cls):
                raise ValueError(f"mask protocol name {key!r} is already registered to {taken.__name__}")
    # what the config and the rounds read of a protocol: refused here rather than as an AttributeError mid-run
    if not isinstance(getattr(cls, "masks", None), bool):
        raise TypeError(f"mask protocol {name!r}: {cls!r} has no `masks` flag (True: it masks, with Client and "
                        "Server classes; False: sums in the clear)")
    if cls.masks and not all(isinstance(getattr(cls, part, None), type) for part in ("Client", "Server")):
        raise TypeError(f"mask protocol {name!r}: {cls!r} masks but lacks a Client or Server class")
    _PROTOCOLS[name] = cls
    for alias in aliases:
        _ALIASES[alias] = name


def _same_definition(old, new) -> bool:
    """Whether `new` is `old` or the same class defined again (same module, same qualified name)."""
    qualname = getattr(new, "__qualname__", None)
    if old is new or not isinstance(qualname, str) or qualname.endswith("<lambda>"):
        return old is new
    return (getattr(old, "__module__", None), getattr(old, "__qualname__", None)) == (new.__module__, qualname)


def canonical(name: str) -> str:
    """The canonical name for a canonical name or alias: exact match first, then case-insensitive."""
    if not isinstance(name, str):  # an int or a list is no name (and a list is no dict key)
        raise UnknownProtocolError(f"unknown mask protocol {name!r}; registered: {_listing()}")
    if name in _PROTOCOLS:
        return name
    if name in _ALIASES:
        return _ALIASES[name]
    folded = name.casefold()
    for key in sorted(_PROTOCOLS):
        if key.casefold() == folded:
            return key
    for alias in sorted(_ALIASES):
        if alias.casefold() == folded:
            return _ALIASES[alias]
    raise UnknownProtocolError(f"unknown mask protocol {name!r}; registered: {_listing()}")


def get(name: str) -> type:
    """The protocol class registered under `name` (canonical or alias)."""
    return _PROTOCOLS[canonical(name)]


def names() -> list[str]:
    """Canonical names, sorted."""
    return sorted(_PROTOCOLS)


def _listing() -> str:
    parts = []
    for key in names():
        aliases = sorted(a for a, target in _ALIASES.items() if target == key)
        parts.append(f"{key} (aliases: {', '.join(aliases)})" if aliases else key)
    return ", ".join(parts) if parts else "(none)"
