"""Paddle's ``training`` family (see ``hookkit.backends.families.training``).

Paddle's optimizers have no step hook: ``on_step`` replaces ``step`` and ``minimize`` on that one
optimizer instance (an instance attribute over the class's method) with a wrapper that calls the
method and then the registered functions; when the last function is removed the instance
attributes are deleted, so the optimizer is exactly as before. A call of ``step`` inside
``minimize`` fires once.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import paddle

from hookkit.backends.families.training import Training
from hookkit.core.validate import ArgumentTypeError, fail

_WRAPPED = ("step", "minimize")


class _StepHooks:
    """The functions called after one optimizer instance's steps, and the wrappers serving them."""

    def __init__(self, optimizer: Any):
        self.fns: dict[int, Callable[[], None]] = {}
        self.depth = 0
        self.next_id = 0
        ref = weakref.ref(optimizer)
        for name in _WRAPPED:
            method = getattr(type(optimizer), name, None)
            if method is not None:
                setattr(optimizer, name, self._wrap(method, ref))

    def _wrap(self, method: Callable, ref: Any) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.depth += 1
            try:
                out = method(ref(), *args, **kwargs)
            finally:
                self.depth -= 1
            if self.depth == 0:
                for fn in list(self.fns.values()):
                    fn()
            return out

        wrapper.__hookkit_step__ = True  # type: ignore[attr-defined]
        return wrapper


_hooks: weakref.WeakKeyDictionary[Any, _StepHooks] = weakref.WeakKeyDictionary()


class _Handle:
    def __init__(self, optimizer: Any, key: int):
        self._opt, self._key = weakref.ref(optimizer), key

    def remove(self) -> None:
        opt = self._opt()
        hooks = None if opt is None else _hooks.get(opt)
        if hooks is None:
            return
        hooks.fns.pop(self._key, None)
        if not hooks.fns:
            del _hooks[opt]
            for name in _WRAPPED:
                if getattr(opt.__dict__.get(name), "__hookkit_step__", False):
                    del opt.__dict__[name]


_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


def rnn_transient(layer: Any, input_shapes: Sequence[Sequence[int]], output_bytes: int) -> tuple[int, int] | None:
    """The transient of one call of ``paddle.nn.LSTM`` / ``GRU`` / ``SimpleRNN`` on the CPU through
    the fused ``rnn`` kernel (see ``PaddleTraining.layer_transient``); None otherwise."""
    gates = _GATES.get(str(getattr(layer, "mode", ""))) if isinstance(layer, paddle.nn.layer.rnn.RNNBase) else None
    params = layer.parameters() if gates and getattr(layer, "could_use_cudnn", False) else []
    if gates is None or not params or not params[0].place.is_cpu_place() or not input_shapes or len(input_shapes[0]) != 3:
        return None
    x = list(input_shapes[0])
    steps, batch = (x[0], x[1]) if layer.time_major else (x[1], x[0])
    h, dirs, layers = layer.hidden_size, layer.num_directions, layer.num_layers
    states = layer.state_components
    size = params[0].element_size()
    between = (1 if layers == 1 else min(layers + 1, 4)) + 2 * (dirs - 1)  # buffers of D.T.N.H
    kernel = (
        dirs * gates * steps * batch * h  # one layer's gate gradients, both directions
        + steps * batch * x[2]  # the input's gradient
        + between * dirs * steps * batch * h  # the output gradient's copy and the gradients between layers
        + (states * layers * dirs + states + 2) * batch * h  # the states' gradients
        + (0 if layer.time_major else dirs * steps * batch * h)  # the output gradient, made time-major
    )
    return 0, output_bytes + size * kernel


