"""TransformerLens's hook names as layer specs: ``"blocks.3.hook_resid_mid"``, ``"blocks.*.attn.hook_z"``.

``core.select`` hands a spec whose last dotted part starts with ``hook_`` here; the model's family
(``core.standard_names``) says which module boundary holds the value. ``select`` returns one
``NamePoint`` per name: a pseudo-layer the router hooks like a layer. Its "output" is the value in
TransformerLens's layout (``[batch, pos, head, d_head]`` for ``hook_q/k/v/z``, a norm's scale), read
in a native hook of the real module; a value a consumer returns is put back in the model's layout.
So every verb that takes a layer spec takes a standard name. Nothing is added to the forward of a
module whose names are not selected.

>>> hookkit.names(gpt2)[:3]                                        # doctest: +SKIP
['hook_embed', 'hook_pos_embed', 'blocks.0.hook_resid_pre']
>>> with hookkit.capture(gpt2, "blocks.*.hook_resid_post") as cap:   # doctest: +SKIP
...     gpt2(ids)
"""

from __future__ import annotations

import functools
import re
import weakref
from collections.abc import Callable
from typing import Any

from hookkit.backends import Backend, backend_for
from hookkit.core.architectures import INTERFACE, attention_family, first_present, read_path
from hookkit.core.entry import public_entry
from hookkit.core.errors import InvalidArgument, LayerNotFound, UnsupportedModel, shown
from hookkit.core.router import register_inner_targets
from hookkit.core.select import register_spec_kind, select
from hookkit.core.standard_names import NAME_FAMILIES, NameFamily, Point, head_size, module_path, name_family
from hookkit.core.suggest import close_matches
from hookkit.core.tree import leaves, map_tensors
from hookkit.core.types import Layer
from hookkit.core.validate import ArgumentTypeError, check_model, fail
from hookkit.core.weakmap import IdentityWeakMap
from hookkit.sites.attention_values import PATTERN, SCORES, AttnValue, attn_value
from hookkit.sites.names_flat import FlatView, grad_view, stamp_of, with_stamp
from hookkit.sites.operations import SourceUnavailable
from hookkit.sites.parts import WHOLE, Part
from hookkit.sites.seen_backend import SeenBackend
from hookkit.sites.values import shape_str

_EPS = ("eps", "variance_epsilon", "_epsilon", "epsilon")
SCORES_NAME, PATTERN_NAME = "blocks.{i}.attn.hook_attn_scores", "blocks.{i}.attn.hook_pattern"


