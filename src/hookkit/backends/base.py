"""The Backend interface: everything hookkit needs from a framework. Nothing outside
``hookkit.backends`` imports a framework or asks which one it runs on; it calls these methods.

The interface comes in tiers, one class each, ``Backend`` inheriting them all:

- ``Core``, required: identity, layer tree, the two forward hooks, tensor basics and the three
  reductions of ``ActivationStats``: enough for ``select``, the router, ``capture``, ``on_forward``
  and ``ActivationStats`` (tests/test_seam.py runs them on a numpy "framework" implementing only it);
- optional tiers, which a backend implements as far as its framework goes: ``Gradients``,
  ``Statistics``, ``Interventions``, ``Summary``, ``Distributed``.

A method a backend lacks raises ``NotImplementedError`` naming the method, its tier and the
features that need it, so only those features fail. Ops that one workflow alone needs live in op
families instead (``Backend.family``, ``hookkit/backends/families/``): ``tensor_math`` for the
analyses, ``demo_kit`` for ``hookkit demo``.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from hookkit.backends import host_stats as _host


def stub(method: Callable) -> Callable:
    """Declare ``method`` (its signature and docstring) without an implementation: called on a
    backend that does not override it, it raises ``NotImplementedError`` saying what is missing."""

    @functools.wraps(method)
    def missing(self: Backend, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(_missing(self, method.__name__))

    missing.stub = True  # type: ignore[attr-defined]
    return missing


def _missing(backend: Backend, name: str) -> str:
    tier: Any = next(c for c in type(backend).__mro__ if name in vars(c) and hasattr(c, "TIER"))  # a tier class
    shown = backend.name or type(backend).__name__
    return f"the {shown} backend does not implement {name}() (tier {tier.__name__}: {tier.TIER}), which {tier.NEEDED_BY} need"


class Core:
    """Required: what every feature needs. A new backend implements the stubs (``NumpyBackend`` in
    tests/test_seam.py is a complete example); the rest have defaults that fit most frameworks."""

    TIER = "the core"
    NEEDED_BY = "select, the router, capture, on_forward and ActivationStats"

    def owns(self, obj: Any) -> bool:
        """Whether ``obj`` (a model, layer or tensor) belongs to this framework."""
        return self.is_layer(obj) or self.is_tensor(obj)

    @stub
    def is_layer(self, obj: Any) -> bool:
        """Whether ``obj`` is one of the framework's layers (``torch.nn.Module``, ``paddle.nn.Layer``)."""

    @stub
    def is_tensor(self, obj: Any) -> bool:
        """Whether ``obj`` is one of the framework's tensors."""

    @stub
    def named_layers(self, model: Any) -> Iterator[tuple[str, Any]]:
        """(dotted name, layer) for the model and every sublayer, the model itself first as ''."""

    @stub
    def children(self, layer: Any) -> list[Any]:
        """The direct sublayers of ``layer``, in order."""

    @stub
    def parameters(self, layer: Any, recurse: bool = True) -> list[Any]:
        """The parameters of ``layer`` (and of its sublayers when ``recurse``), each once."""

    @stub
    def named_parameters(self, layer: Any, recurse: bool = True) -> list[tuple[str, Any]]:
        """``(dotted name, parameter)`` of ``layer`` (and of its sublayers when ``recurse``)."""

    def is_training(self, layer: Any) -> bool:
        """Whether ``layer`` is in training mode (read at call time by mode-aware interventions)."""
        return bool(layer.training)

    def set_training(self, layer: Any, training: bool) -> None:
        """Put ``layer`` (and its sublayers) in training or eval mode."""
        layer.train() if training else layer.eval()

    @stub
    def layer_class(self) -> type:
        """The framework's base layer class (``torch.nn.Module``, ``paddle.nn.Layer``): ``DropHookModel`` subclasses it."""

    @stub
    def hook_forward_pre(self, layer: Any, fn: Callable) -> Any:
        """Native pre-hook ``fn(layer, args, kwargs) -> None | (args, kwargs)``; returns its handle."""

    @stub
    def hook_forward(self, layer: Any, fn: Callable) -> Any:
        """Native post-hook ``fn(layer, args, kwargs, output) -> None | output``; returns its handle."""

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

    def tree_watch(self, root: Any, named: Sequence[tuple[str, Any]]) -> Callable[[], list[Any] | None] | None:
        """A cheap check for ``select``'s cache: a function giving the layers now at ``named``'s dotted
        paths under ``root`` while the model's tree is unchanged, None once something moved. None
        here: the framework cannot tell, and every ``select`` walks the model."""
        return None

    def in_backward(self) -> bool:
        """True while autograd runs a backward pass in this thread: a layer called then is being
        recomputed by activation checkpointing. Called at every hooked call: keep it cheap."""
        return False

    def in_transform(self) -> bool:
        """True inside a functional transform (torch.func grad/vmap...), whose wrapped tensors
        observers must not keep. Called once per root forward."""
        return False

    @stub
    def requires_grad(self, t: Any) -> bool:
        """Whether autograd records operations on ``t``."""

    @stub
    def grad_enabled(self) -> bool:
        """Whether autograd records in this thread now (False under ``no_grad``)."""

    @stub
    def no_grad(self) -> Any:
        """A context manager in which autograd records nothing."""

    def detach(self, t: Any) -> Any:
        """``t`` cut from the autograd graph, sharing its storage."""
        return t.detach()

    def clone(self, t: Any) -> Any:
        """A copy of ``t`` with its own storage."""
        return t.clone()

    @stub
    def to(self, t: Any, device: Any) -> Any:
        """``t`` moved to ``device`` (a device object or its name)."""

    @stub
    def device_of(self, t: Any) -> str:
        """The name of ``t``'s device ("cpu", "cuda:0", "gpu:0")."""

    def input_device(self, model: Any) -> str | None:
        """Where inputs of ``model`` go: the device of its first parameter that holds data, or None
        (no parameter, or none holds data here: a model dispatched by accelerate keeps offloaded
        layers' weights on the meta device between calls, and its hooks move the inputs)."""
        try:
            ops = getattr(self, "family")("meta")  # noqa: B009 - Backend's op-family lookup (Core declares none)
        except NotImplementedError:
            ops = None
        for p in self.parameters(model):
            if ops is None or ops.has_data(p):
                return self.device_of(p)
        return None

    def shape(self, t: Any) -> tuple[int, ...]:
        """``t``'s shape as a tuple of ints."""
        return tuple(int(s) for s in t.shape)

    def numel(self, t: Any) -> int:
        """How many values ``t`` holds."""
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

    def view_base(self, t: Any) -> Any:
        """The tensor ``t`` is a view of (``x.view(...)``, ``x[0]``, ``x.transpose(0, 1)``), or None:
        ``hookkit.graph`` draws a view as the tensor it views. None where the framework does not say."""
        return None

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

    @stub
    def to_numpy(self, t: Any) -> Any:
        """A numpy array of ``t``'s values (on the host; a host sync: never in a hot path)."""

    @stub
    def from_numpy(self, array: Any, like: Any = None) -> Any:
        """A tensor of ``array``'s values, on ``like``'s device and with its dtype when given."""

    def tensor_name(self, t: Any) -> str:
        """The tensor's name where the framework gives tensors names (Paddle), else ''."""
        return getattr(t, "name", "") or ""

    @stub
    def stack(self, ts: Sequence[Any]) -> Any:
        """The tensors ``ts`` (same shape) stacked along a new first dimension, on their device."""

    @stub
    def histc(self, t: Any, bins: int, lo: float, hi: float) -> Any:
        """Counts of ``t``'s values in ``bins`` equal bins over [``lo``, ``hi``] (values outside ignored), on its device."""

    @stub
    def activation_sums(self, t: Any, near_zero: float) -> Any:
        """One row ``[mean, sum of squared deviations from the mean, count of values <= near_zero]``
        of ``t`` as floats: the reader finishes fastai's formulas (std = sqrt(m2 / (n - 1)))."""


