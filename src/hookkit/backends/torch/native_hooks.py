"""Forward hooks placed the way ``register_forward_(pre_)hook(fn, with_kwargs=True)`` places them (an
id from ``RemovableHandle``'s counter, the hook in the module's dict, its "with kwargs" flag in the
other), with a handle of one weak reference instead of a ``RemovableHandle``: hookkit places and
removes these at each context's start and end, so their cost is what a short context costs.

>>> h = place_post(layer, fn)   # doctest: +SKIP
>>> h.remove()                 # doctest: +SKIP
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from torch.utils.hooks import RemovableHandle


class NativeHook:
    """Removes one hook placed by ``place_pre`` or ``place_post``; holds the layer weakly, like ``RemovableHandle`` its dicts
    (one weak reference, usually one the layer has already: ``weakref.ref`` gives it back)."""

    __slots__ = ("_layer", "id", "_pre")

    def __init__(self, layer: Any, hook_id: int, pre: bool):
        self._layer, self.id, self._pre = weakref.ref(layer), hook_id, pre

    def remove(self) -> None:
        layer = self._layer()
        if layer is not None:
            hook_id = self.id
            if self._pre:
                layer._forward_pre_hooks.pop(hook_id, None)
                layer._forward_pre_hooks_with_kwargs.pop(hook_id, None)
            else:
                layer._forward_hooks.pop(hook_id, None)
                layer._forward_hooks_with_kwargs.pop(hook_id, None)


_new = object.__new__


def place_pre(layer: Any, fn: Callable, _ids: Any = RemovableHandle, _ref: Callable = weakref.ref) -> NativeHook:
    """Put ``fn`` last in ``layer``'s forward pre-hooks, called with kwargs."""
    hook_id = _ids.next_id
    _ids.next_id = hook_id + 1
    layer._forward_pre_hooks[hook_id] = fn
    layer._forward_pre_hooks_with_kwargs[hook_id] = True
    h = _new(NativeHook)  # NativeHook(layer, hook_id, True) without the call
    h._layer, h.id, h._pre = _ref(layer), hook_id, True
    return h


def place_post(layer: Any, fn: Callable, _ids: Any = RemovableHandle, _ref: Callable = weakref.ref) -> NativeHook:
    """Put ``fn`` last in ``layer``'s forward hooks, called with kwargs."""
    hook_id = _ids.next_id
    _ids.next_id = hook_id + 1
    layer._forward_hooks[hook_id] = fn
    layer._forward_hooks_with_kwargs[hook_id] = True
    h = _new(NativeHook)
    h._layer, h.id, h._pre = _ref(layer), hook_id, False
    return h
