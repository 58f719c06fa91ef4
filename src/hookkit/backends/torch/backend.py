"""PyTorch backend."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from hookkit.backends.base import Backend, drop_hook_entries
from hookkit.backends.torch import compiled, distributed, native_hooks
from hookkit.backends.torch import stats as torch_stats
from hookkit.backends.torch import tree_watch as torch_tree
from hookkit.backends.torch.ops import TorchOps
from hookkit.core.errors import HookkitError


class _JoinedIdentity(torch.autograd.Function):
    """Copies its inputs; its backward hands all their gradients to one callback at once.

    The copies (not views) let a layer modify its input in place, which PyTorch's own
    full backward hook forbids."""

    @staticmethod
    def forward(ctx: Any, on_grads: Callable, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.on_grads = on_grads
        return tuple(t.clone() for t in tensors)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple:
        new = ctx.on_grads(grads)
        return (None, *(grads if new is None else new))


_MODULE = torch.nn.Module
_plain_walk: set[type] = set()  # layer classes whose children() and parameters() are Module's own


def _walks_plainly(kind: type) -> bool:
    """Whether ``kind`` keeps ``Module``'s ``children`` and ``parameters`` (and the named ones they call)."""
    names = ("children", "named_children", "parameters", "named_parameters", "_named_members")
    if all(getattr(kind, n, None) is getattr(_MODULE, n) for n in names):
        _plain_walk.add(kind)
        return True
    return False


def _each_once(values: Any) -> list[Any]:
    """The values that are not None, each once, in order (a module's ``_modules`` or ``_parameters``
    as ``Module.children`` / ``parameters(recurse=False)`` walk them)."""
    out = [v for v in values if v is not None]
    if len(out) > 1 and len(set(map(id, out))) != len(out):
        seen: set[int] = set()
        out = [v for v in out if not (id(v) in seen or seen.add(id(v)))]  # type: ignore[func-returns-value]
    return out


_hookable_types: set[type] = set()  # layer classes known not to be ScriptModules


