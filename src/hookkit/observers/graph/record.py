"""Recording the graph: forward_pre / forward observers on every layer, tensors matched by identity.

Each call's pre event looks up the tensors it receives (nested tuples, lists, dicts, ModelOutput)
by ``id`` in a table of produced tensors; the entry holds a weak reference, so an id reused by a new
tensor after the first was freed is not mistaken for it (a framework tensor that takes no weak
reference is held until the forward ends). Its forward event registers the tensors it returns: a
tensor a sublayer returned keeps that sublayer as producer (the innermost one), a tensor the call
received and hands back as is (an eval-mode ``Dropout``, ``Identity``) gets the call as producer,
and a new tensor made by a call with sublayers was made by its own code.

A view or a tensor computed by a layer's own code (``x + y``, ``x.view(...)``, ``torch.cat``) is a
new object that no recorded call returned: it is drawn as coming from the enclosing call's *own
code* node, which is fed by that call's inputs and by the outputs of its sublayers that no other
call received. Module boundaries are all the router sees; the operations inside a layer are nodes
of their own only through operation sites (``ops=``).
"""

from __future__ import annotations

import weakref
from typing import Any

from hookkit.backends import Backend
from hookkit.core.router import Event
from hookkit.observers.graph.model import Edge, Node


class _Call:
    """An open call: its node, the sequence number at its start, its input tensors."""

    __slots__ = ("node", "start", "inputs", "has_children", "code_out")

    def __init__(self, node: Node, start: int, inputs: list[Any]):
        self.node, self.start, self.inputs = node, start, inputs
        self.has_children = False
        self.code_out = False  # its own code made a tensor that flowed on


class _Made:
    """A produced tensor: who made it, when, whether a call received it."""

    __slots__ = ("ref", "strong", "producer", "seq", "used", "shape", "dtype")

    def __init__(self, ref: Any, strong: Any, producer: str, seq: int, shape: list[int] | None, dtype: str):
        self.ref, self.strong, self.producer, self.seq = ref, strong, producer, seq
        self.used = False
        self.shape, self.dtype = shape, dtype

    def alive_as(self, t: Any) -> bool:
        obj = self.strong if self.ref is None else self.ref()
        return obj is t


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


