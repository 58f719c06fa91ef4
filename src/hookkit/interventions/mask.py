"""Activation masks (pruning of activations): zero small values, keep the top-k per sample,
or apply a fixed channel mask. One forward consumer per layer at INTERVENTION priority."""

from __future__ import annotations

from typing import Any

import numpy as np

from hookkit.backends import backend_for
from hookkit.core.entry import public_entry
from hookkit.core.handles import HandleGroup
from hookkit.core.router import Event
from hookkit.core.select import LayerSpec
from hookkit.core.types import Layer
from hookkit.core.validate import InvalidArgument, check_int, check_model, check_number, check_tensor_like, fail
from hookkit.interventions.output_edits import edit_outputs
from hookkit.sites import Converted, cast_like, shape_str


def _work(be: Any, t: Any) -> Any:
    """``t``, or a float32 copy of a half or bool tensor: Paddle's CPU has no abs/where kernels for
    those, and bool has no abs anywhere (the result is cast back; float16 -> float32 is exact)."""
    return be.cast(t, "float32") if be.dtype_name(t) in ("float16", "bfloat16", "bool") else t


@public_entry()
def mask_activations(
    model: Layer,
    layers: LayerSpec,
    *,
    threshold: float | None = None,
    top_k: int | None = None,
    channels: Any = None,
    calls: Any = None,
    index: int | None = 0,
) -> HandleGroup:
    """Mask selected layers' outputs; give exactly one mode:

    - ``threshold=t``: zero the values with ``|x| < t``;
    - ``top_k=k``: per sample (dim 0, the rest flattened) keep the ``k`` values largest in ``|x|``,
      zero the others (exactly ``k``: ties are broken by the framework's ``topk``);
    - ``channels=mask``: multiply dim 1 by a fixed mask of ``C`` entries (0/1 or any weights).

    >>> h = hookkit.mask_activations(model, "conv1", threshold=0.1)   # doctest: +SKIP
    >>> h.remove()
    """
    check_model(model)
    given = [k for k, v in (("threshold", threshold), ("top_k", top_k), ("channels", channels)) if v is not None]
    if len(given) != 1:
        raise InvalidArgument(
            f"mask_activations(): the mode must be given as exactly one of threshold=, top_k=, channels=; got {', '.join(given) or 'none'}"
        )
    be = backend_for(model)

    if threshold is not None:
        thr = check_number(threshold, arg="threshold", low=0)

        def apply(t: Any, pos: int, ev: Event) -> Any:
            w = _work(be, t)
            out = be.where(w.abs() >= thr, w, be.zeros_like(w))
            return out if w is t else cast_like(be, out, t)

    elif top_k is not None:
        k = check_int(top_k, arg="top_k", low=1)

        def apply(t: Any, pos: int, ev: Event) -> Any:
            shape = be.shape(t)
            if len(shape) < 1:
                fail("mask_activations", "top_k", f"given for layers with a batch dim (layer {ev.name!r} returns a 0-d tensor)", k)
            per_sample = int(np.prod(shape[1:], dtype=np.int64))
            flat = t.reshape([shape[0], per_sample])  # not -1: ambiguous for an empty batch
            if k > per_sample:
                where = f"layer {ev.name!r} (output shape {shape_str(shape)})"
                fail("mask_activations", "top_k", f"at most the {per_sample} values per sample of {where}", k)
            w = _work(be, flat)
            ranking = w.abs()  # real, also for complex outputs
            keep = be.topk_mask(ranking, k)
            out = be.where(keep > 0, w, be.zeros_like(w)).reshape(list(shape))
            return out if w is flat else cast_like(be, out, t)

    else:
        mask = Converted(check_tensor_like(channels, be, arg="channels", ndim=1))
        n = be.shape(mask.value)[0]

        def apply(t: Any, pos: int, ev: Event) -> Any:
            shape = be.shape(t)
            if len(shape) < 2 or shape[1] != n:
                has = f"has {shape[1]} channels" if len(shape) >= 2 else "has no channel dim"
                valid = f"a mask of shape [{shape[1] if len(shape) >= 2 else '?'}]: layer {ev.name!r} {has} (dim 1 of output shape {shape_str(shape)})"
                fail("mask_activations", "channels", valid, mask.value)
            m = mask.like(be, t).reshape([1, n] + [1] * (len(shape) - 2))
            return t * m

    kinds = ("float", "complex", "int", "bool")  # every kind; the guard passes empty outputs and upcasts half on Paddle's CPU
    return edit_outputs(model, layers, apply, calls=calls, index=index, kinds=kinds)
