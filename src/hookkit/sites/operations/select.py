"""Layer specs that name operations: ``"h.*::add_0"`` -> ``[("h.0::add_0", OpSite), ...]``.

``core.select`` hands a spec (or list) holding ``SEP`` here; the layer part resolves as any layer
spec, the operation part is a glob over the layer's operation names (``*`` any run of characters).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from hookkit.core.errors import LayerNotFound
from hookkit.core.suggest import close_matches
from hookkit.sites.operations.install import layer_ops
from hookkit.sites.operations.listing import SEP


def names_operation(layers: Any) -> bool:
    """Whether a layer spec (or list of them) names an operation."""
    if isinstance(layers, str):
        return SEP in layers
    return isinstance(layers, list) and any(isinstance(s, str) and SEP in s for s in layers)


def select_operations(model: Any, layers: Any, select: Callable, selection: type) -> Any:
    """``select(model, layers)`` where some specs name operations: model order, an operation right
    after its layer's position, in the order its forward performs them."""
    specs = layers if isinstance(layers, list) else [layers]
    # one spec: its layers come in model order already; several are merged by the model's order
    order = {name: i for i, name in enumerate(select(model, ":all").names)} if len(specs) > 1 else _InOrder()
    chosen: dict[str, tuple[tuple[int, int], Any]] = {}
    plain = [s for s in specs if not (isinstance(s, str) and SEP in s)]
    if plain:
        for name, layer in select(model, plain):
            chosen[name] = ((order.get(name, -1), -1), layer)
    for spec in specs:
        if isinstance(spec, str) and SEP in spec:
            _operations(model, spec, select, order, chosen)
    return selection(pair for _, pair in sorted(((k, (n, t)) for n, (k, t) in chosen.items()), key=lambda kv: kv[0]))


def _operations(model: Any, spec: str, select: Callable, order: Any, chosen: dict) -> None:
    """Add the operation sites ``spec`` ("layer glob::operation glob") names to ``chosen``."""
    layer_spec, _, op_spec = spec.partition(SEP)
    if not op_spec or SEP in op_spec:
        raise LayerNotFound(spec, [], f"an operation is named 'layer{SEP}operation', e.g. 'h.0{SEP}add_0'")
    named = select(model, layer_spec)
    exact = not any(c in op_spec for c in "*?[")
    hits = 0
    for lname, layer in named:
        state = layer_ops(layer, lname)
        for i in state.matching(op_spec):
            site = state.site(i)
            site.layer_name, site.exact = lname, exact
            chosen[lname + SEP + site.name] = ((order.get(lname, -1), i), site)
            hits += 1
    if not hits:
        _none_matched(spec, layer_spec, op_spec, named)


def _none_matched(spec: str, layer_spec: str, op_spec: str, named: list) -> None:
    names = sorted({s.name for lname, layer in named for s in layer_ops(layer, lname).compiled.sites})
    shown = layer_spec if len(named) == 1 else f"{layer_spec} ({len(named)} layers)"
    close = close_matches(op_spec, names)
    raise LayerNotFound(
        spec,
        [named[0][0] + SEP + n for n in close] if len(named) == 1 else close,
        f"no operation {op_spec!r} in the forward of {shown}; hookkit.ops(model, layer) lists them",
    )


class _InOrder(dict):
    """``order.get(name)`` for names met in model order: the order they are first asked for."""

    def __init__(self) -> None:
        super().__init__()
        self._next = itertools.count()

    def get(self, name: Any, default: Any = None) -> Any:
        found = dict.get(self, name)
        if found is None:
            found = self[name] = next(self._next)
        return found
