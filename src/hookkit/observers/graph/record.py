"""Recording the graph: forward_pre / forward observers on every layer, tensors matched by identity.

Each call's pre event looks up the tensors it receives (nested tuples, lists, dicts, ModelOutput)
by ``id`` in a table of produced tensors; the entry holds a weak reference, so an id reused by a new
tensor after the first was freed is not mistaken for it (a framework tensor that takes no weak
reference is held until the forward ends). Its forward event registers the tensors it returns: a
tensor a sublayer returned keeps that sublayer as producer (the innermost one), a tensor the call
received and hands back as is (an eval-mode ``Dropout``, ``Identity``) gets the call as producer,
and a new tensor made by a call with sublayers was made by its own code.

A view of a recorded tensor (``x.view(...)``, ``x[0]``; where the backend's ``view_base`` tells)
is drawn as that tensor. A tensor computed by a layer's own code (``x + y``, ``torch.cat``) is a
new object that no recorded call returned: it comes from an *own code* node of the enclosing call,
one per stretch of code between two of its sublayers (``h.0:0/code@2``: the code that ran after its
second sublayer finished), so a block's ``x + attn(ln_1(x))`` is drawn as what it is. An own-code
node is fed by the previous one of the same call (the first by the call's inputs) and by the
outputs of the sublayers that finished before it and that no other call received. Module
boundaries are all the router sees; the operations inside a layer are nodes of their own only
through operation sites (``ops=``).

The hooks do the least they can: a call is a small ``_Call`` (its name, index, layer, enclosing
call), a tensor a ``_Made`` (a weak reference, its producer, the shape and dtype objects as the
framework returns them), an edge a tuple of those; ids, ``Node`` and ``Edge`` objects, shapes as
ints, dtype and type names and parameter counts are made once the forward is over (``build``).
A call without sublayers (a leaf: ``Linear``, ``LayerNorm``, ``Dropout``) has no pre event: nothing
the recorder sees can happen between its start and its end, so its one forward event (``leaf``)
does what the pre event would have done first; where its ``forward`` takes one input the consumer
is a plain one (``leaf_plain``: no Event, its call index counted here, an input given by keyword read
from the framework's call frame). A leaf that raises is found in the traceback; one whose error its
caller catches leaves no node (it never finished).
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from typing import Any

from hookkit.backends import Backend
from hookkit.core.failures import _frames, _self_of
from hookkit.core.router import Event
from hookkit.observers.graph.model import Edge, Node

_SHAPE_ERRORS = (RuntimeError, ValueError, TypeError, AttributeError)  # a nested or sparse tensor without a plain shape


class _Call:
    """A call (the model's own frame too: ``name`` ""): the node it becomes, and while it is open the
    sequence number at its start, its input tensors, its finished sublayers, its own-code nodes."""

    __slots__ = (
        "layer",
        "name",
        "call",
        "parent",
        "start",
        "inputs",
        "finished",
        "marks",
        "segments",
        "outs",
        "error",
        "done",
        "id",
        "depth",
    )

    def __init__(self, layer: Any, name: str, call: int, parent: _Call | None, start: int):
        self.layer, self.name, self.call, self.parent, self.start = layer, name, call, parent, start
        # lists only where needed (a leaf never has sublayers; most calls return one tensor)
        self.inputs: Any = ()  # a list while open
        self.finished = 0  # sublayer calls finished so far
        self.marks: Any = ()  # a list on a frame: the sequence number when each sublayer call finished
        self.segments: dict[int, _Code] | None = None  # own-code nodes by how many sublayers had finished
        self.outs: Any = ()  # a list of _Made once finished
        self.error: str | None = None
        self.done = False
        self.id, self.depth = "", 0  # set by ``build``


class _Code:
    """The own code of ``owner`` that ran after its ``k``-th sublayer finished."""

    __slots__ = ("owner", "k", "error", "done", "id")

    def __init__(self, owner: _Call, k: int):
        self.owner, self.k, self.done, self.id = owner, k, True, ""
        self.error: str | None = None


class _Io:
    """An input or output node of the model (``kind``), the record of its tensor."""

    __slots__ = ("kind", "path", "rec", "id")

    def __init__(self, kind: str, path: str, rec: _Made | None):
        self.kind, self.path, self.rec, self.id = kind, path, rec, f"{kind}:{path}"


class _Made:
    """A recorded tensor: who made it, when, whether a call received it; its shape and dtype as the
    framework gave them (made plain by ``build``)."""

    __slots__ = ("ref", "strong", "producer", "seq", "used", "shape", "dtype", "tensor")

    def __init__(self, ref: Any, strong: Any, producer: Any, seq: int, shape: Any, dtype: Any, tensor: int):
        self.ref, self.strong, self.producer, self.seq, self.tensor = ref, strong, producer, seq, tensor
        self.used = False
        self.shape, self.dtype = shape, dtype

    def obj(self) -> Any:
        return self.strong if self.ref is None else self.ref()


class _Holder:
    """Something with a ``dtype``, for ``Backend.dtype_name`` once the tensor may be gone."""

    __slots__ = ("dtype",)

    def __init__(self, dtype: Any):
        self.dtype = dtype


def walk(obj: Any, is_tensor: Any, path: str, out: list[tuple[str, Any]], depth: int = 0) -> list[tuple[str, Any]]:
    """``(path, tensor)`` for the tensors inside nested tuples, lists and dicts (ModelOutput is a dict)."""
    if is_tensor(obj):
        out.append((path, obj))
    elif depth < 6:
        if isinstance(obj, (tuple, list)):
            for i, o in enumerate(obj):
                walk(o, is_tensor, f"{path}[{i}]", out, depth + 1)
        elif isinstance(obj, dict):
            for k, o in obj.items():
                walk(o, is_tensor, f"{path}.{k}" if path else str(k), out, depth + 1)
    return out


_ATOMS = (str, bytes, int, float, bool, type(None))


def tensors_in(obj: Any, is_tensor: Any, out: list[Any], depth: int = 0) -> list[Any]:
    """The tensors inside nested tuples, lists and dicts, in order (``walk`` without the paths)."""
    if is_tensor(obj):
        out.append(obj)
    elif depth < 6 and not isinstance(obj, _ATOMS):
        if isinstance(obj, (tuple, list)):
            for o in obj:
                if is_tensor(o):
                    out.append(o)
                elif not isinstance(o, _ATOMS):
                    tensors_in(o, is_tensor, out, depth + 1)
        elif isinstance(obj, dict):
            for o in obj.values():
                if is_tensor(o):
                    out.append(o)
                elif not isinstance(o, _ATOMS):
                    tensors_in(o, is_tensor, out, depth + 1)
    return out


_CO_VARARGS, _CO_VARKEYWORDS = 0x04, 0x08


def _call_inputs(frames: list[Any], selves: list[Any], i: int) -> tuple[tuple, dict]:
    """The inputs of the failing call of ``selves[i]``: the ``*args, **kwargs`` of the framework's
    call machinery (a frame of the same layer outside its ``forward``), else the arguments of the
    layer's outermost frame (its ``forward``), by name."""
    layer, outermost = selves[i], i
    for j in range(i - 1, -1, -1):
        if selves[j] is None:
            continue
        if selves[j] is not layer:
            break
        code = frames[j].f_code
        if code.co_flags & _CO_VARARGS:
            local, at = frames[j].f_locals, code.co_argcount + code.co_kwonlyargcount
            kwargs = local.get(code.co_varnames[at + 1], {}) if code.co_flags & _CO_VARKEYWORDS else {}
            return tuple(local.get(code.co_varnames[at], ())), dict(kwargs)
        outermost = j
    code, local = frames[outermost].f_code, frames[outermost].f_locals
    return (), {n: local.get(n) for n in code.co_varnames[1 : code.co_argcount]}


def _caller_inputs(layer: Any) -> tuple[tuple, dict]:
    """The ``*args, **kwargs`` of the framework's call machinery calling ``layer`` now (a frame of the
    layer with ``*args``), from inside its forward hook; ``((), {})`` when none is found."""
    f: Any = sys._getframe(2)
    while f is not None:
        code = f.f_code
        if code.co_flags & _CO_VARARGS and code.co_argcount and code.co_varnames[0] == "self" and f.f_locals.get("self") is layer:
            local, at = f.f_locals, code.co_argcount + code.co_kwonlyargcount
            kwargs = local.get(code.co_varnames[at + 1], {}) if code.co_flags & _CO_VARKEYWORDS else {}
            return tuple(local.get(code.co_varnames[at], ())), dict(kwargs)
        f = f.f_back
    return (), {}


class GraphRecorder:
    """The consumers of one recorded forward: ``pre``/``post`` on the model and on every call with
    sublayers (and operation site), ``leaf`` or ``leaf_plain`` (forward consumers) on every layer
    without sublayers; the root's output through ``root_post_output``. ``build()`` gives the nodes
    and edges."""

    def __init__(
        self,
        be: Backend,
        params: Callable[[Any], int],
        arg_names: list[str],
        op_calls: dict[str, str] | None = None,
        model: Any = None,
        leaves: dict[int, str] | None = None,
    ):
        self.be, self.params, self.arg_names, self.op_calls = be, params, arg_names, op_calls or {}
        self.model = model  # the root: its forward event gives the output nodes (``post``)
        self.leaves = leaves or {}  # id -> name of the layers recorded by ``leaf`` (no pre event)
        self.one_input: set[int] = set()  # ids of the leaves recorded by ``leaf_plain`` instead
        self.view_base, self.is_tensor = be.view_base, be.is_tensor
        self.order: list[Any] = []  # _Io, _Call and _Code: the nodes, in the order they appeared
        self.edges: list[tuple[Any, Any, _Made | None]] = []  # (producer, receiver, the tensor's record)
        self.root = _Call(model, "", 0, None, 0)
        self.root.inputs, self.root.marks = [], []
        self.tensor_types: set[type] = set()  # the types ``is_tensor`` said yes to: a set lookup next time
        self.calls: dict[int, int] = {}  # id -> calls so far, of the leaves recorded by ``leaf_plain``
        self.stack: list[_Call] = []
        self.made: dict[int, _Made] = {}  # id -> the latest tensor recorded with that id
        self.produced: list[_Made] = []  # every record, in order (freed tensors too)
        self.seq = 0
        self.root_started = False
        self.outputs_done = False

    # -- tensors ----------------------------------------------------------------------------------
    def _register(self, t: Any, producer: Any, tensor: int = 0) -> _Made:
        self.seq = seq = self.seq + 1
        try:
            ref, strong = weakref.ref(t), None
        except TypeError:  # a tensor type without weak references: held until the forward ends
            ref, strong = None, t
        try:
            shape, dtype = t.shape, t.dtype  # made plain ints and a name by ``build``
        except _SHAPE_ERRORS:
            shape = dtype = None
        m = self.made[id(t)] = _Made(ref, strong, producer, seq, shape, dtype, tensor or seq)
        self.produced.append(m)
        return m

    def _lookup(self, t: Any) -> _Made | None:
        m = self.made.get(id(t))
        if m is None:
            return None
        ref = m.ref
        return m if (m.strong if ref is None else ref()) is t else None

    def _resolve(self, t: Any) -> _Made | None:
        """The record of ``t``, or of the tensor it is a view of (``x.view(...)`` is drawn as ``x``)."""
        m = self._lookup(t)
        if m is not None:
            return m
        base = self.view_base(t)
        for _ in range(4):
            if base is None:
                return None
            m = self._lookup(base)
            if m is not None:
                return m
            base = self.view_base(base)
        return None

    def _code_of(self, call: _Call) -> _Code:
        """The own-code node of ``call`` for the code running now (after its finished sublayers)."""
        k = call.finished
        segments = call.segments
        if segments is None:
            segments = call.segments = {}
        node = segments.get(k)
        if node is None:
            node = segments[k] = _Code(call, k)
            self.order.append(node)
        return node

    def _received(self, t: Any, by: _Call, frame: _Call) -> None:
        """An edge from the producer of ``t`` (a view's base, or ``frame``'s own code) to ``by``."""
        m = self.made.get(id(t))
        if m is None or (m.strong if m.ref is None else m.ref()) is not t:
            base = self._resolve(t)
            # recorded, so that a sublayer handed the same tensor is matched to the same producer
            m = self._register(t, base.producer, base.tensor) if base is not None else self._register(t, self._code_of(frame))
        m.used = True
        self.edges.append((m.producer, by, m))

    # -- the model's inputs and outputs ------------------------------------------------------------
    def root_pre(self, ev: Event) -> None:
        if self.root_started:
            return
        self.root_started = True
        named: list[tuple[str, Any]] = []
        for i, a in enumerate(ev.args or ()):
            walk(a, self.is_tensor, self.arg_names[i] if i < len(self.arg_names) else f"args[{i}]", named)
        for k, v in (ev.kwargs or {}).items():
            walk(v, self.is_tensor, str(k), named)
        for path, t in named:
            if self._lookup(t) is not None:  # the same tensor passed twice: one input node
                continue
            node = _Io("input", path, None)
            self.order.append(node)
            node.rec = self._register(t, node)
            self.root.inputs.append(t)

    def root_post_output(self, output: Any) -> None:
        if self.outputs_done:
            return
        self.outputs_done = True
        self.finish_outputs(output)

    def finish_outputs(self, output: Any) -> None:
        self.outputs_done = True
        returned: set[int] = set()
        for path, t in walk(output, self.is_tensor, "", []):
            path = path or "output"
            returned.add(id(t))
            m = self._resolve(t)
            if m is None:
                m = self._register(t, self._code_of(self.root))
            m.used = True
            node = _Io("output", path, m)
            self.order.append(node)
            self.edges.append((m.producer, node, m))
        self._feed(self.root, returned)

    # -- every call -----------------------------------------------------------------------------
    def pre(self, ev: Event) -> None:
        if not ev.name:  # the model itself is the frame: its inputs and outputs are nodes
            self.root_pre(ev)
            return
        c = self._open(ev.layer, ev.name, ev.call, ev.args, ev.kwargs)
        c.marks = []  # a frame: its sublayers' ends are marked
        self.stack.append(c)

    def _open(self, layer: Any, name: str, call: int, args: tuple, kwargs: dict | None) -> _Call:
        """A call starting: its node, the edges into it."""
        stack = self.stack
        frame = stack[-1] if stack else self.root
        c = _Call(layer, name, call, frame, self.seq)
        self.order.append(c)
        is_tensor = self.is_tensor
        if len(args) == 1 and not kwargs and is_tensor(args[0]):  # the common call: one tensor
            t = args[0]
            c.inputs = [t]
            self._received(t, c, frame)
        else:
            inputs = c.inputs = []
            tensors_in(args, is_tensor, inputs)
            if kwargs:
                tensors_in(kwargs, is_tensor, inputs)
            if len(inputs) == 1:
                self._received(inputs[0], c, frame)
            else:
                seen: set[int] = set()
                for t in inputs:
                    if id(t) not in seen:
                        seen.add(id(t))
                        self._received(t, c, frame)
        return c

    def leaf(self, ev: Event) -> None:
        """The forward event of a layer without sublayers: its start, then its end."""
        self._leaf(ev.layer, ev.name, ev.call, ev.args, ev.kwargs, ev.output)

    def leaf_plain(self, layer: Any, args: tuple, output: Any) -> None:
        """A plain forward consumer for a leaf whose ``forward`` takes one input (no Event): its name
        and call index kept here; an input given by keyword is read from the framework's call frame."""
        key = id(layer)
        calls = self.calls
        call = calls.get(key, 0)
        calls[key] = call + 1
        if len(args) != 1:
            args, kwargs = _caller_inputs(layer)
            self._leaf(layer, self.leaves[key], call, args, kwargs, output)
            return
        t = args[0]
        types = self.tensor_types
        if type(output) not in types or type(t) not in types:
            self._leaf(layer, self.leaves[key], call, args, None, output)
            return
        self._leaf_common(layer, self.leaves[key], call, t, output)

    def _leaf(self, layer: Any, name: str, call: int, args: tuple, kwargs: dict | None, output: Any) -> None:
        types = self.tensor_types
        if kwargs or len(args) != 1 or type(output) not in types or type(args[0]) not in types:
            if not kwargs and len(args) == 1 and self.is_tensor(output) and self.is_tensor(args[0]):
                types.add(type(output))  # learnt: the next call of this kind takes the path below
                types.add(type(args[0]))
            c = self._open(layer, name, call, args, kwargs)
            c.start = self.seq
            self._close(c, output)
            return
        self._leaf_common(layer, name, call, args[0], output)

    def _leaf_common(self, layer: Any, name: str, call: int, t: Any, output: Any) -> None:
        """A leaf's common call (one tensor in, one tensor out: what most leaves are), ``_open``,
        ``_register`` and ``_close`` inline."""
        stack = self.stack
        frame = stack[-1] if stack else self.root
        c = _Call(layer, name, call, frame, 0)
        self.order.append(c)
        m = self.made.get(id(t))
        if m is None or (m.strong if m.ref is None else m.ref()) is not t:
            self._received(t, c, frame)
        else:
            m.used = True
            self.edges.append((m.producer, c, m))
        # nothing recorded runs inside a leaf: what it returns is new, or its input handed back (Dropout
        # in eval), made by the leaf either way
        self.seq = seq = self.seq + 1
        try:
            ref, strong = weakref.ref(output), None
        except TypeError:  # a tensor type without weak references: held until the forward ends
            ref, strong = None, output
        try:
            shape, dtype = output.shape, output.dtype
        except _SHAPE_ERRORS:
            shape = dtype = None
        m = self.made[id(output)] = _Made(ref, strong, c, seq, shape, dtype, seq)
        self.produced.append(m)
        c.outs = [m]
        c.done = True
        frame.finished += 1
        frame.marks.append(seq)

    def post(self, layer: Any, args: tuple, output: Any) -> None:
        """A plain forward consumer (no Event): the call finishing is the innermost open call of ``layer``."""
        # find this call's frame; frames above it belong to calls whose exceptions were swallowed
        stack = self.stack
        if stack and stack[-1].layer is layer:
            call = stack.pop()
        else:
            for i in range(len(stack) - 1, -1, -1):
                if stack[i].layer is layer:
                    call = stack[i]
                    del stack[i:]
                    break
            else:
                if layer is self.model:
                    self.root_post_output(output)
                return
        self._close(call, output)

    def _close(self, call: _Call, output: Any) -> None:
        call.done = True
        is_tensor, made = self.is_tensor, self.made
        start = call.start
        if is_tensor(output):
            m = made.get(id(output))
            if m is None or m.seq <= start or (m.strong if m.ref is None else m.ref()) is not output:
                # new, or received and handed back as is (Dropout in eval): a call with sublayers
                # made it in its own code, a leaf made it itself
                m = self._register(output, self._code_of(call) if call.marks else call)
            call.outs = [m]  # else a sublayer's output handed on: the sublayer made it
            if call.segments:
                self._feed(call, {id(output)})
        else:
            returned: set[int] = set()
            outs = call.outs = []
            for t in tensors_in(output, is_tensor, []):
                if id(t) in returned:
                    continue
                returned.add(id(t))
                m = made.get(id(t))
                if m is None or m.seq <= start or (m.strong if m.ref is None else m.ref()) is not t:
                    m = self._register(t, self._code_of(call) if call.marks else call)
                outs.append(m)
            if call.segments:
                self._feed(call, returned)
        call.inputs = ()  # the call's tensors are not held once it has finished
        frame = call.parent
        assert frame is not None
        frame.finished += 1
        frame.marks.append(self.seq)

    def _feed(self, call: _Call, returned: set[int]) -> None:
        """Edges into a call's own-code nodes: the previous one (the first: the call's inputs), and
        the outputs of its sublayers that finished before it and that no call received."""
        if not call.segments:
            return
        segments = sorted(call.segments.items())
        first = segments[0][1]
        edges = self.edges
        seen: set[int] = set()
        for t in call.inputs:
            m = self._lookup(t)
            if m is not None and m.producer is not first and m.tensor not in seen:
                seen.add(m.tensor)
                edges.append((m.producer, first, m))
        for (_, a), (_, b) in zip(segments, segments[1:]):
            edges.append((a, b, None))
        dangling = []
        start = call.start
        for m in reversed(self.produced):
            if m.seq <= start:
                break
            if m.used:
                continue
            p = m.producer
            if type(p) is _Code and p.owner is call:
                continue
            obj = m.obj()
            if obj is not None and id(obj) in returned:
                continue
            dangling.append(m)
        marks = call.marks
        for m in reversed(dangling):
            # the first own-code node that ran after the sublayer which made it finished
            for k, seg in segments:
                if k >= 1 and marks[k - 1] >= m.seq:
                    m.used = True
                    edges.append((m.producer, seg, m))
                    break

    # -- a forward that raised --------------------------------------------------------------------
    def fail(self, exc: BaseException) -> str | None:
        """Put the error on the innermost open call (or the model's own code when none is open)."""
        message = f"{type(exc).__name__}: {exc}"
        self._open_failed_leaf(exc)
        hook_layer = getattr(exc, "hookkit_layer", None)
        failing: _Call | None = None
        if hook_layer is not None:
            failing = next((c for c in reversed(self.stack) if c.name == hook_layer), None)
        if failing is None and self.stack:
            failing = self.stack[-1]
        if failing is None:
            seg = self._code_of(self.root)
            seg.error, seg.done = message, False
            self._feed(self.root, set())
            return None
        failing.error = message
        if failing.marks:  # it has sublayers: expanded, the error shows on the code that ran after the last one
            seg = self._code_of(failing)
            seg.error, seg.done = message, False
            self._feed(failing, set())
        return failing.name

    def _open_failed_leaf(self, exc: BaseException) -> None:
        """A leaf has no pre event: when the innermost layer frame of the traceback is a leaf's, the
        call is opened now, with the positional inputs its frame holds."""
        frames = _frames(exc.__traceback__)
        selves = [_self_of(f) for f in frames]
        hooked = {id(c.layer) for c in self.stack}
        for i in range(len(frames) - 1, -1, -1):
            s = selves[i]
            if s is None:
                continue
            if id(s) in hooked or s is self.model:
                return
            if id(s) in self.leaves:
                name = self.leaves[id(s)]
                call = sum(1 for c in self.order if type(c) is _Call and c.layer is s)
                args, kwargs = _call_inputs(frames, selves, i)
                self.stack.append(self._open(s, name, call, args, kwargs))
                return

    # -- the graph, once the forward is over ------------------------------------------------------
    def build(self) -> tuple[list[Node], list[Edge]]:
        """The nodes (ids, names, shapes as ints, dtype and type names, parameter counts) and edges."""
        self._plain_records()
        types: dict[int, str] = {}
        nodes: list[Node] = []
        for s in self.order:
            kind = type(s)
            if kind is _Call:
                node = self._call_node(s, types)
            elif kind is _Code:
                owner = s.owner
                s.id = f"{owner.id}/code@{s.k}" if owner.id else f"code@{s.k}"
                node = Node(
                    s.id, "code", owner.name, "(own code)", owner.call, owner.depth + 1, owner.id or None, error=s.error, finished=s.done
                )
            else:
                m = s.rec
                node = Node(s.id, s.kind, s.path, s.kind, depth=0, shapes=[m.shape or []], dtypes=[m.dtype])
            nodes.append(node)
        edges = [
            Edge(src.id, dst.id, m.shape, m.dtype, 1, m.tensor) if m is not None else Edge(src.id, dst.id) for src, dst, m in self.edges
        ]
        return nodes, edges

    def _plain_records(self) -> None:
        """Each record's shape as a list of ints and its dtype's name (read once per dtype)."""
        be = self.be
        dtypes: dict[Any, str] = {}
        for m in self.produced:
            shape = m.shape
            if shape is not None:
                m.shape = list(map(int, shape))
                dt = m.dtype
                name = dtypes.get(dt)
                if name is None:
                    name = dtypes[dt] = be.dtype_name(_Holder(dt))
                m.dtype = name
            else:
                m.dtype = ""

    def _call_node(self, s: _Call, types: dict[int, str]) -> Node:
        """The node of a layer call or an operation site (its id and depth kept on ``s`` for its children)."""
        parent = s.parent
        assert parent is not None
        s.id = f"{s.name}:{s.call}"
        depth = s.depth = parent.depth + 1
        op_call = self.op_calls.get(s.name) if self.op_calls else None
        if op_call is None:
            layer = s.layer
            type_name = types.get(id(layer))
            if type_name is None:
                type_name = types[id(layer)] = self.be.type_name(layer)
            node_kind, count = "layer", self.params(layer)
        else:
            node_kind, type_name, count = "op", op_call, 0
        outs = s.outs
        if len(outs) == 1:
            m = outs[0]
            shapes, names = [m.shape or []], [m.dtype]
        else:
            shapes, names = [m.shape or [] for m in outs], [m.dtype for m in outs]
        return Node(s.id, node_kind, s.name, type_name, s.call, depth, parent.id or None, shapes, names, count, s.error, s.done)

    def release(self) -> None:
        """Drop every reference to the forward's tensors."""
        self.made.clear()
        self.produced.clear()
        self.stack.clear()
        self.root.inputs = []
        self.tensor_types.clear()
