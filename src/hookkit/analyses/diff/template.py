"""``hookkit.diff``: run two models on the same inputs and name the first layer, call and pass where
they part ways (a port to another framework, a precision change, a refactor, two checkpoints).

How it runs, memory bounded: ``a`` runs first and each of its paired calls' outputs (and, with
``backward=True``, output gradients and parameter gradients) is copied to the host (numpy) as it is
produced; then ``b`` runs and each of its calls is compared with ``a``'s record as soon as ``b``
produces it, and that record is dropped. Device memory never holds more than one model's ordinary
forward and backward; host memory holds ``a``'s records once. Both run in eval mode with their
training flags restored after; gradients are taken with ``grads_of`` (no ``.grad`` is touched).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hookkit.analyses.diff.inputs import to_host
from hookkit.analyses.diff.pairing import Map, Plan, check_map
from hookkit.analyses.diff.result import Diff
from hookkit.analyses.diff.sides import SideA, SideB
from hookkit.core.entry import entry_name, public_entry
from hookkit.core.errors import HookkitError
from hookkit.core.failures import explains_failures
from hookkit.core.select import LayerSpec
from hookkit.core.types import Layer
from hookkit.core.validate import check_bool, check_callable, check_model, check_number, check_runnable, fail


@public_entry("diff")
@explains_failures("diff", models=2)
def diff(
    a: Layer,
    b: Layer,
    inputs: Any,
    *,
    layers: LayerSpec | None = None,
    map: Map = None,
    backward: bool = False,
    loss: Callable[[Any], Any] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    local: bool = False,
) -> Diff:
    """Run ``a`` and ``b`` on the same ``inputs`` and compare them layer by layer, call by call:
    outputs, and with ``backward=True`` each layer's output gradient and each parameter's gradient
    after ``loss(output)`` (default: the sum of the output's floating tensors).

    ``a``, ``b``: models of either framework (PyTorch, PaddlePaddle), of any dtype or device.
    ``inputs``: a tensor or numpy array, a tuple / list (positional inputs) or a dict (keyword
    inputs); each model gets them in its own framework, device and float dtype.
    ``layers``: which of ``a``'s layers to compare (a layer spec; default: every layer with a forward,
    the model itself included). Pairing: by name where the names agree; by structure (the order of
    leaf calls with matching output shapes) where most do not; ``map`` says it: a dict from ``a``'s
    names to ``b``'s (globs allowed), a callable ``f(a_name) -> b_name``, or "name" / "structure".
    ``rtol`` / ``atol``: override the defaults taken from the dtypes compared (see the docs' table).
    ``local=True``: each leaf layer of ``b`` runs on the inputs its partner in ``a`` got, and (backward)
    hands on ``a``'s output gradient, so every row measures that layer's own error rather than what it
    inherited from upstream (PaDiff's "single step"; name or map pairing).

    >>> d = hookkit.diff(torch_model, paddle_model, x, backward=True)   # doctest: +SKIP
    >>> d.first
    Row(phase='forward', layer='blocks.7.mlp.fc1', call=0, max_abs=0.0021, ...)
    >>> print(d)        # the table, first divergence and growing errors marked
    """
    fn = entry_name()
    be_a = check_model(a, arg="a")
    be_b = check_model(b, arg="b")
    check_runnable(be_a, a, arg="a")
    check_runnable(be_b, b, arg="b")
    if a is b:
        fail(fn, "b", "a model other than a (to compare a model with itself changed, compare it with a copy: copy.deepcopy(a))", b)
    backward = check_bool(backward, arg="backward")
    local = check_bool(local, arg="local")
    check_callable(loss, arg="loss", signature="loss(output) -> scalar tensor", optional=True)
    rtol = check_number(rtol, arg="rtol", low=0, optional=True)
    atol = check_number(atol, arg="atol", low=0, optional=True)
    check_map(map)
    host_args, host_kwargs = to_host(inputs)
    plan = Plan(a, be_a, b, be_b, layers, map)
    if local and plan.mode == "structure":
        fail(
            fn,
            "local",
            "False when layers pair by structure (local=True feeds each layer of b its partner's inputs: give map= to pair by name)",
            local,
        )
    side = SideA(a, be_a, plan, backward, local)
    side.run(host_args, host_kwargs, loss)
    rows, unpaired = SideB(b, be_b, plan, side, rtol, atol).run(host_args, host_kwargs, loss)
    if not rows:
        raise HookkitError(
            f"diff(): no call of a pairs with a call of b (pairing by {plan.mode}): "
            f"a's layers: {_names(plan.layers_a)}; b's: {_names(plan.layers_b)}. "
            "Give map={a name or glob: b name} to say which layers correspond."
        )
    return Diff(rows, unpaired, plan.mode, (be_a.name, be_b.name), local=local)


def _names(named: list) -> str:
    names = [n or "(root)" for n, _ in named]
    return ", ".join(names[:8]) + (f" ... ({len(names)} in all)" if len(names) > 8 else "")
