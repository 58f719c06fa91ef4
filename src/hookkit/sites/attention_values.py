"""The attention scores and pattern of one attention call as sites (``blocks.{i}.attn.hook_attn_scores``,
``blocks.{i}.attn.hook_pattern``) for layers whose library hands queries, keys, values and the mask to
a replaceable attention function (transformers' ``AttentionInterface``).

An ``AttnValue`` is a pseudo-layer like an operation site: ``(attention module, "scores" | "pattern")``.
The router places its hooks through ``AttnBackend``, which routes the module's attention function
(``attention.route_interface``, placed with the first hook, removed with the last) to one
``_Slot`` per module. At each call the slot:

- computes the scores ``[batch, head, query_pos, key_pos]`` (``q k^T * scaling``, softcapped, plus
  the position bias; masked positions at the mask's value) beside the call, hands them to the hooks
  of ``"scores"``; then the pattern (their softmax, float32) to the hooks of ``"pattern"``;
- if no hook changed a value, returns what the library's own function (SDPA, flash, eager) returns:
  reading changes nothing of the output. An eager float32 call whose arguments it knows and whose scores
  or pattern a hook reads is run by the slot itself with the eager functions' own operations (the same
  result, the scores not computed twice), and so is a call in a forward that records gradients (so that
  they reach the scores and pattern);
- if a hook returned a new value, runs the rest of that call eagerly from it: softmax of the edited
  scores, the edited pattern, dropout as the model's eager path, ``pattern @ v``; the rest of the layer
  is unchanged. The model's attention implementation is never changed.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from hookkit.core.errors import InvalidArgument, UnsupportedModel, shown
from hookkit.core.weakmap import IdentityWeakMap
from hookkit.sites.seen_backend import SeenBackend
from hookkit.sites.values import shape_str

SCORES, PATTERN = "scores", "pattern"
#: the call's inputs the scores are computed from (``run_with_cache`` derives the scores and pattern from
#: them when read): its hooks get ``args = (query, key)``, ``kwargs`` the mask, scaling, causal flag,
#: position bias and softcap, and the scores and pattern where this call computed them (else None)
INPUTS = "inputs"

#: keyword arguments of an attention call that the eager computation here honours; a tensor under any
#: other keyword (attention sinks, a head mask, ALiBi) or one of ``_CHANGING`` set is refused when editing
_KNOWN = frozenset({"dropout", "scaling", "softcap", "sliding_window", "position_bias", "is_causal", "position_ids", "position_embeddings"})
_CHANGING = frozenset({"s_aux", "sinks", "head_mask", "alibi", "softmax_scale", "attn_logit_softcapping"})


def _unknown(be: Any, args: tuple, kwargs: dict) -> list[str]:
    """The arguments of an attention call that could change its result beyond what ``_Slot`` computes."""
    out = [k for k, v in kwargs.items() if k not in _KNOWN and v is not None and (k in _CHANGING or be.is_tensor(v))]
    return sorted(out) + (["positional arguments"] if args else [])


class AttnValue:
    """The scores or the pattern (``which``) of the attention calls of one module (held weakly)."""

    __slots__ = ("_layer", "which", "__weakref__")

    def __init__(self, layer: Any, which: str):
        self._layer, self.which = weakref.ref(layer), which

    @property
    def layer(self) -> Any:
        return self._layer()

    @staticmethod
    def site_backend(site: AttnValue, backend: Any) -> Any:
        """The backend the router places this value's hooks with (see ``router._hooks_for``)."""
        return AttnBackend.of(backend)

    def children(self) -> list:
        return []

    def __repr__(self) -> str:
        return f"<attention {self.which} of {type(self.layer).__name__}>"


_values: IdentityWeakMap[dict[str, AttnValue]] = IdentityWeakMap()


