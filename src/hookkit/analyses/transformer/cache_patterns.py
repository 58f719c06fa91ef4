"""``blocks.{i}.attn.hook_pattern`` and ``blocks.{i}.attn.hook_attn_scores`` in ``run_with_cache``:
attention probabilities and the scores before their softmax, ``[batch, head, query_pos, key_pos]``,
computed beside the model's own attention kernel (SDPA, flash), from the queries, keys, mask and
scaling it used, as ``attention_patterns`` computes them (``analyses.transformer.patterns``); the
pattern is the softmax of the scores kept. Read only: they are not hook sites (editing them would
need the layer's attention run eagerly)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from hookkit.analyses.transformer.patterns import _interface_watch, _projection_watch
from hookkit.core.architectures import INTERFACE, HeadLayout, Projections, attention_family, head_layout, read_path
from hookkit.core.handles import HandleGroup
from hookkit.core.router import OBSERVER, Event, attach
from hookkit.core.standard_names import Point, module_path
from hookkit.core.tree import leaves

PATTERN = "attn.hook_pattern"
SCORES = "attn.hook_attn_scores"


def pattern_targets(root: Any, found: tuple) -> dict[str, tuple[str, Any, HeadLayout]]:
    """``{"blocks.{i}.attn.hook_attn_scores" and "blocks.{i}.attn.hook_pattern": (attention module
    path, module, layout)}``; empty when the family's attention is not one whose scores hookkit can read."""
    fam, blocks_path, blocks = found
    out = {}
    for i in range(len(blocks)):
        path = module_path(fam, blocks_path, Point(fam.attn), i)
        layer = read_path(root, path)
        if attention_family(layer) is None:
            return {}
        lay = head_layout(layer, path)
        if lay.scores != INTERFACE and not isinstance(lay.scores, Projections):
            return {}
        out[f"blocks.{i}.{SCORES}"] = out[f"blocks.{i}.{PATTERN}"] = (path, layer, lay)
    return out


def _eager_or(watch: Any, path: str, eager: set[str], scores_only: Any = None) -> Any:
    """The watch, but an eager attention in eval mode is left to return its own probabilities
    (transformers' attention modules return them: nothing is computed twice); ``scores_only``: the
    watch that computes the scores alone, for such a layer whose scores are wanted too."""

    def on_call(module: Any, query: Any, key: Any, mask: Any, kwargs: dict, impl: str) -> None:
        if impl == "eager" and not getattr(module, "training", False):
            eager.add(path)
            if scores_only is not None:
                scores_only(module, query, key, mask, kwargs, impl)
            return
        eager.discard(path)
        watch(module, query, key, mask, kwargs, impl)

    return on_call


def _returned(be: Any, path: str, eager: set[str], found: dict[str, Any]) -> Any:
    def on_forward(ev: Event) -> None:
        if path in eager:
            out = leaves(ev.output, be.is_tensor)
            if len(out) > 1 and len(be.shape(out[1])) == 4:
                found[path] = out[1]

    return on_forward


@contextlib.contextmanager
def patterns_kept(model: Any, be: Any, targets: dict[str, tuple[str, Any, HeadLayout]], wanted: list[str]) -> Iterator[dict[str, Any]]:
    """Inside: the forward computes the wanted patterns and scores into the dict yielded (keyed by name)."""
    fam = be.family("attention")
    found: dict[str, Any] = {}
    scores: dict[str, Any] = {}
    eager: set[str] = set()  # layers whose eager attention returns the probabilities it computed
    watched: dict[int, Any] = {}
    group = HandleGroup()
    layers: dict[str, tuple[Any, HeadLayout, set[str]]] = {}  # path -> layer, layout, what is wanted of it
    for name in wanted:
        path, layer, lay = targets[name]
        layers.setdefault(path, (layer, lay, set()))[2].add(SCORES if name.endswith(SCORES) else PATTERN)
    try:
        for path, (layer, lay, what) in layers.items():
            heads = list(range(lay.n_heads))
            into = scores if SCORES in what else None
            if lay.scores == INTERFACE:
                watch = _interface_watch(fam, path, heads, found, into, PATTERN in what)
                only = _interface_watch(fam, path, heads, found, into, False) if into is not None else None
                watch = _eager_or(watch, path, eager, only) if PATTERN in what else watch
                for _, sub in be.named_layers(layer):  # the function gets the layer or one of its parts
                    watched[id(sub)] = watch
                if PATTERN in what:
                    group.add(attach(model, [(path, layer)], "forward", _returned(be, path, eager, found), OBSERVER))
            else:
                group.add(_projection_watch(model, be, fam, path, layer, lay, heads, found, into, PATTERN in what))
        kept: dict[str, Any] = {}
        with fam.watch_interface(watched) if watched else contextlib.nullcontext():
            yield kept
        for name in wanted:
            path = targets[name][0]
            got = scores if name.endswith(SCORES) else found
            if path in got:
                kept[name] = got[path]
    finally:
        group.remove()
