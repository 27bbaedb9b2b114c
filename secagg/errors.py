"""Errors of the secure-aggregation protocols.

Every check fails closed: a message that does not fit the round raises instead of being skipped,
so a round can never silently produce a wrong sum.
"""

from __future__ import annotations

from collections.abc import Iterable


class ProtocolError(Exception):
    """A protocol check failed: wrong session, unknown or duplicate client, wrong length, malformed key."""


class RoundAborted(ProtocolError):
    """Too few or missing participants: the round must not be applied.

    `missing` holds the client ids that did not deliver, so the caller can log who dropped.
    """

    def __init__(self, message: str, missing: Iterable[int] = ()) -> None:
        super().__init__(message)
        self.missing: tuple[int, ...] = tuple(sorted(missing))
