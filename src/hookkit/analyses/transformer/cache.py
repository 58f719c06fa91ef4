"""``run_with_cache``: one forward of an unmodified model, the values at TransformerLens's standard
names kept in an ``ActivationCache`` with TransformerLens's analysis methods (``accumulated_resid``,
``decompose_resid``, ``stack_head_results``, ``stack_neuron_results``, ``apply_ln_to_stack``,
``logit_attrs``, ``get_full_resid_decomposition``), same meaning and arguments where they apply.

Weights (``W_O``, ``W_out``, ``W_U``) are read by calling the model's own projection on the identity
(so a ``Linear``, GPT-2's ``Conv1D`` and Paddle's ``[in, out]`` weights are read alike), once per cache.

>>> logits, cache = hookkit.run_with_cache(gpt2, ids)               # doctest: +SKIP
>>> resid, labels = cache.decompose_resid(return_labels=True)      # doctest: +SKIP
>>> cache.logit_attrs(resid[:, :, -1], tokens=ids[:, -1])          # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import functools
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from hookkit.analyses.inputs import call_model, check_inputs
from hookkit.analyses.transformer.derived import Derived, Replay, split_derived
from hookkit.analyses.transformer.dla_post_norms import no_full_decomposition, no_heads, post_norm_components
from hookkit.core.architectures import read_path, stack_family
from hookkit.core.entry import entry_name, public_entry
from hookkit.core.errors import UnsupportedModel
from hookkit.core.router import OBSERVER
from hookkit.core.standard_names import name_family
from hookkit.core.suggest import close_matches
from hookkit.core.types import Layer
from hookkit.core.validate import ArgumentTypeError, check_model, fail
from hookkit.core.weakmap import IdentityWeakMap
from hookkit.sites import attach_sites, resolve
from hookkit.sites.names import glob_match, names, table


@dataclasses.dataclass
class ModelFacts:
    """What the cache's methods read of the model: its layers count, norm kind, the modules holding
    the projections (weakly, through the points) and the unembedding."""

    n_layers: int
    norm: str
    norm_offset: float
    model: Any  # a weak reference
    post_norms: bool = False
    weights: dict[str, Any] = dataclasses.field(default_factory=dict)


def _slice(t: Any, s: Any, dim: int) -> Any:
    """``t`` sliced by ``s`` (None: all; an int: that index, the dim dropped; a slice) on ``dim``."""
    if s is None:
        return t
    index = [slice(None)] * dim + [s]
    return t[tuple(index)]


class ActivationCache(Mapping):
    """The values of one forward at standard names (``cache["blocks.0.hook_resid_mid"]``,
    ``cache["resid_pre", 0]``), with TransformerLens's analysis methods.

    Made by ``run_with_cache``: ``values``: name -> tensor (or a ``Derived``: computed on first read,
    then kept; every method reads through ``cache[name]``); ``backend``: the model's framework backend;
    ``info``: what the methods read of the model (a ``ModelFacts``).

    >>> _, cache = hookkit.run_with_cache(model, ids)       # doctest: +SKIP
    >>> cache.accumulated_resid(apply_ln=True).shape        # [n_layers + 1, B, T, d_model]
    """

    def __init__(self, values: dict[str, Any], backend: Any, info: ModelFacts):
        self._values, self._be, self._info = values, backend, info
        self._m = backend.family("tensor_math")

    # -- mapping ----------------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> Any:
        name = self._key(key)
        if name not in self._values:
            close = close_matches(name, list(self._values), n=5)
            raise KeyError(
                f"{name!r} is not in this cache ({len(self._values)} names; closest: {', '.join(close) or 'none'}); run_with_cache(names_filter=) keeps what it names"
            )
        value = self._values[name]
        if isinstance(value, Derived):  # a norm's value, derived from its kept input when first read
            value = self._values[name] = value.compute(self._be, name)
        return value

    def __contains__(self, key: Any) -> bool:
        try:
            return self._key(key) in self._values  # without deriving a value
        except KeyError:
            return False

    @staticmethod
    def _key(key: Any) -> str:
        """A full name, or TransformerLens's short form ``("resid_pre", 3)`` / ``("z", 3, "attn")``."""
        if isinstance(key, str):
            return key
        if isinstance(key, tuple) and len(key) in (2, 3) and isinstance(key[0], str):
            short, layer = key[0], key[1]
            sub = (
                key[2]
                if len(key) == 3
                else {
                    "q": "attn",
                    "k": "attn",
                    "v": "attn",
                    "z": "attn",
                    "pattern": "attn",
                    "pre": "mlp",
                    "post": "mlp",
                    "scale": "ln_final",
                }.get(short)
            )
            if layer is None or sub == "ln_final" and layer is None:
                return f"ln_final.hook_{short}"
            return f"blocks.{layer}.{sub}.hook_{short}" if sub else f"blocks.{layer}.hook_{short}"
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"ActivationCache({len(self._values)} names: {list(self._values)[:4]}...)"

    @property
    def n_layers(self) -> int:
        return self._info.n_layers

    @functools.cached_property
    def _cross_attn(self) -> bool:
        """Whether the model is a decoder with cross-attention (its MLP reads ``resid_mid2`` through ``ln3``)."""
        model = self._info.model()
        if model is None:  # the model is gone: what was kept says
            return any(n.endswith("hook_resid_mid2") or ".cross_attn." in n for n in self._values)
        found = name_family(self._be.unwrap(model))
        return found is not None and "blocks.{i}.hook_resid_mid2" in found[0].points

    # -- weights, read once ---------------------------------------------------------------------------
    def _model(self) -> Any:
        model = self._info.model()
        if model is None:
            raise UnsupportedModel("the model this cache was made from is gone: weights can no longer be read")
        return model

    def _linear(self, key: str, module: Any, width: int, like: Any) -> tuple[Any, Any]:
        """``(W [in, out], b [out])`` of a linear ``module`` taking ``width`` features, read by calling it."""
        found = self._info.weights.get(key)
        if found is None:
            be = self._be
            with be.no_grad():
                eye = be.from_numpy(np.eye(width, dtype=np.float32), like=like)
                eye = be.cast(eye, be.dtype_name(like))
                bias = module(eye[:1] * 0)
                found = self._info.weights[key] = (module(eye) - bias, bias[0])
        return found

    def _module_of(self, name: str) -> Any:
        point = table(self._model()).get(name)
        if point is None:
            raise UnsupportedModel(f"this model has no standard name {name!r}, which this method needs")
        return point.module

    def _out_proj(self, layer: int, attn: str) -> tuple[Any, Any]:
        """``(W [n_heads, d_head, d_model], b)`` of the output projection of block ``layer``'s ``attn``."""
        z = self[f"blocks.{layer}.{attn}.hook_z"]
        h, d = self._be.shape(z)[-2:]
        w, b = self._linear(f"{attn}O{layer}", self._module_of(f"blocks.{layer}.{attn}.hook_z"), h * d, z)
        return self._m.reshape(w, [h, d, -1]), b

    def W_O(self, layer: int, attn: str = "attn") -> Any:
        """``[n_heads, d_head, d_model]`` of block ``layer`` (its output projection; ``attn="cross_attn"``:
        a decoder's cross-attention's)."""
        return self._out_proj(layer, attn)[0]

    def b_O(self, layer: int, attn: str = "attn") -> Any:
        return self._out_proj(layer, attn)[1]

    def W_out(self, layer: int) -> Any:
        """``[d_mlp, d_model]``: the MLP's output projection of block ``layer``."""
        post = self[f"blocks.{layer}.mlp.hook_post"]
        return self._linear(f"out{layer}", self._module_of(f"blocks.{layer}.mlp.hook_post"), self._be.shape(post)[-1], post)

    def W_U(self) -> tuple[Any, Any]:
        """``(W_U [d_model, d_vocab], b_U [d_vocab])``: the unembedding."""
        model = self._model()
        fam = stack_family(self._be.unwrap(model))
        unembed = read_path(self._be.unwrap(model), fam.unembed) if fam is not None and fam.unembed else None
        if unembed is None or not self._be.is_layer(unembed):
            raise UnsupportedModel(f"{type(model).__name__} has no unembedding hookkit knows (logit_attrs needs one)")
        resid = self[f"blocks.{self.n_layers - 1}.hook_resid_post"]
        return self._linear("U", unembed, self._be.shape(resid)[-1], resid)

    def final_norm(self) -> tuple[Any, Any]:
        """``(weight, bias)`` of the final norm (the family's offset added: Gemma's ``1 + w``); None where absent."""
        params = dict(self._be.named_parameters(self._module_of("ln_final.hook_scale"), recurse=False))
        w, b = [None if p is None else self._be.detach(p) for p in (params.get("weight"), params.get("bias"))]
        return (w + self._info.norm_offset if w is not None and self._info.norm_offset else w), b

    # -- TransformerLens's methods --------------------------------------------------------------------
    def _stack(self, items: list[Any], labels: list[str], pos_slice: Any, return_labels: bool) -> Any:
        stack = self._m.stack([_slice(t, pos_slice, 1) for t in items], 0)
        return (stack, labels) if return_labels else stack

    def _layer(self, layer: int | None) -> int:
        n = self.n_layers
        if layer is None or layer == -1:
            return n
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer <= n:
            fail("ActivationCache", "layer", f"None, -1 or an int in [0, {n}]", layer)
        return layer

    def accumulated_resid(
        self,
        layer: int | None = None,
        incl_mid: bool = False,
        apply_ln: bool = False,
        pos_slice: Any = None,
        mlp_input: bool = False,
        return_labels: bool = False,
    ) -> Any:
        """The residual stream before each block up to ``layer`` (None: and after the last),
        ``[components, batch, pos, d_model]``; labels ``"0_pre"``, ``"0_mid"``, ``"final_post"``.

        ``incl_mid``: also each block's ``resid_mid``. ``apply_ln``: pass the stack through
        ``apply_ln_to_stack`` at ``layer``. ``pos_slice``: the positions kept (None: all; an int: that
        one, its dim dropped; a slice). ``mlp_input``: the residual stream the MLP of ``layer`` reads
        (after its attention). ``return_labels``: also return the components' labels.
        """
        layer = self._layer(layer)
        items, labels = [], []
        for i in range(layer + 1):
            if i == self.n_layers:
                items.append(self[f"blocks.{i - 1}.hook_resid_post"])
                labels.append("final_post")
                continue
            items.append(self[f"blocks.{i}.hook_resid_pre"])
            labels.append(f"{i}_pre")
            if incl_mid and i < layer or mlp_input and i == layer:
                mid = "mid2" if mlp_input and i == layer and self._cross_attn else "mid"
                items.append(self[f"blocks.{i}.hook_resid_{mid}"])
                labels.append(f"{i}_{mid}")
        stack = self._stack(items, labels, pos_slice, False)
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, mlp_input=mlp_input, pos_slice=pos_slice)
        return (stack, labels) if return_labels else stack

    def _embeds(self) -> tuple[list[Any], list[str]]:
        items, labels = [], []
        for name, label in (("hook_embed", "embed"), ("hook_pos_embed", "pos_embed"), ("hook_token_type_embed", "token_type_embed")):
            if name in self._values:
                t = self[name]
                items.append(t if self._be.shape(t)[0] == self._batch() else t + self._m.full(self._shape(), 0.0, t))
                labels.append(label)
        return items, labels

    def _shape(self) -> list[int]:
        return list(self._be.shape(self["blocks.0.hook_resid_pre"]))

    def _batch(self) -> int:
        return self._shape()[0]

    def decompose_resid(
        self,
        layer: int | None = None,
        mlp_input: bool = False,
        mode: str = "all",
        apply_ln: bool = False,
        pos_slice: Any = None,
        incl_embeds: bool = True,
        return_labels: bool = False,
    ) -> Any:
        """The residual stream at ``layer`` as the outputs that make it: embeddings, then each
        block's ``attn_out`` and ``mlp_out`` (``mode``: ``"all"``, ``"attn"``, ``"mlp"``).

        ``mlp_input``: the residual stream the MLP of ``layer`` reads (after its attention).
        ``apply_ln``: pass the stack through ``apply_ln_to_stack`` at ``layer``. ``pos_slice``: the
        positions kept (None: all; an int: that one, its dim dropped; a slice). ``incl_embeds``: the
        embeddings first. ``return_labels``: also return the components' labels.
        """
        layer = self._layer(layer)
        if mode not in ("all", "attn", "mlp"):
            fail("decompose_resid", "mode", "'all', 'attn' or 'mlp'", mode)
        items, labels = self._embeds() if incl_embeds else ([], [])
        parts = ("attn", "cross_attn", "mlp") if self._cross_attn else ("attn", "mlp")
        for i in range(layer + (1 if mlp_input and layer < self.n_layers else 0)):
            for part in parts:
                if mode in ("all", part.replace("cross_", "")) and (i < layer or part != "mlp"):
                    items.append(self[f"blocks.{i}.hook_{part}_out"])
                    labels.append(f"{i}_{part}_out")
        stack = self._stack(items, labels, pos_slice, False)
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, mlp_input=mlp_input, pos_slice=pos_slice)
        return (stack, labels) if return_labels else stack

    def _target(self, layer: int, mlp_input: bool) -> Any:
        if layer == self.n_layers:
            return self[f"blocks.{layer - 1}.hook_resid_post"]
        return self[f"blocks.{layer}.hook_resid_{'mid' if mlp_input else 'pre'}"]

    def _heads(self, i: int, pos_slice: Any, attn: str = "attn") -> tuple[list[Any], list[str]]:
        """Each head's output in block ``i`` (``z`` times its slice of ``W_O``) and its label
        (``"L0H3"``; a decoder's cross-attention heads ``"L0C3"``)."""
        z = _slice(self[f"blocks.{i}.{attn}.hook_z"], pos_slice, 1)
        per_head = self._m.einsum("...hd,hdm->h...m", z, self.W_O(i, attn))
        n = self._be.shape(per_head)[0]
        tag = "C" if attn == "cross_attn" else "H"
        return [per_head[h] for h in range(n)], [f"L{i}{tag}{h}" for h in range(n)]

    def _mlps(self, layer: int, expand_neurons: bool, pos_slice: Any) -> tuple[list[Any], list[str], list[Any]]:
        """The MLPs before ``layer``: per neuron (with their output biases) or whole."""
        if not layer:
            return [], [], []
        if expand_neurons:
            neurons, labels = self.stack_neuron_results(layer, pos_slice=pos_slice, return_labels=True)
            return [neurons[k] for k in range(len(labels))], labels, [self.W_out(i)[1] for i in range(layer)]
        items = [_slice(self[f"blocks.{i}.hook_mlp_out"], pos_slice, 1) for i in range(layer)]
        return items, [f"{i}_mlp_out" for i in range(layer)], []

    def stack_head_results(
        self,
        layer: int | None = -1,
        return_labels: bool = False,
        incl_remainder: bool = False,
        pos_slice: Any = None,
        apply_ln: bool = False,
    ) -> Any:
        """Each head's output (``z`` times its slice of ``W_O``, no bias) for the blocks before
        ``layer`` (-1: all), ``[components, batch, pos, d_model]``, labels ``"L0H3"``.

        ``return_labels``: also return the components' labels. ``incl_remainder``: add the residual
        stream minus the components, labelled ``remainder``. ``pos_slice``: the positions kept (None:
        all; an int: that one, its dim dropped; a slice). ``apply_ln``: pass the stack through
        ``apply_ln_to_stack`` at ``layer``.
        """
        layer = self._layer(layer)
        items, labels = [], []
        for i in range(layer):
            found, tags = self._heads(i, pos_slice)
            items += found
            labels += tags
        return self._finish(items, labels, layer, incl_remainder, pos_slice, apply_ln, return_labels)

    def _finish(
        self, items: list, labels: list, layer: int, incl_remainder: bool, pos_slice: Any, apply_ln: bool, return_labels: bool
    ) -> Any:
        if incl_remainder:
            target = _slice(self._target(layer, False), pos_slice, 1)
            items.append(target - sum(items) if items else target)
            labels.append("remainder")
        if not items:
            raise UnsupportedModel(f"no component before layer {layer}: pass a layer > 0")
        stack = self._m.stack(items, 0)
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, pos_slice=pos_slice)
        return (stack, labels) if return_labels else stack

    def stack_neuron_results(
        self,
        layer: int,
        neuron_slice: Any = None,
        pos_slice: Any = None,
        return_labels: bool = False,
        incl_remainder: bool = False,
        apply_ln: bool = False,
    ) -> Any:
        """Each MLP neuron's output (``hook_post`` times its row of ``W_out``) for the blocks before
        ``layer``, ``[components, batch, pos, d_model]``, labels ``"L0N5"``.

        ``neuron_slice``: the neurons kept (None: all, a slice or a list). ``pos_slice``: the positions
        kept (None: all; an int: that one, its dim dropped; a slice). ``return_labels``: also return the
        components' labels. ``incl_remainder``: add the residual stream minus the components, labelled
        ``remainder``. ``apply_ln``: pass the stack through ``apply_ln_to_stack`` at ``layer``.
        """
        layer = self._layer(layer)
        items, labels = [], []
        for i in range(layer):
            post = _slice(self[f"blocks.{i}.mlp.hook_post"], pos_slice, 1)
            w, _ = self.W_out(i)
            index = list(range(self._be.shape(post)[-1]))
            index = index if neuron_slice is None else index[neuron_slice] if isinstance(neuron_slice, slice) else list(neuron_slice)
            per = self._m.einsum(
                "...n,nm->n...m", self._m.index_select(post, len(self._be.shape(post)) - 1, index), self._m.index_select(w, 0, index)
            )
            items += [per[k] for k in range(len(index))]
            labels += [f"L{i}N{n}" for n in index]
        return self._finish(items, labels, layer, incl_remainder, pos_slice, apply_ln, return_labels)

    def apply_ln_to_stack(
        self,
        residual_stack: Any,
        layer: int | None = None,
        mlp_input: bool = False,
        pos_slice: Any = None,
        batch_slice: Any = None,
        has_batch_dim: bool = True,
    ) -> Any:
        """``residual_stack`` (``[components, batch, pos, d_model]``) centred (LayerNorm families)
        and divided by the cached scale of the norm that reads the residual stream at ``layer``
        (None or -1: the final norm; ``mlp_input``: the norm before the MLP, a decoder's third). No weight, no bias.

        ``pos_slice``: the positions kept (None: all; an int: that one, its dim dropped; a slice).
        ``batch_slice``: the batch rows kept (None: all; an int; a slice). ``has_batch_dim``: whether
        ``residual_stack`` has a batch dim (after the components).
        """
        layer = self._layer(layer)
        if layer == self.n_layers:
            scale = self["ln_final.hook_scale"]
        else:
            scale = self[f"blocks.{layer}.ln{(3 if self._cross_attn else 2) if mlp_input else 1}.hook_scale"]
        scale = _slice(_slice(scale, batch_slice, 0), pos_slice, 1 if not isinstance(batch_slice, int) else 0)
        if has_batch_dim:
            residual_stack = _slice(residual_stack, batch_slice, 1)
        if self._info.norm == "layer":
            residual_stack = residual_stack - self._m.mean(residual_stack, [-1], keepdim=True)
        return residual_stack / scale

    def logit_attrs(
        self,
        residual_stack: Any,
        tokens: Any,
        incorrect_tokens: Any = None,
        pos_slice: Any = None,
        batch_slice: Any = None,
        has_batch_dim: bool = True,
    ) -> Any:
        """Each component's direct contribution to the logit of ``tokens`` (or to the logit
        difference with ``incorrect_tokens``): the stack through ``apply_ln_to_stack`` (final norm),
        dotted with the unembedding's columns (``W_U[:, tokens]``, the norm's weight not folded in).

        ``residual_stack``: ``[components, batch, d_model]`` (or with positions). ``pos_slice``: the
        positions kept (None: all; an int: that one, its dim dropped; a slice). ``batch_slice``: the
        batch rows kept (None: all; an int; a slice). ``has_batch_dim``: whether ``residual_stack`` has
        a batch dim (after the components).
        """
        directions = self.tokens_to_residual_directions(tokens)
        if incorrect_tokens is not None:
            other = self.tokens_to_residual_directions(incorrect_tokens)
            if self._be.shape(other) != self._be.shape(directions):
                fail(
                    "logit_attrs",
                    "incorrect_tokens",
                    f"the shape of tokens ({list(self._be.shape(tokens)) if self._be.is_tensor(tokens) else 'one token'})",
                    incorrect_tokens,
                )
            directions = directions - other
        scaled = self.apply_ln_to_stack(residual_stack, -1, pos_slice=pos_slice, batch_slice=batch_slice, has_batch_dim=has_batch_dim)
        return self._m.sum(scaled * directions, [-1])

    def tokens_to_residual_directions(self, tokens: Any) -> Any:
        """``W_U[:, tokens]`` laid out ``[*tokens.shape, d_model]`` (an int: ``[d_model]``)."""
        w_u, _ = self.W_U()
        if isinstance(tokens, bool) or not (isinstance(tokens, int) or self._be.is_tensor(tokens) or isinstance(tokens, (list, tuple))):
            fail("logit_attrs", "tokens", "a token id, a list of them or an integer tensor", tokens, kind=ArgumentTypeError)
        if isinstance(tokens, int):
            return self._m.index_select(w_u, 1, [tokens])[:, 0]
        shape = list(self._be.shape(tokens)) if self._be.is_tensor(tokens) else [len(tokens)]
        flat = self._m.reshape(tokens, [-1]) if self._be.is_tensor(tokens) else list(tokens)
        cols = self._m.index_select(w_u, 1, flat)  # [d_model, n]
        return self._m.reshape(self._m.permute(cols, [1, 0]), [*shape, -1])

    def get_full_resid_decomposition(
        self,
        layer: int | None = None,
        mlp_input: bool = False,
        expand_neurons: bool = True,
        apply_ln: bool = False,
        pos_slice: Any = None,
        return_labels: bool = False,
    ) -> Any:
        """Every head, every neuron (``expand_neurons``) or MLP, the embeddings and the biases summed
        (``"bias"``): ``[components, batch, pos, d_model]``, summing to the residual stream at ``layer``
        (a decoder's cross-attention heads too, ``"L0C3"``).

        ``mlp_input``: the residual stream the MLP of ``layer`` reads (after its attention).
        ``apply_ln``: pass the stack through ``apply_ln_to_stack`` at ``layer``. ``pos_slice``: the
        positions kept (None: all; an int: that one, its dim dropped; a slice). ``return_labels``: also
        return the components' labels.
        """
        layer = self._layer(layer)
        if self._info.post_norms:
            no_full_decomposition()
        items, labels = [], []
        with_mid = mlp_input and layer < self.n_layers
        attns = ("attn", "cross_attn") if self._cross_attn else ("attn",)  # a decoder: its cross-attention heads too
        for i in range(layer + (1 if with_mid else 0)):
            for attn in attns:
                found, tags = self._heads(i, pos_slice, attn)
                items += found
                labels += tags
        bias = [self.b_O(i, attn) for i in range(layer + (1 if with_mid else 0)) for attn in attns]
        found, tags, more = self._mlps(layer, expand_neurons, pos_slice)
        items, labels, bias = items + found, labels + tags, bias + more
        embeds, el = self._embeds()
        items += [_slice(t, pos_slice, 1) for t in embeds]
        labels += el
        like = items[-1]
        items.append(sum(bias) + like * 0 if bias else like * 0)
        labels.append("bias")
        stack = self._m.stack(items, 0)
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, mlp_input=mlp_input, pos_slice=pos_slice)
        return (stack, labels) if return_labels else stack


