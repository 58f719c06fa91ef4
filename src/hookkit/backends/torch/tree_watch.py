"""Tell cheaply whether a model's layer tree still holds what ``select`` resolved from it.

PyTorch calls its global registration hooks whenever a sublayer or a parameter is set on any
module (``setattr``, ``add_module``, ``register_parameter``, ``ModuleList.append``...): one counter,
bumped there, says that something may have moved. What those hooks miss (``del model.fc``,
``ModuleList.insert``/``pop``, which edit ``_modules`` directly) shows as a selected path that no
longer leads to its layer, or as a different number of children on the way to it or under it,
which the check walks. An edit of that kind away from every selected layer and its ancestors (a
module inserted into an empty, unselected ``ModuleList``) is not seen until the next registration.
The hooks are installed once per process, the first time a selection is kept; they only count.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch

_version = [0]
_installed: list[Any] = []


def _bump(*_: Any) -> None:
    _version[0] += 1  # returns None: the registration proceeds unchanged


def _install() -> None:
    if not _installed:
        modules = torch.nn.modules.module
        _installed.append(modules.register_module_module_registration_hook(_bump))
        _installed.append(modules.register_module_parameter_registration_hook(_bump))


def tree_watch(root: Any, named: Sequence[tuple[str, Any]]) -> Callable[[], list[Any] | None]:
    """A function giving the layers at ``named``'s paths under ``root`` while nothing moved, else None.
    It checks each link from ``root`` down to the selected layers once (the child under its key, the
    parent's number of children, once per parent) and each selected layer's own number of children;
    it holds the model weakly."""
    _install()
    version = _version[0]
    parents: dict[int, tuple[Any, int, dict[str, Any]]] = {}  # id -> (ref, children, {key: child ref})
    own = []
    for name, layer in named:
        parent = root
        for part in name.split(".") if name else ():
            child = parent._modules[part]
            entry = parents.get(id(parent))
            if entry is None:
                entry = parents[id(parent)] = (weakref.ref(parent), len(parent._modules), {})
            entry[2][part] = weakref.ref(child)
            parent = child
        own.append((weakref.ref(layer), len(layer._modules)))
    checks = [(ref, n, tuple(links.items())) for ref, n, links in parents.values()]

    def layers() -> list[Any] | None:
        if _version[0] != version:
            return None
        for parent_ref, siblings, links in checks:
            parent = parent_ref()
            if parent is None:
                return None
            children = parent._modules
            if len(children) != siblings:
                return None
            for key, child_ref in links:
                if children.get(key) is not child_ref():
                    return None
        found = []
        for ref, n in own:
            layer = ref()
            if layer is None or len(layer._modules) != n:
                return None
            found.append(layer)
        return found

    return layers
