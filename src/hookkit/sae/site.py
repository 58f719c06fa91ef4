"""The features of a splice as a site ``select`` resolves: a parameter-free pseudo-layer in the
model's call path that is not a child of the model (its ``state_dict`` and named layers are
unchanged), taught to ``select`` through ``register_spec_kind`` (core never imports this module).

A features site is selected by ``Splice.features`` (a ``FeaturesSpec``, a ``str`` shown as
``"<site>.sae"``), by that name typed as a plain string while the splice is open, or by the
pseudo-layer object; never by a glob, class or preset, so ``capture(model)`` and its kind do not
pick it up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hookkit.backends import backend_for
from hookkit.core.errors import LayerNotFound
from hookkit.core.select import register_spec_kind
from hookkit.core.types import Layer
from hookkit.core.validate import fail
from hookkit.core.weakmap import IdentityWeakMap


class FeaturesSpec(str):
    """The name of a splice's features site; a ``str`` (``capture`` results are keyed by it)."""

    __slots__ = ()


_spliced: IdentityWeakMap[dict[str, tuple[FeaturesSpec, Any]]] = IdentityWeakMap()  # root -> name -> (spec, layer)
_live_names: dict[str, int] = {}  # names of open splices, all models (how many)
_live_ids: dict[int, int] = {}  # id of each open splice's pseudo-layer


def add_spliced(model: Layer, name: str, layer: Any) -> tuple[FeaturesSpec, Callable[[], None]]:
    """Make ``layer`` selectable on ``model`` as ``name``; returns its spec and its remover."""
    backend = backend_for(model)
    root = backend.unwrap(model)
    extra = _spliced.get(root)
    if extra is None:
        extra = _spliced[root] = {}
    if name in extra or any(n == name for n, _ in backend.named_layers(root)):
        fail("splice", "name", f"a name no layer or other splice of the model has (taken: {name!r})", name)
    spec = FeaturesSpec(name)
    extra[name] = (spec, layer)
    _live_names[name] = _live_names.get(name, 0) + 1
    _live_ids[id(layer)] = _live_ids.get(id(layer), 0) + 1

    def remove() -> None:
        live = _spliced.get(root)
        if live is not None and name in live and live[name][1] is layer:
            del live[name]
            for table, key in ((_live_names, name), (_live_ids, id(layer))):
                table[key] -= 1  # type: ignore[index]
                if not table[key]:  # type: ignore[index]
                    del table[key]  # type: ignore[arg-type]

    return spec, remove


def _one(spec: Any) -> bool:
    if isinstance(spec, str):
        return isinstance(spec, FeaturesSpec) or spec in _live_names
    return id(spec) in _live_ids


def _claims(spec: Any) -> bool:
    if isinstance(spec, list):
        return any(_one(s) for s in spec) if _live_names else any(isinstance(s, FeaturesSpec) for s in spec)
    return _one(spec) if _live_names else isinstance(spec, FeaturesSpec)  # no splice open: one isinstance


def _resolve(model: Any, spec: Any, select_fn: Callable[..., Any], selection: type) -> Any:
    backend = backend_for(model)
    root = backend.unwrap(model)
    extra = _spliced.get(root) or {}
    specs = spec if isinstance(spec, list) else [spec]
    picked, rest = [], []
    for s in specs:
        if not _one(s):
            rest.append(s)
            continue
        hit = extra.get(s) if isinstance(s, str) else next((v for v in extra.values() if v[1] is s), None)
        if hit is not None:
            picked.append(hit)
            continue
        # a features name of another model's splice, or of a closed one: a real layer of this model?
        real = dict(backend.named_layers(root)).get(str(s)) if isinstance(s, str) else None
        if real is None:
            shown = str(s) if isinstance(s, str) else type(s).__name__
            raise LayerNotFound(shown, sorted(extra), "the features of a splice that is not open on this model")
        picked.append((str(s), real))
    base = list(select_fn(model, rest if isinstance(spec, list) else rest[0])) if rest else []
    return selection([*base, *picked])


register_spec_kind(_claims, _resolve)
