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
from hookkit.core.architectures import first_present, read_path
from hookkit.core.entry import entry_name, public_entry
from hookkit.core.errors import LayerNotFound, UnsupportedModel
from hookkit.core.router import register_inner_targets
from hookkit.core.select import register_spec_kind
from hookkit.core.standard_names import NameFamily, Point, head_size, module_path, name_family
from hookkit.core.suggest import close_matches
from hookkit.core.tree import leaves, map_tensors
from hookkit.core.types import Layer
from hookkit.core.validate import ArgumentTypeError, check_model, fail
from hookkit.core.weakmap import IdentityWeakMap
from hookkit.sites.parts import WHOLE, Part
from hookkit.sites.values import shape_str

_EPS = ("eps", "variance_epsilon", "_epsilon", "epsilon")


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


def _check_shape(be: Backend, new: Any, want: list[int], where: str) -> None:
    if list(be.shape(new)) != want:
        fail(entry_name(), "fn", f"a value of the standard name's shape {shape_str(want)} ([batch, pos, head, d_head]) at {where!r}", new)


class NormView(Part):
    """A norm's input -> TransformerLens's ``hook_scale`` (``sqrt(mean(x^2) + eps)``, ``x`` centred
    for a LayerNorm) or ``hook_normalized`` (before the norm's weight and bias). Read only."""

    __slots__ = ("which", "norm", "eps")
    kind = "standard-norm"

    def __init__(self, which: str, norm: str, eps: float):
        self.which, self.norm, self.eps = which, norm, eps

    def get(self, be: Backend, t: Any) -> tuple[Any, Any]:
        m = be.family("tensor_math")
        x = t - m.mean(t, [-1], keepdim=True) if self.norm == "layer" else t
        scale = (m.mean(x * x, [-1], keepdim=True) + self.eps) ** 0.5
        return (scale if self.which == "scale" else x / scale), None

    def put(self, be: Backend, t: Any, state: Any, new: Any, where: str) -> Any:
        valid = f"a standard name that can be written: {where!r} is computed from a norm's input (read it; write hook_resid_* instead)"
        fail(entry_name(), "layers", valid, where, kind=UnsupportedModel)


# -- the pseudo-layer the router hooks ------------------------------------------------------------------
class NamePoint:
    """One standard name of one model: the module holding the value (weakly), the event, the tensor's
    index and the view. What ``select`` returns for a standard name."""

    __slots__ = ("name", "_module", "event", "index", "part", "__weakref__")

    def __init__(self, name: str, module: Any, event: str, index: Any, part: Part):
        self.name, self._module, self.event, self.index, self.part = name, weakref.ref(module), event, index, part

    @property
    def module(self) -> Any:
        return self._module()

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


class _PointBackend:
    """The model's backend, but a name's hooks go on its module's input or output (one per backend)."""

    _made: dict[int, _PointBackend] = {}

    def __init__(self, real: Any):
        self._real = real

    @classmethod
    def of(cls, real: Any) -> _PointBackend:
        made = cls._made.get(id(real))
        if made is None or made._real is not real:
            made = cls._made[id(real)] = cls(real)
        return made

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._real, name)
        setattr(self, name, value)
        return value

    def hook_forward_pre(self, point: NamePoint, fn: Callable) -> Any:
        return self._real.hook_forward_pre(point.module, lambda m, args, kwargs: fn(point, args, kwargs))

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
                    return None
                value = part.put(be, t, state, new, point.name)
                pos = iter(range(len(found)))
                return map_tensors(output, lambda x: value if next(pos) == index else x, be.is_tensor)

            return be.hook_forward(point.module, on_output)

        def on_input(m: Any, args: tuple, kwargs: dict) -> Any:
            slot = _in_slot(be, args, kwargs, point.index)
            if slot is None:
                return None
            key, t = slot
            rec, state = part.get(be, t)
            new = fn(point, args, kwargs, rec)
            if new is None or new is rec:
                return None
            value = part.put(be, t, state, new, point.name)
            if isinstance(key, int):
                return (*args[:key], value, *args[key + 1 :]), kwargs
            return args, {**kwargs, key: value}

        return be.hook_forward_pre(point.module, on_input)

    def drop_forward_hooks(self, point: Any, match: Callable) -> int:
        return 0