def _names_filter(model: Any, names_filter: Any) -> list[str]:
    """The names ``names_filter`` keeps among those the model offers."""
    offered = names(model)
    if names_filter is None:
        return offered
    if callable(names_filter):
        return [n for n in offered if names_filter(n)]
    if isinstance(names_filter, str) or (isinstance(names_filter, list) and all(isinstance(s, str) for s in names_filter)):
        specs = [names_filter] if isinstance(names_filter, str) else names_filter
        known = set(offered)
        kept: set[str] = set()
        for s in specs:
            hits = [s] if s in known else [n for n in offered if glob_match(s, n)]  # a name as itself, a glob scanned
            if not hits:
                resolve(model, s)  # refused, with the close names
            kept.update(hits)
        return [n for n in offered if n in kept]
    fail(
        "run_with_cache",
        "names_filter",
        "None, a name or glob, a list of them, or a function name -> bool",
        names_filter,
        kind=ArgumentTypeError,
    )


@public_entry()
def run_with_cache(model: Layer, inputs: Any, names_filter: Any = None, device: Any = None) -> tuple[Any, ActivationCache]:
    """Run ``model`` on ``inputs`` once, unmodified (its own attention kernels), and return
    ``(output, cache)``: the values at TransformerLens's standard names (``names_filter``: None for
    every name, a name, a glob, a list, or a function name -> bool), detached (the model's own
    tensors, as TransformerLens keeps them, never copied; moved to ``device`` when given). A tensor
    the model writes into in place after it was kept is seen by its version counter: those names are
    kept again by a second forward that copies them (eval mode; refused in training mode). The norms'
    ``hook_scale`` and ``hook_normalized`` are derived from the norm's kept input when first read, and
    the ``hook_attn_scores`` / ``hook_pattern`` of a call the library's kernel runs (SDPA) from the
    query, key and mask it received (``device=None``): the forward computes nothing of its own for them
    (docs/standard-names.md).

    >>> logits, cache = hookkit.run_with_cache(gpt2, ids, names_filter="blocks.*.hook_resid_post")   # doctest: +SKIP
    >>> cache["blocks.0.hook_resid_post"].shape
    """
    be = check_model(model)
    check_inputs(be, inputs)
    found = name_family(be.unwrap(model))
    if found is None:
        names(model)  # refuses, naming the families
    assert found is not None
    fam, _, blocks = found
    wanted = _names_filter(model, names_filter)
    values = _kept(model, be, wanted, inputs, device, copy=False)
    changed = _written_after(be, values)
    m = be.family("tensor_math")
    changed += [n for n, v in values.items() if isinstance(v, Derived) and v.source.written(m)]
    if changed:  # the model wrote into a tensor after it was kept: those names again, copied when kept
        if be.is_training(be.unwrap(model)):
            raise UnsupportedModel(
                f"run_with_cache(): the model wrote in place into the values of {', '.join(changed[:4])} after they were kept, and in "
                "training mode a second forward (which would keep copies of them) need not compute the same values; call model.eval()"
            )
        values.update(_kept(model, be, changed, inputs, device, copy=True))
    output = values.pop("")
    info = ModelFacts(len(blocks), fam.norm, fam.norm_offset, weakref.ref(model), post_norms=fam.post_norms)
    return output, ActivationCache({n: values[n] for n in wanted if n in values}, be, info)


