"""Argument checks at the call: the ONE place where hookkit says what a public argument may be.

Every check raises at the call (never at the first forward), with one message shape:

    gaussian_noise(): std must be a finite number >= 0; got nan

naming the function, the argument, what is valid and what was given (``repr``, shortened). The
errors are ``InvalidArgument`` (a ``ValueError``) for a value out of range and ``ArgumentTypeError``
(a ``TypeError``, and a ``ValueError`` too) for a value of the wrong kind; both are
``hookkit.HookkitError``s, so existing ``except ValueError`` / ``except TypeError`` keep working.
Beside it: ``files`` (``read_json_file``, ``InvalidFile``: files read from elsewhere) and ``guards``
(``output_guard``, ``real_values``: outputs a feature cannot work on, left alone with one
``SkippedOutputWarning``); both names are also importable from here.

>>> check_number(0.1, arg="std", low=0)   # in gaussian_noise: "gaussian_noise(): std must be ..."
0.1
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from typing import Any

from hookkit.core.errors import ArgumentTypeError, HookkitError, InvalidArgument, UnsupportedModel, fail, shown  # noqa: F401 (importable from here)
from hookkit.core.files import MAX_JSON_BYTES, InvalidFile, read_json_file  # noqa: F401 (also importable from here)
from hookkit.core.guards import SkippedOutputWarning, output_guard, real_values, warn_skip  # noqa: F401 (also importable from here)
from hookkit.core.registry import backend_for, framework_of, registered_backends  # framework_of imports nothing

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
    "check_length",
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


# -- numbers --------------------------------------------------------------------------------------
def _is_real(value: Any) -> bool:
    # numbers.Real covers int, float and numpy scalars; bool is an int but never a number here
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and type(value).__name__ != "bool_"


def check_number(
    value: Any,
    *,
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

    >>> check_number(3, arg="k", low=1, integer=True)
    3
    """
    if value is None and optional:
        return None
    if integer:
        ok = _is_real(value) and isinstance(value, numbers.Integral)
    else:
        ok = _is_real(value)
    if not ok:
        fail(None, arg, _describe(low, high, low_open, high_open, finite, integer, optional), value, kind=ArgumentTypeError)
    number = int(value) if integer else float(value)
    bad = (finite and not math.isfinite(number)) or (not integer and math.isnan(number))
    if low is not None:
        bad = bad or (number <= low if low_open else number < low)
    if high is not None:
        bad = bad or (number >= high if high_open else number > high)
    if bad:
        fail(None, arg, _describe(low, high, low_open, high_open, finite, integer, optional), value)
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


def check_int(value: Any, *, arg: str, low: int | None = None, high: int | None = None, optional: bool = False) -> Any:
    """``check_number(..., integer=True)``: an int (not a bool) in ``[low, high]``."""
    return check_number(value, arg=arg, low=low, high=high, integer=True, optional=optional)


def check_probability(value: Any, *, arg: str) -> float:
    """A probability: a finite number in [0, 1]."""
    return check_number(value, arg=arg, low=0.0, high=1.0)


def check_range_pair(value: Any, *, arg: str) -> tuple[float, float]:
    """A ``(low, high)`` pair of finite numbers with low < high (a list or tuple of two)."""
    valid = "a (low, high) pair of finite numbers with low < high"
    if getattr(value, "ndim", None) == 1 and hasattr(value, "tolist"):  # a numpy array of two
        value = value.tolist()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != 2:
        fail(None, arg, valid, value, kind=ArgumentTypeError)
    if not all(_is_real(v) for v in value):
        fail(None, arg, valid, value, kind=ArgumentTypeError)
    lo, hi = float(value[0]), float(value[1])
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        fail(None, arg, valid, value)
    return lo, hi


# -- other kinds ----------------------------------------------------------------------------------
def check_bool(value: Any, *, arg: str) -> bool:
    """True or False (numpy's bool and the ints 0 and 1 too); anything else is a mistake, such as a
    string, which Python would read as True."""
    if isinstance(value, bool) or type(value).__name__ == "bool_" or (isinstance(value, int) and value in (0, 1)):
        return bool(value)
    fail(None, arg, "True or False", value, kind=ArgumentTypeError)


