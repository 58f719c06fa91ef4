"""``DropHookModel``: a model wrapper that runs dropout-like functions as hooks, in training only.

The hooks are placed once and skip the user's function while the hooked layer is in eval mode (no
re-registration at ``train()`` / ``eval()``); the wrapper's parameters, names and state dict are
the wrapped model's own (no ``model.`` prefix), so checkpoints move freely between the wrapper and
the plain model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hookkit.backends import Backend, backend_for, backend_named, registered_backends
from hookkit.core.entry import public_entry
from hookkit.core.handles import HandleGroup
from hookkit.core.router import INTERVENTION, Event, attach
from hookkit.core.select import select
from hookkit.core.validate import ArgumentTypeError, check_callable, check_length, check_model, fail

__all__ = ["HOOK_TYPES", "DropHookModel"]

#: hook types -> router event
HOOK_TYPES = {"forward_pre_hook": "forward_pre", "forward_post_hook": "forward"}
# Also accepted, never listed: "forwar_post_hook", the spelling of the Paddle tutorial wrapper this
# class replaces, so that code written for it runs unchanged.
_ALSO_ACCEPTED = {"forwar_post_hook": "forward_post_hook"}

_classes: dict[str, type] = {}


def _as_list(x: Any, arg: str) -> list[Any]:
    if isinstance(x, (list, tuple)):
        return list(x)
    fail("DropHookModel", arg, "a list (one entry per hook)", x, kind=ArgumentTypeError)


class _PreConsumer:
    """Runs ``fn(layer, inputs)`` while the layer trains (a class, not a closure: it pickles)."""

    __slots__ = ("fn", "is_training")

    def __init__(self, fn: Callable, is_training: Callable[[Any], bool]):
        self.fn, self.is_training = fn, is_training

    def __call__(self, ev: Event) -> Any:
        if not self.is_training(ev.layer):
            return None
        r = self.fn(ev.layer, ev.args)
        if r is None:
            return None
        return (r if isinstance(r, tuple) else (r,)), ev.kwargs


class _PostConsumer(_PreConsumer):
    """Runs ``fn(layer, inputs, output)`` while the layer trains."""

    __slots__ = ()

    def __call__(self, ev: Event) -> Any:
        if not self.is_training(ev.layer):
            return None
        return self.fn(ev.layer, ev.args, ev.output)


_CONSUMERS = {"forward_pre": _PreConsumer, "forward": _PostConsumer}


class DropHookModel:
    """Wrap ``model`` with hook functions (dropout and the like) that act only in training.

    ``hook_funcs[i]`` is ``f(layer, inputs, output) -> new output | None`` for
    ``"forward_post_hook"`` or ``f(layer, inputs) -> new inputs | None`` for ``"forward_pre_hook"``,
    placed on ``hook_layers[i]`` (a layer object or a name spec), ``hook_types[i]`` saying which. The result is a
    ``torch.nn.Module`` / ``paddle.nn.Layer`` whose ``forward``, ``train()``, ``eval()``,
    ``parameters()``, ``named_parameters()``, ``state_dict()`` and loading are the model's own.
    A copy (``copy.deepcopy``, ``pickle``, ``torch.save`` of the whole wrapper) places the same hook
    functions on its own layers; pickling it needs picklable functions (module-level, not lambdas).

    >>> drop = paddle.nn.Dropout2D(p=0.3)                                     # doctest: +SKIP
    >>> dm = hookkit.DropHookModel(model, [model.layer4], [lambda m, i, o: drop(o)], ["forward_post_hook"])  # doctest: +SKIP
    >>> dm.train(); dm(x)   # dropped         dm.eval(); dm(x)   # the plain model's output   # doctest: +SKIP
    """

    # set with object.__setattr__, outside the framework's attribute registry
    _hookkit_spec: list[tuple[list[str], Callable, str]]
    _hookkit_handles: HandleGroup

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is DropHookModel:  # pick the subclass of the model's framework
            model = args[0] if args else kwargs.get("model")
            cls = _class_for(backend_for(model))
        return super().__new__(cls)

    @public_entry()
    def __init__(
        self, model: Any, hook_layers: Sequence[Any], hook_funcs: Sequence[Callable], hook_types: Sequence[str] | str = "forward_post_hook"
    ):
        check_model(model)
        hook_layers = _as_list(hook_layers, "hook_layers")
        hook_funcs = _as_list(hook_funcs, "hook_funcs")
        hook_types = [hook_types] * len(hook_layers) if isinstance(hook_types, str) else _as_list(hook_types, "hook_types")
        n = len(hook_layers)
        check_length(hook_funcs, n, arg="hook_funcs", what="one function per layer of hook_layers")
        check_length(hook_types, n, arg="hook_types", what="one type per layer of hook_layers, or one string for all")
        valid = ", ".join(map(repr, HOOK_TYPES))
        hook_types = [_ALSO_ACCEPTED.get(t, t) if isinstance(t, str) else t for t in hook_types]
        for i, (f, t) in enumerate(zip(hook_funcs, hook_types)):
            if t not in HOOK_TYPES:
                fail("DropHookModel", f"hook_types[{i}]", f"one of {valid}", t)
            if not callable(f):
                check_callable(f, arg=f"hook_funcs[{i}]", signature="f(layer, inputs, output) or f(layer, inputs)")
        named = [select(model, layer) for layer in hook_layers]  # resolve all before placing any
        super().__init__()
        self.model = model
        # kept outside the framework's attribute registry: not a sublayer, parameter or buffer.
        # Layers by name, so that a copy places the same hooks on its own layers.
        spec = [([n for n, _ in targets], f, HOOK_TYPES[t]) for targets, f, t in zip(named, hook_funcs, hook_types)]
        object.__setattr__(self, "_hookkit_spec", spec)
        self._place_hooks()

    def _place_hooks(self) -> None:
        model, handles = self.model, HandleGroup()
        is_training = backend_for(model).is_training
        try:
            for names, f, event in self._hookkit_spec:
                targets = select(model, names)
                handles.add(attach(model, targets, event, _CONSUMERS[event](f, is_training), INTERVENTION))
        except BaseException:
            handles.remove()
            raise
        object.__setattr__(self, "_hookkit_handles", handles)

    # A copy (copy.deepcopy, pickle, torch.save of the whole wrapper) gets the model's layers without
    # hookkit's hooks (the router's rule): the wrapper places its hooks again on the copy's layers.
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_hookkit_handles", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._place_hooks()

    @property
    def handles(self) -> HandleGroup:
        """The router hooks this wrapper placed."""
        return self._hookkit_handles

    def remove_hooks(self) -> None:
        """Detach the hook functions; the wrapper then runs the plain model."""
        self._hookkit_handles.remove()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        # Call the model, not model.forward: its own hooks (hookkit's step clock) must run.
        return self.model(*args, **kwargs)


#: the layer methods about parameters and state that the wrapper hands to the wrapped model,
#: where the framework's layer class has them
_DELEGATED = (
    "parameters",
    "named_parameters",
    "buffers",
    "named_buffers",
    "state_dict",
    "load_state_dict",
    "set_state_dict",
    "set_dict",
    "load_dict",
)


def _delegate(method: str) -> Callable:
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.model, method)(*args, **kwargs)

    call.__name__ = call.__qualname__ = method
    return call


def _class_name(backend: Backend) -> str:
    return f"{backend.name.capitalize()}DropHookModel"


def _class_for(backend: Backend) -> type:
    """The DropHookModel subclass that is also the framework's layer class (built once)."""
    cls = _classes.get(backend.name)
    if cls is not None:
        return cls
    base = backend.layer_class()
    methods = {m: _delegate(m) for m in _DELEGATED if hasattr(base, m)}
    cls = type(_class_name(backend), (DropHookModel, base), {"__module__": __name__, "__doc__": DropHookModel.__doc__, **methods})
    # a module-level name of its own, so that pickling a whole wrapper (torch.save(model)) finds the class
    globals()[cls.__name__] = cls
    _classes[backend.name] = cls
    return cls


def __getattr__(name: str) -> Any:
    # unpickling in a fresh process asks for e.g. TorchDropHookModel before any wrapper was built
    for framework in registered_backends():
        if name == f"{framework.capitalize()}DropHookModel":
            return _class_for(backend_named(framework))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
