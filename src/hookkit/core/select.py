"""Layer specs -> ``[(name, layer)]``, in model order.

A spec is a dotted-name glob (``"h.*.attn"``: ``*`` stays within one name, ``**`` crosses dots), a
compiled regex (full match), a layer class or tuple of classes, a predicate ``(name, layer) -> bool``,
a layer object, a preset (``LEAVES``, ``WITH_PARAMS``), or a list of these.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Union

from hookkit.core.deprecation import warn_deprecated
from hookkit.core.entry import public_entry
from hookkit.core.errors import LayerNotFound
from hookkit.core.registry import backend_for, framework_of
from hookkit.core.suggest import close_matches
from hookkit.core.types import Layer
from hookkit.core.validate import ArgumentTypeError, check_model, fail
from hookkit.core.weakmap import IdentityWeakMap

LEAVES = ":leaves"
"""Preset: layers without sublayers."""
WITH_PARAMS = ":params"
"""Preset: layers that own parameters directly (fastai's default for ActivationStats)."""
ALL = ":all"
"""Preset: every layer, the model itself included."""

_OneSpec = Union[str, "re.Pattern[str]", type, "tuple[type, ...]", Callable[[str, Any], bool], Layer]
#: what ``layers=`` takes: one spec or a list of them (None: the default, the leaves)
LayerSpec = _OneSpec | Sequence[_OneSpec] | None


@functools.lru_cache(maxsize=512)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append(r"[^.]*")
            i += 1
        elif pattern[i] == "?":
            out.append(r"[^.]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.find("]", i)
            if end < 0:
                out.append(re.escape(pattern[i]))
                i += 1
            else:
                out.append(fnmatch.translate(pattern[i : end + 1])[4:-3])
                i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def _is_classes(spec: Any) -> bool:
    return isinstance(spec, type) or (isinstance(spec, tuple) and bool(spec) and all(isinstance(s, type) for s in spec))


def _match_regex(spec: re.Pattern[str], named: list[tuple[str, Any]], backend: Any) -> list[int]:
    hits = [i for i, (n, _) in enumerate(named) if spec.fullmatch(n)]
    if not hits:
        raise LayerNotFound(spec.pattern, _suggest(spec.pattern, [n for n, _ in named]), "regex, full match")
    return hits


def _match_object(spec: Any, named: list[tuple[str, Any]], backend: Any) -> list[int]:
    hits = [i for i, (_, m) in enumerate(named) if m is spec]
    if not hits:
        raise LayerNotFound(type(spec).__name__, [], "this layer object is not part of the model")
    return hits


def _match_predicate(spec: Any, named: list[tuple[str, Any]], backend: Any) -> list[int]:
    other = framework_of(spec)
    if other and other != backend.name:  # a layer or tensor of the other framework (a torch layer is callable)
        raise LayerNotFound(type(spec).__name__, [], f"a {other} object, and the model is a {backend.name} model")
    return [i for i, (n, m) in enumerate(named) if spec(n, m)]


Matcher = Callable[[Any, "list[tuple[str, Any]]", Any], "list[int]"]

#: the kinds of one spec among the model's layers, tried in order: ``(is this kind(spec, backend),
#: indices in named it selects)``. A kind that selects something else than the model's layers (an
#: operation inside a layer's forward, ``"h.0::add_1"``) comes through ``register_spec_kind``.
_MATCHERS: list[tuple[Callable[[Any, Any], bool], Matcher]] = [
    (lambda spec, backend: isinstance(spec, str), lambda spec, named, backend: _match_name(spec, named, backend)),
    (lambda spec, backend: isinstance(spec, re.Pattern), _match_regex),
    (
        lambda spec, backend: _is_classes(spec),
        lambda spec, named, backend: _match_classes(spec if isinstance(spec, tuple) else (spec,), named, backend),
    ),
    (lambda spec, backend: backend.is_layer(spec), _match_object),
    (lambda spec, backend: callable(spec) or framework_of(spec) not in ("", backend.name), _match_predicate),
]


def _match_one(spec: Any, named: list[tuple[str, Any]], backend: Any) -> list[int]:
    """The indices in ``named`` one spec selects (see the module docstring for the kinds)."""
    for is_kind, match in _MATCHERS:
        if is_kind(spec, backend):
            return match(spec, named, backend)
    fail(
        "select",
        "layers",
        "a name glob, a compiled regex, a layer class, a predicate (name, layer) -> bool, a layer object, "
        "a preset (hookkit.LEAVES, hookkit.WITH_PARAMS, hookkit.ALL) or a list of these",
        spec,
        kind=ArgumentTypeError,
    )


def _match_name(spec: str, named: list[tuple[str, Any]], backend: Any) -> list[int]:
    """A preset, an exact name, or a dotted-name glob."""
    if spec == ALL:
        return list(range(len(named)))
    if spec == LEAVES:
        return [i for i, (_, m) in enumerate(named) if not backend.children(m)]
    if spec == WITH_PARAMS:
        return [i for i, (_, m) in enumerate(named) if backend.parameters(m, recurse=False)]
    if spec.startswith(":"):
        fail("select", "layers", f"a preset among {LEAVES!r}, {WITH_PARAMS!r}, {ALL!r} (unknown layer preset)", spec)
    exact = [i for i, (n, _) in enumerate(named) if n == spec]
    if exact:
        return exact
    rx = _glob_regex(spec)
    hits = [i for i, (n, _) in enumerate(named) if n and rx.fullmatch(n)]  # the root only by "" or ALL
    if rx.fullmatch(""):
        warn_deprecated(  # what the glob selects is right; the warning says what changed
            f"select({spec!r}) matching the model itself (it now selects only the layers below the model, as it does here)",
            "hookkit.ALL (or add the name '') to select the model too",
            since="0.2",
        )
    if not hits:
        raise LayerNotFound(spec, _suggest(spec, [n for n, _ in named]))
    return hits


def _match_classes(kinds: tuple, named: list[tuple[str, Any]], backend: Any) -> list[int]:
    """The layers that are instances of one of ``kinds`` (classes of the model's framework)."""
    for k in kinds:
        other = framework_of(k)
        if other and other != backend.name:
            raise LayerNotFound(
                f"{k.__module__}.{k.__qualname__}",
                [],
                f"{k.__qualname__} is a {other} class and the model is a {backend.name} model: use the {backend.name} class",
            )
    hits = [i for i, (_, m) in enumerate(named) if isinstance(m, kinds)]
    if not hits:
        present = sorted({type(m).__name__ for _, m in named})
        raise LayerNotFound(
            " | ".join(k.__name__ for k in kinds),
            close_matches(kinds[0].__name__, present, cutoff=0.3) or present[:5],
            "no layer of this class",
        )
    return hits


def shown_name(name: str) -> str:
    """A layer name for messages: the model itself (named '') is shown as "(root)"."""
    return name if name else "(root)"


def _suggest(spec: str, names: list[str]) -> list[str]:
    """Close names; failing those (a one-character name on a Sequential), the names beside where
    ``spec`` points: the children of its parent (the top-level layers for an undotted name)."""
    close = close_matches(spec, names)
    if close:
        return close
    parent = spec.rpartition(".")[0]
    beside = [n for n in names if n and n.rpartition(".")[0] == parent]
    if not beside:
        beside = [n for n in names if n and "." not in n]
    return beside[:8]


@public_entry()
def select(model: Layer, layers: LayerSpec = LEAVES) -> Selection:
    """Resolve ``layers`` against ``model``: ``[(dotted name, layer)]`` in model order, no duplicates.

    >>> hookkit.select(gpt2, "h.*.attn")   # doctest: +SKIP
    Selection(['h.0.attn', 'h.1.attn'])

    Globs never match the model itself (its name is ''): ``"*"`` selects its direct children; name
    the root with ``""`` or select everything with ``hookkit.ALL``.
    """
    return select_checked(model, layers, check_model(model))


def select_checked(model: Layer, layers: LayerSpec, backend: Any) -> Selection:
    """``select`` for a caller that checked ``model`` already (``backend``) inside its own public
    entry: the set-up path of ``capture`` (issue 38's fixed cost), without a second check or entry."""
    if type(layers) is str:  # the usual spec, kept: what it resolved to before, while the tree is unchanged
        kept = _kept.get(model)
        hit = None if kept is None else kept.get(layers)
        if hit is not None:
            found = hit[1]()
            if found is not None:
                return Selection(zip(hit[0], found))
    for claims, resolve_kind in _SPEC_KINDS:  # a spec kind of a layer above core: "layer::op" (hookkit.sites)
        if claims(layers):
            return resolve_kind(model, layers, select, Selection)
    key = _spec_key(layers)
    kept = _kept.get(model) if key is not None else None
    if kept is not None and key in kept:
        names, layers_now = kept[key]
        found = layers_now()
        if found is not None:
            return Selection(zip(names, found))
    selection = _resolve(model, layers, backend)
    if key is not None:
        watch = backend.tree_watch(backend.unwrap(model), selection)
        if watch is not None:
            kept = _kept.setdefault(model, {})
            if len(kept) >= _KEPT_PER_MODEL:
                kept.clear()
            kept[key] = (selection.names, watch)
    return selection


# A sweep or a per-example edit opens thousands of contexts on one model: what a spec resolved to
# is kept per model while the backend's watch says its tree is unchanged (weakly: the model and its
# layers are never held). Predicates and layer objects are resolved afresh every time, as are
# WITH_PARAMS (a parameter deleted is not seen) and globs that would match the model itself (they warn).
_kept: IdentityWeakMap[dict[Any, tuple[list[str], Callable[[], list[Any] | None]]]] = IdentityWeakMap()
_KEPT_PER_MODEL = 256


#: spec kinds that layers above core add (``register_spec_kind``): (claims(spec), resolve(model, spec, select, Selection))
_SPEC_KINDS: list[tuple[Callable[[Any], bool], Callable[..., Selection]]] = []


def register_spec_kind(claims: Callable[[Any], bool], resolve: Callable[..., Selection]) -> None:
    """Teach ``select`` a new kind of spec: where ``claims(spec)`` is true, ``select(model, spec)``
    returns ``resolve(model, spec, select, Selection)``. The sites layer adds operation sites
    (``"h.0::add_0"``) this way, so core never imports it. The kind registered last is asked first
    (an SAE's features at an operation site, ``"h.0::add_0.sae"``, before the operation sites)."""
    if (claims, resolve) not in _SPEC_KINDS:  # the latest first: a kind built on an earlier one claims its specs before it
        _SPEC_KINDS.insert(0, (claims, resolve))
        _kept.clear()  # a kept string spec was resolved by core before: the new kind may claim it


def _spec_key(layers: Any) -> Any:
    """A hashable key for ``layers``, or None when its result is not kept."""
    if layers is None:
        return LEAVES
    if isinstance(layers, list):
        keys = tuple(_one_key(s) for s in layers)
        return None if any(k is None for k in keys) else ("list", keys)
    return _one_key(layers)


def _one_key(spec: Any) -> Any:
    if isinstance(spec, str):
        return spec if _str_kept(spec) else None
    if isinstance(spec, (type, re.Pattern)) or (isinstance(spec, tuple) and spec and all(isinstance(s, type) for s in spec)):
        return spec
    return None


@functools.lru_cache(maxsize=1024)
def _str_kept(spec: str) -> bool:
    return not (spec == WITH_PARAMS or (spec and not spec.startswith(":") and _glob_regex(spec).fullmatch("")))


def _resolve(model: Layer, layers: LayerSpec, backend: Any) -> Selection:
    # A data-parallel wrapper (DDP, DataParallel) is looked through: names are the inner model's,
    # and names written with the wrapper's prefix ("module.fc") are accepted as well.
    inner = backend.unwrap(model)
    named = list(backend.named_layers(inner))
    specs: Iterable[Any] = layers if isinstance(layers, list) else [layers]
    if layers is None:
        specs = [LEAVES]
    wrapped = _wrapper_name(model, inner, backend) if inner is not model else ""
    chosen: set[int] = set()
    aliases: dict[str, tuple[int, Any]] = {}  # a shared layer named by another attribute path
    for spec in specs:
        bare = _without_prefix(spec, wrapped)
        try:
            chosen.update(_match_one(bare, named, backend))
        except LayerNotFound as exc:
            found = _alias(inner, bare, named, backend) if isinstance(bare, str) else None
            if found is not None:
                aliases[bare] = found
                continue
            if exc.spec == spec or not isinstance(spec, str):
                raise
            raise LayerNotFound(spec, exc.close, f"in the model inside {type(model).__name__}") from None
    if not chosen and not aliases:
        raise LayerNotFound(layers, [], "an empty list selects no layer" if isinstance(layers, list) else "the predicate selected no layer")
    order = [((i, 0, ""), named[i]) for i in chosen] + [((i, 1, name), (name, layer)) for name, (i, layer) in aliases.items()]
    return Selection(pair for _, pair in sorted(order, key=lambda kv: kv[0]))


def _alias(root: Any, path: str, named: list[tuple[str, Any]], backend: Any) -> tuple[int, Any] | None:
    """A layer reachable under another attribute path than its first name (``self.a = self.b =
    shared``: ``named_layers`` lists it once, as ``a``): ``(its index in named, the layer)``."""
    if not path or path.startswith(":") or any(c in path for c in "*?["):
        return None
    layer = root
    for part in path.split("."):
        child = getattr(layer, part, None) if part.isidentifier() or part.isdigit() else None
        if child is None or not any(c is child for c in backend.children(layer)):
            return None
        layer = child
    index = next((i for i, (_, m) in enumerate(named) if m is layer), None)
    return None if index is None else (index, layer)


class Selection(list[tuple[str, Layer]]):
    """What ``select`` returns: a list of ``(dotted name, layer)`` pairs that shows as its names
    (a layer's own repr can run for pages). ``names``: the names alone; ``layers``: the layers alone.

    >>> hookkit.select(gpt2, "h.*.attn")   # doctest: +SKIP
    Selection(['h.0.attn', 'h.1.attn'])
    """

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self]

    @property
    def layers(self) -> list[Layer]:
        return [m for _, m in self]

    def __repr__(self) -> str:
        shown = [n or "(root)" for n in self.names]
        if len(shown) > 20:
            return f"Selection({shown[:10]!r} ... {shown[-5:]!r}, {len(shown)} layers)"
        return f"Selection({shown!r})"

    def _repr_html_(self) -> str:
        """The selected layers and their types, a table in Jupyter."""
        import html

        cell = "padding:2px 8px;border-bottom:1px solid #ddd;white-space:nowrap;text-align:left"
        rows = "".join(
            f'<tr><td style="{cell}">{html.escape(n or "(root)")}</td><td style="{cell}">{html.escape(type(m).__name__)}</td></tr>'
            for n, m in list(self)[:200]
        )
        k = len(self)
        caption = f"Selection: {k} layer{'' if k == 1 else 's'}" + (" (first 200 shown)" if k > 200 else "")
        return (
            '<table style="border-collapse:collapse;font-family:ui-monospace,monospace;font-size:12px">'
            f'<caption style="text-align:left;font-weight:bold">{html.escape(caption)}</caption>'
            f'<thead><tr><th style="{cell}">layer</th><th style="{cell}">type</th></tr></thead><tbody>{rows}</tbody></table>'
        )


def _wrapper_name(model: Any, inner: Any, backend: Any) -> str:
    return next((name for name, m in backend.named_layers(model) if m is inner), "")


def _without_prefix(spec: Any, wrapped: str) -> Any:
    if isinstance(spec, str) and wrapped and not spec.startswith(":"):
        if spec == wrapped:
            return ""
        if spec.startswith(wrapped + "."):
            return spec[len(wrapped) + 1 :]
    return spec


def name_of(model: Layer, layer: Any) -> str:
    """The dotted name of ``layer`` inside ``model`` ('' for the model itself; a data-parallel
    wrapper is looked through, as in ``select``)."""
    backend = backend_for(model)
    for name, m in backend.named_layers(backend.unwrap(model)):
        if m is layer:
            return name
    raise LayerNotFound(type(layer).__name__, [], "this layer object is not part of the model")