def _kept(model: Any, be: Any, wanted: list[str], inputs: Any, device: Any, copy: bool) -> dict[str, Any]:
    """One forward keeping the values at ``wanted``: detached references to the model's own tensors
    (their in-place write count beside, under ``(name, "version")``), or copies (``copy``); the
    model's output under ``""``. Kept by reference on their own device, a norm's names are ``Derived``
    from a reference to its input (one per norm), computed when the cache is read."""
    m = be.family("tensor_math")
    sites = _resolved(model, wanted)
    values: dict[Any, Any] = {}
    reads: list = []
    derived: dict[str, Derived] = {}
    if not copy and device is None:
        sites, reads, derived = split_derived(be, sites, values)
    sources = {id(site): src for site, src in reads}

    def keep(site: Any) -> Callable[[Any], None]:
        name = site.name

        def on(ev: Any) -> None:
            t = be.detach(ev.output)  # the model's own tensor (as TransformerLens keeps them), or a copy
            if copy:
                t = be.clone(t)
            elif device is None:
                values[name, "version"] = m.version(t)
            values[name] = t if device is None else be.to(t, device)

        return on

    def keep_input(site: Any) -> Callable[[Any], None]:
        src = sources[id(site)]

        def on(ev: Any) -> None:
            src.keep(be, m, site, ev)

        return on

    group = attach_sites(model, sites + [site for site, _ in reads], lambda s: keep_input(s) if id(s) in sources else keep(s), OBSERVER)
    try:
        values[""] = call_model(model, inputs)
    finally:
        group.remove()
    for d in derived.values():
        if isinstance(d.source, Replay):
            d.source.bind(values)
    values.update({name: d for name, d in derived.items() if d.source.seen})  # a norm never called: no name
    return values


