"""Registry of compression protocols: config names -> codec classes.

The config's `compression.name` (`compression_protocol` in fl.run_server) is looked up here, so a typo fails
when the config is validated, before any work, with an error that lists every registered name. The seed
framework's class names (`TopKProtocol`) are accepted as aliases so old configs keep working.
"""

from __future__ import annotations

__all__ = ["UnknownProtocolError", "register", "get", "canonical", "names"]


class UnknownProtocolError(ValueError):
    """A compression protocol name that nothing registered."""


_classes: dict[str, type] = {}  # canonical name -> codec class
_canonical_of: dict[str, str] = {}  # canonical name or alias -> canonical name


def register(name: str, cls, aliases: tuple[str, ...] = ()):
    """Register `cls` under the canonical `name` and its `aliases`; returns `cls`.

    Registering the same class again is a no-op; its new definition (a module reloaded, a notebook cell run
    again: the same module and qualified name) takes the name over. A name or alias that is already
    taken by another protocol (compared case-insensitively, since lookup falls back to that)
    raises ValueError.
    """
    if name in _classes and not _same_definition(_classes[name], cls):
        owner = _classes[name]
        raise ValueError(f"compression protocol {name!r} is already registered to "
                         f"{getattr(owner, '__name__', None) or repr(owner)}")
    for key in (name, *aliases):
        for taken, owner in _canonical_of.items():
            if taken.lower() == key.lower() and owner != name:
                raise ValueError(f"name {key!r} is already registered to compression protocol {owner!r}")
    _classes[name] = cls
    for key in (name, *aliases):
        _canonical_of[key] = name
    return cls


def _same_definition(old: type, new: type) -> bool:
    """Whether `new` is `old` or the same class (or named factory) defined again: same module, same qualified name.
    A lambda's qualified name and a partial's missing one name no single definition, so only `old` itself is."""
    qualname = getattr(new, "__qualname__", None)
    if old is new or not isinstance(qualname, str) or qualname.endswith("<lambda>"):
        return old is new
    return (getattr(old, "__module__", None), getattr(old, "__qualname__", None)) == (new.__module__, qualname)


def canonical(name: str) -> str:
    """The canonical name for a canonical name or alias (exact match first, then case-insensitive)."""
    if not isinstance(name, str):  # an int or a list is no name (and a list is no dict key)
        raise UnknownProtocolError(f"unknown compression protocol {name!r}; registered: {_listing()}")
    if name in _canonical_of:
        return _canonical_of[name]
    for key, owner in _canonical_of.items():
        if key.lower() == name.lower():
            return owner
    raise UnknownProtocolError(f"unknown compression protocol {name!r}; registered: {_listing()}")


def get(name: str) -> type:
    """The codec class registered under `name` (canonical name or alias)."""
    return _classes[canonical(name)]


def names() -> list[str]:
    """Canonical names, sorted."""
    return sorted(_classes)


def _listing() -> str:
    """'none, topk (aliases: TopKProtocol), ...': what an error message shows, in registration order
    (the package registers the dense baseline and top-k first, then the codecs it imports by name, then any other
    module of the package, by file name)."""
    parts = []
    for name in _classes:
        aliases = [key for key, owner in _canonical_of.items() if owner == name and key != name]
        parts.append(f"{name} (aliases: {', '.join(aliases)})" if aliases else name)
    return ", ".join(parts) or "nothing"