def attn_value(layer: Any, which: str) -> AttnValue:
    """The one ``AttnValue`` of ``layer`` and ``which`` (kept as long as the layer lives)."""
    made = _values.get(layer)
    if made is None:
        made = _values[layer] = {}
    found = made.get(which)
    if found is None:
        found = made[which] = AttnValue(layer, which)
    return found


class _Hook:
    """One hook placed on a slot; ``remove()`` takes it away (and the route with the slot's last)."""

    __slots__ = ("slot", "which", "fn")

    def __init__(self, slot: _Slot, which: str, fn: Callable):
        self.slot, self.which, self.fn = slot, which, fn

    def remove(self) -> None:
        slot, self.slot = self.slot, None  # type: ignore[assignment]
        if slot is not None:
            slot.discard(self.which, self.fn)


class _Slot:
    """The hooks on one attention module's scores and pattern, and the route of its attention function."""

    __slots__ = ("be", "layer", "fns", "pre", "routed", "__weakref__")

    def __init__(self, be: Any, layer: Any):
        self.be, self.layer = be, weakref.ref(layer)
        self.fns: dict[str, list[Callable]] = {SCORES: [], PATTERN: [], INPUTS: []}
        self.pre: dict[str, list[Callable]] = {SCORES: [], PATTERN: [], INPUTS: []}
        self.routed: Any = None

    def place(self, which: str, fn: Callable, pre: bool) -> _Hook:
        (self.pre if pre else self.fns)[which].append(fn)
        if self.routed is None:
            layer = self.layer()
            parts = [m for _, m in self.be.named_layers(layer)]  # the function gets the layer or one of its parts
            self.routed = self.be.family("attention").route_interface(parts, self)
        return _Hook(self, which, fn)

    def discard(self, which: str, fn: Callable) -> None:
        for table in (self.fns, self.pre):
            if fn in table[which]:
                table[which].remove(fn)
        if not any(self.fns.values()) and not any(self.pre.values()) and self.routed is not None:
            routed, self.routed = self.routed, None
            routed.remove()
            layer = self.layer()
            if layer is not None:
                _slots.pop(layer, None)

    # -- one attention call ------------------------------------------------------------------------
    def __call__(
        self, original: Callable, module: Any, query: Any, key: Any, value: Any, mask: Any, args: tuple, kwargs: dict, impl: str
    ) -> Any:
        fam = self.be.family("attention")
        site = _values.get(self.layer()) or {}
        scaling, causal = _scaling_and_causal(self.be, module, query, mask, kwargs, impl)
        unknown = _unknown(self.be, args, kwargs)
        # run by the slot with the eager operations: an eager float32 call whose scores or pattern a hook
        # reads (the same result, the scores not computed twice), or a forward recording gradients (so that
        # they reach the scores and pattern; SDPA's output does not depend on them). Only INPUTS hooks
        # (run_with_cache): the library's own function runs, the scores are derived when read.
        grads = self.be.grad_enabled() and self.be.requires_grad(query)
        own = not unknown and (grads or (impl == "eager" and self._reads_values() and self.be.dtype_name(query) == "float32"))
        scores, pattern, edited = self._scores_and_pattern(fam, site, query, key, mask, scaling, causal, kwargs, own)
        if self.fns[INPUTS]:  # read only: what the scores are computed from (and them, where computed here)
            self._hand_inputs(site, query, key, mask, scaling, causal, kwargs, scores, pattern)
        if not edited and not own:
            return original(module, query, key, value, mask, *args, **kwargs)  # reading: the library's own kernel
        if edited and unknown:
            raise UnsupportedModel(
                f"editing the attention scores or pattern of {type(module).__name__} runs its attention eagerly, and its attention "
                f"function takes arguments hookkit's eager computation does not know ({', '.join(unknown)}); read them instead"
            )
        dropout = kwargs.get("dropout", 0.0)
        return fam.mix(pattern, value, float(dropout or 0.0), bool(getattr(module, "training", False)))

    def _reads_values(self) -> bool:
        return bool(self.fns[SCORES] or self.pre[SCORES] or self.fns[PATTERN] or self.pre[PATTERN])

    def _scores_and_pattern(
        self, fam: Any, site: dict, query: Any, key: Any, mask: Any, scaling: float, causal: bool, kwargs: dict, own: bool
    ) -> tuple[Any, Any, bool]:
        """The call's scores and pattern through their hooks, where a hook or the eager run needs them:
        (scores, pattern, whether a hook replaced either)."""
        if not (own or self._reads_values()):
            return None, None, False
        scores = fam.scores(
            query,
            key,
            range(self.be.shape(query)[1]),
            scaling,
            mask=mask,
            causal=causal,
            position_bias=kwargs.get("position_bias"),
            softcap=kwargs.get("softcap"),
        )
        scores, edited = self._run(SCORES, site.get(SCORES), scores)
        pattern = None
        if self.fns[PATTERN] or self.pre[PATTERN] or edited or own:
            pattern = fam.softmax(scores)
            pattern, changed = self._run(PATTERN, site.get(PATTERN), pattern)
            edited = edited or changed
        return scores, pattern, edited

    def _hand_inputs(
        self, site: dict, query: Any, key: Any, mask: Any, scaling: float, causal: bool, kwargs: dict, scores: Any, pattern: Any
    ) -> None:
        """What the scores are computed from (and them, where computed here) to the read-only INPUTS hooks."""
        given = {"mask": mask, "scaling": scaling, "causal": causal, "position_bias": kwargs.get("position_bias")}
        given |= {"softcap": kwargs.get("softcap"), "scores": scores, "pattern": pattern}
        for fn in list(self.fns[INPUTS]):
            fn(site.get(INPUTS), (query, key), given, query)

    def _run(self, which: str, site: Any, value: Any) -> tuple[Any, bool]:
        """``value`` through the hooks of ``which``: (the value, whether a hook replaced it)."""
        for fn in list(self.pre[which]):
            fn(site, (), {})
        edited = False
        for fn in list(self.fns[which]):
            new = fn(site, (), {}, value)
            if new is not None and new is not value:
                _check(self.be, new, value, which)
                value, edited = new, True
        return value, edited


