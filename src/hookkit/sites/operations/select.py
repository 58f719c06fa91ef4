"""Layer specs that name operations: ``"h.*::add_0"`` -> ``[("h.0::add_0", OpSite), ...]``.

``core.select`` hands a spec (or list) holding ``SEP`` here; the layer part resolves as any layer
spec, the operation part is a glob over the layer's operation names (``*`` any run of characters).
"""

from __future__ import annotations

import fnmatch
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
    order = {name: i for i, name in enumerate(select(model, ":all").names)}
    chosen: dict[str, tuple[tuple[int, int], Any]] = {}
    plain = [s for s in specs if not (isinstance(s, str) and SEP in s)]
    if plain:
        for name, layer in select(model, plain):
            chosen[name] = ((order.get(name, -1), -1), layer)
    for spec in specs:
        if not (isinstance(spec, str) and SEP in spec):
            continue
        layer_spec, _, op_spec = spec.partition(SEP)
        if not op_spec or SEP in op_spec:
            raise LayerNotFound(spec, [], f"an operation is named 'layer{SEP}operation', e.g. 'h.0{SEP}add_0'")
        named = select(model, layer_spec)
        exact = not any(c in op_spec for c in "*?[")
        hits = 0
        names: list[str] = []
        for lname, layer in named:
            state = layer_ops(layer, lname)
            for i, s in enumerate(state.compiled.sites):
                if s.name == op_spec or fnmatch.fnmatchcase(s.name, op_spec):
                    site = state.site(i)
                    site.layer_name, site.exact = lname, exact
                    chosen[lname + SEP + s.name] = ((order.get(lname, -1), i), site)
                    hits += 1
            names.extend(s.name for s in state.compiled.sites)
        if not hits:
            shown = layer_spec if len(named) == 1 else f"{layer_spec} ({len(named)} layers)"
            close = close_matches(op_spec, sorted(set(names)))
            raise LayerNotFound(
                spec,
                [named[0][0] + SEP + n for n in close] if len(named) == 1 else close,
                f"no operation {op_spec!r} in the forward of {shown}; hookkit.ops(model, layer) lists them",
            )
    return selection(pair for _, pair in sorted(((k, (n, t)) for n, (k, t) in chosen.items()), key=lambda kv: kv[0]))
