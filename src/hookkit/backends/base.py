"""The Backend interface: everything hookkit needs from a framework. Nothing outside
``hookkit.backends`` imports a framework or asks which one it runs on; it calls these methods.

Required for the core (``select``, the router, ``capture``, ``on_forward``): identity, layer tree,
the two forward hooks and the tensor basics (``requires_grad``, ``grad_enabled``, ``no_grad``,
``to_numpy``, ``from_numpy``...). Required for the statistics (``ActivationStats``,
``watch_nonfinite``): ``stack``, ``histc`` and the reductions under "monitoring".

Optional, each raising ``NotImplementedError`` (or defaulting to "nothing to do") until a backend
provides it, so that only the feature needing it fails: gradients (``hook_tensor``,
``identity_with_backward``, ``when_all_grads``, ``grads_of``...: on_grad, on_backward, gradcam,
GradientStats, clip_grad), the intervention ops (dropout family, masks, pruning), the summary's
helpers (a mult-add counter, opaque layers), the wrapper class and the demo's training pieces,
data-parallel training (defaults: one process). A backend for a framework without autograd
implements the required part only: tests/test_seam.py registers such a numpy "framework" and runs
capture, on_forward and ActivationStats on it.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from hookkit.backends import host_stats as _host


class Backend:
    """One framework's primitives. Subclasses: ``TorchBackend``, ``PaddleBackend``; a new one is
    registered with ``hookkit.backends.register_backend`` (its ``name`` is the registered one)."""

    name: str = ""

    # -- op families: optional groups of ops a workflow needs (see hookkit.backends.families) ---
    def family(self, name: str) -> Any:
        """The op family ``name`` of this framework: the ``OPS`` object of the module
        ``<this backend's package>.<name>`` (``hookkit.backends.torch.tensor_math``), imported on
        first use. A workflow that needs ops beyond this interface asks for its family, so a backend
        without it fails only there, with a message naming the family and the framework.

        >>> backend_for(model).family("tensor_math").interpolate(t, (8, 8), "bilinear")   # doctest: +SKIP
        """
        cache = self.__dict__.setdefault("_families", {})
        ops = cache.get(name)
        if ops is None:
            package = type(self).__module__.rpartition(".")[0]
            try:
                module = importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{package}.{name}":
                    raise
                raise NotImplementedError(
                    f"the {self.name or type(self).__name__} backend has no {name!r} op family "
                    f"(a module {package}.{name} with an OPS object): the feature that asked for it needs it"
                ) from None
            ops = cache[name] = module.OPS
        return ops

    # -- identity -------------------------------------------------------------------------------
    def owns(self, obj: Any) -> bool:
        return self.is_layer(obj) or self.is_tensor(obj)

    def is_layer(self, obj: Any) -> bool:
        raise NotImplementedError

    def is_tensor(self, obj: Any) -> bool:
        raise NotImplementedError

    # -- layer tree -----------------------------------------------------------------------------
    def named_layers(self, model: Any) -> Iterator[tuple[str, Any]]:
        """(dotted name, layer) for the model and every sublayer, the model itself first as ''."""
        raise NotImplementedError

    def children(self, layer: Any) -> list[Any]:
        raise NotImplementedError

    def parameters(self, layer: Any, recurse: bool = True) -> list[Any]:
        raise NotImplementedError

    def named_parameters(self, layer: Any, recurse: bool = True) -> list[tuple[str, Any]]:
        raise NotImplementedError

    def is_training(self, layer: Any) -> bool:
        return bool(layer.training)

    def set_training(self, layer: Any, training: bool) -> None:
        layer.train() if training else layer.eval()

    # -- what hookkit.summary needs -------------------------------------------------------------
    def mult_add_counter(self) -> Any:
        """A fresh ``hookkit.backends.counting.MultAddCounter`` for one forward; this one counts nothing."""
        from hookkit.backends.counting import MultAddCounter

        return MultAddCounter()

    def opaque_layers(self, model: Any) -> dict[str, str]:
        """Layers (by name) whose calls hooks cannot see (scripted, compiled), each with a reason
        that starts with a short tag and a colon ("scripted: ..."); their sublayers are unreachable too."""
        return {}

    def type_name(self, layer: Any) -> str:
        """The layer's class name as users wrote it (a scripted ``Linear`` is still "Linear")."""
        return type(layer).__name__

    def has_forward(self, layer: Any) -> bool:
        """False for pure containers (a list or dict of layers) that define no forward of their own."""
        return True

    def forward_state(self, layer: Any) -> list[tuple[str, Any]]:
        """The layer's own (not its sublayers') tensors a forward may update in place: buffers
        (running statistics, pruning masks, caches), by attribute name."""
        return []

    def copy_into(self, dst: Any, src: Any) -> None:
        """Copy ``src``'s values into tensor ``dst`` in place, outside autograd (buffers)."""
        raise NotImplementedError

    # -- native hooks ---------------------------------------------------------------------------
    def hook_forward_pre(self, layer: Any, fn: Callable) -> Any:
        """Native pre-hook ``fn(layer, args, kwargs) -> None | (args, kwargs)``; returns its handle."""
        raise NotImplementedError

    def hook_forward(self, layer: Any, fn: Callable) -> Any:
        """Native post-hook ``fn(layer, args, kwargs, output) -> None | output``; returns its handle."""
        raise NotImplementedError

    def drop_forward_hooks(self, layer: Any, match: Callable[[Any], bool]) -> int:
        """Remove the layer's native forward pre- and post-hooks whose function ``match(fn)``
        accepts, without their handles (the inert hooks a copy or an unpickled model carries);
        returns how many were removed."""
        return 0

    def check_hookable(self, model: Any, named: Sequence[tuple[str, Any]]) -> None:
        """Raise if hooks on these layers could not run on every call (compiled graphs)."""

    def check_not_compiled(self, model: Any, layers: Sequence[Any]) -> None:
        """Make hooks placed now take effect in code the framework already compiled for ``model``
        (drop those compiled entries), or raise a clear error where that cannot be done."""

    def in_backward(self) -> bool:
        """True while autograd runs a backward pass in this thread: a layer called then is being
        recomputed by activation checkpointing. Called at every hooked call: keep it cheap."""
        return False

    def in_transform(self) -> bool:
        """True inside a functional transform (torch.func grad/vmap...), whose wrapped tensors
        observers must not keep. Called once per root forward."""
        return False

    def hook_tensor(self, tensor: Any, fn: Callable) -> Any:
        """Native gradient hook ``fn(grad) -> None | grad``; returns its handle."""
        return tensor.register_hook(fn)

    def identity_with_backward(self, tensors: Sequence[Any], on_grads: Callable) -> Sequence[Any]:
        """Copies of ``tensors`` joined in one autograd node whose backward calls
        ``on_grads(grads) -> None | grads`` with all their gradients at once."""
        raise NotImplementedError

    def when_all_grads(self, tensors: Sequence[Any], fn: Callable[[tuple], object]) -> None:
        """Call ``fn(grads)`` once, after every tensor's gradient is computed (None if unused)."""
        raise NotImplementedError

    # -- tensors --------------------------------------------------------------------------------
    def requires_grad(self, t: Any) -> bool:
        raise NotImplementedError

    def grad_enabled(self) -> bool:
        raise NotImplementedError

    def no_grad(self) -> Any:
        raise NotImplementedError

    def enable_grad(self) -> Any:
        """A context manager in which autograd records, also inside the user's ``no_grad`` block
        (the analyses that need a gradient enable it for their own pass, as captum does)."""
        raise NotImplementedError("enable_grad: analyses that take gradients (cam, attribute) need it")

    def detach(self, t: Any) -> Any:
        return t.detach()

    def clone(self, t: Any) -> Any:
        return t.clone()

    def to(self, t: Any, device: Any) -> Any:
        raise NotImplementedError

    def device_of(self, t: Any) -> str:
        raise NotImplementedError

    def shape(self, t: Any) -> tuple[int, ...]:
        return tuple(int(s) for s in t.shape)

    def numel(self, t: Any) -> int:
        n = 1
        for s in t.shape:
            n *= int(s)
        return n

    def dtype_name(self, t: Any) -> str:
        """The dtype's plain name: "float32", "bfloat16", "int64"..."""
        return str(t.dtype).rpartition(".")[2]

    def is_empty(self, t: Any) -> bool:
        """True when ``t`` holds no value (a zero-size batch); cheaper than ``numel(t) == 0`` on Paddle."""
        return 0 in t.shape

    def dtype_kind(self, t: Any) -> str:
        """ "float", "complex", "int" or "bool": what a feature can compute on ``t``."""
        name = self.dtype_name(t)
        if name == "bool":
            return "bool"
        if name.startswith("complex"):
            return "complex"
        if "float" in name:  # float16/32/64, bfloat16, float8_*
            return "float"
        return "int"

    def device_problem(self, device: Any) -> str | None:
        """Why tensors cannot be moved to ``device`` on this machine ("no such device type", "CUDA is
        not available"...), or None when they can. Checked at the call of features taking ``to=``."""
        return None

    def compute_dtype(self, t: Any) -> str | None:
        """The dtype to compute in where the framework has no kernels for ``t``'s own on its device
        (Paddle's CPU has no float16/bfloat16 add, multiply, min...); None: ``t``'s own dtype."""
        return None

    def itemsize(self, t: Any) -> int:
        raise NotImplementedError

    def to_numpy(self, t: Any) -> Any:
        raise NotImplementedError

    def from_numpy(self, array: Any, like: Any = None) -> Any:
        raise NotImplementedError

    def cast(self, t: Any, dtype: str) -> Any:
        """``t`` converted to the dtype named ``dtype`` ("float16", "int64"...), on its device."""
        raise NotImplementedError

    def reduce(self, t: Any, op: str, dims: Sequence[int]) -> Any:
        """``t`` reduced over ``dims`` (dropped) with ``op``: "mean" or "max"; on its device."""
        raise NotImplementedError

    def tensor_name(self, t: Any) -> str:
        return getattr(t, "name", "") or ""

    # -- maths the statistics need, computed on the tensor's device -----------------------------
    def stack(self, ts: Sequence[Any]) -> Any:
        raise NotImplementedError

    def histc(self, t: Any, bins: int, lo: float, hi: float) -> Any:
        raise NotImplementedError

    def isfinite_all(self, t: Any) -> Any:
        """A 0-d boolean tensor on the device: True when every value of ``t`` is finite."""
        raise NotImplementedError

    # -- monitoring: a few fused reductions per call; the result stays on the device ------------
    # Each returns one row, a 1-d tensor (stacked later, in bulk); the reader finishes the formulas
    # on the host, knowing the element count n: std = sqrt(m2 / (n - 1)), fraction = count / n...
    def l2_norm(self, t: Any) -> Any:
        """``||t||`` as a 0-d float32 tensor on ``t``'s device (no host read)."""
        raise NotImplementedError

    def activation_sums(self, t: Any, near_zero: float) -> Any:
        """One row ``[mean, sum of squared deviations from the mean, count of values <= near_zero]``
        of ``t`` as floats: the reader finishes fastai's formulas (std = sqrt(m2 / (n - 1)))."""
        raise NotImplementedError

    def activation_sums_hist(self, t: Any, near_zero: float, bins: int, lo: float, hi: float) -> tuple:
        """``(activation_sums(t, near_zero), histc(t, bins, lo, hi))``, in one pass where it can."""
        return self.activation_sums(t, near_zero), self.histc(t, bins, lo, hi)

    def grad_sums(self, t: Any) -> Any:
        """One row ``[sum, ||t||, max |t|]`` of a gradient: ``param_sums`` (gradients have
        |mean| << std, so mean and std follow from the sum and the norm when read)."""
        return self.param_sums(t)

    def param_sums(self, t: Any) -> Any:
        """One row ``[sum, ||t||, max |t|]`` of ``t`` (NaN when any value is): mergeable across tensors."""
        raise NotImplementedError

    def finite_probe(self, t: Any) -> tuple:
        """0-d tensors that are all finite exactly when every value of ``t`` is (min and max)."""
        raise NotImplementedError

    # -- the CPU route of the statistics (backends/host_stats.py: the C kernel) ---------------------
    # Where ``host_values`` gives an array, the kernel writes the record straight into a row of a
    # ``host_stats.HostRows`` block (no tensor per call); otherwise the caller takes the framework
    # route above. A backend provides ``host_values`` (and ``host_threads``); the rest is shared.
    host_routes = True  # tests switch the CPU route off to run the framework route on the CPU

    def host_values(self, t: Any) -> Any:
        """A float32 numpy array of ``t``'s values (a view where it can) when ``t`` lives in host
        memory and can be read there; None otherwise (device tensors, tensors without storage)."""
        return None

    def host_threads(self) -> int:
        """Threads the kernel may split one large tensor across (the framework's intra-op threads)."""
        return 1

    def activation_sums_into(self, rows: Any, t: Any, near_zero: float, step: int, call: int, hist: tuple | None = None) -> bool:
        """Write ``[step, call, n, mean, m2, count <= near_zero]`` of ``t`` (and its histc counts over
        ``hist=(lo, hi)``) into the next row of ``rows`` when the CPU route serves ``t``; False if not."""
        values = self.host_values(t) if _host.kernels is not None and self.host_routes else None
        if values is None:
            return False
        _host.write_activation(rows, values, near_zero, step, call, hist, self.host_threads() if values.size > _host.SPLIT else 1)
        return True

    def tensor_sums_into(self, rows: Any, t: Any, step: int, call: int) -> bool:
        """Write ``[step, call, n, sum, ||t||, max |t|]`` into the next row of ``rows`` when the
        CPU route serves ``t``; False if not (then ``grad_sums`` / ``param_sums``)."""
        values = self.host_values(t) if _host.kernels is not None and self.host_routes else None
        if values is None:
            return False
        _host.write_tensor(rows, values, step, call, self.host_threads() if values.size > _host.SPLIT else 1)
        return True

    # -- gradients: optional (on_grad, gradcam, clip_grad, prune, GradientStats) ---------------------
    #: whether an exception raised in a gradient hook reaches the caller of backward unchanged
    #: (Paddle turns it into an OSError: consumers then keep it and raise it after backward)
    raises_through_backward: bool = True
    #: how the framework spells "this tensor takes no gradient" and the call that changes it (messages)
    grad_off_text: str = "requires_grad=False"
    grad_on_text: str = "tensor.requires_grad_()"

    def set_requires_grad(self, t: Any) -> Any:
        """Make ``t`` (a leaf) record gradients, in place; returns it."""
        raise NotImplementedError

    def grads_of(self, output: Any, inputs: Sequence[Any], allow_unused: bool = False) -> tuple:
        """Gradients of the scalar ``output`` w.r.t. ``inputs``, leaving every ``.grad`` untouched
        (``allow_unused``: None for an input the output does not depend on, instead of an error)."""
        raise NotImplementedError

    # -- tensor ops of the interventions: optional ---------------------------------------------------
    def clamp(self, t: Any, lo: float | None = None, hi: float | None = None) -> Any:
        """``t`` with values below ``lo`` / above ``hi`` replaced by them (None: no bound)."""
        raise NotImplementedError

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def zeros_like(self, t: Any) -> Any:
        raise NotImplementedError

    def topk_mask(self, t: Any, k: int) -> Any:
        """A tensor like the 2-d ``t``, 1 at each row's ``k`` largest values, 0 elsewhere."""
        raise NotImplementedError

    def assign(self, param: Any, value: Any) -> None:
        """Overwrite a parameter's values around autograd (no version bump, no graph node)."""
        raise NotImplementedError

    def dropout(self, t: Any, p: float) -> Any:
        """Element-wise dropout as in training: zero with probability ``p``, scale the rest by 1/(1-p)."""
        raise NotImplementedError

    def channel_dropout(self, t: Any, p: float) -> Any:
        """Dropout of whole channels (dim 1, per sample) of an (N, C, ...) tensor, scaled by 1/(1-p)."""
        raise NotImplementedError

    def bernoulli(self, shape: Sequence[int], p: float, like: Any) -> Any:
        """0/1 values of ``shape``, each 1 with probability ``p``, with ``like``'s dtype and device."""
        raise NotImplementedError

    def rand_like(self, t: Any) -> Any:
        """Uniform [0, 1) values like ``t``, from the framework's seeded generator."""
        raise NotImplementedError

    def randn_like(self, t: Any) -> Any:
        """Standard normal values like ``t``, from the framework's seeded generator."""
        raise NotImplementedError

    def max_pool2d(self, t: Any, kernel: tuple[int, int], padding: tuple[int, int, int, int]) -> Any:
        """Stride-1 max pooling of (N, C, H, W) ``t`` zero-padded by (left, right, top, bottom)."""
        raise NotImplementedError

    # -- the wrapper layer and the demo: optional ----------------------------------------------------
    def layer_types(self) -> dict[str, type]:
        """The framework's layer classes under common names: ``Layer`` (the base class, which
        ``DropHookModel`` subclasses), ``Conv2d``, ``MaxPool2d``, ``ReLU``, ``Flatten``, ``Linear``
        (PyTorch's signatures, used by the demo)."""
        raise NotImplementedError

    def seed(self, seed: int) -> None:
        """Seed the framework's random generator."""
        raise NotImplementedError

    def adam(self, parameters: Any, lr: float) -> Any:
        """An Adam optimizer over ``parameters``."""
        raise NotImplementedError

    def cross_entropy(self, logits: Any, labels: Any) -> Any:
        """The mean cross-entropy loss of ``logits`` [N, classes] for integer ``labels`` [N]."""
        raise NotImplementedError

    def clear_grads(self, optimizer: Any) -> None:
        """Reset the gradients of the parameters ``optimizer`` updates."""
        raise NotImplementedError

    def cpu_session(self) -> Any:
        """A context manager running the framework on the CPU with one math thread (the fastest for
        a tiny model on a shared machine), restoring the settings on exit."""
        return contextlib.nullcontext()

    # -- data-parallel training (statistics reduced across processes when read): optional -----------
    def unwrap(self, model: Any) -> Any:
        """The model inside data-parallel wrappers (DDP's ``.module``), or ``model`` itself: layer
        names are those of the inner model."""
        return model

    def world(self) -> tuple[int, int]:
        """``(rank, world size)`` of the framework's default process group; ``(0, 1)`` without one."""
        return 0, 1

    def launch(self, nprocs: int, fn: Callable[..., int], args: tuple) -> list[int]:
        """Run ``fn(*args)`` in ``nprocs`` new processes on this machine, each one rank of a process
        group on 127.0.0.1 (gloo); returns each rank's exit code (``hookkit extract --nproc``)."""
        raise NotImplementedError(f"launch: starting ranks is not implemented for the {self.name} backend (hookkit extract --nproc)")

    def barrier(self) -> None:
        """Wait until every rank of the default process group gets here (nothing to wait for without one)."""

    def all_gather_rows(self, rows: Any) -> list:
        """Every rank's float64 ``[k, w]`` numpy array (k may differ by rank), in rank order. A
        collective: every rank of the process group calls it."""
        return [rows]

    def after_backward(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` once the running backward is complete, after the framework's own
        end-of-backward work (DDP's gradient all-reduce). Called from a gradient hook."""
        raise NotImplementedError

    def grad_of(self, param: Any) -> Any:
        """The gradient accumulated in ``param`` (this rank's shard of a sharded one), or None."""
        return param.grad

    def is_sharded(self, param: Any) -> bool:
        """Whether each rank holds only a shard of ``param`` (FSDP); else ranks hold equal copies."""
        return False


def drop_hook_entries(layer: Any, groups: Sequence[Sequence[str]], match: Callable[[Any], bool]) -> int:
    """``Backend.drop_forward_hooks`` for frameworks that keep a layer's hooks in dicts keyed by
    handle id: ``groups`` names, per kind of hook, the dict of functions first, then the dicts of
    flags kept beside it under the same ids."""
    removed = 0
    for hooks_attr, *flag_attrs in groups:
        hooks = getattr(layer, hooks_attr, None)
        if not hooks:
            continue
        for key in [k for k, fn in hooks.items() if match(fn)]:
            del hooks[key]
            for attr in flag_attrs:
                flags = getattr(layer, attr, None)
                if flags is not None:
                    flags.pop(key, None)
            removed += 1
    return removed