def check_str(value: Any, *, arg: str, optional: bool = False) -> Any:
    """A non-empty string (or None with ``optional``)."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        fail(None, arg, "a string" + (" or None" if optional else ""), value, kind=ArgumentTypeError)
    if not value:
        fail(None, arg, "a non-empty string", value)
    return value


def check_choice(value: Any, choices: Iterable[Any], *, arg: str) -> Any:
    """One of ``choices`` (compared with ==, types must match: ``True`` is not ``1``)."""
    choices = tuple(choices)
    for c in choices:
        if type(value) is type(c) and value == c:
            return value
    fail(None, arg, "one of " + ", ".join(map(repr, choices)), value)


def check_callable(value: Any, *, arg: str, signature: str = "", optional: bool = False) -> Any:
    """A callable (``signature`` says how it is called, for the message)."""
    if value is None and optional:
        return None
    if not callable(value):
        fail(
            None,
            arg,
            "callable" + (f" as {signature}" if signature else "") + (" or None" if optional else ""),
            value,
            kind=ArgumentTypeError,
        )
    return value


def check_length(value: Any, n: int, *, arg: str, what: str) -> Any:
    """``value`` when it holds ``n`` items; ``what`` says which (``"one heatmap per image"``).

    >>> check_length(["a", "b"], 2, arg="labels", what="one label per row")
    ['a', 'b']
    """
    if len(value) != n:
        fail(None, arg, f"{what} ({n})", value)
    return value


def check_model(model: Any, *, arg: str = "model") -> Any:
    """The backend of ``model`` when it is a torch.nn.Module / paddle.nn.Layer (a tensor is refused)."""
    try:
        be = backend_for(model)
    except UnsupportedModel:
        be = None
    if be is None or not be.is_layer(model):
        kinds = ", ".join(registered_backends())
        what = "a model: a layer of " + kinds + " (torch.nn.Module, paddle.nn.Layer; a framework counts once imported)"
        if be is not None:
            what += f"; this is a {be.name} tensor"
        fail(None, arg, what, model, kind=UnsupportedModel)
    return be


def check_tensor_like(
    value: Any,
    backend: Any,
    *,
    arg: str,
    ndim: int | Sequence[int] | None = None,
    convert: bool = True,
) -> Any:
    """A tensor of ``backend``'s framework: a tensor of it is returned as is; with ``convert``, a
    numpy array, a number or a nested list of numbers is converted (float32 unless it is an integer
    array; bool becomes float32 0/1); a tensor of the other framework is refused, naming both. ``ndim``: allowed ranks.

    >>> x = check_tensor_like(np.zeros((2, 3)), backend_for(model), arg="inputs")   # doctest: +SKIP
    """
    import numpy as np

    what = f"a {backend.name} tensor" + (" (or a numpy array)" if convert else "")
    if not backend.is_tensor(value):
        other = framework_of(value)
        if other and other != backend.name:
            fail(None, arg, f"{what}: the model is a {backend.name} model, this is a {other} tensor", value, kind=ArgumentTypeError)
        if not convert or isinstance(value, (str, bytes, dict)) or value is None:
            fail(None, arg, what, value, kind=ArgumentTypeError)
        try:
            array = np.asarray(value)
        except (TypeError, ValueError):
            fail(None, arg, what, value, kind=ArgumentTypeError)
        if array.dtype == object or array.dtype.kind not in "biuf":
            fail(None, arg, what + " of numbers", value, kind=ArgumentTypeError)
        if array.dtype.kind == "f" or array.dtype.kind == "b":
            array = array.astype(np.float32)
        value = backend.from_numpy(np.ascontiguousarray(array))
    if ndim is not None:
        ranks = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        have = len(backend.shape(value))
        if have not in ranks:
            fail(None, arg, f"a tensor with {' or '.join(map(str, ranks))} dims", value)
    return value


def check_runnable(be: Any, model: Any, *, arg: str = "model") -> None:
    """Refuse a model whose weights hold no data (PyTorch's meta device: built under
    ``accelerate.init_empty_weights()``) for a verb that runs it and reads real values; the message
    names the first layer without data and what to do. Layers accelerate loads at call time
    (offloaded to the CPU or disk) are fine."""
    try:
        ops = be.family("meta")
    except NotImplementedError:
        return
    missing = ops.dataless(model)
    if not missing:
        return
    layer, _, tensor = missing[0].rpartition(".")
    where = f"layer {layer!r}" if layer else "the model"
    fail(
        None,
        arg,
        f"a model whose weights hold values: {where} has {tensor!r} without data (meta device; {len(missing)} such tensors), "
        "so no real value can be computed; load its weights (from_pretrained, load_state_dict(..., assign=True), "
        "accelerate's load_checkpoint_and_dispatch) or dispatch it with offloading; hookkit.summary runs such a model "
        "as a dry run",
        be.type_name(model),
    )
