"""``hookkit.ops(model, layer)``: the operations one layer's forward performs, named, in source order."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

from hookkit.core.entry import public_entry
from hookkit.core.errors import LayerNotFound
from hookkit.core.registry import backend_for
from hookkit.core.select import name_of, select
from hookkit.core.suggest import close_matches
from hookkit.core.types import Layer
from hookkit.core.validate import check_model, fail
from hookkit.sites.operations.install import layer_ops

SEP = "::"
"""Between a layer's name and an operation's: ``"h.0::add_0"`` is the first ``+`` of ``h.0``'s forward."""


@dataclass(frozen=True)
class Operation:
    """One operation of a layer's forward.

    ``name``: unique in the layer (``add_0``, ``attn_0``, ``matmul_1``); ``spec``: ``layer + SEP +
    name``, what every verb takes; ``line``: the text of its line; ``lineno``: its line in the file;
    ``call``: what is called as written (``"self.attn"``, ``"torch.matmul"``, ``"+"``); ``kind``:
    ``"submodule"``, ``"function"``, ``"method"`` or ``"operator"``.
    """

    name: str
    spec: str
    line: str
    lineno: int
    call: str
    kind: str


class Operations(list[Operation]):
    """What ``ops`` returns: the operations in evaluation order within source order; printed, the
    forward's source with each operation's name beside its line.

    >>> ops = hookkit.ops(gpt2, "transformer.h.0")   # doctest: +SKIP
    >>> ops["add_0"].spec
    'transformer.h.0::add_0'
    """

    def __init__(self, items: list[Operation], layer: str, source: str, first: int):
        super().__init__(items)
        self.layer, self.source, self.first = layer, source, first

    @property
    def names(self) -> list[str]:
        return [o.name for o in self]

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            for o in self:
                if o.name == key:
                    return o
            raise LayerNotFound(self.layer + SEP + key, [self.layer + SEP + n for n in close_matches(key, self.names)], "no such operation")
        return super().__getitem__(key)

    def _rows(self) -> list[tuple[str, int, str]]:
        by_line: dict[int, list[str]] = {}
        for o in self:
            by_line.setdefault(o.lineno, []).append(o.name)
        return [(", ".join(by_line.get(self.first + i, [])), self.first + i, text) for i, text in enumerate(self.source.splitlines())]

    def __str__(self) -> str:
        rows = self._rows()
        width = max([len(n) for n, _, _ in rows] + [0])
        return "\n".join(f"{n:>{width}} {lineno:5d}  {text}".rstrip() for n, lineno, text in rows)

    def __repr__(self) -> str:
        return f"Operations({self.layer!r}, {self.names!r})"

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td style='text-align:right;color:#0a6'><b>{html.escape(n)}</b></td><td style='color:#888'>{lineno}</td>"
            f"<td><pre style='margin:0'>{html.escape(text)}</pre></td></tr>"
            for n, lineno, text in self._rows()
        )
        return f"<table><caption>operations of {html.escape(self.layer or '(root)')}</caption>{rows}</table>"


_KINDS = {"operator": "operator", "function": "function", "method": "method"}


def listing(layer: Any, name: str) -> Operations:
    """The ``Operations`` of one layer named ``name`` (the layer's forward rewritten on first use)."""
    state = layer_ops(layer, name)
    backend = backend_for(layer)
    items = []
    for s in state.compiled.sites:
        kind = _KINDS.get(s.kind)
        if kind is None:  # self.<attr>(...): a submodule or a method of the layer
            attr = s.call.split(".", 1)[1] if "." in s.call else s.call
            kind = "submodule" if backend.is_layer(layer.__dict__.get("_modules", {}).get(attr) or getattr(layer, attr, None)) else "method"
        items.append(Operation(s.name, name + SEP + s.name, s.line, s.lineno, s.call, kind))
    return Operations(items, name, state.compiled.source, state.compiled.first)


@public_entry()
def ops(model: Layer, layer: str | Layer) -> Operations:
    """The operations ``layer``'s forward performs (calls and binary operators), in source order,
    each with the spec that names it wherever hookkit takes a layer spec.

    >>> print(hookkit.ops(gpt2, "transformer.h.0"))   # doctest: +SKIP
    >>> with hookkit.capture(gpt2, "transformer.h.*::add_0") as cap:   # doctest: +SKIP
    ...     gpt2(ids)
    """
    check_model(model)
    if isinstance(layer, str):
        if SEP in layer:
            fail("ops", "layer", "a layer's name (without an operation)", layer)
        found = select(model, layer)
        if len(found) != 1:
            fail("ops", "layer", "the name of one layer (a glob selected " + str(len(found)) + ")", layer)
        name, obj = found[0]
    else:
        name, obj = name_of(model, layer), layer
    return listing(obj, name)