class Gradients:
    """Optional: autograd. A framework without it leaves these alone; only the features above fail."""

    TIER = "gradients"
    NEEDED_BY = "on_grad, on_backward, capture(grads=True), GradientStats, clip_grad, prune, cam and attribute"

    #: whether an exception raised in a gradient hook reaches the caller of backward unchanged
    #: (Paddle turns it into an OSError: consumers then keep it and raise it after backward)
    raises_through_backward: bool = True
    #: how the framework spells "this tensor takes no gradient" and the call that changes it (messages)
    grad_off_text: str = "requires_grad=False"
    grad_on_text: str = "tensor.requires_grad_()"

    def hook_tensor(self, tensor: Any, fn: Callable) -> Any:
        """Native gradient hook ``fn(grad) -> None | grad``; returns its handle."""
        return tensor.register_hook(fn)

    @stub
    def identity_with_backward(self, tensors: Sequence[Any], on_grads: Callable) -> tuple:
        """Copies of ``tensors`` joined in one autograd node whose backward calls
        ``on_grads(grads) -> None | grads`` with all their gradients at once."""

    @stub
    def when_all_grads(self, tensors: Sequence[Any], fn: Callable[[tuple], None]) -> None:
        """Call ``fn(grads)`` once, after every tensor's gradient is computed (None if unused)."""

    @stub
    def enable_grad(self) -> Any:
        """A context manager in which autograd records, also inside the user's ``no_grad`` block
        (the analyses that need a gradient enable it for their own pass, as captum does)."""

    @stub
    def set_requires_grad(self, t: Any) -> Any:
        """Make ``t`` (a leaf) record gradients, in place; returns it."""

    @stub
    def grads_of(self, output: Any, inputs: Sequence[Any], allow_unused: bool = False) -> tuple:
        """Gradients of the scalar ``output`` w.r.t. ``inputs``, leaving every ``.grad`` untouched
        (``allow_unused``: None for an input the output does not depend on, instead of an error)."""


