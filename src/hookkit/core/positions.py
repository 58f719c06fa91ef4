"""Token positions and generation steps: where a forward sits in a sequence, computed once per root
forward and carried by every event (``ev.offset``, ``ev.gen_step``, ``ev.tokens``).

Under a KV cache a forward feeds only the new tokens: its layers' outputs cover the absolute
positions ``offset .. offset + tokens - 1``, where ``offset`` is how many positions the cache held
when the forward started. A forward whose cache is empty (or that has none) starts a new sequence
at generation step 0; each later forward continuing the cache is one step more. What a cache looks
like is the backend's business (``Backend.family("tokens")``); this module only counts.

``Positions`` and ``Steps`` parse the ``positions=`` / ``steps=`` arguments of ``capture``,
``patch``, ``ablate``, ``steer`` and ``edit`` and answer, for one layer call, which positions of its
output are selected.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from typing import Any

from hookkit.core.architectures import token_dim
from hookkit.core.entry import entry_name
from hookkit.core.registry import backend_for
from hookkit.core.validate import ArgumentTypeError, InvalidArgument, fail
from hookkit.core.weakmap import IdentityWeakMap

KEYWORDS = ("all", "last", "prompt", "generated")


class TokenPos:
    """Where one root forward sits: ``offset`` (positions the cache held before it), ``tokens`` (how
    many it feeds; None when no token input was found), ``gen_step`` (0 for the forward that starts a
    sequence, +1 per cached forward after it), ``seq`` (which sequence of the root, -1 for calls made
    outside any root forward), ``prompt`` (the tokens of the sequence's step 0) and ``cached``
    (whether the forward was given a cache, so that later forwards may continue it)."""

    __slots__ = ("offset", "tokens", "gen_step", "seq", "prompt", "cached")

    def __init__(self, offset: int, tokens: int | None, gen_step: int, seq: int, prompt: int | None, cached: bool):
        self.offset, self.tokens, self.gen_step, self.seq, self.prompt, self.cached = offset, tokens, gen_step, seq, prompt, cached

    def __repr__(self) -> str:
        return f"TokenPos(offset={self.offset}, tokens={self.tokens}, gen_step={self.gen_step}, seq={self.seq})"


# Calls outside a root forward (an encoder-decoder's encoder, which generate() runs on its own; a
# layer called directly): positions count from 0 along the call's own output, generation step 0.
OUTSIDE = TokenPos(0, None, 0, -1, None, False)


class Sequences:
    """One root's sequence counter: turns each root forward's ``(offset, tokens, cached)`` into a
    ``TokenPos``. Owned by the root's clock; the previous forward is the calling thread's."""

    __slots__ = ("count", "_ops", "_dim", "__weakref__")

    def __init__(self) -> None:
        self.count = 0
        self._ops: Any = None  # the backend's tokens family, False where it has none
        self._dim: int | None = None

    def begin(self, backend: Any, root: Any, args: tuple, kwargs: dict, prev: TokenPos | None) -> TokenPos:
        """The position of the root forward starting now with ``args, kwargs``."""
        ops = self._ops
        if ops is None:
            try:
                ops = backend.family("tokens")
            except (NotImplementedError, ImportError, TypeError):  # a backend without the family
                ops = False
            else:
                self._dim = _kept_token_dim(backend, root, ops)
            self._ops = ops
        if ops is False:
            return OUTSIDE
        offset, tokens, cached = ops.forward_info(args, kwargs, self._dim)
        if offset == 0 or prev is None or prev.seq < 0:
            self.count += 1
            prompt = None if tokens is None else offset + tokens
            return TokenPos(offset, tokens, 0, self.count, prompt, cached)
        return TokenPos(offset, tokens, prev.gen_step + 1, prev.seq, prev.prompt, cached)


# -- the token axis ---------------------------------------------------------------------------------
# A root's clock (and its Sequences) starts afresh with each context opened on an idle model: its
# token axis is kept per model while the backend's watch says the model's tree is unchanged.
_token_dims: IdentityWeakMap[tuple[Any, int | None]] = IdentityWeakMap()


def _kept_token_dim(backend: Any, root: Any, ops: Any) -> int | None:
    kept = _token_dims.get(root)
    if kept is not None and kept[0]() is not None:
        return kept[1]
    dim = model_token_dim(root, ops)
    watch = backend.tree_watch(root, [("", root)])
    if watch is not None:
        _token_dims[root] = (watch, dim)
    return dim


def model_token_dim(model: Any, ops: Any = None) -> int | None:
    """The token axis of ``model`` as far as hookkit knows it: the model-family registry
    (``hookkit.core.architectures``) first, then the backend's ``tokens`` family (``ops``: it, when
    the caller has it), which knows the frameworks' own transformer layers; None when neither does."""

    dim = token_dim(model, default=None)
    if dim is not None:
        return dim
    if ops is None:
        try:
            ops = backend_for(model).family("tokens")
        except (NotImplementedError, ImportError, TypeError):
            return None
    return ops.token_dim(model)


