"""Gradient clipping through hooks: per selected layer, clip the gradient
flowing back through its output (router "grad" event) and/or its parameters' gradients (tensor
hooks on the parameters). What a hook returns replaces the gradient, so the clipped value is what
reaches upstream layers and ``param.grad``, hence what the optimizer sees.

Norms are per tensor (each output tensor, each parameter), computed on the device: no host sync.

Mixed precision: under a gradient scaler the backward carries ``loss_scale * gradient``, so a
threshold applied as is would be ``loss_scale`` times too small (65,536x with the default scale).
``scaler=`` makes the thresholds apply to the unscaled gradient: the hook reads the scaler's current
scale as a device tensor, clips ``g / scale`` and scales back, and leaves non-finite values as they
are, so the scaler still sees an overflow and skips that step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hookkit.backends import Backend, backend_for
from hookkit.core.entry import public_entry
from hookkit.core.guards import output_guard
from hookkit.core.handles import HandleGroup
from hookkit.core.router import INTERVENTION, Event, attach, attach_params
from hookkit.core.select import LayerSpec, select
from hookkit.core.types import Layer
from hookkit.core.validate import InvalidArgument, check_choice, check_model, check_number, fail

__all__ = ["clip_grad"]

TARGETS = ("output", "params", "both")
_EPS = 1e-6  # as torch.nn.utils.clip_grad_norm_


def _clipper(backend: Backend, value: float | None, norm: float | None, scaler: Any = None) -> Callable[[Any], Any]:
    """``grad -> clipped grad``: clamp to [-value, value], then scale so that its L2 norm <= norm.
    With a gradient ``scaler``: of ``grad / loss scale``, non-finite values kept."""

    def clip(g: Any) -> Any:
        if g is None:
            return None
        if value is not None:
            g = backend.clamp(g, -value, value)
        if norm is not None:
            coef = backend.clamp(norm / (backend.l2_norm(g) + _EPS), hi=1.0)
            g = g * backend.cast(coef, backend.dtype_name(g))
        return g

    if scaler is None:
        return clip
    amp, math = backend.family("amp"), backend.family("tensor_math")

    def clip_unscaled(g: Any) -> Any:
        if g is None:
            return None
        s = amp.scale(scaler)
        if s is None:  # scaling off (a disabled scaler): the gradient is the true one
            return clip(g)
        dtype = backend.dtype_name(g)
        work = g if dtype in ("float32", "float64") else backend.cast(g, "float32")  # a half type cannot hold 65,536
        s = backend.cast(s, backend.dtype_name(work))
        out = clip(work / s) * s
        return backend.cast(backend.where(math.isfinite(work), out, work), dtype)

    return clip_unscaled


def _is_scaler(backend: Backend, obj: Any) -> bool:
    try:
        return bool(backend.family("amp").is_scaler(obj))
    except NotImplementedError:  # a framework without the amp family has no scaler to give
        return False


def _check_positive(x: float | None, arg: str) -> float | None:
    return check_number(x, arg=arg, low=0, low_open=True, optional=True)


@public_entry()
def clip_grad(
    model: Layer,
    layers: LayerSpec,
    value: float | None = None,
    norm: float | None = None,
    target: str = "both",
    *,
    scaler: Any = None,
) -> HandleGroup:
    """Clip gradients of the selected layers by ``value`` (clamp to [-value, value]) and/or ``norm``
    (scale each tensor to L2 norm <= norm; both given: clamp first). ``target``: ``"output"`` (the
    gradient w.r.t. the layer's output, flowing on to earlier layers), ``"params"`` (each of the
    layer's parameter gradients, sublayers included), or ``"both"``. One handle removes every hook.
    Parameters frozen at the call (``requires_grad=False`` / ``stop_gradient=True``) are skipped.

    Mixed precision: pass the gradient scaler (``scaler=torch.amp.GradScaler(...)`` or
    ``paddle.amp.GradScaler``) and ``value`` / ``norm`` apply to the unscaled gradient, as
    ``scaler.unscale_(opt)`` then ``clip_grad_value_`` would; non-finite values are left for the
    scaler to find. Without it the thresholds apply to the gradient as the backward carries it: the
    scaled one.

    >>> h = hookkit.clip_grad(model, "conv1", value=1.0, target="params")   # doctest: +SKIP
    >>> loss.backward(); opt.step(); h.remove()                              # doctest: +SKIP
    """
    check_model(model)
    value, norm = _check_positive(value, "value"), _check_positive(norm, "norm")
    if value is None and norm is None:
        raise InvalidArgument(
            "clip_grad(): value= (clip each element) and/or norm= (clip each tensor's L2 norm) must be given; got neither"
        )
    check_choice(target, TARGETS, arg="target")
    backend = backend_for(model)
    if scaler is not None and not _is_scaler(backend, scaler):
        fail(
            "clip_grad",
            "scaler",
            "None or the gradient scaler of the model's framework (torch.amp.GradScaler, paddle.amp.GradScaler)",
            scaler,
        )
    named = select(model, layers)
    # complex gradients have a norm but no order: clamping them is skipped (one warning)
    guarded = output_guard(backend, _clipper(backend, value, norm, scaler), kinds=("float",) if value is not None else ("float", "complex"))

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
