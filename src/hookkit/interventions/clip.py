"""Gradient clipping through hooks: per selected layer, clip the gradient
flowing back through its output (router "grad" event) and/or its parameters' gradients (tensor
hooks on the parameters). What a hook returns replaces the gradient, so the clipped value is what
reaches upstream layers and ``param.grad``, hence what the optimizer sees.

Norms are per tensor (each output tensor, each parameter), computed on the device: no host sync.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hookkit.backends import Backend, backend_for
from hookkit.core.guards import output_guard
from hookkit.core.handles import HandleGroup
from hookkit.core.router import INTERVENTION, Event, attach, attach_params
from hookkit.core.select import LayerSpec, select
from hookkit.core.validate import InvalidArgument, check_choice, check_model, check_number

__all__ = ["clip_grad"]

TARGETS = ("output", "params", "both")
_EPS = 1e-6  # as torch.nn.utils.clip_grad_norm_


def _clipper(backend: Backend, value: float | None, norm: float | None) -> Callable[[Any], Any]:
    """``grad -> clipped grad``: clamp to [-value, value], then scale so that its L2 norm <= norm."""

    def clamp(g: Any) -> Any:
        return backend.clamp(g, -value, value)

    def scale(g: Any) -> Any:
        coef = backend.clamp(norm / (backend.l2_norm(g) + _EPS), hi=1.0)
        return g * backend.cast(coef, backend.dtype_name(g))

    def clip(g: Any) -> Any:
        if g is None:
            return None
        if value is not None:
            g = clamp(g)
        if norm is not None:
            g = scale(g)
        return g

    return clip


def _check_positive(x: float | None, arg: str) -> float | None:
    return check_number(x, fn="clip_grad", arg=arg, low=0, low_open=True, optional=True)


def clip_grad(
    model: Any,
    layers: LayerSpec,
    value: float | None = None,
    norm: float | None = None,
    target: str = "both",
) -> HandleGroup:
    """Clip gradients of the selected layers by ``value`` (clamp to [-value, value]) and/or ``norm``
    (scale each tensor to L2 norm <= norm; both given: clamp first). ``target``: ``"output"`` (the
    gradient w.r.t. the layer's output, flowing on to earlier layers), ``"params"`` (each of the
    layer's parameter gradients, sublayers included), or ``"both"``. One handle removes every hook.

    >>> h = hookkit.clip_grad(model, "conv1", value=1.0, target="params")   # doctest: +SKIP
    >>> loss.backward(); opt.step(); h.remove()                              # doctest: +SKIP
    """
    check_model(model, fn="clip_grad")
    value, norm = _check_positive(value, "value"), _check_positive(norm, "norm")
    if value is None and norm is None:
        raise InvalidArgument(
            "clip_grad(): value= (clip each element) and/or norm= (clip each tensor's L2 norm) must be given; got neither"
        )
    check_choice(target, TARGETS, fn="clip_grad", arg="target")
    backend = backend_for(model)
    named = select(model, layers)
    # complex gradients have a norm but no order: clamping them is skipped (one warning)
    guarded = output_guard(
        backend, _clipper(backend, value, norm), fn="clip_grad", kinds=("float",) if value is not None else ("float", "complex")
    )

    def clip(g: Any, name: str = "") -> Any:
        return None if g is None else guarded(g, layer=name)

    group = HandleGroup()
    try:
        if target in ("output", "both"):

            def on_grad(ev: Event) -> Any:
                return clip(ev.grad, ev.name)

            group.add(attach(model, named, "grad", on_grad, INTERVENTION))
        if target in ("params", "both"):
            seen: set[int] = set()
            params = []
            for name, layer in named:
                for pname, p in backend.named_parameters(layer, recurse=True):
                    if id(p) in seen or not backend.requires_grad(p):
                        continue
                    seen.add(id(p))
                    params.append((name, layer, pname, p))

            def on_param_grad(ev: Event) -> Any:
                return clip(ev.grad, ev.name)

            group.add(attach_params(model, params, on_param_grad, INTERVENTION))
    except BaseException:
        group.remove()
        raise
    return group
