"""Tell cheaply whether a model's layer tree still holds what ``select`` resolved from it.

PyTorch calls its global registration hooks whenever a sublayer or a parameter is set on any
module (``setattr``, ``add_module``, ``register_parameter``, ``ModuleList.append``...): one counter,
bumped there, says that something may have moved. What those hooks miss (``del model.fc``,
``ModuleList.insert``/``pop``, which edit ``_modules`` directly) shows as a selected path that no
longer leads to its layer, or as a different number of siblings beside it, which the check walks. The hooks are installed once per process, the
first time a selection is kept; they only count.
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
    It holds the model weakly."""
    _install()
    version = _version[0]
    root_ref = weakref.ref(root)
    paths = [(tuple(name.split(".")) if name else (), weakref.ref(layer), _siblings(root, name)) for name, layer in named]

    def layers() -> list[Any] | None:
        if _version[0] != version:
            return None
        found = []
        for parts, ref, siblings in paths:
            layer, beside = root_ref(), None
            for part in parts:
                if layer is None:
                    return None
                beside = layer._modules
                layer = beside.get(part)
            if layer is None or layer is not ref() or (beside is not None and len(beside) != siblings):
                return None
            found.append(layer)
        return found

    return layers


def _siblings(root: Any, name: str) -> int:
    """How many children the parent of the layer at ``name`` has (0 for the root)."""
    if not name:
        return 0
    return len(root.get_submodule(name.rpartition(".")[0])._modules)