class TorchBackend(TorchOps, Backend):
    name = "torch"

    def __init__(self) -> None:
        super().__init__()
        compiled.prepare()

    def is_layer(self, obj: Any) -> bool:
        return isinstance(obj, torch.nn.Module)

    def view_base(self, t: Any) -> Any:
        return t._base  # the base's own Python object while it lives (PyTorch keeps one per tensor)

    def is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, torch.Tensor)

    # the hot paths call it per record: the tensor method itself, no Python frame in between
    detach = staticmethod(torch.Tensor.detach)  # type: ignore[assignment]  # called as Backend.detach(t): same call shape

    def layer_class(self) -> type:
        return torch.nn.Module

    def named_layers(self, model: Any) -> Iterator[tuple[str, Any]]:
        return model.named_modules()

    def children(self, layer: Any) -> list[Any]:
        if type(layer) in _plain_walk or _walks_plainly(type(layer)):
            return _each_once(layer._modules.values())  # what Module.children gives, without its generators
        return list(layer.children())

    def parameters(self, layer: Any, recurse: bool = True) -> list[Any]:
        if not recurse:
            if type(layer) in _plain_walk or _walks_plainly(type(layer)):
                return _each_once(layer._parameters.values())  # what Module.parameters(recurse=False) gives
        return list(layer.parameters(recurse=recurse))

    def named_parameters(self, layer: Any, recurse: bool = True) -> list[tuple[str, Any]]:
        return list(layer.named_parameters(recurse=recurse))

    # hook_forward_pre(layer, fn), hook_forward(layer, fn): straight to the placing functions (a
    # context places and removes them each time it opens)
    hook_forward_pre = staticmethod(native_hooks.place_pre)
    hook_forward = staticmethod(native_hooks.place_post)

    def forward_touched(self, layer: Any) -> bool:
        g = torch.nn.modules.module
        hooks = (layer._forward_pre_hooks, layer._forward_hooks, g._global_forward_pre_hooks, g._global_forward_hooks)
        return any(hooks) or "forward" in layer.__dict__

    def drop_forward_hooks(self, layer: Any, match: Callable[[Any], bool]) -> int:
        return drop_hook_entries(
            layer,
            (
                ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs"),
                ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called"),
            ),
            match,
        )

    # Checkpoint recomputes run inside autograd's graph task; a forward does not.
    # (both read at each forward of a hooked root: the C functions are bound once)
    in_backward = staticmethod(lambda _task=torch._C._current_graph_task_id: _task() != -1)

    def in_transform(self, _peek: Callable = torch._C._functorch.peek_interpreter_stack) -> bool:
        return _peek() is not None

    def check_not_compiled(self, model: Any, layers: Sequence[Any]) -> None:
        compiled.forget_stale_code()

    def tree_watch(self, root: Any, named: Sequence[tuple[str, Any]]) -> Callable[[], list[Any] | None]:
        return torch_tree.tree_watch(root, named)

    def check_hookable(self, model: Any, named: Sequence[tuple[str, Any]]) -> None:
        # PyTorch refuses hooks on ScriptModules with a bare RuntimeError; say which layer and why
        hookable = _hookable_types
        if type(model) in hookable and all([type(m) in hookable for _, m in named]):  # the usual case: classes seen before
            return
        script = torch.jit.ScriptModule
        if len(hookable) > 4096:  # classes made in a loop: bounded
            hookable.clear()
        hookable.update(type(m) for m in (model, *[m for _, m in named]) if not isinstance(m, script))
        scripted = [(n, m) for n, m in [("", model), *named] if isinstance(m, script)]
        if scripted:
            name, layer = scripted[0]
            what = "the model" if name == "" else f"layer {name!r}"
            raise HookkitError(
                f"cannot hook {what}: it is a ScriptModule ({type(layer).__name__}, from torch.jit.script or torch.jit.trace) "
                "and PyTorch places no hooks on scripted modules. Hook the module before scripting it, or choose layers "
                "outside it (hookkit.summary shows it as one opaque row)."
            )

    # -- hookkit.summary ------------------------------------------------------------------------
    def mult_add_counter(self) -> Any:
        from hookkit.backends.torch.flops import TorchOpCounter  # lazy: only hookkit.summary counts mult-adds, on its first use

        return TorchOpCounter()

    def opaque_layers(self, model: Any) -> dict[str, str]:
        return {
            name: "scripted: a torch.jit module takes no hooks; its operators count in the row of its nearest hooked parent"
            for name, m in model.named_modules()
            if isinstance(m, torch.jit.ScriptModule)
        }

    def type_name(self, layer: Any) -> str:
        return (
            getattr(layer, "original_name", None) or type(layer).__name__
            if isinstance(layer, torch.jit.ScriptModule)
            else type(layer).__name__
        )

    def has_forward(self, layer: Any) -> bool:
        if isinstance(layer, torch.jit.ScriptModule):
            return True  # scripting needs a forward; its class attribute is a descriptor that must not be read
        return inspect.getattr_static(type(layer), "forward", None) is not torch.nn.Module.forward

    def forward_state(self, layer: Any) -> list[tuple[str, Any]]:
        return list(layer.named_buffers(recurse=False))

    def copy_into(self, dst: Any, src: Any) -> None:
        with torch.no_grad():
            dst.copy_(src)

    def identity_with_backward(self, tensors: Sequence[Any], on_grads: Callable) -> Sequence[Any]:
        return _JoinedIdentity.apply(on_grads, *tensors)

    def when_all_grads(self, tensors: Sequence[Any], fn: Callable[[tuple], object]) -> None:
        def all_in(grads: Sequence[Any]) -> None:
            fn(tuple(grads))

        torch.autograd.graph.register_multi_grad_hook(tuple(tensors), all_in, mode="all")

    def requires_grad(self, t: Any) -> bool:
        return t.requires_grad

    def grad_enabled(self) -> bool:
        return torch.is_grad_enabled()

    def no_grad(self) -> Any:
        return torch.no_grad()

    def enable_grad(self) -> Any:
        return torch.enable_grad()

    def to(self, t: Any, device: Any) -> Any:
        return t.to(device)

    def device_of(self, t: Any) -> str:
        return str(t.device)

    def device_problem(self, device: Any) -> str | None:
        try:
            dev = torch.device(device)
        except (RuntimeError, TypeError) as e:
            return f"not a torch device ({str(e).splitlines()[0]})"
        if dev.type == "cpu" or dev.type == "meta":
            return None
        module = getattr(torch, dev.type, None)  # torch.cuda, torch.mps, torch.xpu...
        is_available = getattr(module, "is_available", None)
        if is_available is None or not is_available():
            return f"torch has no {dev.type} device on this machine (torch.{dev.type}.is_available() is False)"
        count = getattr(module, "device_count", lambda: 1)()
        if dev.index is not None and dev.index >= count:
            return f"this machine has {count} {dev.type} device(s); index {dev.index} does not exist"
        return None

    def itemsize(self, t: Any) -> int:
        return t.element_size()

    def to_numpy(self, t: Any) -> Any:
        t = t.detach()
        if t.dtype == torch.bfloat16:
            t = t.float()
        return t.cpu().numpy()

    def from_numpy(self, array: Any, like: Any = None) -> Any:
        t = torch.from_numpy(array)
        return t.to(like.device) if like is not None else t

    def cast(self, t: Any, dtype: str) -> Any:
        return t.to(getattr(torch, dtype))

    def reduce(self, t: Any, op: str, dims: Sequence[int]) -> Any:
        return t.mean(dim=tuple(dims)) if op == "mean" else t.amax(dim=tuple(dims))

    def stack(self, ts: Sequence[Any]) -> Any:
        return torch.stack(list(ts))

    def histc(self, t: Any, bins: int, lo: float, hi: float) -> Any:
        return torch.histc(t.float(), bins, lo, hi)

    def isfinite_all(self, t: Any) -> Any:
        return torch.isfinite(t).all()

    def l2_norm(self, t: Any) -> Any:
        if t.dtype in (torch.float64, torch.complex64, torch.complex128) or not (t.is_floating_point() or t.is_complex()):
            # vector_norm refuses to narrow float64 and to return a real dtype= for complex input
            return torch.linalg.vector_norm(t if t.is_floating_point() or t.is_complex() else t.float()).float()
        return torch.linalg.vector_norm(t, dtype=torch.float32)  # casts while reducing: no copy

    # The monitoring reductions: torch's ops on every device (torch/stats.py); CPU tensors take the
    # C kernel first (Backend.activation_sums_into, through host_values), where it is built.
    def activation_sums(self, t: Any, near_zero: float) -> Any:
        return torch_stats.activation_sums_device(t, near_zero)

    def activation_sums_hist(self, t: Any, near_zero: float, bins: int, lo: float, hi: float) -> tuple:
        return torch_stats.activation_sums_device(t, near_zero), self.histc(t, bins, lo, hi)

    def param_sums(self, t: Any) -> Any:
        return torch_stats.tensor_sums_device(t)

    def host_values(self, t: Any) -> Any:
        return torch_stats.host_values(t)

    def host_threads(self) -> int:
        return torch.get_num_threads()  # the kernel splits only tensors of over 2**21 values

    def finite_probe(self, t: Any) -> tuple:
        if t.is_complex():
            t = torch.view_as_real(t)  # finite exactly when both parts are
        if not t.is_floating_point() or t.numel() == 0:  # nothing can be NaN there (aminmax refuses empty)
            return ()
        return tuple(torch.aminmax(t.reshape(-1)))  # min and max propagate NaN; +-Inf shows in them

    def numel(self, t: Any) -> int:
        return t.numel()

    # Data parallelism (distributed.py): wrappers, ranks, rows gathered at read time
    unwrap = staticmethod(distributed.unwrap)
    world = staticmethod(distributed.world)
    all_gather_rows = staticmethod(distributed.all_gather_rows)
    barrier = staticmethod(distributed.barrier)
    launch = staticmethod(distributed.launch)
    after_backward = staticmethod(distributed.after_backward)
    is_sharded = staticmethod(distributed.is_sharded)
    grad_of = staticmethod(distributed.grad_of)
