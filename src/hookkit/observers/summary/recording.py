"""The forward the summary watches: one row per layer call, counted through the backend's counter.

Every layer gets a forward_pre and a forward observer (through the router, removed afterwards,
also when the forward raises). Layers hooks cannot reach (``Backend.opaque_layers``: scripted
modules, ``to_static`` layers) are left alone and shown as static rows. Whatever the mode, the model
comes back as it was: training flags, buffers (BatchNorm statistics...) and hooks.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from hookkit.backends import Backend
from hookkit.core import router
from hookkit.observers.summary.dryrun import has_data
from hookkit.observers.summary.table import Row


def kernel_size(layer: Any) -> list[int] | None:
    k = getattr(layer, "kernel_size", None) or getattr(layer, "_kernel_size", None)
    if isinstance(k, int) and not isinstance(k, bool):
        return [k]
    if isinstance(k, (tuple, list)) and k and all(isinstance(v, int) and not isinstance(v, bool) for v in k):
        return [int(v) for v in k]
    return None


def tensors(obj: Any, is_tensor: Any, depth: int = 0) -> list[Any]:
    """Tensors inside nested tuples/lists/dicts (Hugging Face outputs are dicts), without rebuilding them."""
    if is_tensor(obj):
        return [obj]
    if depth > 4:
        return []
    if isinstance(obj, (tuple, list)):
        return [t for o in obj for t in tensors(o, is_tensor, depth + 1)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in tensors(o, is_tensor, depth + 1)]
    return []


def shapes_and_bytes(be: Backend, ts: list[Any]) -> tuple[list[list[int]], int]:
    """Shapes and bytes of the tensors that have a plain shape (a nested tensor has none: skipped)."""
    found, size = [], 0
    for t in ts:
        try:
            shape = list(be.shape(t))
            size += be.numel(t) * be.itemsize(t)
        except RuntimeError:
            continue
        found.append(shape)
    return found, size


class Recorder:
    """The forward_pre / forward observers: one Row per call, a stack of open calls."""

    def __init__(self, be: Backend, counter: Any, leaf_ids: set[int]):
        self.be, self.counter, self.leaf_ids = be, counter, leaf_ids
        self.rows: list[Row] = []
        self.stack: list[tuple[Row, int]] = []  # (open row, counter total at its pre event)

    def pre(self, ev: router.Event) -> None:
        be = self.be
        in_shapes, in_bytes = shapes_and_bytes(be, tensors((ev.args, ev.kwargs), be.is_tensor))
        row = Row(
            name=ev.name,
            type=be.type_name(ev.layer),
            depth=len(self.stack),
            call=ev.call,
            input_shapes=in_shapes,
            input_bytes=in_bytes,
            kernel_size=kernel_size(ev.layer),
            leaf=id(ev.layer) in self.leaf_ids,
        )
        self.rows.append(row)
        self.counter.before_call(ev.layer, ev.args, ev.kwargs)
        self.stack.append((row, self.counter.total()))

    def post(self, ev: router.Event) -> None:
        self.counter.after_call(ev.layer, ev.args, ev.kwargs, ev.output)
        # find this call's open row; rows above it belong to calls whose exceptions were swallowed
        for i in range(len(self.stack) - 1, -1, -1):
            row, start = self.stack[i]
            if row.name == ev.name and row.call == ev.call:
                del self.stack[i:]
                break
        else:
            return
        self.finish(row, ev.output, self.counter.total() - start)

    def finish(self, row: Row, output: Any, mult_adds: int) -> None:
        row.output_shapes, row.output_bytes = shapes_and_bytes(self.be, tensors(output, self.be.is_tensor))
        row.mult_adds = mult_adds
        row.finished = True


class ModelState:
    """Training flags and buffers of every layer, put back exactly by ``restore()``.

    Buffers are copied (BatchNorm's running statistics and ``num_batches_tracked``, caches a
    forward fills): a train-mode forward updates them in place or rebinds them."""

    def __init__(self, be: Backend, model: Any, layers: list[Any]):
        self.be, self.model = be, model
        self.modes = [(m, be.is_training(m)) for m in layers]
        # buffers without data (meta device) hold no values to change or put back
        self.buffers = [(m, n, b, be.clone(b)) for m in layers for n, b in be.forward_state(m) if b is not None and has_data(be, b)]

    def restore(self) -> None:
        be = self.be
        be.set_training(self.model, self.modes[0][1])  # framework-wide state (Paddle's tracer), then each layer
        for m, training in self.modes:
            m.training = training
        for m, name, buf, saved in self.buffers:
            if getattr(m, name, None) is not buf:
                setattr(m, name, buf)
            before, now = be.to_numpy(saved), be.to_numpy(buf)
            # only what changed is written back: some buffers take no in-place write (inference tensors)
            if before.shape != now.shape or not np.array_equal(before, now, equal_nan=before.dtype.kind in "fc"):
                be.copy_into(buf, saved)


def run_forward(
    model: Any,
    be: Backend,
    hooked: list[tuple[str, Any]],
    leaf_ids: set[int],
    args: tuple,
    kwargs: dict,
    mode: str,
    layers: list[Any],
    saved: Any = None,
    call: Any = None,
) -> tuple[Recorder, Any, BaseException | None]:
    """One forward without gradients, observed on ``hooked``; the model is restored afterwards.

    ``saved``: a ``memory.SavedCounter``: the forward then runs with gradients, as in training, and
    every tensor autograd saves is counted on the rows of the calls running (``saved.after(output)``
    runs last, inside the same hooks: the loss). ``call``: what runs the forward instead of
    ``model(*args, **kwargs)`` (the dry run's fake forward)."""
    counter = be.mult_add_counter()
    rec = Recorder(be, counter, leaf_ids)
    if saved is not None:
        saved.recorder = rec
    state = ModelState(be, model, layers)
    exc: BaseException | None = None
    handles = []
    with router.private_pass(model):  # the features the user has open do not see this forward
        try:
            if hooked:
                handles.append(router.attach(model, hooked, "forward_pre", rec.pre, router.OBSERVER))
                handles.append(router.attach(model, hooked, "forward", rec.post, router.OBSERVER))
            if mode != "same":
                be.set_training(model, mode == "train")
            grads = be.no_grad() if saved is None else be.enable_grad()
            with grads, counter, saved.hooks() if saved is not None else contextlib.nullcontext():
                root = None
                if not hooked:  # the model itself takes no hooks (scripted): one row from its inputs and output
                    root = Row(name="", type=be.type_name(model), depth=0, call=0, leaf=not be.children(model))
                    root.input_shapes = shapes_and_bytes(be, tensors((args, kwargs), be.is_tensor))[0]
                    rec.rows.append(root)
                    rec.stack.append((root, 0))
                output = (call or model)(*args, **kwargs)
                if root is not None:
                    rec.stack.clear()
                    rec.finish(root, output, counter.total())
                if saved is not None:
                    saved.after(output)
        except Exception as e:  # noqa: BLE001 - re-raised by summary() after the partial table
            exc = e
        finally:
            for h in handles:
                h.remove()
            state.restore()
    return rec, counter, exc
