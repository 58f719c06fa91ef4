"""Which layer of model ``b`` answers to which layer of model ``a``: by name, by a ``map``, or by
structure (the order of leaf calls with matching shapes). Shared by ``hookkit.diff`` and
``hookkit.port_weights``.

A ``map`` is a dict from ``a``'s layer names to ``b``'s (keys may be globs: ``*`` within one name,
``**`` across dots; each wildcard of a value takes what the key's wildcard matched, in order:
``{"blocks.*.fc": "layers.*.linear"}``; a value None leaves the layer unpaired), or a callable
``f(a_name) -> b_name | None``. Names the map does not cover pair with the same name in ``b``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from hookkit.core.entry import entry_name
from hookkit.core.errors import LayerNotFound
from hookkit.core.select import ALL, LayerSpec, select
from hookkit.core.suggest import close_matches
from hookkit.core.validate import ArgumentTypeError, fail

Map = dict[str, Any] | Callable[[str], Any] | str | None
MAP_KINDS = "None, a dict {a name or glob: b name}, a callable f(a_name) -> b_name or None, or 'name' / 'structure'"


def _key_regex(key: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(key):
        if key.startswith("**", i):
            out.append("(.*)")
            i += 2
        elif key[i] == "*":
            out.append(r"([^.]*)")
            i += 1
        else:
            out.append(re.escape(key[i]))
            i += 1
    return re.compile("".join(out))


def _fill(value: str, groups: Sequence[str]) -> str:
    parts = re.split(r"\*\*|\*", value)
    if len(parts) == 1:
        return value
    out = [parts[0]]
    for i, part in enumerate(parts[1:]):
        out += [groups[i] if i < len(groups) else "", part]
    return "".join(out)


def check_map(map: Any) -> None:
    fn = entry_name()
    if map is None or callable(map) or map in ("name", "structure"):
        return
    if not isinstance(map, dict):
        fail(fn, "map", MAP_KINDS, map, kind=ArgumentTypeError)
    for k, v in map.items():
        if not isinstance(k, str) or not (v is None or isinstance(v, str)):
            fail(fn, "map", "a dict whose keys are a's layer names (str) and values b's names (str or None)", map, kind=ArgumentTypeError)


def resolve(map: Map, names_a: Sequence[str], names_b: Sequence[str], model_a: str = "a", model_b: str = "b") -> dict[str, str | None]:
    """``{a name: b name or None}`` for every name of ``names_a`` the map covers (a dict's keys must
    each match some name of ``a``, and every b name it gives must exist in ``b``)."""
    fn = entry_name()
    if map is None or isinstance(map, str):
        return {}
    set_b = set(names_b)
    out: dict[str, str | None] = {}
    if callable(map):
        for n in names_a:
            try:
                v = map(n)
            except Exception as exc:  # noqa: BLE001 - the user's callable: say where it failed
                raise type(exc)(f"{fn}(): map({n!r}) raised {type(exc).__name__}: {exc}") from exc
            if v is None:
                continue
            if not isinstance(v, str):
                fail(
                    fn,
                    "map",
                    f"a callable returning a layer name of {model_b} (str) or None; map({n!r}) returned",
                    v,
                    kind=ArgumentTypeError,
                )
            out[n] = v
    else:
        for key, value in map.items():
            if "*" in key:
                rx = _key_regex(key)
                hits = [(n, m.groups()) for n in names_a if (m := rx.fullmatch(n))]
            else:
                hits = [(key, ())] if key in names_a else []
            if not hits:
                raise LayerNotFound(key, close_matches(key, names_a), f"{fn}(): map key, in model {model_a}")
            for n, groups in hits:
                out[n] = None if value is None else _fill(value, groups)
    for n, v in out.items():
        if v is not None and v not in set_b:
            raise LayerNotFound(v, close_matches(v, names_b), f"{fn}(): map[{n!r}], in model {model_b}")
    return out


def name_pairs(names_a: Sequence[str], names_b: Sequence[str], covered: dict[str, str | None]) -> dict[str, str]:
    """``{a name: b name}``: the map's pairs, then equal names for the rest."""
    set_b = set(names_b)
    pairs: dict[str, str] = {}
    for n in names_a:
        if n in covered:
            if covered[n] is not None:
                pairs[n] = covered[n]  # type: ignore[assignment]
        elif n in set_b:
            pairs[n] = n
    return pairs


