"""PaddlePaddle backend. Paddle has no layer backward hook: hookkit builds one from tensor hooks."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import paddle

from hookkit.backends.base import Backend, drop_hook_entries
from hookkit.backends.paddle import distributed
from hookkit.backends.paddle.ops import PaddleOps
from hookkit.core.errors import HookkitError


class _JoinedIdentity(paddle.autograd.PyLayer):
    """Copies its inputs; its backward hands all their gradients to one callback at once."""

    @staticmethod
    def forward(ctx: Any, *tensors: Any, on_grads: Callable | None = None) -> Any:
        ctx.on_grads = on_grads
        out = tuple(t.clone() for t in tensors)
        return out if len(out) > 1 else out[0]

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        new = ctx.on_grads(grads)
        out = tuple(grads if new is None else new)
        return out if len(out) > 1 else out[0]


class PaddleBackend(PaddleOps, Backend):
    name = "paddle"

    def is_layer(self, obj: Any) -> bool:
        return isinstance(obj, paddle.nn.Layer)

    def is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, paddle.Tensor)

    # the hot paths call it per record: the tensor method itself, no Python frame in between
    detach = staticmethod(paddle.Tensor.detach)

    def layer_class(self) -> type:
        return paddle.nn.Layer

    def named_layers(self, model: Any) -> Iterator[tuple[str, Any]]:
        return model.named_sublayers(include_self=True)

    def children(self, layer: Any) -> list[Any]:
        return list(layer.children())

    def parameters(self, layer: Any, recurse: bool = True) -> list[Any]:
        return list(layer.parameters(include_sublayers=recurse))

    def named_parameters(self, layer: Any, recurse: bool = True) -> list[tuple[str, Any]]:
        return list(layer.named_parameters(include_sublayers=recurse))

    def hook_forward_pre(self, layer: Any, fn: Callable) -> Any:
        return layer.register_forward_pre_hook(fn, with_kwargs=True)

    def hook_forward(self, layer: Any, fn: Callable) -> Any:
        return layer.register_forward_post_hook(fn, with_kwargs=True)

    def forward_touched(self, layer: Any) -> bool:
        return bool(layer._forward_pre_hooks or layer._forward_post_hooks) or "forward" in layer.__dict__

    def drop_forward_hooks(self, layer: Any, match: Callable[[Any], bool]) -> int:
        groups = (
            ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs_flag"),
            ("_forward_post_hooks", "_forward_post_hooks_with_kwargs_flag", "_forward_post_hooks_always_called"),
        )
        return drop_hook_entries(layer, groups, match)

    # True while Paddle's autograd engine runs: recompute (fleet.utils.recompute) re-runs forwards then
    in_backward = staticmethod(paddle.base.core.eager._is_run_in_backward)

    def check_hookable(self, model: Any, named: Sequence[tuple[str, Any]]) -> None:
        from paddle.jit.dy2static.program_translator import StaticFunction

        static = [n for n, m in model.named_sublayers(include_self=True) if isinstance(getattr(m, "forward", None), StaticFunction)]
        if not static:
            return
        for name, _ in named:
            for s in static:
                if s == "" or name == s or name.startswith(s + "."):
                    where = "the model" if s == "" else f"layer {s!r}"
                    raise HookkitError(
                        f"cannot hook layer {name!r}: {where} was converted with paddle.jit.to_static, so its layers' hooks "
                        "would run once while tracing and never on later calls. Hook the model before converting it, or run "
                        "it in dygraph mode (paddle.jit.enable_to_static(False))."
                    )

    # -- hookkit.summary ------------------------------------------------------------------------
    def mult_add_counter(self) -> Any:
        from hookkit.backends.paddle.flops import PaddleRuleCounter  # lazy: only hookkit.summary counts mult-adds, on its first use

        return PaddleRuleCounter()

    def opaque_layers(self, model: Any) -> dict[str, str]:
        from paddle.jit.dy2static.program_translator import StaticFunction

        return {
            name: "to_static: converted with paddle.jit.to_static, its sublayers' calls are not seen (their mult-adds are not counted)"
            for name, m in model.named_sublayers(include_self=True)
            if isinstance(getattr(m, "forward", None), StaticFunction)
        }

    def has_forward(self, layer: Any) -> bool:
        return getattr(type(layer), "forward", None) is not paddle.nn.Layer.forward  # an operation site has none

    def forward_state(self, layer: Any) -> list[tuple[str, Any]]:
        # BatchNorm's running statistics are non-trainable parameters here, not buffers; RNN
        # layers hold an uninitialized dropout-state buffer: nothing to read or restore
        found = list(layer.named_buffers(include_sublayers=False))
        found += [(n, p) for n, p in layer.named_parameters(include_sublayers=False) if p.stop_gradient]
        return [(n, t) for n, t in found if t is not None and t._is_initialized()]

    def copy_into(self, dst: Any, src: Any) -> None:
        with paddle.no_grad():
            paddle.assign(src, output=dst)

    def identity_with_backward(self, tensors: Sequence[Any], on_grads: Callable) -> Sequence[Any]:
        out = _JoinedIdentity.apply(*tensors, on_grads=on_grads)
        return out if isinstance(out, (tuple, list)) else (out,)

    def when_all_grads(self, tensors: Sequence[Any], fn: Callable[[tuple], object]) -> None:
        # Paddle has no multi-tensor gradient hook: count per-tensor hooks. A tensor that takes no
        # part in the loss never reports, so fn then does not run (documented in on_backward).
        grads: list[Any] = [None] * len(tensors)
        left = [len(tensors)]

        def make(i: int) -> Callable:
            def hook(g: Any) -> None:
                grads[i] = g
                left[0] -= 1
                if left[0] == 0:
                    fn(tuple(grads))

            return hook

        for i, t in enumerate(tensors):
            t.register_hook(make(i))

    def requires_grad(self, t: Any) -> bool:
        return not t.stop_gradient

    def grad_enabled(self) -> bool:
        return paddle.is_grad_enabled()

    def no_grad(self) -> Any:
        return paddle.no_grad()

    def enable_grad(self) -> Any:
        return paddle.set_grad_enabled(True)

    def device_problem(self, device: Any) -> str | None:
        if hasattr(device, "is_cpu_place"):  # a Place object: paddle.CPUPlace(), paddle.CUDAPlace(0)
            device = "cpu" if device.is_cpu_place() else str(device).removeprefix("Place(").removesuffix(")")
        if not isinstance(device, str) or not device:
            return "not a Paddle device name ('cpu', 'gpu', 'gpu:0'...)"
        kind, _, index = device.partition(":")
        kind = {"cuda": "gpu"}.get(kind, kind)
        if kind == "cpu":
            return None
        if index and not index.isdigit():
            return f"not a Paddle device name ({device!r}: the index must be a number)"
        if kind == "gpu":
            count = paddle.device.cuda.device_count() if paddle.device.is_compiled_with_cuda() else 0
        else:
            count = len(paddle.device.get_available_custom_device()) if kind in paddle.device.get_all_custom_device_type() else 0
        if count == 0:
            return f"Paddle has no {kind} device on this machine"
        if index and int(index) >= count:
            return f"this machine has {count} {kind} device(s); index {index} does not exist"
        return None

    def to(self, t: Any, device: Any) -> Any:
        if hasattr(device, "is_cpu_place"):  # a Place object
            device = "cpu" if device.is_cpu_place() else str(device).removeprefix("Place(").removesuffix(")")
        device = str(device)
        if device == "cpu":
            return t.cpu()
        return t.to(device)

    def device_of(self, t: Any) -> str:
        place = t.place
        if place.is_cpu_place():
            return "cpu"
        if place.is_gpu_place():
            return f"gpu:{place.gpu_device_id()}"
        return str(place)

    def itemsize(self, t: Any) -> int:
        return t.element_size()

    def to_numpy(self, t: Any) -> Any:
        t = t.detach()
        if t.dtype == paddle.bfloat16:
            t = t.astype("float32")
        return t.numpy()

    def from_numpy(self, array: Any, like: Any = None) -> Any:
        t = paddle.to_tensor(array)
        return self.to(t, self.device_of(like)) if like is not None else t

    def cast(self, t: Any, dtype: str) -> Any:
        return t if self.dtype_name(t) == dtype else t.astype(dtype)  # as torch's ``.to``: no copy when it has it

    def reduce(self, t: Any, op: str, dims: Sequence[int]) -> Any:
        return t.mean(axis=list(dims)) if op == "mean" else t.amax(axis=list(dims))

    def stack(self, ts: Sequence[Any]) -> Any:
        ts = list(ts)
        if len({t.dtype for t in ts}) > 1:  # Paddle does not promote (torch does): float64 holds them all
            ts = [t.astype("float64") for t in ts]
        return paddle.stack(ts)

    def histc(self, t: Any, bins: int, lo: float, hi: float) -> Any:
        return paddle.histogram(t.astype("float32"), bins=bins, min=lo, max=hi).astype("float32")

    def isfinite_all(self, t: Any) -> Any:
        return paddle.isfinite(t).all()

    def l2_norm(self, t: Any) -> Any:
        if t.is_complex():
            t = t.abs()  # astype would drop the imaginary part
        return paddle.linalg.norm(t.astype("float32"))

    def compute_dtype(self, t: Any) -> str | None:
        if t.dtype in (paddle.float16, paddle.bfloat16) and t.place.is_cpu_place():
            return "float32"  # Paddle registers no CPU add/multiply/min/where... for half types
        return None

    # The monitoring reductions: Paddle's ops on every device; CPU tensors take the C kernel first
    # (Backend.activation_sums_into) through dlpack, no copy: one read instead of Paddle's passes
    # and temporaries, and no paddle.to_tensor per call (BENCHMARKS.md).
    def host_values(self, t: Any) -> np.ndarray | None:
        if not t.place.is_cpu_place() or t.is_complex():
            return None
        if t.dtype != paddle.float32:
            t = t.astype("float32")
        try:
            return np.from_dlpack(t.detach())
        except (RuntimeError, TypeError, ValueError, BufferError):  # no readable storage: Paddle's ops
            return None

    def activation_sums(self, t: Any, near_zero: float) -> Any:
        t = t.astype("float32")
        mean = t.mean()
        return paddle.stack([mean, (t - mean).square().sum(), (t <= near_zero).astype("float32").sum()])

    def param_sums(self, t: Any) -> Any:
        t = t.astype("float32")
        if t.size == 0:  # the sums of nothing; no max |x| (min/max refuse an empty tensor)
            return paddle.to_tensor([0.0, 0.0, float("nan")], dtype="float32", place=t.place)
        return paddle.stack([t.sum(), (t * t).sum().sqrt(), paddle.maximum(-t.min(), t.max())])

    def finite_probe(self, t: Any) -> tuple:
        if t.is_complex():
            t = paddle.as_real(t)  # finite exactly when both parts are
        if not t.is_floating_point() or t.size == 0:  # nothing can be NaN there (min refuses empty)
            return ()
        if self.compute_dtype(t) is not None:
            t = t.astype("float32")  # exact: half values and NaN/Inf survive the cast
        return (t.min(), t.max())  # both propagate NaN; +-Inf shows in them

    # Data parallelism (distributed.py): wrappers, ranks, rows gathered at read time
    unwrap = staticmethod(distributed.unwrap)
    world = staticmethod(distributed.world)
    all_gather_rows = staticmethod(distributed.all_gather_rows)
    barrier = staticmethod(distributed.barrier)
    launch = staticmethod(distributed.launch)
    after_backward = staticmethod(distributed.after_backward)
