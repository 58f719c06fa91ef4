"""The tensor side of token positions: checking a layer's output has the token axis, taking the
selected positions out of it and putting edited ones back (``capture``, ``patch``, ``ablate``,
``steer``, ``edit`` with ``positions=``), and joining per-step records into one sequence
(``capture.sequence``). The ops are the backend's ``tokens`` family."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hookkit.core.entry import entry_name, restored
from hookkit.core.positions import Positions, Selection
from hookkit.core.tree import leaves
from hookkit.core.validate import InvalidArgument


def token_length(be: Any, t: Any, dim: int, layer: str) -> int:
    """The length of ``t`` along the token axis ``dim``; a clear error when it has no such axis."""
    shape = be.shape(t)
    if len(shape) <= dim:
        raise InvalidArgument(
            f"{entry_name()}: the output of layer {layer!r} has shape [{', '.join(map(str, shape))}]: no token axis {dim} "
            "(positions= needs outputs laid out [batch, tokens, ...]; pass token_dim= for another layout)"
        )
    return int(shape[dim])


def tensor_at(be: Any, output: Any, index: int, layer: str) -> Any:
    """The tensor at ``index`` among ``output``'s tensors (depth first)."""
    if be.is_tensor(output):
        found = [output]
    else:
        found = leaves(output, be.is_tensor)
    if index >= len(found):
        raise InvalidArgument(
            f"{entry_name()}: layer {layer!r} returns {len(found)} tensor{'s' if len(found) != 1 else ''} "
            f"({type(output).__name__}); index={index} is out of range"
        )
    return found[index]


def select_output(be: Any, ev: Any, spec: Positions, dim: int, index: int) -> tuple[Any, Any] | None:
    """``(selected slice, absolute positions)`` of the output tensor at ``index`` for ``capture``;
    None when the call holds none of the positions (at forward time: errors name ``spec``'s function)."""
    with restored(spec.name):
        t = tensor_at(be, ev.output, index, ev.name)
        sel = spec.select(ev.pos, token_length(be, t, dim, ev.name), ev.name)
    if sel is None:
        return None
    if sel.whole:
        return t, sel.absolute
    return be.family("tokens").take(t, dim, sel.index), sel.absolute


def edit_at_positions(
    be: Any, t: Any, ev: Any, spec: Positions, dim: int, reach: Any, fn: Callable[[Any, int, Any], Any], leaf: int
) -> Any:
    """``t`` with ``fn(part, leaf, ev)`` applied to its selected positions (``ev.selected``: their
    absolute positions while ``fn`` runs)."""
    with restored(spec.name):  # at forward time: errors name the function ``spec`` was given to
        length = token_length(be, t, dim, ev.name)
    sel: Selection | None = spec.select(ev.pos, length, ev.name)
    if reach is not None:
        reach.note(ev.name, ev.pos, sel, length)
    if sel is None:
        return t
    ev.selected = sel.absolute
    try:
        if sel.whole:
            return fn(t, leaf, ev)
        ops = be.family("tokens")
        part = ops.take(t, dim, sel.index)
        new = fn(part, leaf, ev)
        if new is part:
            return t
        if be.shape(new) != be.shape(part):
            raise InvalidArgument(
                f"{spec.name}: the replacement for positions {_shown(sel.absolute)} of layer {ev.name!r} has shape "
                f"[{', '.join(map(str, be.shape(new)))}]; the selected slice has shape [{', '.join(map(str, be.shape(part)))}]"
            )
        return ops.put(t, dim, sel.index, new)
    finally:
        ev.selected = None


def _shown(positions: Any) -> str:
    p = list(positions)
    return ", ".join(map(str, p[:8])) + (", ..." if len(p) > 8 else "")


_FN = "capture.sequence"


def stitch(be: Any, name: str, records: list, dim: int, index: int, call: int | None, selected: bool) -> Any:
    """Join the records of ``name``'s latest sequence along ``dim`` (see ``capture.sequence``)."""
    with restored(_FN):
        return _stitch(be, name, records, dim, index, call, selected)


def _stitch(be: Any, name: str, records: list, dim: int, index: int, call: int | None, selected: bool) -> Any:
    fn = _FN
    if not records:
        raise KeyError(f"layer {name!r} has not run since the capture started")
    last = records[-1]
    if last.output is None:
        raise InvalidArgument(f"{fn}: the capture kept no outputs of layer {name!r} (capture(..., outputs=False))")
    if last.pos is None or last.pos.seq < 0:
        return tensor_at(be, last.output, index, name)  # run outside the root's forward (an encoder): as is
    mine = _latest_call(records, last.pos.seq, name, call)
    if selected:
        pieces = [tensor_at(be, r.output, index, name) for r in mine]
    else:
        pieces = _joinable(be, mine, name, dim, index)
    if len(pieces) == 1:
        return pieces[0]
    return be.family("tensor_math").cat(pieces, dim)


def _latest_call(records: list, seq: int, name: str, call: int | None) -> list:
    """The records of sequence ``seq`` of one call of the layer (``call``, or its only one)."""
    mine = [r for r in records if r.pos is not None and r.pos.seq == seq]
    calls = sorted({r.call for r in mine})
    if call is None:
        if len(calls) > 1:
            raise InvalidArgument(f"{_FN}: layer {name!r} runs {len(calls)} times per forward (calls {calls}): pass call= to pick one")
        call = calls[0]
    elif call not in calls:
        raise InvalidArgument(f"{_FN}: layer {name!r} has no call {call} in its latest sequence; its calls: {calls}")
    return [r for r in mine if r.call == call]


def _joinable(be: Any, mine: list, name: str, dim: int, index: int) -> list:
    """The records' tensors, checked to follow each other along the token axis."""
    pieces = []
    expected = 0
    for r in mine:
        t = tensor_at(be, r.output, index, name)
        length = token_length(be, t, dim, name)
        pos = r.pos
        if pos.cached and pos.tokens is not None and length != pos.tokens:
            raise InvalidArgument(
                f"{_FN}: layer {name!r} does not see every position: at generation step {pos.gen_step} it gave {length} "
                f"position{'s' if length != 1 else ''} where the forward fed {pos.tokens} (an lm_head that generate() runs on "
                "the last position only); its records cannot be joined into the sequence (cap.calls(name) has them per step)"
            )
        start = pos.offset if pos.cached else 0
        if start != expected:
            raise InvalidArgument(
                f"{_FN}: the records of layer {name!r} start at position {start} at generation step {pos.gen_step} where "
                f"position {expected} was expected: some steps of the sequence were not recorded (capture(keep=...), "
                "steps=, or a capture started during the generation)"
            )
        expected = start + length
        pieces.append(t)
    return pieces
