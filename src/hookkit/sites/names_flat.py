"""Standard names inside a region where a block flattens batch and positions (OPT's decoder layer
reshapes its residual stream to ``[batch * pos, d_model]`` around the MLP and its norm): the value
is shown as ``[batch, pos, d]`` and a value written there goes back flattened.

The ``[batch, pos]`` of the current call is what the block was called with: while such a name is
hooked, one native pre-hook on the block (shared by all its flattened names, removed with the last)
stamps it; TransformerLens's bridge does the same (``_UnflattenTokens``).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from hookkit.backends import Backend
from hookkit.core.errors import InvalidArgument
from hookkit.core.weakmap import IdentityWeakMap
from hookkit.sites.parts import WHOLE, Part
from hookkit.sites.values import shape_str


def _gone() -> None:
    return None


class Stamp:
    """The leading dims (``[batch, pos]``) of one block's first tensor input at its current call (per
    thread: two threads may run the model on batches of different sizes)."""

    __slots__ = ("block", "local", "users", "native", "be")

    def __init__(self, block: Any = None):
        self.block: Any = weakref.ref(block) if block is not None else _gone
        self.local = threading.local()
        self.users = 0
        self.native: Any = None
        self.be: Any = None

    # A deep copy or pickle of the model copies its hook dicts, and this stamp's bound method with them:
    # the copy gets an inert stamp (as the router's hooks do).
    def __reduce__(self) -> tuple:
        return (Stamp, ())

    def __deepcopy__(self, memo: dict) -> Stamp:
        return Stamp()

    def _on_pre(self, layer: Any, args: tuple, kwargs: dict) -> None:
        be = self.be
        if be is None:  # an inert copy
            return
        for t in [*args, *(kwargs or {}).values()]:
            if be.is_tensor(t):
                self.local.lead = list(be.shape(t))[:-1]
                return

    @property
    def lead(self) -> list[int] | None:
        return getattr(self.local, "lead", None)

    def hold(self, be: Any) -> _StampHandle:
        """Count one more user; the first places the block's native pre-hook."""
        block = self.block()
        if self.users == 0 and block is not None:
            self.be = be
            self.native = be.hook_forward_pre(block, self._on_pre)
        self.users += 1
        return _StampHandle(self)

    def release(self) -> None:
        self.users -= 1
        if self.users == 0 and self.native is not None:
            self.native.remove()
            self.native = None
            self.local = threading.local()


class _StampHandle:
    __slots__ = ("stamp",)

    def __init__(self, stamp: Stamp):
        self.stamp: Stamp | None = stamp

    def remove(self) -> None:
        stamp, self.stamp = self.stamp, None
        if stamp is not None:
            stamp.release()


class _Both:
    """The handle of a name's hook and of its block's stamp."""

    __slots__ = ("hook", "stamp")

    def __init__(self, hook: Any, stamp: _StampHandle):
        self.hook, self.stamp = hook, stamp

    def remove(self) -> None:
        self.hook.remove()
        self.stamp.remove()


_stamps: IdentityWeakMap[Stamp] = IdentityWeakMap()


def stamp_of(block: Any) -> Stamp:
    """The one ``Stamp`` of ``block``."""
    found = _stamps.get(block)
    if found is None:
        found = _stamps[block] = Stamp(block)
    return found


class FlatView(Part):
    """``[batch * pos, d]`` as ``[batch, pos, d]`` (the block's call's ``[batch, pos]``), then ``inner``
    (``WHOLE``, a norm's view...); written values go back through ``inner`` and are flattened again."""

    __slots__ = ("inner", "stamp")
    kind = "standard-flat"

    def __init__(self, inner: Part, stamp: Stamp):
        self.inner, self.stamp = inner, stamp

    def get(self, be: Backend, t: Any) -> tuple[Any, Any]:
        shape = list(be.shape(t))
        lead = self.stamp.lead
        if lead is None or len(shape) != 2 or len(lead) != 2 or lead[0] * lead[1] != shape[0]:
            rec, state = self.inner.get(be, t)  # not flattened (called from elsewhere): as it is
            return rec, (None, t, state)
        x = be.family("tensor_math").reshape(t, [*lead, shape[-1]])
        rec, state = self.inner.get(be, x)
        return rec, (shape, x, state)

    def put(self, be: Backend, t: Any, state: Any, new: Any, where: str) -> Any:
        shape, x, inner_state = state
        if shape is None:
            return self.inner.put(be, t, inner_state, new, where)
        if self.inner.kind == "whole" and list(be.shape(new)) != list(be.shape(x)):
            raise InvalidArgument(
                f"the value written at standard name {where!r} must be shaped {shape_str(be.shape(x))} ([batch, pos, d]); got {shape_str(be.shape(new))}"
            )
        value = self.inner.put(be, x, inner_state, new, where)
        return be.family("tensor_math").reshape(value, shape)


def with_stamp(be: Any, part: Part, handle: Any) -> Any:
    """``handle``, or with the block's stamp held as long as it is when ``part`` is a ``FlatView``."""
    if not isinstance(part, FlatView):
        return handle
    return _Both(handle, part.stamp.hold(be))


def grad_view(be: Any, part: Part, rec: Any) -> bool:
    """Whether ``rec``, a view computed from the model's tensor (heads, an unflattened value), must be
    put back unchanged so that a gradient reaching the model's tensor reaches it (``capture(grads=True)``,
    ``attribution_patching``): a writable view, under autograd. The norms' computed values are not."""
    inner = part.inner if isinstance(part, FlatView) else part
    return part is not WHOLE and not inner.kind.startswith("standard-norm") and be.requires_grad(rec)
