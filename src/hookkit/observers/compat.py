"""fastai's hook API, by fastai's names (``fastai/callback/hook.py``), on both frameworks.

Where fastai is wrong, hookkit does the right thing: backward hooks are built on tensor hooks
(not PyTorch's deprecated ``register_backward_hook``), ``dummy_eval`` restores the training mode,
and every call's hooks are removed when the block raises.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from hookkit.backends import backend_for
from hookkit.core.entry import public_entry
from hookkit.core.router import OBSERVER, Event, attach
from hookkit.core.tree import map_tensors
from hookkit.core.validate import ArgumentTypeError, check_bool, check_callable, check_model, fail


def _prepare(value: Any, backend: Any, detach: bool, cpu: bool) -> Any:
    def f(t: Any) -> Any:
        if detach:
            t = backend.detach(t)
        if cpu:
            t = backend.to(t, "cpu")
        return t

    return map_tensors(value, f, backend.is_tensor)


class Hook:
    """Run ``hook_func(module, input, output)`` on ``m`` and keep its result in ``.stored``.

    ``is_forward=False`` makes it a backward hook: ``hook_func(module, grad_input, grad_output)``.
    ``detach`` / ``cpu`` apply to what ``hook_func`` receives. ``gather`` is accepted for fastai
    compatibility (it only matters for model-parallel outputs).

    >>> with Hook(model.fc, lambda m, i, o: o) as h:   # doctest: +SKIP
    ...     y = model(x)
    >>> h.stored is the output of model.fc
    """

    @public_entry()
    def __init__(self, m: Any, hook_func: Callable, is_forward: bool = True, detach: bool = True, cpu: bool = False, gather: bool = False):
        self._backend = check_model(m, arg="m")
        check_callable(hook_func, arg="hook_func", signature="hook_func(module, input, output)")
        for arg, value in (("is_forward", is_forward), ("detach", detach), ("cpu", cpu), ("gather", gather)):
            check_bool(value, arg=arg)
        self.hook_func, self.detach, self.cpu, self.gather = hook_func, detach, cpu, gather
        self.stored: Any = None
        self.removed = False
        self.is_forward = is_forward
        event = "forward" if is_forward else "backward"
        self._handle = attach(m, [("", m)], event, self.hook_fn_event, OBSERVER)

    def hook_fn_event(self, ev: Event) -> None:
        if self.is_forward:
            self.hook_fn(ev.layer, ev.args, ev.output)
        else:
            self.hook_fn(ev.layer, ev.grad_inputs, ev.grad_outputs)

    def hook_fn(self, module: Any, input: Any, output: Any) -> None:
        """Apply ``hook_func`` to (module, input, output) and store the result."""
        if self.detach or self.cpu:
            input = _prepare(input, self._backend, self.detach, self.cpu)
            output = _prepare(output, self._backend, self.detach, self.cpu)
        self.stored = self.hook_func(module, input, output)

    def remove(self) -> None:
        """Remove the hook from the model (idempotent)."""
        if not self.removed:
            self._handle.remove()
            self.removed = True

    def __enter__(self, *args: Any) -> Hook:
        return self

    def __exit__(self, *args: Any) -> None:
        self.remove()


def _hook_storage(m: Any, i: Any, o: Any) -> Any:
    return o


def hook_output(module: Any, detach: bool = True, cpu: bool = False, grad: bool = False) -> Hook:
    """A ``Hook`` storing ``module``'s output (or, with ``grad=True``, the gradients w.r.t. its output).

    >>> with hook_output(model.fc) as h: y = model(x)   # doctest: +SKIP
    """
    return Hook(module, _hook_storage, detach=detach, cpu=cpu, is_forward=not grad)


def _modules_of(ms: Any) -> list[Any]:
    try:
        backend = backend_for(ms)
    except TypeError:
        return list(ms)
    if backend.is_layer(ms):
        return backend.children(ms)
    return list(ms)


class Hooks:
    """One ``Hook`` per module of ``ms`` (a list of modules, or a model: its children).

    >>> with Hooks(model, lambda m, i, o: o.shape) as hs:   # doctest: +SKIP
    ...     model(x)
    >>> hs.stored
    """

    def __init__(self, ms: Iterable[Any], hook_func: Callable, is_forward: bool = True, detach: bool = True, cpu: bool = False):
        self.hooks: list[Hook] = []
        try:
            for m in _modules_of(ms):
                self.hooks.append(Hook(m, hook_func, is_forward, detach, cpu))
        except BaseException:
            self.remove()
            raise

    def __getitem__(self, i: int) -> Hook:
        return self.hooks[i]

    def __len__(self) -> int:
        return len(self.hooks)

    def __iter__(self) -> Iterator[Hook]:
        return iter(self.hooks)

    @property
    def stored(self) -> list[Any]:
        """What each hook stored, in module order."""
        return [h.stored for h in self.hooks]

    def remove(self) -> None:
        """Remove every hook (idempotent)."""
        for h in self.hooks:
            h.remove()

    def __enter__(self, *args: Any) -> Hooks:
        return self

    def __exit__(self, *args: Any) -> None:
        self.remove()


def hook_outputs(modules: Iterable[Any], detach: bool = True, cpu: bool = False, grad: bool = False) -> Hooks:
    """``Hooks`` storing the outputs (or output gradients, with ``grad=True``) of ``modules``.

    >>> with hook_outputs(model) as hs: model(x)   # doctest: +SKIP
    """
    return Hooks(modules, _hook_storage, detach=detach, cpu=cpu, is_forward=not grad)


def _first_param(m: Any) -> Any:
    params = backend_for(m).parameters(m)
    if not params:
        fail(None, "m", "a model with parameters (their device is the dummy batch's)", m)
    return params[0]


@public_entry()
def in_channels(m: Any) -> int:
    """The input channels of the first convolution-like layer (a weight of 4 dimensions) in ``m``.

    >>> in_channels(cnn)   # doctest: +SKIP
    3
    """
    return _in_channels(m)


def _in_channels(m: Any) -> int:
    backend = backend_for(m)
    for _, layer in backend.named_layers(m):
        w = getattr(layer, "weight", None)
        if w is not None and len(backend.shape(w)) == 4:
            return backend.shape(w)[1]
    fail(None, "m", "a model with a layer whose weight has 4 dimensions (a 2-d convolution: its input channels)", m)


def _check_size(size: Any) -> None:
    ok = isinstance(size, (tuple, list)) and all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in size)
    if not ok:
        fail(None, "size", "a (height, width) pair of ints >= 1", size, kind=ArgumentTypeError)


@public_entry()
def dummy_eval(m: Any, size: tuple[int, int] = (64, 64)) -> Any:
    """Run ``m`` in eval mode on a random batch of one ``(1, in_channels, *size)`` image, without gradients.
    Unlike fastai, the training mode is restored afterwards.

    >>> dummy_eval(cnn, (32, 32)).shape   # doctest: +SKIP
    """
    import numpy as np

    backend = check_model(m, arg="m")
    _check_size(size)
    ch = _in_channels(m)
    like = _first_param(m)
    x = backend.from_numpy(np.random.uniform(-1.0, 1.0, (1, ch, *size)).astype("float32"), like)
    was = backend.is_training(m)
    backend.set_training(m, False)
    try:
        with backend.no_grad():
            return m(x)
    finally:
        backend.set_training(m, was)


@public_entry()
def model_sizes(m: Any, size: tuple[int, int] = (64, 64)) -> list[tuple[int, ...]]:
    """Output shape of each child of ``m`` on a dummy batch (``dummy_eval``), as tuples.

    >>> model_sizes(nn.Sequential(nn.Conv2d(3, 16, 3, padding=1)))   # doctest: +SKIP
    [(1, 16, 64, 64)]
    """
    backend = check_model(m, arg="m")
    _check_size(size)
    with hook_outputs(m) as hooks:
        dummy_eval(m, size=size)
        return [backend.shape(o.stored) for o in hooks]


def num_features_model(m: Any) -> int:
    """Number of output channels of ``m``, found by trying growing input sizes (as fastai)."""
    sz, last_error = 32, None
    while sz <= 2048:
        try:
            return model_sizes(m, (sz, sz))[-1][1]
        except Exception as exc:  # too small for the model's strides: try larger
            last_error = exc
            sz *= 2
    fail(
        "num_features_model",
        "m",
        f"a model that runs on an image from 32x32 to 2048x2048 (the last try raised: {last_error})",
        m,
        cause=last_error,
    )


def has_params(m: Any) -> bool:
    """True if ``m`` has at least one parameter.

    >>> has_params(nn.Linear(3, 4)), has_params(nn.ReLU())   # doctest: +SKIP
    (True, False)
    """
    return len(backend_for(m).parameters(m)) > 0


def total_params(m: Any) -> tuple[int, bool]:
    """(number of parameters of ``m``, whether its first parameter is trainable), as fastai."""
    backend = backend_for(m)
    params = backend.parameters(m)
    count = sum(backend.numel(p) for p in params)
    return count, (backend.requires_grad(params[0]) if params else False)
