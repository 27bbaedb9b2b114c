"""No masking: the server sees each client's update (the baseline the masked runs are measured against)."""

from __future__ import annotations

from .registry import register


class NoMasking:
    """Plain aggregation; there are no state machines, fl/ sums the updates directly."""

    name = "none"
    masks = False
    Client = None
    Server = None


register("none", NoMasking)