def _resolved(model: Any, wanted: list[str]) -> list[Any]:
    """``resolve(model, wanted)``, kept per model for the last ``wanted`` while the model's name table
    stands (a loop of ``run_with_cache`` calls resolves its names once)."""
    if not wanted:
        return []
    names_table, key = table(model), (entry_name(), *wanted)  # a Site names the public function its errors name
    kept = _sites_kept.get(model)
    if kept is not None and kept[0] is names_table and kept[1] == key:
        return kept[2]
    sites = resolve(model, wanted)
    _sites_kept[model] = (names_table, key, sites)
    return sites


_sites_kept: IdentityWeakMap[tuple[dict, tuple[str, ...], list[Any]]] = IdentityWeakMap()


def _written_after(be: Any, values: dict[Any, Any]) -> list[str]:
    """The names whose kept tensor the model wrote into in place after it was kept (the version
    counter moved); their ``(name, "version")`` entries are taken out."""
    m = be.family("tensor_math")
    changed = []
    for key in [k for k in values if isinstance(k, tuple)]:
        before = values.pop(key)
        if before is not None and m.version(values[key[0]]) != before:
            changed.append(key[0])
    return changed


# -- direct logit attribution ---------------------------------------------------------------------------
class LogitAttribution:
    """What ``logit_attribution`` returns: ``values`` ``[components, batch]`` (a framework tensor),
    ``labels`` (``"embed"``, ``"L0H3"``, ``"0_mlp_out"``, ``"bias"``...), ``to_numpy()`` and ``plot()``.
    The rows sum to the logit (or the logit difference) the model computed. Made by
    ``logit_attribution``: ``backend``: the model's framework backend; ``n_layers``, ``n_heads``: the
    grid the plot draws."""

    def __init__(self, values: Any, labels: list[str], backend: Any, n_layers: int, n_heads: int):
        self.values, self.labels, self._be = values, labels, backend
        self.n_layers, self.n_heads = n_layers, n_heads

    def to_numpy(self) -> np.ndarray:
        return self._be.to_numpy(self._be.detach(self.values))

    def heads(self, row: int | None = None) -> np.ndarray:
        """``[n_layers, n_heads]``: each head's contribution (batch row ``row``; None: the mean)."""
        if not self.n_heads:
            no_heads(self.n_layers)
        v = self.to_numpy()
        v = v.mean(1) if row is None else v[:, row]
        at = {label: k for k, label in enumerate(self.labels)}
        return np.array([[v[at[f"L{i}H{h}"]] for h in range(self.n_heads)] for i in range(self.n_layers)])

    def plot(self, row: int | None = None, ax: Any = None) -> Any:
        """Heat map layers x heads, with each block's MLP and the embeddings beside (batch row ``row``;
        None: the mean over the batch)."""
        from hookkit.viz.logit_attribution import plot_logit_attribution  # lazy: viz loads matplotlib, needed only to plot

        return plot_logit_attribution(self, row=row, ax=ax)

    def __repr__(self) -> str:
        return f"<LogitAttribution {len(self.labels)} components x {self._be.shape(self.values)[1]} rows>"