def token_dim_of(model: Any, token_dim: int | None = None) -> int:
    """The token axis of ``model``'s activations: ``token_dim`` when given, else what the backend
    knows of the model's family (``model_token_dim``: 1 for ``transformers`` models and ``paddle.nn``
    transformers).

    >>> token_dim_of(gpt2)   # doctest: +SKIP
    1
    """
    fn = entry_name("positions")
    if token_dim is not None:
        if isinstance(token_dim, bool) or not isinstance(token_dim, int) or token_dim < 0:
            fail(fn, "token_dim", "None (the model's own) or an int >= 0 (the token axis of its activations)", token_dim)
        return token_dim
    dim = model_token_dim(model)
    if dim is None:
        raise InvalidArgument(
            f"{fn}: {type(model).__name__} has no known token axis (it is not a transformers model or a "
            "paddle.nn transformer): pass token_dim= (the axis of its activations that counts tokens, 1 for [batch, tokens, ...])"
        )
    return dim


# -- steps= -------------------------------------------------------------------------------------------
def check_steps(steps: Any) -> Any:
    """``steps=``: None, an int >= 0, a list of them or a range -> something supporting ``in``."""
    if steps is None:
        return None
    valid = "None, an int >= 0 (generation step, 0 = the prompt forward), a list of them or a range"
    if isinstance(steps, range):
        if steps.step <= 0 or steps.start < 0:
            fail(None, "steps", valid, steps)
        return steps
    items = [steps] if isinstance(steps, numbers.Integral) and not isinstance(steps, bool) else steps
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        fail(None, "steps", valid, steps, kind=ArgumentTypeError)
    items = list(items)
    for s in items:
        if isinstance(s, bool) or not isinstance(s, numbers.Integral):
            fail(None, "steps", valid, steps, kind=ArgumentTypeError)
        if s < 0:
            fail(None, "steps", valid, steps)
    return frozenset(int(s) for s in items)


# -- positions= -------------------------------------------------------------------------------------
class Selection:
    """The selected positions of one call: ``index`` along the token axis of the output (a slice or
    a list), ``absolute`` the same positions counted from the start of the sequence (a range or a
    list), ``whole`` when every position of the output is selected."""

    __slots__ = ("index", "absolute", "whole")

    def __init__(self, index: Any, absolute: Any, whole: bool):
        self.index, self.absolute, self.whole = index, absolute, whole


def _span(positions: range, lo: int, hi: int, offset: int) -> Selection | None:
    a, b = max(lo, positions.start), min(hi, positions.stop)
    if a >= b:
        return None
    return Selection(slice(a - offset, b - offset), range(a, b), a == positions.start and b == positions.stop)


_VALID = f"an int >= 0, a list of them, a slice, or one of {', '.join(map(repr, KEYWORDS))}"


