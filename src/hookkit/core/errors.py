"""hookkit's exceptions: each names the layer or argument at fault and what would be valid."""

from __future__ import annotations

import numbers
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from hookkit.core.entry import entry_name


class HookkitError(Exception):
    """Base class of every error hookkit raises itself."""


class LayerNotFound(HookkitError, LookupError):
    """A layer spec matched no layer of the model.

    >>> hookkit.capture(model, "h.9.attn")   # doctest: +SKIP
    LayerNotFound: no layer matches 'h.9.attn'; closest: h.0.attn, h.1.attn
    """

    def __init__(self, spec: object, close: list[str] | None = None, detail: str = ""):
        self.spec = spec
        self.close = list(close or [])
        msg = f"no layer matches {spec!r}"
        if detail:
            msg += f" ({detail})"
        if self.close:
            msg += "; closest: " + ", ".join(self.close)
        super().__init__(msg)

    def __str__(self) -> str:  # LookupError would repr() the message
        return self.args[0]


class GradientNotTracked(HookkitError, RuntimeError):
    """A gradient hook was asked of a tensor that takes no part in autograd."""


class UnsupportedModel(HookkitError, TypeError):
    """The object is neither a torch.nn.Module nor a paddle.nn.Layer (or their tensors)."""


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)``; on Python 3.10, which has no ``add_note``, the note is stored in
    ``__notes__`` as 3.11 would store it."""
    if sys.version_info >= (3, 11):
        exc.add_note(note)
    else:
        exc.__notes__ = [*getattr(exc, "__notes__", ()), note]  # type: ignore[attr-defined]  # the 3.11 attribute, set by hand


def annotate(exc: BaseException, layer_name: str, call: int, where: str) -> BaseException:
    """Add the layer name and call index to an exception raised in a user's hook, keeping its type.
    A ``NonFiniteError`` already names the layer at fault: it gets no note."""
    note = f"hookkit: raised in a {where} hook on layer {layer_name!r} (call {call})"
    if not isinstance(exc, NonFiniteError) and note not in getattr(exc, "__notes__", ()):
        add_note(exc, note)
    exc.hookkit_layer = layer_name  # type: ignore[attr-defined]
    exc.hookkit_call = call  # type: ignore[attr-defined]
    return exc


class NonFiniteError(HookkitError, FloatingPointError):
    """A NaN or Inf appeared: ``layer`` is the first layer that produced it, ``phase`` is "forward"
    (its output) or "backward" (the gradient w.r.t. its output), with ``call`` and ``step``; or
    ``phase`` "input": ``layer`` received non-finite values that no watched layer made (the parent's
    own code made them after layer ``before``, or the model's input held them).

    >>> with hookkit.watch_nonfinite(model):   # doctest: +SKIP
    ...     model(x).sum().backward()
    NonFiniteError: non-finite values (NaN or Inf) in the forward output of layer 'log' (call 0, step 3)
    """

    def __init__(
        self, layer: str, phase: str, call: int, step: int, detail: str = "", *, before: str | None = None, rank: int | None = None
    ):
        self.layer, self.phase, self.call, self.step = layer, phase, call, step
        self.rank = rank  # the process that saw it, under data-parallel training
        self.before = before  # phase "input": the watched layer that ran last before the bad values appeared
        if phase == "input":
            head = f"non-finite values (NaN or Inf) reached the input of layer {layer!r} (call {call}, step {step}) from outside any watched layer"
            if before is not None:
                parent = layer.rpartition(".")[0] or "(root)"
                msg = f"{head}: they were made in the forward code of its parent {parent!r}, between layer {before!r} and layer {layer!r}"
            else:
                msg = f"{head}: the model's input, or code that runs before the first watched layer, made them"
        else:
            what = "forward output" if phase == "forward" else "gradient w.r.t. the output"
            msg = f"non-finite values (NaN or Inf) in the {what} of layer {layer!r} (call {call}, step {step})"
        super().__init__(msg + (f"; {detail}" if detail else ""))

    # The router annotates exceptions raised in hooks with the hook's own layer; this error already
    # names the layer at fault, so keep that.
    @property
    def hookkit_layer(self) -> str:
        return self.layer

    @hookkit_layer.setter
    def hookkit_layer(self, value: str) -> None:
        pass


# -- argument errors (``core.validate`` re-exports these; ``core.registry`` raises them too) ---------
def _no_framework(value: Any) -> str:
    return ""


#: the registered framework of a value's class; ``core.registry`` sets it (it imports this module)
_framework_of: Callable[[Any], str] = _no_framework


class InvalidArgument(HookkitError, ValueError):
    """A public argument has a value hookkit cannot use (out of range, NaN, wrong length...)."""


class ArgumentTypeError(HookkitError, TypeError, ValueError):
    """A public argument has a type hookkit cannot use (a string for a number, a non-callable...).
    Also a ValueError: code written when these checks raised ValueError keeps catching them."""


_MAX_REPR = 80


def shown(value: Any) -> str:
    """``repr(value)`` cut to 80 characters; a tensor or array as its kind, shape and dtype."""
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype") and not isinstance(value, numbers.Number):
        try:
            dims = ", ".join(str(int(s)) for s in shape)
        except (TypeError, ValueError):
            dims = "?"
        return (
            f"{_framework_of(value) or type(value).__module__.split('.')[0]} {type(value).__name__} of shape [{dims}], dtype {value.dtype}"
        )
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not hide the real error
        text = f"<{type(value).__name__}>"
    return text if len(text) <= _MAX_REPR else text[: _MAX_REPR - 3] + "..."


def fail(
    fn: str | None, arg: str, valid: str, value: Any, *, kind: type[Exception] = InvalidArgument, cause: BaseException | None = None
) -> NoReturn:
    """Raise ``kind`` with hookkit's message: ``fn(): arg must be <valid>; got <value>`` (chained
    to ``cause`` when given: the error that showed the argument unusable). ``fn`` None: the public
    function the user called (``core.entry``)."""
    exc = kind(f"{fn or entry_name()}(): {arg} must be {valid}; got {shown(value)}")
    if cause is not None:
        raise exc from cause
    raise exc
