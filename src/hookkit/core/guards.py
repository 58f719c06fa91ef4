"""Hot-path guards: layer outputs a feature cannot work on (an integer output for dropout, a complex
one for statistics) are left as they are, with one warning, never a crash in the user's forward."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

from hookkit.core.entry import entry_name, restored
from hookkit.core.user_frame import user_stacklevel


class SkippedOutputWarning(UserWarning):
    """A feature met a layer output it cannot work on (an integer output for dropout, a complex one
    for statistics) and left it as it was. Warned once per feature, layer and dtype."""


_warned: set[tuple[str, str, str]] = set()


def warn_skip(layer: str, dtype: str, why: str) -> None:
    """Warn once (per function, layer and dtype) that the entry's function (at forward time: the
    name the consumer restored, ``core.entry.restored``) left layer ``layer``'s output alone."""
    fn = entry_name()
    key = (fn, layer, dtype)
    if key in _warned:
        return
    _warned.add(key)
    where = f"layer {layer!r}" if layer else "the model (root)"
    msg = f"{fn}(): left the {dtype} output of {where} unchanged: {why} (warned once)"
    warnings.warn(msg, SkippedOutputWarning, stacklevel=user_stacklevel())  # the user's line


def output_guard(backend: Any, op: Callable[..., Any], *, kinds: Sequence[str] = ("float",)) -> Callable[..., Any]:
    """``op(t, *args)`` made safe for any output: ``guarded(t, *args, layer=name)`` returns ``t``
    unchanged (warning once) when its dtype kind ("float", "complex", "int", "bool") is not in
    ``kinds``, returns an empty ``t`` as it is, and runs ``op`` in float32 (cast back) where the
    framework has no kernels for ``t``'s dtype on its device (half precision on Paddle's CPU).
    Its warning names the entry's public function, taken now (the warning comes at forward time)."""
    name = entry_name()
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
            with restored(name):
                warn_skip(layer, dtype_name(t), f"it applies to {what} outputs")
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
    mean and histogram are not defined the way the entry's function reports them. Hot paths skip the call for
    dtypes already found real: ``if id(t.dtype) not in ok.real and not ok(t, name): return`` (by id:
    dtypes are singletons, and hashing a Paddle dtype costs ~0.5 us)."""

    __slots__ = ("real", "_name", "_kind_of", "_dtype_name")

    def __init__(self, backend: Any):
        self.real: set[int] = set()
        self._name = entry_name()  # the warning comes at forward time, outside the entry
        self._kind_of, self._dtype_name = backend.dtype_kind, backend.dtype_name

    def __call__(self, t: Any, layer: str) -> bool:
        if id(t.dtype) in self.real:
            return True
        if self._kind_of(t) != "complex":
            self.real.add(id(t.dtype))
            return True
        with restored(self._name):
            warn_skip(layer, self._dtype_name(t), "statistics are taken of real values (record t.abs() or t.real with a hook)")
        return False


def real_values(backend: Any) -> RealValues:
    """The ``RealValues`` check of the entry's function on ``backend``'s tensors."""
    return RealValues(backend)