def _scaling_and_causal(be: Any, module: Any, query: Any, mask: Any, kwargs: dict, impl: str) -> tuple[float, bool]:
    """The scaling of an attention call (its ``scaling=``, the module's, ``d_head ** -0.5``) and whether
    it is causal without a mask (SDPA / flash: their ``is_causal`` flag)."""
    scaling = kwargs.get("scaling")
    if scaling is None:
        scaling = getattr(module, "scaling", None) or be.shape(query)[-1] ** -0.5
    causal = False
    if impl != "eager" and mask is None:
        flag = kwargs.get("is_causal")
        causal = bool(getattr(module, "is_causal", True) if flag is None else flag)
    return float(scaling), causal


def _check(be: Any, new: Any, old: Any, which: str) -> None:
    if not be.is_tensor(new) or list(be.shape(new)) != list(be.shape(old)):
        raise InvalidArgument(
            f"the attention {which} written must be shaped {shape_str(list(be.shape(old)))} ([batch, head, query_pos, key_pos]); got {shown(new)}"
        )


_slots: IdentityWeakMap[_Slot] = IdentityWeakMap()


class AttnBackend(SeenBackend):
    """The model's backend, but hooks on an ``AttnValue`` go into its module's slot."""

    def _slot(self, site: AttnValue) -> _Slot:
        layer = site.layer
        slot = _slots.get(layer)
        if slot is None:
            slot = _slots[layer] = _Slot(self._real, layer)
        return slot

    def hook_forward_pre(self, site: AttnValue, fn: Callable) -> _Hook:
        return self._slot(site).place(site.which, fn, pre=True)

    def hook_forward(self, site: AttnValue, fn: Callable) -> _Hook:
        return self._slot(site).place(site.which, fn, pre=False)

    def drop_forward_hooks(self, site: Any, match: Callable) -> int:
        return 0