class Statistics:
    """Optional beyond ``Core``'s ``stack``, ``histc`` and ``activation_sums``: the fused reductions of the
    statistics (one row per call, left on the device; the reader finishes the formulas on the host,
    knowing the element count n: std = sqrt(m2 / (n - 1)), fraction = count / n...) and their CPU
    route (``host_stats.py``: where ``host_values`` gives an array, the C kernel writes the record
    straight into a row of a ``HostRows`` block, no tensor per call)."""

    TIER = "statistics"
    NEEDED_BY = "ActivationStats, GradientStats, ParamStats and watch_nonfinite"

    host_routes = True  # tests switch the CPU route off to run the framework route on the CPU

    @stub
    def cast(self, t: Any, dtype: str) -> Any:
        """``t`` converted to the dtype named ``dtype`` ("float16", "int64"...), on its device; ``t`` itself
        when it already has that dtype (no copy)."""

    @stub
    def reduce(self, t: Any, op: str, dims: Sequence[int]) -> Any:
        """``t`` reduced over ``dims`` (dropped) with ``op``: "mean" or "max"; on its device."""

    @stub
    def isfinite_all(self, t: Any) -> Any:
        """A 0-d boolean tensor on the device: True when every value of ``t`` is finite."""

    @stub
    def l2_norm(self, t: Any) -> Any:
        """``||t||`` as a 0-d float32 tensor on ``t``'s device (no host read)."""

    def activation_sums_hist(self, t: Any, near_zero: float, bins: int, lo: float, hi: float) -> tuple:
        """``(activation_sums(t, near_zero), histc(t, bins, lo, hi))``, in one pass where it can."""
        return self.activation_sums(t, near_zero), self.histc(t, bins, lo, hi)  # type: ignore[attr-defined]  # Core's, in a Backend

    def grad_sums(self, t: Any) -> Any:
        """One row ``[sum, ||t||, max |t|]`` of a gradient: ``param_sums`` (gradients have
        |mean| << std, so mean and std follow from the sum and the norm when read)."""
        return self.param_sums(t)

    @stub
    def param_sums(self, t: Any) -> Any:
        """One row ``[sum, ||t||, max |t|]`` of ``t`` (NaN when any value is): mergeable across tensors."""

    @stub
    def finite_probe(self, t: Any) -> tuple:
        """0-d tensors that are all finite exactly when every value of ``t`` is (min and max)."""

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