@public_entry()
def logit_attribution(model: Layer, inputs: Any, tokens: Any, incorrect_tokens: Any = None, pos: int = -1) -> LogitAttribution:
    """Direct logit attribution in one call: each component's contribution (embeddings, each head,
    each head's bias, each MLP, the final norm's and unembedding's biases) to the logit of
    ``tokens`` (one per batch row, or one for all) at position ``pos``, or to the logit difference
    with ``incorrect_tokens``, through the final norm's cached scale and weight: ``[components,
    batch]`` with ``.labels``; the rows sum to what the model computed. Where the attention and MLP
    outputs pass a norm before the residual stream (Gemma 2), heads are not additive: the rows are the
    embeddings and each block's normed ``attn_out`` and ``mlp_out``, summing to the logit before the
    final softcapping (``heads()`` says why it has none).

    >>> dla = hookkit.logit_attribution(gpt2, ids, tokens=answer, incorrect_tokens=other)   # doctest: +SKIP
    >>> dla.plot()
    """
    be = check_model(model)
    if isinstance(pos, bool) or not isinstance(pos, int):
        fail("logit_attribution", "pos", "an int (a token position, negative from the end)", pos, kind=ArgumentTypeError)
    _, cache = run_with_cache(
        model,
        inputs,
        names_filter=lambda n: n.endswith(
            (
                "hook_embed",
                "pos_embed",
                "token_type_embed",
                "hook_z",
                "attn_out",
                "mlp_out",
                "resid_pre",
                "resid_post",
                "ln_final.hook_scale",
            )
        ),
    )
    n = cache.n_layers
    m = be.family("tensor_math")
    if cache._info.post_norms:  # heads are not additive: each block's normed attention and MLP outputs
        items, labels = post_norm_components(cache, pos)
        n_heads = 0
    else:
        heads, labels = cache.stack_head_results(-1, return_labels=True, pos_slice=pos)
        items = [heads[k] for k in range(len(labels))]
        items += [cache.b_O(i) + heads[0] * 0 for i in range(n)]
        labels += [f"{i}_attn_bias" for i in range(n)]
        items += [_slice(cache[f"blocks.{i}.hook_mlp_out"], pos, 1) for i in range(n)]
        labels += [f"{i}_mlp_out" for i in range(n)]
        embeds, el = cache._embeds()
        items = [_slice(t, pos, 1) for t in embeds] + items
        labels = el + labels
        n_heads = be.shape(heads)[0] // max(n, 1)
    stack = m.stack(items, 0)  # [components, batch, d_model]
    weight, bias = cache.final_norm()
    directions = cache.tokens_to_residual_directions(tokens)
    if incorrect_tokens is not None:
        directions = directions - cache.tokens_to_residual_directions(incorrect_tokens)
    _, b_u = cache.W_U()
    scaled = cache.apply_ln_to_stack(stack, -1, pos_slice=pos)
    values = m.sum(scaled * (directions * weight if weight is not None else directions), [-1])
    const = m.sum((bias if bias is not None else weight * 0) * directions, [-1]) + _unembed_bias(be, m, b_u, tokens, incorrect_tokens)
    values = m.cat([values, m.reshape(const + values[0] * 0, [1, -1])], 0)
    return LogitAttribution(values, [*labels, "bias"], be, n, n_heads)


def _unembed_bias(be: Any, m: Any, b_u: Any, tokens: Any, incorrect: Any) -> Any:
    def pick(t: Any) -> Any:
        return m.index_select(b_u, 0, [t] if isinstance(t, int) else (m.reshape(t, [-1]) if be.is_tensor(t) else list(t)))

    out = pick(tokens)
    return out - pick(incorrect) if incorrect is not None else out
