"""``blocks.{i}.attn.hook_pattern`` in ``run_with_cache``: attention probabilities ``[batch, head,
query_pos, key_pos]`` computed beside the model's own attention kernel (SDPA, flash), from the
queries, keys, mask and scaling it used, as ``attention_patterns`` computes them
(``analyses.transformer.patterns``). Read only: they are not hook sites (editing a pattern would
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


def pattern_targets(root: Any, found: tuple) -> dict[str, tuple[str, Any, HeadLayout]]:
    """``{"blocks.{i}.attn.hook_pattern": (attention module path, module, layout)}``; empty when the
    family's attention is not one whose scores hookkit can read."""
    fam, blocks_path, blocks = found
    out = {}
    for i in range(len(blocks)):
        path = module_path(fam, blocks_path, Point(fam.attn), i)
        layer = read_path(root, path)
        if attention_family(layer) is None:
            return {}
        lay = head_layout(layer, path, "run_with_cache")
        if lay.scores != INTERFACE and not isinstance(lay.scores, Projections):
            return {}
        out[f"blocks.{i}.{PATTERN}"] = (path, layer, lay)
    return out


def _eager_or(watch: Any, path: str, eager: set[str]) -> Any:
    """The watch, but an eager attention in eval mode is left to return its own probabilities
    (transformers' attention modules return them: nothing is computed twice)."""

    def on_call(module: Any, query: Any, key: Any, mask: Any, kwargs: dict, impl: str) -> None:
        if impl == "eager" and not getattr(module, "training", False):
            eager.add(path)
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
    """Inside: the forward computes the wanted patterns into the dict yielded (keyed by name)."""
    fam = be.family("attention")
    found: dict[str, Any] = {}
    eager: set[str] = set()  # layers whose eager attention returns the probabilities it computed
    watched: dict[int, Any] = {}
    group = HandleGroup()
    try:
        for name in wanted:
            path, layer, lay = targets[name]
            heads = list(range(lay.n_heads))
            if lay.scores == INTERFACE:
                watch = _eager_or(_interface_watch(fam, path, heads, found), path, eager)
                for _, sub in be.named_layers(layer):  # the function gets the layer or one of its parts
                    watched[id(sub)] = watch
                group.add(attach(model, [(path, layer)], "forward", _returned(be, path, eager, found), OBSERVER))
            else:
                group.add(_projection_watch(model, be, fam, path, layer, lay, heads, found))
        by_path = {targets[n][0]: n for n in wanted}
        kept: dict[str, Any] = {}
        with fam.watch_interface(watched) if watched else contextlib.nullcontext():
            yield kept
        kept.update({by_path[p]: t for p, t in found.items() if p in by_path})
    finally:
        group.remove()
