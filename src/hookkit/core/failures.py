"""Where a forward failed: the layer, its call and the inputs it got, added to the framework's error.

When the framework raises inside a hooked model ("mat1 and mat2 shapes cannot be multiplied"), the
user should learn which layer got which inputs, as ``summary`` tells. Nothing is paid per call: the
exception's traceback already holds the frames of every layer call it went through, innermost last.
At the exit of a hookkit context (``Handle.__exit__``) or of a verb that runs the model, ``explain``
walks it once: the outermost frame whose ``self`` is a root the router counts is the model, the
innermost frame whose ``self`` is one of its layers is the failing layer, and the framework's call
machinery just above it (``self``, ``*args``) holds the inputs the layer got. The same exception is
kept (``except RuntimeError`` still works) and gets a note:

    hookkit: the forward failed in layer '0' (Linear, call 0) under capture(): inputs (4, 7) float32

Errors hookkit makes itself, and errors raised in a consumer (already noted with their layer by the
router), get no second note.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

from hookkit.core import clock as clocks
from hookkit.core.entry import entered
from hookkit.core.errors import HookkitError, add_note
from hookkit.core.registry import backend_for

F = TypeVar("F", bound=Callable[..., Any])
_CO_VARARGS = 0x04
_PREFIX = "hookkit: the forward failed"


def _frames(tb: TracebackType | None) -> list[Any]:
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def _self_of(frame: Any) -> Any:
    code = frame.f_code
    if not code.co_argcount or code.co_varnames[0] != "self":
        return None
    return frame.f_locals.get("self")


def _inputs(frames: list[Any], selves: list[Any], i: int) -> tuple:
    """The positional inputs of the failing call: the ``*args`` of the framework's call machinery
    (a frame of the same layer outside its ``forward``; frames without a ``self`` between them, as
    closures, are passed), else the arguments of the outermost frame of the layer (its ``forward``)."""
    layer, outermost = selves[i], i
    for j in range(i - 1, -1, -1):
        if selves[j] is None:
            continue
        if selves[j] is not layer:
            break
        code = frames[j].f_code
        if code.co_flags & _CO_VARARGS:
            return tuple(frames[j].f_locals.get(code.co_varnames[code.co_argcount + code.co_kwonlyargcount], ()))
        outermost = j
    code, local = frames[outermost].f_code, frames[outermost].f_locals
    return tuple(local.get(n) for n in code.co_varnames[1 : code.co_argcount])


def describe_inputs(backend: Any, values: tuple) -> str:
    """``(4, 7) float32, None`` for the values a layer got: a tensor's shape and dtype, else its type."""
    parts = []
    for v in values:
        if backend.is_tensor(v):
            parts.append(f"{backend.shape(v)} {backend.dtype_name(v)}")
        elif isinstance(v, (list, tuple)) and v and all(backend.is_tensor(t) for t in v):
            parts.append("[" + ", ".join(f"{backend.shape(t)} {backend.dtype_name(t)}" for t in v) + "]")
        else:
            parts.append(type(v).__name__)
    return ", ".join(parts) or "none"


#: the router's hooks of a layer (``router._registry.get``), set by the router when it loads: the
#: router imports handles, which explain failures here, so this module cannot import the router
def _unhooked(layer: Any) -> Any:
    return None


hooks_of: Callable[[Any], Any] = _unhooked


def _call_index(root: Any, layer: Any, name: str) -> int | None:
    """The failing call's index in its forward, when the router counts the layer (it is hooked)."""
    clock = clocks.clock_of(root)
    scope = clock.scopes.get(name) if clock is not None else None
    if scope is None or clock is None:
        return None
    hooks = hooks_of(layer)  # counted now only while a consumer of this root hooks it
    if hooks is None or not any(c.scope is scope for cs in hooks.consumers.values() for c in cs):
        return None
    fw = clock.current()
    return None if fw.done else clocks.calls_of(scope, fw)


