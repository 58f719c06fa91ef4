"""``reduce=`` of ``hookkit.extract``: per-layer reductions applied at hook time, on the tensor's
device, before anything is copied to the host (mean / max over dims, one position or a slice of
dim 1, a user function)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hookkit.backends import Backend
from hookkit.core.select import _glob_regex
from hookkit.observers.features import ExtractError


@dataclass(frozen=True)
class Reduction:
    """What ``reduce=`` asks for one layer, applied at hook time on the tensor's device.

    ``op``: "mean" / "max" over ``dims`` (dims dropped), "token" (index ``index`` along dim 1, which
    is dropped), "slice" (``slice`` along dim 1), or "fn" (``fn(tensor) -> tensor``)."""

    op: str
    dims: tuple[int, ...] = ()
    index: int = 0
    slice: Any = None
    fn: Any = None

    def describe(self) -> str:
        if self.op in ("mean", "max"):
            return f"{self.op}:{','.join(map(str, self.dims))}"
        if self.op == "token":
            return f"token:{self.index}"
        if self.op == "slice":
            s = self.slice
            return f"slice:{'' if s.start is None else s.start}:{'' if s.stop is None else s.stop}" + (f":{s.step}" if s.step else "")
        return f"fn:{getattr(self.fn, '__module__', '?')}.{getattr(self.fn, '__qualname__', type(self.fn).__name__)}"

    def apply(self, be: Backend, t: Any, key: str) -> Any:
        if self.op in ("mean", "max"):
            nd = len(be.shape(t))
            dims = tuple(d + nd if d < 0 else d for d in self.dims)
            if any(not 0 < d < nd for d in dims):
                raise ExtractError(
                    f"extract(reduce=...): {self.describe()!r} for {key!r}: its output has {nd} dims, valid dims are 1..{nd - 1} (dim 0 is the samples)"
                )
            return be.reduce(t, self.op, dims)
        if self.op in ("token", "slice"):
            if len(be.shape(t)) < 2:
                raise ExtractError(
                    f"extract(reduce=...): {self.describe()!r} for {key!r} indexes dim 1, but its output has shape {list(be.shape(t))}"
                )
            return t[:, self.index] if self.op == "token" else t[:, self.slice]
        r = self.fn(t)
        if not be.is_tensor(r):
            raise ExtractError(
                f"extract(reduce=...): the function {self.describe()[3:]} returned {type(r).__name__} for {key!r}, not a tensor"
            )
        return r


ReduceSpec = None | str | int | slice | Callable[[Any], Any] | Reduction
_VALID = "'mean:DIMS', 'max:DIMS' (like 'mean:1' or 'mean:2,3'), 'token:I', 'slice:START:STOP', an int (token), a slice, a function tensor -> tensor, or None"


def parse_reduce(spec: Any) -> Reduction | None:
    """One reduction from its spelling (see ``extract``'s ``reduce=``)."""
    if spec is None or isinstance(spec, Reduction):
        return spec
    if isinstance(spec, bool):
        raise ExtractError(f"extract(reduce=...): got {spec!r}; valid: {_VALID}")
    if isinstance(spec, int):
        return Reduction("token", index=spec)
    if isinstance(spec, slice):
        return Reduction("slice", slice=spec)
    if isinstance(spec, str):
        return _parse_text(spec)
    if callable(spec):
        return Reduction("fn", fn=spec)
    raise ExtractError(f"extract(reduce=...): got {type(spec).__name__}; valid: {_VALID}, or a dict layer -> one of these")


_NONE = Reduction("none")  # "none": no reduction (parse_reduce returns None)


def _parse_text(spec: str) -> Reduction | None:
    """``"mean:1"``, ``"max:2,3"``, ``"token:-1"``, ``"slice:0:4"`` or ``"none"``."""
    op, _, arg = spec.strip().partition(":")
    try:
        found = _TEXT[op](arg) if op in _TEXT and (bool(arg) != (op == "none")) else _NONE
    except ValueError:
        found = _NONE
    if found is _NONE:
        raise ExtractError(f"extract(reduce=...): cannot read {spec!r}; valid: {_VALID}")
    return found


def _slice(arg: str) -> Reduction | None:
    parts = [int(p) if p.strip() else None for p in arg.split(":")]
    if len(parts) > 3:
        return _NONE
    return Reduction("slice", slice=slice(*parts) if len(parts) > 1 else slice(parts[0], None))


_TEXT: dict[str, Callable[[str], Reduction | None]] = {
    "mean": lambda arg: Reduction("mean", dims=tuple(int(d) for d in arg.split(","))),
    "max": lambda arg: Reduction("max", dims=tuple(int(d) for d in arg.split(","))),
    "token": lambda arg: Reduction("token", index=int(arg)),
    "slice": _slice,
    "none": lambda arg: None,
}


def reductions_for(reduce: Any, names: list[str]) -> dict[str, Reduction | None]:
    """``reduce=`` (one spec, or ``{layer or glob: spec}``) -> each layer's reduction."""
    if not isinstance(reduce, Mapping):
        r = parse_reduce(reduce)
        return {n: r for n in names}
    out: dict[str, Reduction | None] = {n: None for n in names}
    for pattern, spec in reduce.items():  # later entries win, as in a dict literal read top-down
        if not isinstance(pattern, str):
            raise ExtractError(f"extract(reduce={{...}}): keys are layer names or globs; got {pattern!r}")
        rx = _glob_regex(pattern)
        hits = [n for n in names if n == pattern or rx.fullmatch(n)]
        if not hits:
            raise ExtractError(f"extract(reduce={{{pattern!r}: ...}}): matches none of the extracted layers: {', '.join(names)}")
        r = parse_reduce(spec)
        for n in hits:
            out[n] = r
    return out
