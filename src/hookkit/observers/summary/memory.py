"""What training holds: the bytes autograd saves per layer call, and the training-memory estimate
beside the measured peak of one real step.

``SavedCounter``: the framework's saved-tensor hooks (``backend.family("training").saving``) around
the summary's forward; each tensor autograd saves is identified by its storage (a view and its
base are one storage), counted once, on the rows of the calls running when it was first saved
(the innermost call and the calls around it: ``Recorder.stack``, kept by the summary's own
forward_pre / forward consumers). Parameters' storages are not counted (the parameter column has
them). A checkpointed segment saves its inputs only, through the same hooks.

``estimate_training``: parameters + buffers + inputs + gradients + optimizer state + saved
activations + the largest transient, and the measured peak of one real step (forward, loss,
backward, ``optimizer.step()``) run on the model with everything put back exactly afterwards
(``StateSnapshot``: weights, buffers, ``.grad``, the optimizer's state).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Set as AbstractSet
from contextlib import AbstractContextManager
from typing import Any

from hookkit.backends import Backend
from hookkit.core.tree import first_tensor
from hookkit.core.validate import fail


class SavedCounter:
    """Counts the storages autograd saves during the summary's forward (and the loss after it)."""

    def __init__(self, be: Backend, params: list[Any], loss_fn: Callable[[Any], Any] | None = None):
        self.be, self.ops = be, be.family("training")
        self.recorder: Any = None
        self.loss_fn = loss_fn
        self.param_keys = {k[0] for k in map(self.ops.storage, params) if k is not None}
        self.sizes: dict[int, int] = {}  # storage key -> bytes, in first-saved order
        self.outside = 0  # saved outside every hooked call (the loss)
        self._keep: list[Any] = []  # the saved tensors, alive until the end: no storage address is reused
        self.loss: Any = None

    def hooks(self) -> AbstractContextManager:
        return self.ops.saving(self._on_save)

    def _on_save(self, t: Any) -> None:
        found = self.ops.storage(t)
        if found is None:
            return
        key, nbytes = found
        if key in self.param_keys or key in self.sizes:
            return
        self._keep.append(t)
        self.sizes[key] = nbytes
        stack = self.recorder.stack if self.recorder is not None else ()
        if not stack:
            self.outside += nbytes
        for row, _ in stack:
            row.saved_bytes += nbytes

    def after(self, output: Any) -> None:
        """The loss of the forward's output, under the same hooks (what it saves is counted apart)."""
        if self.loss_fn is not None:
            self.loss = self.loss_fn(output)

    @property
    def total(self) -> int:
        return sum(self.sizes.values())

    def release(self) -> None:
        self._keep.clear()
        self.loss = None


def default_loss(be: Backend) -> Callable[[Any], Any]:
    """The sum of the output's first tensor: a scalar whose backward reaches every layer it depends on."""

    def loss(output: Any) -> Any:
        t = output if be.is_tensor(output) else first_tensor(output, be.is_tensor)
        if t is None:
            fail("summary", "loss_fn", "a function of the model's output giving a scalar loss (the output holds no tensor to sum)", None)
        return t.sum()

    return loss