class PaddleTraining(Training):
    @contextlib.contextmanager
    def saving(self, on_save: Callable[[Any], None]) -> Iterator[None]:
        def pack(t: Any) -> Any:
            on_save(t)
            return t

        with paddle.autograd.saved_tensors_hooks(pack, lambda t: t):
            yield

    def storage(self, t: Any) -> tuple[int, int] | None:
        try:
            return int(t.data_ptr()) - int(t._offset()), int(t._holder_size())
        except (RuntimeError, ValueError, AttributeError, TypeError):
            return None

    def on_step(self, optimizer: Any, fn: Callable[[], None]) -> Any:
        if not isinstance(optimizer, paddle.optimizer.Optimizer):
            fail("WeightStats", "optimizer", "a paddle.optimizer.Optimizer", optimizer, kind=ArgumentTypeError)
        hooks = _hooks.get(optimizer)
        if hooks is None:
            hooks = _hooks[optimizer] = _StepHooks(optimizer)
        key = hooks.next_id
        hooks.next_id += 1
        hooks.fns[key] = fn
        return _Handle(optimizer, key)

    def optimizer_parameters(self, optimizer: Any) -> list[Any]:
        found: list[Any] = []
        for item in optimizer._parameter_list or []:
            found += item["params"] if isinstance(item, dict) else [item]
        return self.group_parameters(found)

    def optimizer_state(self, optimizer: Any) -> dict[str, Any]:
        return vars(optimizer)

    def take_grad(self, p: Any) -> Any:
        g = p.grad
        saved = None if g is None else g.clone()
        p.clear_gradient(False)
        return saved

    def put_grad(self, p: Any, grad: Any) -> None:
        if grad is None:
            p.clear_gradient(False)
        else:
            p._copy_gradient_from(grad)

    def backward(self, loss: Any) -> None:
        loss.backward()

    def peak_bytes(self, fn: Callable[[], None], device: str) -> tuple[int, str]:
        if device.startswith("gpu"):
            idx = int(device.partition(":")[2] or 0)
            paddle.device.cuda.synchronize(idx)
            paddle.device.cuda.reset_max_memory_allocated(idx)
            start = paddle.device.cuda.memory_allocated(idx)
            fn()
            paddle.device.cuda.synchronize(idx)
            return paddle.device.cuda.max_memory_allocated(idx) - start, "paddle.device.cuda.max_memory_allocated"
        from paddle.base import core

        start = core.host_memory_stat_current_value("Allocated", 0)
        core.host_memory_stat_reset_peak_value("Allocated", 0)
        fn()
        return core.host_memory_stat_peak_value("Allocated", 0) - start, "Paddle's host allocator statistics (peak of 'Allocated')"

    def weight_rows(self, ws: Sequence[Any], prevs: Sequence[Any]) -> Any:
        rows = []
        for w, prev in zip(ws, prevs):
            wf = w.detach().astype("float32")
            nan = paddle.full([], float("nan"), dtype="float32")
            if wf.size == 0:  # an empty shard: neutral for the merge
                gone = nan if prev is None else paddle.zeros([])
                rows.append(paddle.stack([nan, paddle.zeros([]), paddle.zeros([]), gone, gone]))
                continue
            mean = wf.mean()
            dev = wf - mean
            peak = paddle.maximum(-wf.min(), wf.max())
            if prev is None:
                rows.append(paddle.stack([mean, (dev * dev).sum(), peak, nan, nan]))
            else:
                pf = prev.astype("float32")
                d = wf - pf
                rows.append(paddle.stack([mean, (dev * dev).sum(), peak, (d * d).sum(), (pf * pf).sum()]))
        return paddle.stack(rows)

    def update_norms(self, ws: Sequence[Any], prevs: Sequence[Any]) -> Any:
        rows = []
        for w, prev in zip(ws, prevs):
            wf, pf = w.detach().astype("float32"), prev.astype("float32")
            d = wf - pf
            rows.append(paddle.stack([(d * d).sum(), (pf * pf).sum()]))
        return paddle.stack(rows)

    def local(self, t: Any) -> Any:
        return t

    def copy_all(self, dsts: Sequence[Any], srcs: Sequence[Any]) -> None:
        with paddle.no_grad():
            for d, s in zip(dsts, srcs):
                paddle.assign(s.detach(), output=d)

    def layer_transient(self, layer: Any, input_shapes: Sequence[Sequence[int]], output_bytes: int) -> tuple[int, int] | None:
        """Recurrent layers on the CPU (``paddle.nn.LSTM``, ``GRU``, ``SimpleRNN`` through the fused
        ``rnn`` kernel; T steps, batch N, input size I, hidden H, G gates: LSTM 4, GRU 3, RNN 1;
        D directions, L layers, S states: LSTM 2, else 1; item size s), measured with Paddle's host
        allocator statistics: one kernel runs the backward of every layer and allocates, beyond the
        weights' gradients, s x [D.G.T.N.H (one layer's gate gradients) + T.N.I (the input's
        gradient) + k.D.T.N.H (the output gradient's copy and the gradients passed between layers:
        k = 1 for one layer, min(L + 1, 4) for more, plus 2 when bidirectional) + (S.L.D + S + 2).N.H
        (the states' gradients) + D.T.N.H where the input is batch-major (the output gradient,
        transposed to time-major)]; the backward's transient is the call's output gradients plus
        that (the forward's: 0, what it keeps is saved).
        None elsewhere (other layers, the step-by-step path, GPU)."""
        return rnn_transient(layer, input_shapes, output_bytes)

    def is_optimizer(self, obj: Any) -> bool:
        return isinstance(obj, paddle.optimizer.Optimizer)


OPS = PaddleTraining()