class Interventions:
    """Optional: the tensor ops the interventions compute with, on the tensor's device."""

    TIER = "intervention ops"
    NEEDED_BY = "the dropout family, masks, pruning and the output edits"

    def forward_touched(self, layer: Any) -> bool:
        """Whether anything but the layer's own ``forward`` may act on its call: a native forward
        (pre-)hook on it (or on every layer), or a ``forward`` set on the instance (an operation site's
        route). Conservative: True where the framework's hooks cannot be read (``run_with_cache`` then
        keeps what it would have derived)."""
        return True

    @stub
    def clamp(self, t: Any, lo: float | None = None, hi: float | None = None) -> Any:
        """``t`` with values below ``lo`` / above ``hi`` replaced by them (None: no bound)."""

    @stub
    def where(self, cond: Any, a: Any, b: Any) -> Any:
        """``a`` where ``cond`` is true, else ``b`` (broadcast)."""

    @stub
    def zeros_like(self, t: Any) -> Any:
        """Zeros with ``t``'s shape, dtype and device."""

    @stub
    def topk_mask(self, t: Any, k: int) -> Any:
        """A tensor like the 2-d ``t``, 1 at each row's ``k`` largest values, 0 elsewhere."""

    @stub
    def assign(self, param: Any, value: Any) -> None:
        """Overwrite a parameter's values around autograd (no version bump, no graph node)."""

    @stub
    def dropout(self, t: Any, p: float) -> Any:
        """Element-wise dropout as in training: zero with probability ``p``, scale the rest by 1/(1-p)."""

    @stub
    def channel_dropout(self, t: Any, p: float) -> Any:
        """Dropout of whole channels (dim 1, per sample) of an (N, C, ...) tensor, scaled by 1/(1-p)."""

    @stub
    def bernoulli(self, shape: Sequence[int], p: float, like: Any) -> Any:
        """0/1 values of ``shape``, each 1 with probability ``p``, with ``like``'s dtype and device."""

    @stub
    def rand_like(self, t: Any) -> Any:
        """Uniform [0, 1) values like ``t``, from the framework's seeded generator."""

    @stub
    def randn_like(self, t: Any) -> Any:
        """Standard normal values like ``t``, from the framework's seeded generator."""

    @stub
    def max_pool2d(self, t: Any, kernel: tuple[int, int], padding: tuple[int, int, int, int]) -> Any:
        """Stride-1 max pooling of (N, C, H, W) ``t`` zero-padded by (left, right, top, bottom)."""


class Summary:
    """Optional: what ``hookkit.summary`` reads beyond the core (defaults: count nothing, hide nothing)."""

    TIER = "summary"
    NEEDED_BY = "hookkit.summary"

    @stub
    def itemsize(self, t: Any) -> int:
        """Bytes per value of ``t``'s dtype."""

    def mult_add_counter(self) -> Any:
        """A fresh ``hookkit.backends.counting.MultAddCounter`` for one forward; this one counts nothing."""
        from hookkit.backends.counting import MultAddCounter  # lazy: only hookkit.summary counts mult-adds, on its first use

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

    @stub
    def copy_into(self, dst: Any, src: Any) -> None:
        """Copy ``src``'s values into tensor ``dst`` in place, outside autograd (buffers)."""


class Distributed:
    """Optional: data-parallel training. The defaults are one process."""

    TIER = "distributed"
    NEEDED_BY = "the statistics' cross-rank reduction, capture under DDP/FSDP and extract --nproc"

    def unwrap(self, model: Any) -> Any:
        """The model inside data-parallel wrappers (DDP's ``.module``), or ``model`` itself: layer
        names are those of the inner model."""
        return model

    def world(self) -> tuple[int, int]:
        """``(rank, world size)`` of the framework's default process group; ``(0, 1)`` without one."""
        return 0, 1

    @stub
    def launch(self, nprocs: int, fn: Callable[..., int], args: tuple) -> list[int]:
        """Run ``fn(*args)`` in ``nprocs`` new processes on this machine, each one rank of a process
        group on 127.0.0.1 (gloo); returns each rank's exit code (``hookkit extract --nproc``)."""

    def barrier(self) -> None:
        """Wait until every rank of the default process group gets here (nothing to wait for without one)."""

    def all_gather_rows(self, rows: Any) -> list:
        """Every rank's float64 ``[k, w]`` numpy array (k may differ by rank), in rank order. A
        collective: every rank of the process group calls it."""
        return [rows]

    @stub
    def after_backward(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` once the running backward is complete, after the framework's own
        end-of-backward work (DDP's gradient all-reduce). Called from a gradient hook."""

    def grad_of(self, param: Any) -> Any:
        """The gradient accumulated in ``param`` (this rank's shard of a sharded one), or None."""
        return param.grad

    def is_sharded(self, param: Any) -> bool:
        """Whether each rank holds only a shard of ``param`` (FSDP); else ranks hold equal copies."""
        return False


class Backend(Core, Gradients, Statistics, Interventions, Summary, Distributed):
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
                if not package:  # a backend defined in a top-level module has no family modules
                    raise ModuleNotFoundError(name=f"{package}.{name}")
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
