"""Forward hooks placed the way ``register_forward_(pre_)hook(fn, with_kwargs=True)`` places them (an
id from ``RemovableHandle``'s counter, the hook in the module's dict, its "with kwargs" flag in the
other), with a handle of two weak references instead of a ``RemovableHandle``: hookkit places and
removes these at each context's start and end, so their cost is what a short context costs.

>>> h = place(layer._forward_hooks, layer._forward_hooks_with_kwargs, fn)   # doctest: +SKIP
>>> h.remove()                                                             # doctest: +SKIP
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from torch.utils.hooks import RemovableHandle


class NativeHook:
    """Removes one hook placed by ``place`` (the module's dicts held weakly, like ``RemovableHandle``)."""

    __slots__ = ("_hooks", "_kwargs", "id")

    def __init__(self, hooks: Any, kwargs: Any, hook_id: int):
        self._hooks, self._kwargs, self.id = weakref.ref(hooks), weakref.ref(kwargs), hook_id

    def remove(self) -> None:
        for ref in (self._hooks, self._kwargs):
            d = ref()
            if d is not None:
                d.pop(self.id, None)


def place(hooks: Any, kwargs: Any, fn: Callable) -> NativeHook:
    """Put ``fn`` last in ``hooks`` (a module's ``_forward_hooks`` or ``_forward_pre_hooks``), called with kwargs."""
    hook_id = RemovableHandle.next_id
    RemovableHandle.next_id = hook_id + 1
    hooks[hook_id] = fn
    kwargs[hook_id] = True
    return NativeHook(hooks, kwargs, hook_id)
