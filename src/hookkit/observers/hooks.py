"""The registration API: ``on_forward_pre``, ``on_forward``, ``on_backward``, ``on_grad``.

User functions run as interventions (before hookkit's observers), so a ``capture`` on the same
layer sees what they returned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hookkit.backends import backend_for
from hookkit.core.entry import public_entry
from hookkit.core.errors import GradientNotTracked
from hookkit.core.handles import Handle, HandleGroup
from hookkit.core.router import INTERVENTION, Event, attach, hook_tensor
from hookkit.core.select import LayerSpec, select
from hookkit.core.types import Layer
from hookkit.core.validate import ArgumentTypeError, check_bool, check_callable, check_int, check_model, fail


def _check_hook_args(fn: Any, priority: Any, signature: str, with_kwargs: Any = False) -> None:
    """``signature``: how ``fn`` is called, for the message (``"fn(layer, grad)"``)."""
    check_callable(fn, arg="fn", signature=signature)
    check_bool(with_kwargs, arg="with_kwargs")
    check_int(priority, arg="priority")


@public_entry()
def on_forward_pre(
    model: Layer, layers: LayerSpec, fn: Callable, *, with_kwargs: bool = False, priority: int = INTERVENTION
) -> HandleGroup:
    """Call ``fn(layer, inputs)`` before each selected layer runs; a non-None return replaces the inputs
    (a tuple, or a single value). With ``with_kwargs=True``: ``fn(layer, inputs, kwargs)`` returning
    None or ``(inputs, kwargs)``.

    >>> h = hookkit.on_forward_pre(model, "flatten", lambda layer, inputs: print(inputs))   # doctest: +SKIP
    """
    check_model(model)
    _check_hook_args(fn, priority, "fn(layer, inputs, kwargs)" if with_kwargs else "fn(layer, inputs)", with_kwargs)
    if with_kwargs:

        def consume(ev: Event) -> Any:
            return fn(ev.layer, ev.args, ev.kwargs)
    else:

        def consume(ev: Event) -> Any:
            r = fn(ev.layer, ev.args)
            if r is None:
                return None
            return (r if isinstance(r, tuple) else (r,)), ev.kwargs

    return attach(model, select(model, layers), "forward_pre", consume, priority)


@public_entry()
def on_forward(model: Layer, layers: LayerSpec, fn: Callable, *, with_kwargs: bool = False, priority: int = INTERVENTION) -> HandleGroup:
    """Call ``fn(layer, inputs, output)`` after each selected layer runs; a non-None return replaces the
    output. With ``with_kwargs=True``: ``fn(layer, inputs, kwargs, output)``.

    >>> h = hookkit.on_forward(model, "flatten", lambda layer, inputs, out: 2 * out)   # doctest: +SKIP
    """
    check_model(model)
    _check_hook_args(fn, priority, "fn(layer, inputs, kwargs, output)" if with_kwargs else "fn(layer, inputs, output)", with_kwargs)
    if not with_kwargs:  # fn takes what the router's plain forward consumers take
        return attach(model, select(model, layers), "forward", None, priority, plain=fn)

    def consume(ev: Event) -> Any:
        return fn(ev.layer, ev.args, ev.kwargs, ev.output)

    return attach(model, select(model, layers), "forward", consume, priority)


@public_entry()
def on_backward(model: Layer, layers: LayerSpec, fn: Callable, *, priority: int = INTERVENTION) -> HandleGroup:
    """Call ``fn(layer, grad_inputs, grad_outputs)`` when the gradients of a selected layer's call are
    known; a non-None return replaces ``grad_inputs``. ``grad_inputs`` follows the positional inputs
    (None where an input takes no gradient); ``grad_outputs`` follows the output's tensors.

    Built on tensor hooks, so it works on PaddlePaddle, with in-place ops (``ReLU(inplace=True)``)
    and with tuple outputs, where PyTorch's full backward hook fails. Cost: a copy of each input
    that takes a gradient. On Paddle, a layer whose inputs need no gradient reports only when every
    output that needs one takes part in the loss.

    >>> h = hookkit.on_backward(model, "conv1", lambda layer, gin, gout: print(gout[0].shape))   # doctest: +SKIP
    """
    check_model(model)
    _check_hook_args(fn, priority, "fn(layer, grad_inputs, grad_outputs)")

    def consume(ev: Event) -> Any:
        return fn(ev.layer, ev.grad_inputs, ev.grad_outputs)

    return attach(model, select(model, layers), "backward", consume, priority)


@public_entry()
def on_output_grad(model: Layer, layers: LayerSpec, fn: Callable, *, priority: int = INTERVENTION) -> HandleGroup:
    """Call ``fn(layer, grad)`` with the gradient w.r.t. each selected layer's output tensor (one call
    per tensor of the output); a non-None return replaces the gradient flowing back.

    >>> h = hookkit.on_output_grad(model, "conv1", lambda layer, g: g.clamp(-1, 1))   # doctest: +SKIP
    """
    check_model(model)
    _check_hook_args(fn, priority, "fn(layer, grad)")

    def consume(ev: Event) -> Any:
        return fn(ev.layer, ev.grad)

    return attach(model, select(model, layers), "grad", consume, priority)


@public_entry()
def on_grad(tensor: Any, fn: Callable[[Any], Any]) -> Handle:
    """Call ``fn(grad)`` when ``tensor``'s gradient is computed; a non-None return replaces it.
    Works on leaf and non-leaf tensors of both frameworks.

    >>> h = hookkit.on_grad(a, saved.append)   # doctest: +SKIP
    """
    check_callable(fn, arg="fn", signature="fn(grad)")
    try:
        backend = backend_for(tensor)
    except TypeError:
        backend = None
    if backend is None or not backend.is_tensor(tensor):
        fail("on_grad", "tensor", "a tensor (torch or paddle)", tensor, kind=ArgumentTypeError)
    if not backend.requires_grad(tensor):
        flag, fix = backend.grad_off_text, backend.grad_on_text
        name = backend.tensor_name(tensor)
        raise GradientNotTracked(
            f"cannot watch the gradient of tensor {name + ' ' if name else ''}with shape {list(backend.shape(tensor))}: "
            f"it has {flag}, so autograd computes no gradient for it; call {fix} before using it"
        )
    return hook_tensor(tensor, fn)