def _dtype_hint(backend: Any, layer: Any, values: tuple) -> str:
    """The expected dtype when an input's floating dtype, or an integer input, cannot meet the
    layer's floating parameters."""
    params = [p for _, p in backend.named_parameters(layer, recurse=False)]
    want = {backend.dtype_name(p) for p in params if backend.dtype_kind(p) == "float"}
    if len(want) != 1:
        return ""
    (expected,) = want
    got = [backend.dtype_name(v) for v in values if backend.is_tensor(v)]
    wrong = sorted({d for d in got if d != expected})
    if not wrong:
        return ""
    return f"; the layer's parameters are {expected} and it got {', '.join(wrong)}: pass {expected} inputs"


def explain(exc: BaseException, under: str = "", models: tuple = ()) -> None:
    """Add to ``exc`` (raised by the framework inside a hooked forward) a note naming the failing
    layer, its call index where the router counts it, and the shapes and dtypes it got; ``under``
    names the hookkit call it ran under; ``models``: the roots to look for (else the models the router
    counts forwards of, while the hooks are still in place). Does nothing for hookkit's own errors, errors already noted,
    or an exception that never went through a hooked model.

    >>> try:   # doctest: +SKIP
    ...     with hookkit.capture(model, "0"):
    ...         model(torch.randn(4, 7))
    ... except RuntimeError as e:
    ...     print(e.__notes__[-1])
    hookkit: the forward failed in layer '0' (Linear, call 0) under capture(): inputs (4, 7) float32 ...
    """
    if not isinstance(exc, Exception) or isinstance(exc, HookkitError) or getattr(exc, "hookkit_layer", None) is not None:
        return
    if any(str(n).startswith(_PREFIX) for n in getattr(exc, "__notes__", ())):
        return
    try:
        note = _note(exc, under, models)
    except Exception:  # explaining must never hide the user's error
        return
    if note:
        add_note(exc, note)


def _note(exc: BaseException, under: str, models: tuple) -> str:
    frames = _frames(exc.__traceback__)
    selves = [_self_of(f) for f in frames]
    ids = {id(m) for m in models}
    is_root = (lambda s: id(s) in ids) if models else _is_root
    root_at = next((i for i, s in enumerate(selves) if s is not None and is_root(s)), None)
    if root_at is None:
        return ""
    root = selves[root_at]
    backend = backend_for(root)
    names = {id(layer): name for name, layer in backend.named_layers(root)}
    at = next((i for i in range(len(frames) - 1, root_at - 1, -1) if selves[i] is not None and id(selves[i]) in names), None)
    if at is None:
        return ""
    layer = selves[at]
    name = names[id(layer)]
    values = _inputs(frames, selves, at)
    call = _call_index(root, layer, name)
    shown = repr(name) if name else "(root)"
    where = f"{backend.type_name(layer)}" + (f", call {call}" if call is not None else "")
    under_s = f" under {under}()" if under else ""
    exc.hookkit_failed_layer = name  # type: ignore[attr-defined]
    return f"{_PREFIX} in layer {shown} ({where}){under_s}: inputs {describe_inputs(backend, values)}{_dtype_hint(backend, layer, values)}"


def _is_root(obj: Any) -> bool:
    hooks = hooks_of(obj)
    return hooks is not None and hooks.root_clock is not None


def explains_failures(name: str, models: int = 1) -> Callable[[F], F]:
    """Decorate a public function that runs the model it is given (its first ``models`` positional
    arguments): a framework error raised in the model's forward gets ``explain``'s note, naming
    ``name`` as the call. One ``try`` per call of the function, nothing per layer call.

    >>> @explains_failures("cam")   # doctest: +SKIP
    ... def cam(model, layers, inputs, ...): ...
    """

    def wrap(func: F) -> F:
        @functools.wraps(func)
        def inner(*args: Any, **kwargs: Any) -> Any:
            try:
                with entered(name):  # checks below, and a context closing inside, name this call
                    return func(*args, **kwargs)
            except Exception as exc:
                explain(exc, name, tuple(args[:models]))
                raise

        return inner  # type: ignore[return-value]

    return wrap