class StateSnapshot:
    """Weights, ``.grad``, buffers, training flags and the optimizer's state, put back exactly by ``restore()``.

    Parameters' values are copied (and copied back in place); their gradients are taken off them
    (the step computes fresh ones) and given back; the optimizer's containers (dicts, lists, sets
    under its attributes) get their items back and its state tensors their values, so tensors
    created by the step (Adam's moments on the first step) are dropped and the ones that existed
    are the same objects with the same bits."""

    def __init__(self, be: Backend, model: Any, layers: list[Any], optimizer: Any):
        from hookkit.observers.summary.recording import ModelState

        self.be, self.ops = be, be.family("training")
        params = self.ops.group_parameters([*be.parameters(model), *self.ops.optimizer_parameters(optimizer)])
        self.params = params
        self.model_state = ModelState(be, model, layers)
        self.values = [(p, be.clone(be.detach(p))) for p in params]
        self.grads = [(p, self.ops.take_grad(p)) for p in params]
        self.containers: list[tuple[Any, Any]] = []
        self.tensors: list[tuple[Any, Any]] = []
        self._walk(self.ops.optimizer_state(optimizer), {id(p) for p in params}, set(), 0)

    def _walk(self, obj: Any, skip: set[int], seen: set[int], depth: int) -> None:
        if id(obj) in seen or depth > 8:
            return
        seen.add(id(obj))
        if self.be.is_tensor(obj):
            if id(obj) not in skip:
                self.tensors.append((obj, self.be.clone(self.be.detach(obj))))
            return
        if isinstance(obj, dict):
            self.containers.append((obj, list(obj.items())))
            children = list(obj.values())
        elif isinstance(obj, list):
            self.containers.append((obj, list(obj)))
            children = list(obj)
        elif isinstance(obj, set):
            self.containers.append((obj, set(obj)))
            return
        else:
            return
        for child in children:
            self._walk(child, skip, seen, depth + 1)

    def clear_grads(self) -> None:
        for p in self.params:
            self.ops.take_grad(p)

    def restore(self) -> None:
        be = self.be
        for obj, items in self.containers:
            if isinstance(obj, dict):
                obj.clear()
                obj.update(items)
            elif isinstance(obj, list):
                obj[:] = items
            else:
                obj.clear()
                obj.update(items)
        for t, saved in self.tensors:
            if be.shape(t) == be.shape(saved):
                be.copy_into(t, saved)
        for p, saved in self.values:
            be.copy_into(p, saved)
        for p, g in self.grads:
            self.ops.put_grad(p, g)
        self.model_state.restore()