class StructureAligner:
    """Pairs ``b``'s leaf calls, as they come, with ``a``'s recorded leaf calls (in order, each a
    tuple of output shapes): the next ``a`` call with the same shapes pairs; the ``a`` calls it
    skips over are left unpaired. Greedy and streaming: ``b``'s calls need not be known in advance."""

    def __init__(self, calls_a: Sequence[tuple[Any, tuple]]):
        self.calls = list(calls_a)  # (key of a's record, shapes)
        self.pos = 0
        self.skipped: list[Any] = []

    def match(self, shapes: tuple) -> Any:
        """The key of the ``a`` call paired with a ``b`` call of these output shapes, or None."""
        for i in range(self.pos, len(self.calls)):
            key, s = self.calls[i]
            if s == shapes:
                self.skipped += [k for k, _ in self.calls[self.pos : i]]
                self.pos = i + 1
                return key
        return None

    def rest(self) -> list[Any]:
        """Keys of ``a``'s calls never paired."""
        return self.skipped + [k for k, _ in self.calls[self.pos :]]


def _operations_in(b: Any, layers: Any) -> list:
    """``b``'s operation sites ("layer::op", see ``hookkit.ops``) that ``layers`` names: operations
    pair by spec."""
    found: list = []
    for spec in layers if isinstance(layers, list) else [layers]:
        if isinstance(spec, str) and "::" in spec:
            try:
                found += select(b, spec)
            except LookupError:
                pass
    return found


class Plan:
    """Which layers of each model take part (``layers_a``, ``layers_b``), how they pair (``mode``: "name",
    "map" or "structure"), and for name / map pairing which of ``a``'s layers each ``b`` layer answers to."""

    def __init__(self, a: Any, be_a: Any, b: Any, be_b: Any, layers: LayerSpec | None, map: Map):
        sel_a = _with_forward(a, be_a, ALL if layers is None else layers)
        all_b = _with_forward(b, be_b, ALL) + _operations_in(b, layers)
        self.b_to_a: dict[str, list[str]] = {}
        known_b = {n for n, _ in all_b if n}
        leaves_a = [n for n, _ in _leaves(sel_a, be_a) if n]
        # by structure when most of a's leaves have no namesake in b
        if map == "structure" or (map is None and leaves_a and 2 * sum(n in known_b for n in leaves_a) < len(leaves_a)):
            self.mode = "structure"
            self.layers_a, self.layers_b = _leaves(sel_a, be_a), _leaves(all_b, be_b)
            if any(not n for n, _ in self.layers_a):
                self.b_to_a[""] = [""]
            return
        self.mode = "map" if map is not None and map != "name" else "name"
        self._by_name(a, be_a, layers, map, sel_a, all_b)

    def _by_name(self, a: Any, be_a: Any, layers: LayerSpec | None, map: Map, sel_a: list, all_b: list) -> None:
        names_b = [n for n, _ in all_b if n]
        all_a = [n for n, _ in _with_forward(a, be_a, ALL) if n]
        pairs = name_pairs([n for n, _ in sel_a if n], names_b, resolve(map, all_a, names_b))
        if any(not n for n, _ in sel_a):
            pairs[""] = ""  # the models' outputs always pair
        self.layers_a = sel_a
        # with the default layers, b's layers nobody pairs with are attached too, to list their calls
        wanted = set(pairs.values()) if layers is not None else {n for n, _ in all_b}
        self.layers_b = [(n, m) for n, m in all_b if n in wanted]
        for na, nb in pairs.items():
            self.b_to_a.setdefault(nb, []).append(na)


def _with_forward(model: Any, be: Any, spec: LayerSpec) -> list[tuple[str, Any]]:
    """The selected layers that have a forward (a container of parameters alone has none)."""
    return [(n, m) for n, m in select(model, spec) if be.has_forward(m)]


def _leaves(named: list[tuple[str, Any]], be: Any) -> list[tuple[str, Any]]:
    """The root (``""``) and the layers without children."""
    return [(n, m) for n, m in named if not n or not be.children(m)]
