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
            raise TypeError(f"expected a paddle.optimizer.Optimizer; got {type(optimizer).__name__}")
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


OPS = PaddleTraining()