class GraphRecorder:
    """The consumers of one recorded forward (``pre``/``post`` on every layer; ``root_pre``/``root_post`` on the model)."""

    def __init__(self, be: Backend, params: dict[int, int], arg_names: list[str]):
        self.be, self.params, self.arg_names = be, params, arg_names
        self.nodes: list[Node] = []
        self.edges: list[Edge] = []
        self.stack: list[_Call] = []
        self.made: dict[int, _Made] = {}  # id -> the latest tensor registered with that id
        self.produced: list[_Made] = []  # every registration, in order (freed tensors too)
        self.seq = 0
        self.code_nodes: dict[str, Node] = {}
        self.root_started = False
        self.outputs_done = False
        self.root_inputs: list[Any] = []

    # -- tensors ----------------------------------------------------------------------------------
    def _describe(self, t: Any) -> tuple[list[int] | None, str]:
        try:
            return list(self.be.shape(t)), self.be.dtype_name(t)
        except (RuntimeError, ValueError, TypeError):  # a nested or sparse tensor without a plain shape
            return None, ""

    def _register(self, t: Any, producer: str) -> _Made:
        self.seq += 1
        try:
            ref, strong = weakref.ref(t), None
        except TypeError:
            ref, strong = None, t
        shape, dtype = self._describe(t)
        m = self.made[id(t)] = _Made(ref, strong, producer, self.seq, shape, dtype)
        self.produced.append(m)
        return m

    def _lookup(self, t: Any) -> _Made | None:
        m = self.made.get(id(t))
        return m if m is not None and m.alive_as(t) else None

    def _code_of(self, call: _Call | None) -> str:
        """The id of ``call``'s own-code node (the model's own code at the top), made on first use."""
        if call is None:
            key, parent, depth, name = "/code", None, 1, ""
        else:
            call.code_out = True
            key, parent, depth, name = call.node.id + "/code", call.node.id, call.node.depth + 1, call.node.name
        if key not in self.code_nodes:
            node = Node(id=key, kind="code", name=name, type="(own code)", call=call.node.call if call else 0, depth=depth, parent=parent)
            self.code_nodes[key] = node
            self.nodes.append(node)
        return key

    def _edge(self, src: str, dst: str, m: _Made | None, t: Any = None) -> None:
        shape, dtype = (m.shape, m.dtype) if m is not None else self._describe(t)
        self.edges.append(Edge(src, dst, shape, dtype))

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
            self.root_inputs.append(t)

    def root_post(self, ev: Event) -> None:
        if self.outputs_done:
            return
        self.outputs_done = True
        self.finish_outputs(ev.output)

    def finish_outputs(self, output: Any) -> None:
        for path, t in walk(output, self.be.is_tensor, "", []):
            path = path or "output"
            m = self._lookup(t)
            src = m.producer if m is not None else self._code_of(None)
            shape, dtype = (m.shape, m.dtype) if m is not None else self._describe(t)
            node = Node(id=f"output:{path}", kind="output", name=path, type="output", depth=0, shapes=[shape or []], dtypes=[dtype])
            self.nodes.append(node)
            if m is not None:
                m.used = True
            self._edge(src, node.id, m, t)
        if "/code" in self.code_nodes:
            self._feed("/code", self.root_inputs, 0, set())

    # -- every call -----------------------------------------------------------------------------
    def pre(self, ev: Event) -> None:
        name = ev.name
        if name == "":  # the model itself is the frame: its inputs and outputs are nodes
            return
        parent = self.stack[-1] if self.stack else None
        kind = "op" if "::" in name else "layer"
        try:
            type_name = self.be.type_name(ev.layer)
        except Exception:  # noqa: BLE001 - a pseudo-layer of an operation site may have no class name to give
            type_name = type(ev.layer).__name__
        node = Node(
            id=f"{name}:{ev.call}",
            kind=kind,
            name=name,
            type=type_name,
            call=ev.call,
            depth=parent.node.depth + 1 if parent is not None else 1,
            parent=parent.node.id if parent is not None else None,
            params=self.params.get(id(ev.layer), 0),
            finished=False,
        )
        if parent is not None:
            parent.has_children = True
        self.nodes.append(node)
        inputs = walk((ev.args, ev.kwargs), self.be.is_tensor, "", [])
        seen: set[int] = set()
        for _, t in inputs:
            if id(t) in seen:
                continue
            seen.add(id(t))
            m = self._lookup(t)
            if m is not None:
                m.used = True
                self._edge(m.producer, node.id, m)
            else:  # made by the enclosing call's own code (or a view of a known tensor)
                self._edge(self._code_of(parent), node.id, None, t)
        self.stack.append(_Call(node, self.seq, [t for _, t in inputs]))

    def post(self, ev: Event) -> None:
        name = ev.name
        if name == "":
            return
        # find this call's frame; frames above it belong to calls whose exceptions were swallowed
        node_id = f"{name}:{ev.call}"
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i].node.id == node_id:
                call = self.stack[i]
                del self.stack[i:]
                break
        else:
            return
        node = call.node
        node.finished = True
        outs = walk(ev.output, self.be.is_tensor, "", [])
        returned: set[int] = set()
        for _, t in outs:
            if id(t) in returned:
                continue
            returned.add(id(t))
            m = self._lookup(t)
            if m is not None and m.seq > call.start:  # a sublayer's output handed on: the sublayer made it
                node.shapes.append(m.shape or [])
                node.dtypes.append(m.dtype)
                continue
            if m is not None or not call.has_children:  # received and handed back as is, or made here
                m = self._register(t, node.id)
            else:  # a new tensor from the call's own code
                m = self._register(t, self._code_of(call))
            node.shapes.append(m.shape or [])
            node.dtypes.append(m.dtype)
        if call.code_out:
            self._feed(call.node.id + "/code", call.inputs, call.start, returned)

    def _feed(self, code: str, inputs: list[Any], start: int, returned: set[int]) -> None:
        """What flows into a call's own code: its inputs, and its sublayers' outputs no call received."""
        seen: set[int] = set()
        for t in inputs:
            m = self._lookup(t)
            if m is not None and m.producer != code and id(m) not in seen:
                seen.add(id(m))
                m.used = True
                self._edge(m.producer, code, m)
        # a sublayer's output freed without reaching another call was consumed by this code
        dangling = []
        for m in reversed(self.produced):
            if m.seq <= start:
                break
            if m.used or m.producer == code:
                continue
            obj = m.strong if m.ref is None else m.ref()
            if obj is not None and id(obj) in returned:
                continue
            m.used = True
            dangling.append(m)
        for m in reversed(dangling):
            self._edge(m.producer, code, m)

    # -- a forward that raised --------------------------------------------------------------------
    def fail(self, exc: BaseException) -> str | None:
        """Put the error on the innermost open call (or the model's own code when none is open)."""
        message = f"{type(exc).__name__}: {exc}"
        hook_layer = getattr(exc, "hookkit_layer", None)
        failing: _Call | None = None
        if hook_layer is not None:
            failing = next((c for c in reversed(self.stack) if c.node.name == hook_layer), None)
        if failing is None and self.stack:
            failing = self.stack[-1]
        if failing is None:
            self.nodes.append(Node(id="/code", kind="code", name="", type="(own code)", depth=1, error=message, finished=False))
            return None
        failing.node.error = message
        if failing.has_children:  # expanded, the error shows on its own code
            code = self._code_of(failing)
            self.code_nodes[code].error = message
            self.code_nodes[code].finished = False
        return failing.node.name

    def release(self) -> None:
        """Drop every reference to the forward's tensors."""
        self.made.clear()
        self.produced.clear()
        self.stack.clear()
