"""``attribution``: what attribution needs from a framework beyond tensor math: gradients that may
be missing, the bytes a forward keeps for its backward, and the free memory of a device.

>>> ops = backend_for(model).family("attribution")                # doctest: +SKIP
>>> with ops.saved_bytes(model) as saved:                          # doctest: +SKIP
...     out = model(x)
>>> saved.bytes, ops.free_bytes(x)                                  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any


class SavedBytes:
    """The running total of a ``saved_bytes`` block: ``.bytes`` (an int), and ``.largest``: the bytes of
    the largest tensor saved."""

    __slots__ = ("bytes", "largest")

    def __init__(self) -> None:
        self.bytes = 0
        self.largest = 0


def host_free_bytes() -> int:
    """Memory the host can still give (``MemAvailable`` of /proc/meminfo; free pages elsewhere)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, AttributeError):
        return 4 << 30


class AttributionOps:
    """The interface; each framework's ``attribution`` module subclasses it as ``OPS``."""

    def grads_or_none(self, output: Any, inputs: Sequence[Any]) -> tuple:
        """Gradients of the scalar ``output`` w.r.t. ``inputs``; None for an input ``output`` does
        not depend on. Parameters' ``.grad`` are left alone."""
        raise NotImplementedError("attribution.grads_or_none is not implemented for this framework")

    def saved_bytes(self, model: Any) -> Any:
        """A context manager yielding a ``SavedBytes``: the bytes of the tensors autograd saves for
        the backward of what runs inside (each storage once, ``model``'s parameters not counted)."""
        raise NotImplementedError("attribution.saved_bytes is not implemented for this framework")

    def free_bytes(self, like: Any) -> int:
        """Free memory of the device ``like`` lives on (the host's available RAM for a CPU tensor)."""
        return host_free_bytes()

    def on_host(self, like: Any) -> bool:
        """Whether ``like`` lives in host memory (a CPU tensor)."""
        return True

    def embedding_rows(self, layer: Any) -> int | None:
        """The rows of ``layer``'s table when it is the framework's token-embedding (lookup-table) layer,
        else None: where a text model's token ids become vectors."""
        raise NotImplementedError("attribution.embedding_rows is not implemented for this framework")
