"""Argument checks at the call: the ONE place where hookkit says what a public argument may be.

Every check raises at the call (never at the first forward), with one message shape:

    gaussian_noise(): std must be a finite number >= 0; got nan

naming the function, the argument, what is valid and what was given (``repr``, shortened). The
errors are ``InvalidArgument`` (a ``ValueError``) for a value out of range and ``ArgumentTypeError``
(a ``TypeError``, and a ``ValueError`` too) for a value of the wrong kind; both are
``hookkit.HookkitError``s, so existing ``except ValueError`` / ``except TypeError`` keep working.
Files read from elsewhere raise ``InvalidFile``; outputs a feature cannot work on are left alone
with one ``SkippedOutputWarning`` (``output_guard``, ``real_values``).

>>> check_number(0.1, fn="gaussian_noise", arg="std", low=0)
0.1
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn

from hookkit.backends import framework_of  # the registered framework of an object, importing nothing
from hookkit.core.errors import HookkitError

__all__ = [
    "MAX_JSON_BYTES",
    "read_json_file",
    "ArgumentTypeError",
    "InvalidArgument",
    "InvalidFile",
    "SkippedOutputWarning",
    "check_bool",
    "check_callable",
    "check_choice",
    "check_int",
    "check_model",
    "check_number",
    "check_probability",
    "check_range_pair",
    "check_str",
    "check_tensor_like",
    "fail",
    "framework_of",
    "output_guard",
    "real_values",
    "shown",
    "warn_skip",
]


class InvalidArgument(HookkitError, ValueError):
    """A public argument has a value hookkit cannot use (out of range, NaN, wrong length...)."""


class InvalidFile(HookkitError, ValueError):
    """A file hookkit was asked to read (saved statistics, a report folder) is not what it should
    be: outside its folder, not valid JSON, a field of the wrong type or shape. Names file and field."""


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
            f"{framework_of(value) or type(value).__module__.split('.')[0]} {type(value).__name__} of shape [{dims}], dtype {value.dtype}"
        )
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not hide the real error
        text = f"<{type(value).__name__}>"
    return text if len(text) <= _MAX_REPR else text[: _MAX_REPR - 3] + "..."


def fail(fn: str, arg: str, valid: str, value: Any, *, kind: type[Exception] = InvalidArgument) -> NoReturn:
    """Raise ``kind`` with hookkit's message: ``fn(): arg must be <valid>; got <value>``."""
    raise kind(f"{fn}(): {arg} must be {valid}; got {shown(value)}")


# -- numbers --------------------------------------------------------------------------------------
MAX_JSON_BYTES = 64 << 20  # a summary of a 10k-layer model is ~5 MB


