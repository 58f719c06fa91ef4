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
"""

from __future__ import annotations

import weakref
from typing import Any

from hookkit.backends import Backend
from hookkit.core.router import Event
from hookkit.observers.graph.model import Edge, Node


class _Call:
    """An open call (the model itself too, ``node`` None): its node, the sequence number at its
    start, its input tensors, its finished sublayers, its own-code nodes."""

    __slots__ = ("node", "id", "start", "inputs", "finished", "marks", "segments", "layer")

    def __init__(self, node: Node | None, start: int, inputs: list[Any], layer: Any = None):
        self.node, self.start, self.inputs, self.layer = node, start, inputs, layer
        self.id = node.id if node is not None else ""
        self.finished = 0  # sublayer calls finished so far
        self.marks: list[int] = []  # the sequence number when each sublayer call finished
        self.segments: dict[int, Node] = {}  # own-code nodes by how many sublayers had finished


class _Made:
    """A recorded tensor: who made it, when, whether a call received it."""

    __slots__ = ("ref", "strong", "producer", "seq", "used", "shape", "dtype", "tensor")

    def __init__(self, ref: Any, strong: Any, producer: str, seq: int, shape: list[int] | None, dtype: str, tensor: int):
        self.ref, self.strong, self.producer, self.seq, self.tensor = ref, strong, producer, seq, tensor
        self.used = False
        self.shape, self.dtype = shape, dtype

    def obj(self) -> Any:
        return self.strong if self.ref is None else self.ref()


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


class GraphRecorder:
    """The consumers of one recorded forward (``pre``/``post`` on every layer; ``root_pre`` on the model; the root's output through ``root_post_output``)."""

    def __init__(
        self, be: Backend, params: dict[int, int], arg_names: list[str], op_calls: dict[str, str] | None = None, model: Any = None
    ):
        self.be, self.params, self.arg_names, self.op_calls = be, params, arg_names, op_calls or {}
        self.model = model  # the root: its forward event gives the output nodes (``post``)
        self.view_base, self.is_tensor = be.view_base, be.is_tensor
        self.types: dict[int, str] = {}  # id(layer) -> its type name, read once per layer
        self.dtypes: dict[Any, str] = {}  # dtype -> its name, read once per dtype
        self.nodes: list[Node] = []
        self.edges: list[Edge] = []
        self.root = _Call(None, 0, [])
        self.stack: list[_Call] = []
        self.made: dict[int, _Made] = {}  # id -> the latest tensor recorded with that id
        self.produced: list[_Made] = []  # every record, in order (freed tensors too)
        self.seq = 0
        self.root_started = False
        self.outputs_done = False

    # -- tensors ----------------------------------------------------------------------------------
    def _describe(self, t: Any) -> tuple[list[int] | None, str]:
        try:
            dt = t.dtype
            dtype = self.dtypes.get(dt)
            if dtype is None:
                dtype = self.dtypes[dt] = self.be.dtype_name(t)
            return list(self.be.shape(t)), dtype
        except (RuntimeError, ValueError, TypeError, AttributeError):  # a nested or sparse tensor without a plain shape
            return None, ""

    def _register(self, t: Any, producer: str, tensor: int = 0) -> _Made:
        self.seq = seq = self.seq + 1
        try:
            ref, strong = weakref.ref(t), None
        except TypeError:  # a tensor type without weak references: held until the forward ends
            ref, strong = None, t
        shape, dtype = self._describe(t)
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

    def _code_of(self, call: _Call) -> str:
        """The own-code node of ``call`` for the code running now (after its finished sublayers)."""
        k = call.finished
        node = call.segments.get(k)
        if node is None:
            parent = call.node
            node = Node(
                id=f"{call.id}/code@{k}" if call.id else f"code@{k}",
                kind="code",
                name=parent.name if parent is not None else "",
                type="(own code)",
                call=parent.call if parent is not None else 0,
                depth=parent.depth + 1 if parent is not None else 1,
                parent=parent.id if parent is not None else None,
            )
            call.segments[k] = node
            self.nodes.append(node)
        return node.id

    def _edge(self, src: str, dst: str, m: _Made | None, t: Any = None) -> None:
        shape, dtype = (m.shape, m.dtype) if m is not None else self._describe(t)
        self.edges.append(Edge(src, dst, shape, dtype, 1, m.tensor if m is not None else 0))

    def _received(self, t: Any, by: str, frame: _Call) -> None:
        """An edge from the producer of ``t`` (a view's base, or ``frame``'s own code) to ``by``."""
        m = self.made.get(id(t))
        if m is not None and (m.strong if m.ref is None else m.ref()) is not t:
            m = None
        if m is None:
            base = self._resolve(t)
            # recorded, so that a sublayer handed the same tensor is matched to the same producer
            m = self._register(t, base.producer, base.tensor) if base is not None else self._register(t, self._code_of(frame))
        m.used = True
        self._edge(m.producer, by, m)

    # -- the model's inputs and outputs ------------------------------------------------------------
    def root_pre(self, ev: Event) -> None:
        if self.root_started:
            return
        self.root_started = True
        named: list[tuple[str, Any]] = []
        for i, a in enumerate(ev.args or ()):
            walk(a, self.be.is_tensor, self.arg_names[i] if i < len(self.arg_names) else f"args[{i}]", named)
        for k, v in (ev.kwargs or {}).items():
            walk(v, self.be.is_tensor, str(k), named)
        for path, t in named:
            if self._lookup(t) is not None:  # the same tensor passed twice: one input node
                continue
            shape, dtype = self._describe(t)
            node = Node(id=f"input:{path}", kind="input", name=path, type="input", depth=0, shapes=[shape or []], dtypes=[dtype])
            self.nodes.append(node)
            self._register(t, node.id)
            self.root.inputs.append(t)

    def root_post_output(self, output: Any) -> None:
        if self.outputs_done:
            return
        self.outputs_done = True
        self.finish_outputs(output)

    def finish_outputs(self, output: Any) -> None:
        self.outputs_done = True
        returned: set[int] = set()
        for path, t in walk(output, self.be.is_tensor, "", []):
            path = path or "output"
            returned.add(id(t))
            m = self._resolve(t)
            if m is None:
                m = self._register(t, self._code_of(self.root))
            m.used = True
            node = Node(id=f"output:{path}", kind="output", name=path, type="output", depth=0, shapes=[m.shape or []], dtypes=[m.dtype])
            self.nodes.append(node)
            self._edge(m.producer, node.id, m)
        self._feed(self.root, returned)

    # -- every call -----------------------------------------------------------------------------
    def pre(self, ev: Event) -> None:
        name = ev.name
        if name == "":  # the model itself is the frame: its inputs and outputs are nodes
            self.root_pre(ev)
            return
        stack = self.stack
        frame = stack[-1] if stack else self.root
        parent = frame.node
        layer = ev.layer
        op_call = self.op_calls.get(name) if self.op_calls else None
        if op_call is None:
            kind, type_name = "layer", self.types.get(id(layer))
            if type_name is None:
                type_name = self.types[id(layer)] = self.be.type_name(layer)
        else:
            kind, type_name = "op", op_call
        node = Node(
            f"{name}:{ev.call}",
            kind,
            name,
            type_name,
            ev.call,
            parent.depth + 1 if parent is not None else 1,
            parent.id if parent is not None else None,
            params=self.params.get(id(layer), 0),
            finished=False,
        )
        self.nodes.append(node)
        args, is_tensor = ev.args, self.is_tensor
        if len(args) == 1 and not ev.kwargs and is_tensor(args[0]):  # the common call: one tensor
            inputs = [args[0]]
            self._received(args[0], node.id, frame)
        else:
            inputs = tensors_in(args, is_tensor, [])
            if ev.kwargs:
                tensors_in(ev.kwargs, is_tensor, inputs)
            seen: set[int] = set()
            for t in inputs:
                if id(t) not in seen:
                    seen.add(id(t))
                    self._received(t, node.id, frame)
        stack.append(_Call(node, self.seq, inputs, layer))

    def post(self, layer: Any, args: tuple, output: Any) -> None:
        """A plain forward consumer (no Event): the call finishing is the innermost open call of ``layer``."""
        # find this call's frame; frames above it belong to calls whose exceptions were swallowed
        stack = self.stack
        for i in range(len(stack) - 1, -1, -1):
            if stack[i].layer is layer:
                call = stack[i]
                del stack[i:]
                break
        else:
            if layer is self.model:
                self.root_post_output(output)
            return
        node = call.node
        assert node is not None
        node.finished = True
        is_tensor, made = self.is_tensor, self.made
        outs = [output] if is_tensor(output) else tensors_in(output, is_tensor, [])
        returned: set[int] = set()
        for t in outs:
            if id(t) in returned:
                continue
            returned.add(id(t))
            m = made.get(id(t))
            if m is None or m.seq <= call.start or (m.strong if m.ref is None else m.ref()) is not t:
                # new, or received and handed back as is (Dropout in eval): a call with sublayers
                # made it in its own code, a leaf made it itself
                m = self._register(t, self._code_of(call) if call.marks else node.id)
            node.shapes.append(m.shape or [])  # else a sublayer's output handed on: the sublayer made it
            node.dtypes.append(m.dtype)
        if call.segments:
            self._feed(call, returned)
        frame = stack[-1] if stack else self.root
        frame.finished += 1
        frame.marks.append(self.seq)

    def _feed(self, call: _Call, returned: set[int]) -> None:
        """Edges into a call's own-code nodes: the previous one (the first: the call's inputs), and
        the outputs of its sublayers that finished before it and that no call received."""
        segments = sorted(call.segments.items())
        if not segments:
            return
        first = segments[0][1].id
        seen: set[int] = set()
        for t in call.inputs:
            m = self._lookup(t)
            if m is not None and m.producer != first and m.tensor not in seen:
                seen.add(m.tensor)
                self._edge(m.producer, first, m)
        for (_, a), (_, b) in zip(segments, segments[1:]):
            self.edges.append(Edge(a.id, b.id))
        dangling = []
        for m in reversed(self.produced):
            if m.seq <= call.start:
                break
            if m.used or m.producer.startswith(f"{call.id}/code@" if call.id else "code@"):
                continue
            obj = m.obj()
            if obj is not None and id(obj) in returned:
                continue
            dangling.append(m)
        for m in reversed(dangling):
            # the first own-code node that ran after the sublayer which made it finished
            for k, seg in segments:
                if k >= 1 and call.marks[k - 1] >= m.seq:
                    m.used = True
                    self._edge(m.producer, seg.id, m)
                    break

    # -- a forward that raised --------------------------------------------------------------------
    def fail(self, exc: BaseException) -> str | None:
        """Put the error on the innermost open call (or the model's own code when none is open)."""
        message = f"{type(exc).__name__}: {exc}"
        hook_layer = getattr(exc, "hookkit_layer", None)
        failing: _Call | None = None
        if hook_layer is not None:
            failing = next((c for c in reversed(self.stack) if c.node is not None and c.node.name == hook_layer), None)
        if failing is None and self.stack:
            failing = self.stack[-1]
        if failing is None or failing.node is None:
            self._code_of(self.root)
            node = self.root.segments[self.root.finished]
            node.error, node.finished = message, False
            self._feed(self.root, set())
            return None
        failing.node.error = message
        if failing.marks:  # it has sublayers: expanded, the error shows on the code that ran after the last one
            self._code_of(failing)
            seg_node = failing.segments[failing.finished]
            seg_node.error, seg_node.finished = message, False
            self._feed(failing, set())
        return failing.node.name

    def release(self) -> None:
        """Drop every reference to the forward's tensors."""
        self.made.clear()
        self.produced.clear()
        self.stack.clear()