_points: IdentityWeakMap[dict[str, NamePoint]] = IdentityWeakMap()


def _points_of(module: Any) -> list[NamePoint]:
    """The standard-name points made on ``module`` so far (``remove_all`` clears them)."""
    made = _points.get(module)
    return [] if made is None else list(made.values())


def _view(fam: NameFamily, point: Point, module: Any, d_head: int | None) -> Part:
    if not point.view:
        return WHOLE
    if point.view[0] == "norm":
        _, eps = first_present(module, _EPS)
        return NormView(point.view[1], point.view[2], float(eps) if isinstance(eps, (int, float)) else 1e-5)
    if d_head is None:
        raise UnsupportedModel(f"the attention of family {fam.name} has none of the head size attributes {fam.d_head}")
    return HeadsView(point.view[0], point.view[1], point.view[2], d_head)


def _point(name: str, module: Any, fam: NameFamily, point: Point, d_head: int | None) -> NamePoint:
    made = _points.get(module)
    if made is None:
        made = _points[module] = {}
    found = made.get(name)
    if found is None:
        event = "out" if point.event == "out" else "in"
        index = point.index if isinstance(point.index, int) or event == "in" else 0
        found = made[name] = NamePoint(name, module, event, index, _view(fam, point, module, d_head))
    return found


def table(model: Layer) -> dict[str, NamePoint]:
    """Every standard name ``model`` offers -> its point, in TransformerLens's order (embeddings,
    then block by block, then the final norm); empty when the family is unknown."""
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
        d_head = head_size(read_path(root, module_path(fam, blocks_path, Point(fam.attn), i)), fam)
        for template, point in group:
            module = read_path(root, module_path(fam, blocks_path, point, i))
            if module is None or not be.is_layer(module):
                continue  # not in this model (an optional norm, a learned position embedding)
            name = template.format(i=i)
            out[name] = _point(name, module, fam, point, d_head)
    return out


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
    plain = [s for s in specs if not is_standard(s)]
    offered = table(model)
    chosen: set[str] = set()
    for spec in specs:
        if not is_standard(spec):
            continue
        hits = [n for n in offered if glob_match(spec, n)]
        if not hits:
            _refuse(model, spec, offered)
        chosen.update(hits)
    pairs = list(select(model, plain)) if plain else []
    return selection(pairs + [(n, p) for n, p in offered.items() if n in chosen])


def _refuse(model: Any, spec: str, offered: dict[str, NamePoint]) -> None:
    if not offered:
        raise LayerNotFound(
            spec,
            [],
            f"hookkit knows no standard names for {type(model).__name__}; a family is one entry of "
            "hookkit.core.standard_names (register_names, docs/standard-names.md)",
        )
    if spec.endswith(("hook_pattern", "hook_attn_scores")):
        raise LayerNotFound(
            spec,
            [],
            "attention patterns are computed beside the model's attention: run_with_cache keeps hook_pattern, hookkit.attention_patterns reads them; they are not hook sites",
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
    check_model(model, fn="names")
    offered = table(model)
    if not offered:
        fail(
            "names",
            "model",
            "a model of a family with standard names (GPT-2, GPT-NeoX, GPT-J, Llama, Mistral, Qwen2, Gemma 2, Phi, OPT, BERT, "
            "Paddle nn.TransformerEncoder; or one registered with register_names)",
            model,
            kind=ArgumentTypeError,
        )
    return list(offered)


register_spec_kind(is_standard, select_names)
register_inner_targets(_points_of)
