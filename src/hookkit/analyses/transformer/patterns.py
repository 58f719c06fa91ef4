"""``attention_patterns``: attention probabilities of selected layers and heads while the model keeps
its fast attention (SDPA, flash) for its own output.

The probabilities are computed from the queries, keys, masks, position biases and scaling the
model itself used: for families whose library hands them to a replaceable attention function
(transformers' ``AttentionInterface``: rotary embeddings already applied, grouped-query keys), at
that call; for Paddle's ``nn.MultiHeadAttention``, from the outputs of its own query and key
projections and the mask it was called with. Only the selected heads are computed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hookkit.analyses.inputs import call_model, check_inputs
from hookkit.analyses.passes import analysis_pass
from hookkit.backends import backend_for
from hookkit.core.architectures import INTERFACE, HeadLayout, Projections, attention_family, head_layout, known_attention, submodule
from hookkit.core.entry import entry_name, public_entry
from hookkit.core.errors import UnsupportedModel
from hookkit.core.failures import explains_failures
from hookkit.core.handles import HandleGroup
from hookkit.core.router import OBSERVER, Event, attach
from hookkit.core.select import LayerSpec, select
from hookkit.core.types import Layer
from hookkit.core.validate import check_model, check_runnable
from hookkit.sites import Site, attach_sites, check_heads


def attention_layers(model: Layer, layers: LayerSpec) -> list[tuple[str, Any, HeadLayout]]:
    """The selected attention layers (None: every layer of a known attention family)."""
    be = backend_for(model)
    if layers is None:
        named = [(n, layer) for n, layer in be.named_layers(model) if n and attention_family(layer) is not None]
        if not named:
            raise UnsupportedModel(f"{entry_name()}(): the model has no attention layer of a known family; known: {known_attention()}")
    else:
        named = select(model, layers)
    return [(n, layer, head_layout(layer, n)) for n, layer in named]


@explains_failures("attention_patterns")
@public_entry()
def attention_patterns(model: Layer, inputs: Any, layers: LayerSpec = None, heads: Any = None) -> dict[str, Any]:
    """Run ``model`` on ``inputs`` once and return ``{layer name: probabilities [B, H_selected, T_q, T_k]}``
    for the selected attention layers (None: all of a known family) and heads (None: all; a list of
    head indices; a dict layer name -> list). The model's output is computed by its own attention
    implementation, untouched; a layer called several times in the forward gives its last call.

    >>> pats = hookkit.attention_patterns(model, {"input_ids": ids, "attention_mask": am}, layers="model.layers.0.self_attn", heads=[0, 5])   # doctest: +SKIP
    >>> pats["model.layers.0.self_attn"].shape     # [B, 2, T, T]
    """
    be = check_model(model)
    check_runnable(be, model)
    check_inputs(be, inputs)
    targets = attention_layers(model, layers)
    sel = {}
    for name, _, lay in targets:
        want = heads.get(name, True) if isinstance(heads, Mapping) else (True if heads is None else heads)
        sel[name] = check_heads(want, lay.n_heads, name)
    found: dict[str, Any] = {}
    fam = be.family("attention")
    watched = {}
    group = HandleGroup()
    try:
        for name, layer, lay in targets:
            if lay.scores == INTERFACE:
                for _, sub in be.named_layers(layer):  # the function gets the layer or one of its parts
                    watched[id(sub)] = _interface_watch(fam, name, sel[name], found)
            elif isinstance(lay.scores, Projections):
                group.add(_projection_watch(model, be, fam, name, layer, lay, sel[name], found))
            else:
                raise UnsupportedModel(
                    f"attention_patterns(): layer {name!r} ({type(layer).__name__}) has no known way to read its attention "
                    f"scores; families that have one: {known_attention()}"
                )
        with analysis_pass(model, be, grad=False), be.no_grad():
            if watched:
                with fam.watch_interface(watched):
                    call_model(model, inputs)
            else:
                call_model(model, inputs)
    finally:
        group.remove()
    missing = [name for name, _, _ in targets if name not in found]
    if missing:
        raise RuntimeError(
            f"attention_patterns(): layers {', '.join(missing)} did not compute attention through a function hookkit can see "
            "(a cached or custom attention path); their patterns are unavailable"
        )
    return {name: found[name] for name, _, _ in targets}


def _keep(fam: Any, name: str, found: dict[str, Any], scores_into: dict[str, Any] | None, probs: bool, *args: Any, **kw: Any) -> None:
    """``found[name]``: the probabilities (when ``probs``); ``scores_into[name]``: the scores before the
    softmax they are the softmax of (when given): computed once."""
    if scores_into is None:
        found[name] = fam.probs(*args, **kw)
        return
    s = fam.scores(*args, **kw)
    scores_into[name] = s
    if probs:
        found[name] = fam.softmax(s)


def _interface_watch(
    fam: Any, name: str, heads: list[int], found: dict[str, Any], scores_into: dict[str, Any] | None = None, probs: bool = True
) -> Any:
    def watch(module: Any, query: Any, key: Any, mask: Any, kwargs: dict, impl: str) -> None:
        scaling = kwargs.get("scaling")
        if scaling is None:
            scaling = getattr(module, "scaling", None) or query.shape[-1] ** -0.5
        causal = False
        if impl != "eager" and mask is None:  # SDPA / flash: causal from the flag when no mask is given
            flag = kwargs.get("is_causal")
            causal = bool(getattr(module, "is_causal", True) if flag is None else flag)
        _keep(
            fam,
            name,
            found,
            scores_into,
            probs,
            query,
            key,
            heads,
            float(scaling),
            mask=mask,
            causal=causal,
            position_bias=kwargs.get("position_bias"),
            softcap=kwargs.get("softcap"),
        )

    return watch


def _projection_watch(
    model: Any,
    be: Any,
    fam: Any,
    name: str,
    layer: Any,
    lay: HeadLayout,
    heads: list[int],
    found: dict[str, Any],
    scores_into: dict[str, Any] | None = None,
    probs: bool = True,
) -> HandleGroup:
    spec: Projections = lay.scores
    m = be.family("tensor_math")
    seen: dict[str, Any] = {}

    def keep(site: Site) -> Any:
        def on_forward(ev: Event) -> None:
            seen[site.name] = site.tensor(be, ev)

        return on_forward

    def on_call(ev: Event) -> None:
        seen.clear()
        seen["mask"] = (
            ev.kwargs.get(spec.mask_kw)
            if spec.mask_kw in (ev.kwargs or {})
            else (ev.args[spec.mask_arg] if len(ev.args) > spec.mask_arg else None)
        )
        if len(ev.args) > spec.mask_arg + 1 and ev.args[spec.mask_arg + 1] is not None or (ev.kwargs or {}).get("cache") is not None:
            raise UnsupportedModel(f"attention_patterns(): layer {name!r} was called with a cache; call it without one")

    def on_done(ev: Event) -> None:
        q, k = seen.get("q"), seen.get("k")
        if q is None or k is None:
            return

        def heads_first(t: Any) -> Any:
            b, t_len = be.shape(t)[0], be.shape(t)[1]
            return m.permute(m.reshape(t, [b, t_len, -1, lay.d_head]), [0, 2, 1, 3])

        scaling = spec.scaling if spec.scaling is not None else lay.d_head**-0.5
        _keep(fam, name, found, scores_into, probs, heads_first(q), heads_first(k), heads, scaling, mask=seen.get("mask"), scale_query=True)

    group = HandleGroup()
    try:
        group.add(attach(model, [(name, layer)], "forward_pre", on_call, OBSERVER))
        qk = [Site(which, f"{name}.{path}", submodule(layer, path, name)) for which, path in (("q", spec.q), ("k", spec.k))]
        attach_sites(model, qk, keep, OBSERVER, group=group)  # the projections' outputs, keyed "q" and "k"
        group.add(attach(model, [(name, layer)], "forward", on_done, OBSERVER))
    except BaseException:
        group.remove()
        raise
    return group