def read_json_file(path: Any, what: str) -> Any:
    """Parse a JSON file from elsewhere as data: refused with ``InvalidFile`` naming ``path`` when it
    is larger than ``MAX_JSON_BYTES``, not UTF-8, not JSON or nested too deeply. ``what`` says what
    the file is for ("a report", "a statistics file"). NaN and Infinity (json.dump's) are read.

    >>> read_json_file("run1/summary.json", "a report")   # doctest: +SKIP
    """
    import json
    import os

    size = os.path.getsize(path)
    if size > MAX_JSON_BYTES:
        raise InvalidFile(f"{path}: {size:,} bytes, more than the {MAX_JSON_BYTES:,} {what} reads from one JSON file")
    try:
        with open(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise InvalidFile(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise InvalidFile(f"{path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    except RecursionError:
        raise InvalidFile(f"{path}: JSON nested too deeply") from None


def _is_real(value: Any) -> bool:
    # numbers.Real covers int, float and numpy scalars; bool is an int but never a number here
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and type(value).__name__ != "bool_"


def check_number(
    value: Any,
    *,
    fn: str,
    arg: str,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    finite: bool = True,
    integer: bool = False,
    optional: bool = False,
) -> Any:
    """``value`` as a Python float (int with ``integer=True``) when it is a real number in range.

    ``low``/``high`` bound it (closed, or open with ``low_open``/``high_open``); ``finite`` refuses
    NaN and +-Inf; ``optional`` lets None through.

    >>> check_number(3, fn="f", arg="k", low=1, integer=True)
    3
    """
    if value is None and optional:
        return None
    if integer:
        ok = _is_real(value) and isinstance(value, numbers.Integral)
    else:
        ok = _is_real(value)
    if not ok:
        fail(fn, arg, _describe(low, high, low_open, high_open, finite, integer, optional), value, kind=ArgumentTypeError)
    number = int(value) if integer else float(value)
    bad = (finite and not math.isfinite(number)) or (not integer and math.isnan(number))
    if low is not None:
        bad = bad or (number <= low if low_open else number < low)
    if high is not None:
        bad = bad or (number >= high if high_open else number > high)
    if bad:
        fail(fn, arg, _describe(low, high, low_open, high_open, finite, integer, optional), value)
    return number


def _describe(low: Any, high: Any, low_open: bool, high_open: bool, finite: bool, integer: bool, optional: bool) -> str:
    what = "an int" if integer else ("a finite number" if finite else "a number (not NaN)")
    if low is not None and high is not None:
        what += f" in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    elif low is not None:
        what += f" {'>' if low_open else '>='} {low:g}"
    elif high is not None:
        what += f" {'<' if high_open else '<='} {high:g}"
    return what + (" or None" if optional else "")


def check_int(value: Any, *, fn: str, arg: str, low: int | None = None, high: int | None = None, optional: bool = False) -> Any:
    """``check_number(..., integer=True)``: an int (not a bool) in ``[low, high]``."""
    return check_number(value, fn=fn, arg=arg, low=low, high=high, integer=True, optional=optional)


def check_probability(value: Any, *, fn: str, arg: str) -> float:
    """A probability: a finite number in [0, 1]."""
    return check_number(value, fn=fn, arg=arg, low=0.0, high=1.0)


def check_range_pair(value: Any, *, fn: str, arg: str) -> tuple[float, float]:
    """A ``(low, high)`` pair of finite numbers with low < high (a list or tuple of two)."""
    valid = "a (low, high) pair of finite numbers with low < high"
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != 2:
        fail(fn, arg, valid, value, kind=ArgumentTypeError)
    if not all(_is_real(v) for v in value):
        fail(fn, arg, valid, value, kind=ArgumentTypeError)
    lo, hi = float(value[0]), float(value[1])
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        fail(fn, arg, valid, value)
    return lo, hi


# -- other kinds ----------------------------------------------------------------------------------
def check_bool(value: Any, *, fn: str, arg: str) -> bool:
    """True or False (numpy's bool and the ints 0 and 1 too); anything else is a mistake, such as a
    string, which Python would read as True."""
    if isinstance(value, bool) or type(value).__name__ == "bool_" or (isinstance(value, int) and value in (0, 1)):
        return bool(value)
    fail(fn, arg, "True or False", value, kind=ArgumentTypeError)


def check_str(value: Any, *, fn: str, arg: str, optional: bool = False) -> Any:
    """A non-empty string (or None with ``optional``)."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        fail(fn, arg, "a string" + (" or None" if optional else ""), value, kind=ArgumentTypeError)
    if not value:
        fail(fn, arg, "a non-empty string", value)
    return value


def check_choice(value: Any, choices: Iterable[Any], *, fn: str, arg: str) -> Any:
    """One of ``choices`` (compared with ==, types must match: ``True`` is not ``1``)."""
    choices = tuple(choices)
    for c in choices:
        if type(value) is type(c) and value == c:
            return value
    fail(fn, arg, "one of " + ", ".join(map(repr, choices)), value)


def check_callable(value: Any, *, fn: str, arg: str, signature: str = "", optional: bool = False) -> Any:
    """A callable (``signature`` says how it is called, for the message)."""
    if value is None and optional:
        return None
    if not callable(value):
        fail(
            fn,
            arg,
            "callable" + (f" as {signature}" if signature else "") + (" or None" if optional else ""),
            value,
            kind=ArgumentTypeError,
        )
    return value


def check_model(model: Any, *, fn: str, arg: str = "model") -> Any:
    """The backend of ``model`` when it is a torch.nn.Module / paddle.nn.Layer (a tensor is refused)."""
    from hookkit.backends import backend_for, registered_backends
    from hookkit.core.errors import UnsupportedModel

    try:
        be = backend_for(model)
    except UnsupportedModel:
        be = None
    if be is None or not be.is_layer(model):
        kinds = ", ".join(registered_backends())
        what = "a model: a layer of " + kinds + " (torch.nn.Module, paddle.nn.Layer; a framework counts once imported)"
        if be is not None:
            what += f"; this is a {be.name} tensor"
        fail(fn, arg, what, model, kind=UnsupportedModel)
    return be


def check_tensor_like(
    value: Any,
    backend: Any,
    *,
    fn: str,
    arg: str,
    ndim: int | Sequence[int] | None = None,
    convert: bool = True,
) -> Any:
    """A tensor of ``backend``'s framework: a tensor of it is returned as is; with ``convert``, a
    numpy array, a number or a nested list of numbers is converted (float32 unless it is an integer
    array; bool becomes float32 0/1); a tensor of the other framework is refused, naming both. ``ndim``: allowed ranks.

    >>> x = check_tensor_like(np.zeros((2, 3)), backend_for(model), fn="gradcam", arg="inputs")   # doctest: +SKIP
    """
    import numpy as np

    what = f"a {backend.name} tensor" + (" (or a numpy array)" if convert else "")
    if not backend.is_tensor(value):
        other = framework_of(value)
        if other and other != backend.name:
            fail(fn, arg, f"{what}: the model is a {backend.name} model, this is a {other} tensor", value, kind=ArgumentTypeError)
        if not convert or isinstance(value, (str, bytes, dict)) or value is None:
            fail(fn, arg, what, value, kind=ArgumentTypeError)
        try:
            array = np.asarray(value)
        except (TypeError, ValueError):
            fail(fn, arg, what, value, kind=ArgumentTypeError)
        if array.dtype == object or array.dtype.kind not in "biuf":
            fail(fn, arg, what + " of numbers", value, kind=ArgumentTypeError)
        if array.dtype.kind == "f" or array.dtype.kind == "b":
            array = array.astype(np.float32)
        value = backend.from_numpy(np.ascontiguousarray(array))
    if ndim is not None:
        ranks = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        have = len(backend.shape(value))
        if have not in ranks:
            fail(fn, arg, f"a tensor with {' or '.join(map(str, ranks))} dims", value)
    return value


# -- outputs a feature cannot use: skipped with one warning, never a crash in the user's forward ----
class SkippedOutputWarning(UserWarning):
    """A feature met a layer output it cannot work on (an integer output for dropout, a complex one
    for statistics) and left it as it was. Warned once per feature, layer and dtype."""


_warned: set[tuple[str, str, str]] = set()


def warn_skip(fn: str, layer: str, dtype: str, why: str) -> None:
    """Warn once (per function, layer and dtype) that ``fn`` left layer ``layer``'s output alone."""
    key = (fn, layer, dtype)
    if key in _warned:
        return
    _warned.add(key)
    where = f"layer {layer!r}" if layer else "the model (root)"
    warnings.warn(f"{fn}(): left the {dtype} output of {where} unchanged: {why} (warned once)", SkippedOutputWarning, stacklevel=2)


def output_guard(backend: Any, op: Callable[..., Any], *, fn: str, kinds: Sequence[str] = ("float",)) -> Callable[..., Any]:
    """``op(t, *args)`` made safe for any output: ``guarded(t, *args, layer=name)`` returns ``t``
    unchanged (warning once) when its dtype kind ("float", "complex", "int", "bool") is not in
    ``kinds``, returns an empty ``t`` as it is, and runs ``op`` in float32 (cast back) where the
    framework has no kernels for ``t``'s dtype on its device (half precision on Paddle's CPU)."""
    kind_of, compute_dtype, dtype_name, is_empty, cast = (
        backend.dtype_kind,
        backend.compute_dtype,
        backend.dtype_name,
        backend.is_empty,
        backend.cast,
    )
    allowed = frozenset(kinds)
    what = " or ".join(f"{k}ing-point" if k == "float" else k for k in kinds)

    skip, direct, maybe_upcast = 0, 1, 2
    # per dtype, decided once. Keyed by id: dtype objects are singletons of their framework, and
    # hashing a Paddle dtype costs ~0.5 us (a dict lookup by id: ~40 ns)
    plan: dict[int, int] = {}

    def guarded(t: Any, *args: Any, layer: str = "") -> Any:
        key = id(t.dtype)
        how = plan.get(key)
        if how is None:
            half = dtype_name(t) in ("float16", "bfloat16")
            how = plan[key] = skip if kind_of(t) not in allowed else maybe_upcast if half else direct
        if how == skip:
            warn_skip(fn, layer, dtype_name(t), f"it applies to {what} outputs")
            return t
        if is_empty(t):
            return t
        work = compute_dtype(t) if how == maybe_upcast else None  # also depends on the device
        if work is None:
            return op(t, *args)
        return cast(op(cast(t, work), *args), dtype_name(t))

    return guarded


class RealValues:
    """``ok(t, layer) -> bool`` for statistics: False (and one warning) for complex tensors, whose
    mean and histogram are not defined the way ``fn`` reports them. Hot paths skip the call for
    dtypes already found real: ``if id(t.dtype) not in ok.real and not ok(t, name): return`` (by id:
    dtypes are singletons, and hashing a Paddle dtype costs ~0.5 us)."""

    __slots__ = ("real", "_fn", "_kind_of", "_dtype_name")

    def __init__(self, backend: Any, fn: str):
        self.real: set[int] = set()
        self._fn, self._kind_of, self._dtype_name = fn, backend.dtype_kind, backend.dtype_name

    def __call__(self, t: Any, layer: str) -> bool:
        if id(t.dtype) in self.real:
            return True
        if self._kind_of(t) != "complex":
            self.real.add(id(t.dtype))
            return True
        warn_skip(self._fn, layer, self._dtype_name(t), "statistics are taken of real values (record t.abs() or t.real with a hook)")
        return False


def real_values(backend: Any, fn: str) -> RealValues:
    """The ``RealValues`` check of ``fn`` on ``backend``'s tensors."""
    return RealValues(backend, fn)