# -- views: the value TransformerLens shows, from the tensor at the boundary --------------------------
class HeadsView(Part):
    """Chunk ``k`` of ``n`` of the last dim (``"split"``), or the ``k``-th ``d_head`` of each head's
    ``n * d_head`` (``"interleaved"``), as ``[..., head, d_head]``."""

    __slots__ = ("layout", "k", "n", "d")
    kind = "standard-heads"

    def __init__(self, layout: str, k: int, n: int, d: int):
        self.layout, self.k, self.n, self.d = layout, k, n, d

    def get(self, be: Backend, t: Any) -> tuple[Any, Any]:
        m = be.family("tensor_math")
        shape = list(be.shape(t))
        w, k, d = shape[-1], self.k, self.d
        if self.layout == "split":
            c = w // self.n
            return m.reshape(t[..., k * c : (k + 1) * c], [*shape[:-1], c // d, d]), shape
        x4 = m.reshape(t, [*shape[:-1], w // (self.n * d), self.n * d])
        return x4[..., k * d : (k + 1) * d], shape

    def put(self, be: Backend, t: Any, state: Any, new: Any, where: str) -> Any:
        m = be.family("tensor_math")
        shape, k, d = state, self.k, self.d
        w = shape[-1]
        if self.layout == "split":
            c = w // self.n
            want = [*shape[:-1], c // d, d]
            _check_shape(be, new, want, where)
            pieces = [t[..., : k * c], m.reshape(new, [*shape[:-1], c]), t[..., (k + 1) * c :]]
            return m.cat([p for p in pieces if be.shape(p)[-1]], -1)
        x4 = m.reshape(t, [*shape[:-1], w // (self.n * d), self.n * d])
        _check_shape(be, new, [*shape[:-1], w // (self.n * d), d], where)
        pieces = [x4[..., : k * d], new, x4[..., (k + 1) * d :]]
        return m.reshape(m.cat([p for p in pieces if be.shape(p)[-1]], -1), shape)


class HeadsFirstView(Part):
    """``[batch, head, pos, d_head]`` (what attention functions take) as ``[batch, pos, head, d_head]``."""

    __slots__ = ()
    kind = "standard-heads"

    def get(self, be: Backend, t: Any) -> tuple[Any, Any]:
        return be.family("tensor_math").permute(t, [0, 2, 1, 3]), list(be.shape(t))

    def put(self, be: Backend, t: Any, state: Any, new: Any, where: str) -> Any:
        _check_shape(be, new, [state[0], state[2], state[1], state[3]], where)
        return be.family("tensor_math").permute(new, [0, 2, 1, 3])


def _check_shape(be: Backend, new: Any, want: list[int], where: str) -> None:
    if list(be.shape(new)) != want:
        raise InvalidArgument(
            f"the value written at standard name {where!r} must be shaped {shape_str(want)} ([batch, pos, head, d_head]); got {shown(new)}"
        )


class NormView(Part):
    """A norm's input -> TransformerLens's ``hook_scale`` (``sqrt(mean(x^2) + eps)``, ``x`` centred
    for a LayerNorm) or ``hook_normalized`` (before the norm's weight and bias). Read only."""

    __slots__ = ("which", "norm", "eps", "last")
    kind = "standard-norm"

    def __init__(self, which: str, norm: str, eps: float, last: list):
        self.which, self.norm, self.eps = which, norm, eps
        self.last = last  # shared by the norm's two views: [weak reference to the input, its scale]

    def get(self, be: Backend, t: Any) -> tuple[Any, Any]:
        m = be.family("tensor_math")
        ref, scale = self.last
        if ref is None or ref() is not t:  # the other view has not read this input
            if self.which != "scale":
                return m.norm_normalized(t, self.norm, self.eps), None
            scale = m.norm_scale(t, self.norm, self.eps)
            self.last[:] = [_weak(t), scale]  # small: kept for the other view of the same input
        return (scale if self.which == "scale" else m.norm_normalized(t, self.norm, self.eps, scale)), None

    def put(self, be: Backend, t: Any, state: Any, new: Any, where: str) -> Any:
        raise UnsupportedModel(
            f"standard name {where!r} is read only: it is computed from a norm's input (read it; write a hook_resid_* name instead)"
        )


def _weak(t: Any) -> Any:
    try:
        return weakref.ref(t)
    except TypeError:  # a tensor type without weak references: never reused
        return None


_scales: IdentityWeakMap[list] = IdentityWeakMap()  # per norm module: its last input (weakly) and scale


# -- the pseudo-layer the router hooks ------------------------------------------------------------------
class NamePoint:
    """One standard name of one model: the module holding the value (weakly), the event, the tensor's
    index and the view. What ``select`` returns for a standard name. ``replay``: None, or where the
    value is an activation of other names' values (``Point.replay``): ``(activation, its parent
    module, names)``, the first two held weakly."""

    __slots__ = ("name", "_module", "event", "index", "part", "replay", "__weakref__")

    def __init__(self, name: str, module: Any, event: str, index: Any, part: Part, replay: Replayed | None = None):
        self.name, self._module, self.event, self.index, self.part = name, weakref.ref(module), event, index, part
        self.replay = replay

    @property
    def module(self) -> Any:
        return self._module()

    @property
    def token_axis(self) -> int | None:
        """The axis of (query) token positions where it is not the model's: 2 for ``[batch, head, query_pos, key_pos]``."""
        return 2 if self.name.endswith(("attn.hook_pattern", "attn.hook_attn_scores")) else None

    @staticmethod
    def site_backend(point: NamePoint, backend: Any) -> Any:
        """The backend the router places this name's hooks with (see ``router._hooks_for``)."""
        return _PointBackend.of(backend)

    def children(self) -> list:
        return []

    def __repr__(self) -> str:
        return f"<standard name {self.name}>"


def _in_slot(be: Backend, args: tuple, kwargs: dict, index: Any) -> tuple[Any, Any] | None:
    if isinstance(index, int):
        return (index, args[index]) if index < len(args) and be.is_tensor(args[index]) else None
    for i, a in enumerate(args):
        if be.is_tensor(a):
            return i, a
    for k, v in (kwargs or {}).items():
        if be.is_tensor(v):
            return k, v
    return None


def _placer(be: Any, target: Any) -> Any:
    """What places native hooks on ``target``: the backend, or for an operation site (one native
    slot per event) a fan-out that shares the slot between the names it holds (``hook_rot_q|k``)."""
    site_backend = getattr(type(target), "site_backend", None)
    return be if site_backend is None else _FanOut(site_backend(target, be))


class _Fan:
    """The functions of the names sharing one operation site's slot, called in placement order."""

    __slots__ = ("fns", "native")

    def __init__(self) -> None:
        self.fns: list[Callable] = []
        self.native: Any = None

    def __call__(self, site: Any, *rest: Any) -> Any:
        changed = None
        for fn in list(self.fns):
            r = fn(site, *rest) if changed is None or len(rest) < 3 else fn(site, rest[0], rest[1], changed)
            if r is not None:
                changed = r
        return changed


class _FanHandle:
    __slots__ = ("fan", "fn", "key", "site")

    def __init__(self, fan: _Fan, fn: Callable, key: tuple, site: Any):
        self.fan, self.fn, self.key, self.site = fan, fn, key, site

    def remove(self) -> None:
        fan, self.fan = self.fan, None  # type: ignore[assignment]
        if fan is None or self.fn not in fan.fns:
            return
        fan.fns.remove(self.fn)
        if not fan.fns:
            fan.native.remove()
            _fans.get(self.site, {}).pop(self.key, None)


class _FanOut:
    """An operation site's backend seen through fans (one per site and event)."""

    __slots__ = ("real",)

    def __init__(self, real: Any):
        self.real = real

    def _place(self, site: Any, fn: Callable, event: str) -> _FanHandle:
        fans = _fans.get(site)
        if fans is None:
            fans = _fans[site] = {}
        key = (event,)
        fan = fans.get(key)
        if fan is None:
            fan = fans[key] = _Fan()
            fan.native = getattr(self.real, event)(site, fan)
        fan.fns.append(fn)
        return _FanHandle(fan, fn, key, site)

    def hook_forward(self, site: Any, fn: Callable) -> _FanHandle:
        return self._place(site, fn, "hook_forward")

    def hook_forward_pre(self, site: Any, fn: Callable) -> _FanHandle:
        return self._place(site, fn, "hook_forward_pre")


_fans: IdentityWeakMap[dict[tuple, _Fan]] = IdentityWeakMap()


class _PointBackend(SeenBackend):
    """The model's backend, but a name's hooks go on its module's input or output (one per backend)."""

    def hook_forward_pre(self, point: NamePoint, fn: Callable) -> Any:
        handle = _placer(self._real, point.module).hook_forward_pre(point.module, lambda m, args, kwargs: fn(point, args, kwargs))
        return with_stamp(self._real, point.part, handle)

    def hook_forward(self, point: NamePoint, fn: Callable) -> Any:
        be, part = self._real, point.part
        if point.event == "out":
            index = point.index

            def on_output(m: Any, args: tuple, kwargs: dict, output: Any) -> Any:
                found = leaves(output, be.is_tensor)
                if index >= len(found):
                    return None
                t = found[index]
                rec, state = part.get(be, t)
                new = fn(point, args, kwargs, rec)
                if new is None or new is rec:
                    if not grad_view(be, part, rec):
                        return None
                    new = rec  # the view put back, so a gradient reaching the model's tensor reaches it
                value = part.put(be, t, state, new, point.name)
                pos = iter(range(len(found)))
                return map_tensors(output, lambda x: value if next(pos) == index else x, be.is_tensor)

            return with_stamp(be, part, _placer(be, point.module).hook_forward(point.module, on_output))

        def on_input(m: Any, args: tuple, kwargs: dict) -> Any:
            slot = _in_slot(be, args, kwargs, point.index)
            if slot is None:
                return None
            key, t = slot
            rec, state = part.get(be, t)
            new = fn(point, args, kwargs, rec)
            if new is None or new is rec:
                if not grad_view(be, part, rec):
                    return None
                new = rec
            value = part.put(be, t, state, new, point.name)
            if isinstance(key, int):
                return (*args[:key], value, *args[key + 1 :]), kwargs
            return args, {**kwargs, key: value}

        return with_stamp(be, part, _placer(be, point.module).hook_forward_pre(point.module, on_input))

    def drop_forward_hooks(self, point: Any, match: Callable) -> int:
        return 0


_points: IdentityWeakMap[dict[str, NamePoint]] = IdentityWeakMap()


def _points_of(module: Any) -> list[NamePoint]:
    """The standard-name points made on ``module`` so far (``remove_all`` clears them)."""
    made = _points.get(module)
    return [] if made is None else list(made.values())


def _view(fam: NameFamily, point: Point, module: Any, d_head: int | None, block: Any = None) -> Part:
    if not point.view:
        return WHOLE
    if point.view[0] == "unflatten":  # [batch * pos, d] inside the block (OPT's MLP): [batch, pos, d]
        return FlatView(_view(fam, Point(point.path, view=point.view[1]), module, d_head), stamp_of(block))
    if point.view[0] == "heads_first":
        return HeadsFirstView()
    if point.view[0] == "norm":
        _, eps = first_present(module, _EPS)
        last = _scales.get(module)
        if last is None:
            last = _scales[module] = [None, None]
        return NormView(point.view[1], point.view[2], float(eps) if isinstance(eps, (int, float)) else 1e-5, last)
    if d_head is None:
        raise UnsupportedModel(f"the attention of family {fam.name} has none of the head size attributes {fam.d_head}")
    return HeadsView(point.view[0], point.view[1], point.view[2], d_head)


class Replayed:
    """Where a name's value is an activation's forward of other names' values (``Point.replay``): the
    activation (a layer or a function) and the module calling it, held weakly, and the names."""

    __slots__ = ("_act", "_parent", "names")

    def __init__(self, act: Any, parent: Any, names: tuple[str, ...]):
        self._act, self._parent, self.names = weakref.ref(act), weakref.ref(parent), names

    @property
    def act(self) -> Any:
        return self._act()

    @property
    def parent(self) -> Any:
        return self._parent()


def _replayed(be: Backend, root: Any, fam: NameFamily, blocks_path: str, point: Point, i: int, named: list) -> Replayed | None:
    """``point.replay`` of block ``i`` resolved (None where the model has no such activation)."""
    if not point.replay:
        return None
    path = module_path(fam, blocks_path, Point(point.replay[0]), i)
    act, parent = read_path(root, path), read_path(root, path.rsplit(".", 1)[0])
    if act is None or not callable(act) or not be.is_layer(parent):
        return None
    if be.is_layer(act):
        named.append((path, act))
    return Replayed(act, parent, tuple(n.format(i=i) for n in point.replay[1:]))


def _point(
    name: str, module: Any, fam: NameFamily, point: Point, d_head: int | None, block: Any = None, replay: Replayed | None = None
) -> NamePoint:
    owner = getattr(module, "layer", None) if hasattr(type(module), "site_backend") else module  # an operation: its layer's
    made = _points.get(owner)
    if made is None:
        made = _points[owner] = {}
    found = made.get(name)
    if found is None:
        event = "out" if point.event == "out" else "in"
        index = point.index if isinstance(point.index, int) or event == "in" else 0
        found = made[name] = NamePoint(name, module, event, index, _view(fam, point, module, d_head, block))
    found.replay = replay  # the activation as this table found it (it may have been replaced since the last)
    return found


def _target(model: Any, root: Any, path: str) -> Any:
    """The module at ``path``, or the operation site ``"layer::op"`` names (None where absent)."""
    if "::" not in path:
        return read_path(root, path)
    try:
        found = select(model, path)
    except (LayerNotFound, SourceUnavailable):
        return None  # not in this version of the family's forward, or no source to read
    return found[0][1] if len(found) == 1 else None


def table(model: Layer) -> dict[str, NamePoint]:
    """Every standard name ``model`` offers -> its point, in TransformerLens's order (embeddings,
    then block by block, then the final norm); empty when the family is unknown. Kept per model
    while the backend's ``tree_watch`` says its modules are where they were (and no family was
    registered meanwhile): a verb's set-up does not walk the families again."""
    families = tuple(map(id, NAME_FAMILIES))
    kept = _tables.get(model)
    if kept is not None and kept[2] == families and kept[1]() is not None:
        return kept[0]
    be = backend_for(model)
    named: list[tuple[str, Any]] = []
    out = _table(model, named)
    watch = be.tree_watch(be.unwrap(model), named) if out else None
    if watch is not None:
        _tables[model] = (out, watch, families)
    return out


_tables: IdentityWeakMap[tuple[dict[str, NamePoint], Callable[[], Any], tuple]] = IdentityWeakMap()


def _table(model: Layer, named: list[tuple[str, Any]]) -> dict[str, NamePoint]:
    """``table`` computed; ``named`` gets the ``(path, module)`` pairs it read."""
    found = name_family(backend_for(model).unwrap(model))
    if found is None:
        return {}
    fam, blocks_path, blocks = found
    root = backend_for(model).unwrap(model)
    out: dict[str, NamePoint] = {}
    templates = list(fam.points.items())
    first = [(n, p) for n, p in templates if "{i}" not in n and not n.startswith("ln_final")]
    per_block = [(n, p) for n, p in templates if "{i}" in n]
    last = [(n, p) for n, p in templates if n.startswith("ln_final")]
    be = backend_for(model)
    for i, group in [(0, first), *[(b, per_block) for b in range(len(blocks))], (0, last)]:
        attn_path = module_path(fam, blocks_path, Point(fam.attn), i)
        attn = read_path(root, attn_path)
        if be.is_layer(attn):
            named.append((attn_path, attn))
        d_head = head_size(attn, fam)
        computed = _computed(root, attn_path, fam) if group is per_block else {}
        for template, point in group:
            if template == "blocks.{i}.attn.hook_z":  # TransformerLens's order: scores and pattern before z
                out.update({n.format(i=i): _point(n.format(i=i), v, fam, Point(""), None) for n, v in computed.items()})
                computed = {}
            path = module_path(fam, blocks_path, point, i)
            module = _module_at(model, root, path, named)
            if module is not None:
                name = template.format(i=i)
                replay = _replayed(be, root, fam, blocks_path, point, i, named) if group is per_block else None
                out[name] = _point(name, module, fam, point, d_head, blocks[i], replay)
        out.update({n.format(i=i): _point(n.format(i=i), v, fam, Point(""), None) for n, v in computed.items()})
    return out


def _module_at(model: Any, root: Any, path: str, named: list[tuple[str, Any]]) -> Any:
    """The layer or operation site at ``path`` (None where this model has none: an optional norm, a
    learned position embedding); ``named`` gets the layer holding it."""
    be = backend_for(model)
    module = _target(model, root, path)
    if module is None or not (be.is_layer(module) or hasattr(type(module), "site_backend")):
        return None
    layer = module if be.is_layer(module) else getattr(module, "layer", None)
    if layer is not None:
        named.append((path.split("::")[0], layer))
    return module


def _computed(root: Any, attn_path: str, fam: NameFamily) -> dict[str, AttnValue]:
    """``hook_attn_scores`` and ``hook_pattern`` of an attention whose library hands its call to a
    replaceable attention function (``sites.attention_values``), unless the family names them itself:
    on the family's attention module, or its parent where the registry knows that one (BERT's
    ``attention`` around ``attention.self``)."""
    if SCORES_NAME in fam.points:
        return {}
    parts = attn_path.split(".")
    for path in (attn_path, ".".join(parts[:-1]) if len(parts) > 1 else None):
        attn = read_path(root, path) if path else None
        family = attention_family(attn) if attn is not None else None
        if family is not None:
            if family.scores != INTERFACE or _own_attention(attn):
                return {}
            return {SCORES_NAME: attn_value(attn, SCORES), PATTERN_NAME: attn_value(attn, PATTERN)}
    return {}


def _own_attention(attn: Any) -> bool:
    """Whether the layer computes its attention in a method of its own instead of the attention function
    (GPT-2's ``reorder_and_upcast_attn`` under eager attention): no scores or pattern names then."""
    config = getattr(attn, "config", None)
    return bool(getattr(attn, "reorder_and_upcast_attn", False)) and getattr(config, "_attn_implementation", None) == "eager"


@functools.lru_cache(maxsize=256)
def _glob(pattern: str) -> re.Pattern[str]:
    """A dotted-name glob as ``core.select`` reads it: ``*`` within one name, ``**`` across dots, ``?``, ``[...]``."""

    def one(p: str) -> str:
        if p.startswith("[") and p.endswith("]") and len(p) > 2:
            return "[" + ("^" + p[2:-1] if p[1] == "!" else p[1:-1]) + "]"
        return {"**": ".*", "*": r"[^.]*", "?": r"[^.]"}.get(p, re.escape(p))

    return re.compile("".join(one(p) for p in re.split(r"(\*\*|\*|\?|\[[^\]]+\])", pattern) if p))


def glob_match(spec: str, name: str) -> bool:
    """Whether the standard name ``name`` is ``spec`` or matches it as a glob."""
    return spec == name or _glob(spec).fullmatch(name) is not None


def is_standard(spec: Any) -> bool:
    """Whether a spec (or a list of them) names a standard name (its last dotted part ``hook_...``)."""
    specs = spec if isinstance(spec, list) else [spec]
    return any(isinstance(s, str) and "::" not in s and s.rsplit(".", 1)[-1].lstrip("*").startswith("hook_") for s in specs)


def select_names(model: Any, layers: Any, select: Callable, selection: type) -> Any:
    """``select(model, layers)`` where some specs are standard names: the plain specs' layers, then
    the names in TransformerLens's order."""
    specs = layers if isinstance(layers, list) else [layers]
    offered = table(model)
    if not offered:  # no family: layers really named so (TransformerLens's own HookPoints) are selected as layers
        return _as_layers(model, specs, select)
    plain = [s for s in specs if not is_standard(s)]
    chosen: set[str] = set()
    for spec in specs:
        if not is_standard(spec):
            continue
        hits = [spec] if spec in offered else [n for n in offered if glob_match(spec, n)]
        if not hits:
            _refuse(model, spec, offered)
        chosen.update(hits)
    pairs = list(select(model, plain)) if plain else []
    return selection(pairs + [(n, p) for n, p in offered.items() if n in chosen])


def _as_layers(model: Any, specs: list, select: Callable) -> Any:
    """``select`` of standard-looking specs as plain layer names (a glob as its regex)."""
    as_regex = [re.compile(_glob(s).pattern) if is_standard(s) else s for s in specs]
    try:
        return select(model, as_regex if len(as_regex) > 1 else as_regex[0])
    except LayerNotFound as exc:
        spec = next(s for s in specs if is_standard(s))
        raise LayerNotFound(
            spec,
            exc.close,
            f"no layer of that name, and hookkit knows no standard names for {type(model).__name__}; a family is one entry of "
            "hookkit.core.standard_names (register_names, docs/standard-names.md)",
        ) from None


def _refuse(model: Any, spec: str, offered: dict[str, NamePoint]) -> None:
    if not offered:
        raise LayerNotFound(
            spec,
            [],
            f"hookkit knows no standard names for {type(model).__name__}; a family is one entry of "
            "hookkit.core.standard_names (register_names, docs/standard-names.md)",
        )
    if spec.endswith(("hook_pattern", "hook_attn_scores")) and not any(n.endswith(("hook_pattern", "hook_attn_scores")) for n in offered):
        raise LayerNotFound(
            spec,
            [],
            f"the attention of {type(model).__name__} does not hand its scores to a function hookkit can route (transformers' "
            "AttentionInterface) and its family names no operation for them: no hook_pattern or hook_attn_scores"
            + (
                " (reorder_and_upcast_attn=True under eager attention computes them in the layer's own method: use SDPA attention or turn the option off)"
                if any(_own_attention(m) for _, m in backend_for(model).named_layers(backend_for(model).unwrap(model)))
                else ""
            ),
        )
    names = list(offered)
    close = close_matches(spec, names, n=8, cutoff=0.6) or close_matches(spec.rsplit(".", 1)[-1], names)
    raise LayerNotFound(spec, close, f"not a standard name of this model; hookkit.names(model) lists its {len(names)}")


@public_entry()
def names(model: Layer) -> list[str]:
    """The standard (TransformerLens) names ``model`` offers, in TransformerLens's order; each is a
    layer spec every verb takes, globs included.

    >>> hookkit.names(gpt2)[:4]   # doctest: +SKIP
    ['hook_embed', 'hook_pos_embed', 'blocks.0.hook_resid_pre', 'blocks.0.ln1.hook_scale']
    """
    check_model(model)
    offered = table(model)
    if not offered:
        fail(
            "names",
            "model",
            "a model of a family with standard names (GPT-2, GPT-NeoX, GPT-J, Llama, Mistral, Qwen2, Gemma 2, Phi, OPT, BERT, "
            "Paddle nn.TransformerEncoder and nn.TransformerDecoder; or one registered with register_names)",
            model,
            kind=ArgumentTypeError,
        )
    return list(offered)


register_spec_kind(is_standard, select_names)
register_inner_targets(_points_of)
