"""``porting``: what each framework calls a layer's state and how it lays it out, so weights can move
between frameworks (``hookkit.port_weights``) and gradients can be compared across them (``hookkit.diff``).

Every tensor of a layer's own state gets a *canonical* name and layout, the same on every framework:
names are PyTorch's (``weight``, ``bias``, ``running_mean``, ``running_var``), layouts are
PyTorch's (a linear layer's weight is ``[out_features, in_features]``). Whether a weight is stored
transposed is decided by the layer's type, never by its shape (a square weight's shape cannot tell).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def _missing(op: str) -> NotImplementedError:
    return NotImplementedError(f"porting.{op} is not implemented for this framework")


@dataclass(frozen=True)
class StateEntry:
    """One tensor of a layer's own state: its ``canonical`` name, its ``native`` attribute name, the
    ``tensor``, whether it is stored ``transposed`` relative to the canonical layout (a 2-d weight), and
    whether it is ``bookkeeping`` (a counter such as ``num_batches_tracked``, which other frameworks may
    not keep: skipped, and reported, when it has no counterpart)."""

    canonical: str
    native: str
    tensor: Any
    transposed: bool = False
    bookkeeping: bool = False


class Porting:
    """The interface; each framework's ``porting`` module subclasses it as ``OPS``."""

    def layer_state(self, layer: Any) -> list[StateEntry]:
        """The layer's own state (parameters and buffers, not its sublayers'), in definition order,
        under canonical names."""
        raise _missing("layer_state")

    def read(self, t: Any) -> Any:
        """A numpy copy of ``t``'s values, exact (bfloat16 widened to float32)."""
        raise _missing("read")

    def write(self, t: Any, array: Any) -> None:
        """Overwrite ``t``'s values in place with ``array`` (same shape), outside autograd, keeping
        ``t``'s dtype and device."""
        raise _missing("write")