class Positions:
    """A parsed ``positions=`` argument: ints (absolute positions), a list of them, a slice
    (``slice(8, None)``: from 8 on), ``"all"``, ``"last"`` (the newest position of each forward),
    ``"prompt"`` (the positions of the forward that started the sequence) or ``"generated"`` (every
    later one)."""

    __slots__ = ("spec", "kind", "explicit", "start", "stop", "step", "name")

    def __init__(self, spec: Any):
        self.spec = spec
        self.name = entry_name()  # errors at forward time (select) name the function it was given to
        self.explicit: tuple[int, ...] = ()  # positions that must be reached
        self.start = 0  # kind "from": the first position
        self.stop: int | None = None
        self.step = 1
        if isinstance(spec, str):
            if spec not in KEYWORDS:
                fail(None, "positions", _VALID, spec)
            self.kind = spec
        elif isinstance(spec, slice):
            self._from_slice(spec)
        else:
            self.kind, self.explicit = "set", _listed(spec)

    def _from_slice(self, spec: slice) -> None:
        fn = self.name
        start, stop, step = spec.start or 0, spec.stop, 1 if spec.step is None else spec.step
        for v in (start, stop, step):
            if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Integral)):
                fail(fn, "positions", _VALID, spec, kind=ArgumentTypeError)
        if start < 0 or (stop is not None and stop < 0) or step < 1:
            fail(fn, "positions", f"{_VALID} (a slice of absolute positions: bounds >= 0, step >= 1)", spec)
        if stop is None:
            self.kind, self.start, self.step = "from", int(start), int(step)
        else:
            self.kind, self.explicit = "set", tuple(range(start, stop, step))
            if not self.explicit:
                fail(fn, "positions", f"{_VALID} (this slice selects nothing)", spec)

    def __repr__(self) -> str:
        return f"positions={self.spec!r}"

    def select(self, pos: TokenPos, length: int, layer: str) -> Selection | None:
        """The selected positions of an output of ``length`` entries along the token axis, produced
        by a call in the forward at ``pos``; None when none is selected."""
        kind = self.kind
        if kind == "all":
            return Selection(slice(0, length), None, True)
        if kind == "last":
            base = pos.offset + (length if pos.tokens is None or not pos.cached else pos.tokens)
            return Selection(slice(length - 1, length), range(base - 1, base), length == 1)
        offset = pos.offset
        if pos.cached and pos.tokens is not None and length != pos.tokens:
            raise InvalidArgument(
                f"{self.name}: layer {layer!r} gives {length} positions along the token axis where its forward feeds "
                f"{pos.tokens} (generation step {pos.gen_step}): it does not see every position (an lm_head run on the "
                f"last position only), so absolute positions cannot be placed on it; use positions='last' or 'all' there"
            )
        if not pos.cached:
            offset = 0
        span = range(offset, offset + length)
        if kind == "prompt":
            end = offset + length if not pos.cached or pos.prompt is None else pos.prompt
            return _span(span, 0, end, offset)
        if kind == "generated":
            return None if not pos.cached or pos.prompt is None else _span(span, pos.prompt, span.stop, offset)
        found = self._from_on(span) if kind == "from" else self._listed_in(span, pos, length, layer)
        if not found:
            return None
        if len(found) == 1 or found[-1] - found[0] == len(found) - 1:
            return Selection(slice(found[0] - offset, found[-1] + 1 - offset), range(found[0], found[-1] + 1), len(found) == length)
        return Selection([p - offset for p in found], found, False)

    def _from_on(self, span: range) -> list[int]:
        """Kind "from": the positions of ``span`` from ``start`` on, every ``step``."""
        first = max(self.start, span.start)
        first += (-(first - self.start)) % self.step
        return list(range(first, span.stop, self.step))

    def _listed_in(self, span: range, pos: TokenPos, length: int, layer: str) -> list[int]:
        """Kind "set": the listed positions within ``span`` (past its end without a cache: an error)."""
        if not pos.cached and self.explicit[-1] >= span.stop:
            past = [p for p in self.explicit if p >= span.stop]
            raise InvalidArgument(
                f"{self.name}: position{'s' if len(past) > 1 else ''} {', '.join(map(str, past[:8]))} "
                f"past the end of the forward on layer {layer!r}: it has {length} positions (0..{length - 1}) "
                "and no cache to continue it"
            )
        return [p for p in self.explicit if span.start <= p < span.stop]


def _listed(spec: Any) -> tuple[int, ...]:
    """``positions=`` as an int or a list of ints: the sorted distinct positions."""
    items = [spec] if isinstance(spec, numbers.Integral) and not isinstance(spec, bool) else spec
    if isinstance(items, (bytes, dict)) or not isinstance(items, Iterable):
        fail(None, "positions", _VALID, spec, kind=ArgumentTypeError)
    items = list(items)
    if not items:
        fail(None, "positions", _VALID + " (this list is empty)", spec)
    for p in items:
        if isinstance(p, bool) or not isinstance(p, numbers.Integral):
            fail(None, "positions", _VALID, spec, kind=ArgumentTypeError)
        if p < 0:
            fail(None, "positions", f"{_VALID} (absolute positions from the start of the sequence, >= 0)", spec)
    return tuple(sorted({int(p) for p in items}))


class Reach:
    """Which explicit positions a consumer met, per layer and sequence, so that a generation that
    ended before one of them is reported (at the next sequence and when the handle's ``with`` ends)."""

    __slots__ = ("positions", "seen")

    def __init__(self, positions: Positions):
        self.positions = positions
        self.seen: dict[str, tuple[int, set[int], int]] = {}  # layer -> (seq, reached, end)

    def note(self, layer: str, pos: TokenPos, sel: Selection | None, length: int) -> None:
        if not self.positions.explicit or not pos.cached:
            return
        entry = self.seen.get(layer)
        if entry is None or entry[0] != pos.seq:
            if entry is not None:
                self.check(layer)
            entry = self.seen[layer] = (pos.seq, set(), 0)
        if sel is not None:
            entry[1].update(sel.absolute)
        end = pos.offset + length
        if end > entry[2]:
            self.seen[layer] = (entry[0], entry[1], end)

    def missing(self) -> dict[str, list[int]]:
        """Layer -> explicit positions its latest sequence never reached."""
        out = {}
        for layer, (_, reached, _) in self.seen.items():
            lost = [p for p in self.positions.explicit if p not in reached]
            if lost:
                out[layer] = lost
        return out

    def check(self, layer: str | None = None) -> None:
        """Raise for positions the latest sequence of ``layer`` (or of any layer) never reached."""
        for name, lost in self.missing().items():
            if layer is not None and name != layer:
                continue
            end = self.seen[name][2]
            del self.seen[name]
            raise InvalidArgument(
                f"{self.positions.name}: position{'s' if len(lost) > 1 else ''} {', '.join(map(str, lost[:8]))} of "
                f"{self.positions!r} never reached on layer {name!r}: the generation ended at position {end - 1} "
                f"({end} positions); generate more tokens or select positions below {end}"
            )