def tensors_under(be: Backend, obj: Any, skip: set[int], depth: int = 0, seen: set[int] | None = None) -> list[Any]:
    """Tensors inside the dicts and lists under ``obj`` (not those whose id is in ``skip``)."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth > 8:
        return []
    seen.add(id(obj))
    if be.is_tensor(obj):
        return [] if id(obj) in skip else [obj]
    children = list(obj.values()) if isinstance(obj, dict) else list(obj) if isinstance(obj, list) else []
    return [t for c in children for t in tensors_under(be, c, skip, depth + 1, seen)]


def distinct_bytes(be: Backend, ts: list[Any], exclude: AbstractSet[int] = frozenset()) -> int:
    """Bytes of the distinct storages of ``ts`` (storage keys in ``exclude`` not counted)."""
    ops = be.family("training")
    sizes: dict[int, int] = {}
    for t in ts:
        found = ops.storage(t)
        if found is not None and found[0] not in exclude:
            sizes[found[0]] = found[1]
    return sum(sizes.values())


def measure_step(
    be: Backend, model: Any, layers: list[Any], optimizer: Any, args: tuple, kwargs: dict, loss_fn: Callable[[Any], Any]
) -> dict[str, Any]:
    """One real training step (forward, loss, backward, ``optimizer.step()``) in the steady state
    (the optimizer's state exists: a first, unmeasured step makes it when it does not), its peak
    measured by the framework's allocator; then everything is put back (``StateSnapshot``).

    Returns ``{"peak_delta", "how", "optimizer_state_bytes"}``: the most bytes allocated at once
    during the step above what was allocated when it started, how it was measured, and the bytes
    of the optimizer's state tensors."""
    ops = be.family("training")
    snap = StateSnapshot(be, model, layers, optimizer)
    params = snap.params
    try:
        be.set_training(model, True)

        def step() -> None:
            loss = loss_fn(model(*args, **kwargs))
            ops.backward(loss)
            optimizer.step()

        skip = {id(p) for p in params}
        state = tensors_under(be, ops.optimizer_state(optimizer), skip)
        param_keys = {k[0] for k in map(ops.storage, params) if k is not None}
        if not any(be.numel(t) > 1 for t in state):
            step()  # the first step makes the state (Adam's moments); the steady state is measured
            snap.clear_grads()
        state_bytes = distinct_bytes(be, tensors_under(be, ops.optimizer_state(optimizer), skip), param_keys)
        device = be.device_of(params[0]) if params else "cpu"
        peak, how = ops.peak_bytes(step, device)
    finally:
        snap.restore()
    return {"peak_delta": int(peak), "how": how, "optimizer_state_bytes": int(state_bytes)}


def largest_transient(be: Backend, named: list[tuple[str, Any]], rows: list[Any], gradients: int) -> int:
    """The most one layer call holds at once beyond the saved activations and the gradients: in its
    backward, for most layers the gradients of its outputs and inputs (alive together; leaf calls
    only), for layers the framework runs a kernel of its own for (recurrent layers) that kernel's
    rule (``training.layer_transient``); in its forward, before any gradient exists, what the
    rule says less ``gradients`` (the estimate counts them all)."""
    ops, layers = be.family("training"), dict(named)
    most = 0
    for r in rows:
        if not r.finished:
            continue
        rule = ops.layer_transient(layers[r.name], r.input_shapes, r.output_bytes) if r.name in layers else None
        if rule is not None:
            most = max(most, rule[1], rule[0] - gradients)
        elif r.leaf:
            most = max(most, r.input_bytes + r.output_bytes)
    return most


def training_estimate(
    be: Backend,
    model: Any,
    named: list[tuple[str, Any]],
    result: Any,
    saved: SavedCounter,
    optimizer: Any,
    args: tuple,
    kwargs: dict,
    loss_fn: Callable[[Any], Any],
    dry: Any = None,
) -> dict[str, Any]:
    """The training-memory estimate and the measured peak of one real step (bytes), as ``Summary.training``.

    ``dry``: the ``DryRun`` of a model whose weights hold no data (``dryrun``): the optimizer's state
    comes from one step on gradients without data, given to the parameters the loss's backward
    reaches, and nothing is measured (``measured`` is None)."""
    from hookkit.observers.summary.recording import tensors

    ops = be.family("training")
    params = ops.group_parameters([*be.parameters(model), *ops.optimizer_parameters(optimizer)])
    param_keys = {k[0] for k in map(ops.storage, params) if k is not None}
    buffers = [b for _, layer in named for _, b in be.forward_state(layer) if b is not None]
    inputs = tensors((args, kwargs), be.is_tensor)
    input_keys = {k[0] for k in map(ops.storage, inputs) if k is not None}
    parts = {
        "params": distinct_bytes(be, params),
        "buffers": distinct_bytes(be, buffers, param_keys),
        "inputs": distinct_bytes(be, inputs, param_keys),
        "gradients": sum(be.numel(p) * be.itemsize(p) for p in params if be.requires_grad(p)),
        # the loss's saves too (``saved.outside``); the inputs are counted once, above
        "saved": sum(n for key, n in saved.sizes.items() if key not in input_keys),
    }
    parts["transient"] = largest_transient(be, named, result.all_rows, parts["gradients"])
    if dry is not None:
        reached = dry.backward(saved.loss)
        parts["optimizer_state"] = optimizer_state_bytes(be, model, [m for _, m in named], optimizer, reached)
        return {
            **parts,
            "estimate": sum(parts.values()),
            "measured": None,
            "measured_how": "not measured: a dry run (weights without data)",
        }
    measured = measure_step(be, model, [m for _, m in named], optimizer, args, kwargs, loss_fn)
    parts["optimizer_state"] = measured["optimizer_state_bytes"]
    estimate = sum(parts.values())
    at_start = parts["params"] + parts["buffers"] + parts["inputs"] + parts["optimizer_state"]
    return {
        **parts,
        "estimate": estimate,
        "measured": at_start + measured["peak_delta"],
        "measured_how": measured["how"],
    }


def optimizer_state_bytes(be: Backend, model: Any, layers: list[Any], optimizer: Any, reached: set[int]) -> int:
    """Bytes of the state ``optimizer`` creates in its steady state, from one step on gradients
    without data (meta tensors: nothing allocated) given to the parameters whose ids are in
    ``reached`` (those the loss's backward reaches: an optimizer skips the others, as in the real
    step); its state and the parameters' ``.grad`` are put back afterwards."""
    ops, meta = be.family("training"), be.family("meta")
    snap = StateSnapshot(be, model, layers, optimizer)
    try:
        for p in snap.params:
            if be.requires_grad(p) and id(p) in reached:
                ops.put_grad(p, meta.empty_like(p))
        optimizer.step()
        skip = {id(p) for p in snap.params}
        param_keys = {k[0] for k in map(ops.storage, snap.params) if k is not None}
        return distinct_bytes(be, tensors_under(be, ops.optimizer_state(optimizer), skip), param_keys)
    finally:
        snap.restore()
