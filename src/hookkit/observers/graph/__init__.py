"""``hookkit.graph``: the calls of one forward as a directed graph (data, and a Graphviz picture)."""

from __future__ import annotations

import inspect
import weakref
from typing import Any

from hookkit.core import router
from hookkit.core.entry import public_entry
from hookkit.core.errors import add_note
from hookkit.core.select import ALL, LayerSpec, select
from hookkit.core.types import Layer
from hookkit.core.user_frame import warn_user
from hookkit.core.validate import ArgumentTypeError, check_bool, check_choice, check_int, check_model, fail
from hookkit.observers.graph.model import Edge, Graph, Node
from hookkit.observers.graph.record import GraphRecorder
from hookkit.observers.summary.recording import ModelState
from hookkit.sites.operations import SEP
from hookkit.sites.operations import ops as listing

__all__ = ["Edge", "Graph", "GraphWarning", "Node", "graph"]

MODES = ("eval", "train", "same")


class GraphWarning(UserWarning):
    """The forward ``hookkit.graph`` ran raised: the graph returned stops at the failing call."""


@public_entry("graph")
def graph(
    model: Layer,
    inputs: Any,
    depth: int = 2,
    ops: LayerSpec = None,
    *,
    mode: str = "eval",
    raise_errors: bool = False,
    overlay: Any = None,
) -> Graph:
    """Run one forward of ``model`` on ``inputs`` and return its graph: a node per layer call
    (folded at ``depth``: the calls the model makes itself are depth 1), the model's inputs and
    outputs, and the tensors flowing between them, matched by identity.

    ``inputs``: a tensor, a tuple/list of positional inputs, or a dict of keyword inputs.
    ``ops``: operation sites inside layers (``"h.*.attn::*"``, ``"block::add_0"``: see ``hookkit.ops``)
    drawn as nodes inside their layer (``kind`` "op", ``type`` what it calls: ``"torch.relu"``, ``"+"``).
    ``mode``: "eval" (default), "train" or "same"; the forward runs without gradients and the
    model's modes and buffers are put back afterwards. ``overlay``: drawn on the picture (see
    ``Graph.with_overlay``).

    A forward that raises: the graph up to the failing call is returned, the error on that node
    (``graph.error``), with a ``hookkit.GraphWarning``: the picture is what one wants when chasing a
    shape error. ``raise_errors=True`` re-raises instead, the graph in ``exc.hookkit_graph``.

    >>> g = hookkit.graph(model, torch.randn(1, 3, 32, 32), depth=2)   # doctest: +SKIP
    >>> g.nodes, g.edges; g.save("model.svg")   # doctest: +SKIP
    """
    be = check_model(model)
    check_int(depth, arg="depth", low=1)
    check_choice(mode, MODES, arg="mode")
    check_bool(raise_errors, arg="raise_errors")
    args, kwargs = _inputs(be, inputs)

    named = list(be.named_layers(model))
    children = {id(m): be.children(m) for _, m in named}
    hooked = list(select(model, ALL))
    op_calls: dict[str, str] = {}
    if ops is not None:
        sites, op_calls = _op_sites(model, ops)
        hooked += sites
    # a layer without sublayers (nor operation sites) has no pre event: its forward event does both
    with_sites = {name.rpartition(SEP)[0] for name in op_calls}
    leaves = {id(m): name for name, m in named if name and not children[id(m)] and name not in with_sites}
    rec = GraphRecorder(be, _ParamCounts(be, named, children), _arg_names(model), op_calls, model, leaves)
    # a leaf whose forward takes one input gets a plain forward consumer (no Event): its inputs are
    # its positional arguments, or, given by keyword, read from the call frame
    rec.one_input = {id(m) for name, m in named if id(m) in leaves and _one_input(m)}
    exc = _record(model, be, [m for _, m in named], hooked, rec, args, kwargs, mode)
    error = place = None
    if exc is not None:
        where = rec.fail(exc)
        error = f"{type(exc).__name__}: {exc}"
        place = f"in layer {where!r}" if where else "in the model's own code, outside every layer"
    nodes, edges = rec.build()
    rec.release()
    result = Graph(nodes, edges, depth, model_type=be.type_name(model), framework=be.name, error=error, overlay=overlay)
    if exc is not None:
        if raise_errors:
            add_note(exc, f"hookkit.graph: the forward failed {place}; the partial graph is exc.hookkit_graph")
            exc.hookkit_graph = result  # type: ignore[attr-defined]
            raise exc
        warn_user(
            f"graph(): the forward failed {place}: {error} (the graph returned stops there; raise_errors=True re-raises)", GraphWarning
        )
    return result


def _record(
    model: Any, be: Any, layers: list, hooked: list, rec: GraphRecorder, args: tuple, kwargs: dict, mode: str
) -> BaseException | None:
    """The observed forward; the model's modes (and, after a training-mode forward, its buffers)
    put back, every hook removed, also when it raises. Returns the forward's exception."""
    modes = [be.is_training(m) for m in layers]
    switch = mode != "same" and any(t != (mode == "train") for t in modes)
    # buffers can change only in a training-mode forward (BatchNorm's statistics): saved then, put back
    state = ModelState(be, model, layers) if (mode == "train" or (mode == "same" and any(modes))) else None
    exc: BaseException | None = None
    handles = []
    with router.private_pass(model):  # the features the user has open do not see this forward
        try:
            # ALL includes the model itself (""): its events give the input and output nodes
            leaves = rec.leaves
            opened = [(name, layer) for name, layer in hooked if id(layer) not in leaves]
            handles.append(router.attach(model, opened, "forward_pre", rec.pre, router.OBSERVER))
            one = rec.one_input
            ends = [
                (name, layer, None, rec.leaf_plain)
                if id(layer) in one
                else (name, layer, rec.leaf, None)
                if id(layer) in leaves
                else (name, layer, None, rec.post)
                for name, layer in hooked
            ]
            handles.append(router.attach_each(model, ends, "forward", router.OBSERVER))
            if switch:
                be.set_training(model, mode == "train")
            with be.no_grad():
                output = model(*args, **kwargs)
            if not rec.outputs_done:  # the root's hook did not run (a wrapper returned early): outputs from here
                rec.finish_outputs(output)
        except Exception as e:  # noqa: BLE001 - returned on the graph, or re-raised by graph()
            exc = e
        finally:
            for h in handles:
                h.remove()
            if state is not None:
                state.restore()
            elif switch:
                be.set_training(model, modes[0])
                for m, training in zip(layers, modes):
                    if be.is_training(m) != training:
                        m.training = training
    return exc


def _inputs(be: Any, inputs: Any) -> tuple[tuple, dict]:
    if isinstance(inputs, dict):
        return (), dict(inputs)
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    if be.is_tensor(inputs):
        return (inputs,), {}
    fail("graph", "inputs", "a tensor, a tuple/list of positional inputs or a dict of keyword inputs", inputs, kind=ArgumentTypeError)
    raise AssertionError  # fail raises


_ARG_NAMES: weakref.WeakKeyDictionary[Any, list[str]] = weakref.WeakKeyDictionary()  # forward function -> names


def _arg_names(model: Any) -> list[str]:
    """The names of the forward's positional parameters (the input nodes' names); read once per
    forward function (a bound method's function: its signature is every instance's)."""
    forward = getattr(model, "forward", None)
    func = getattr(forward, "__func__", None)
    if func is not None:
        try:
            names = _ARG_NAMES.get(func)
        except TypeError:  # not weakly referable
            return _signature_names(forward)
        if names is None:
            names = _ARG_NAMES[func] = _signature_names(forward)
        return list(names)
    return _signature_names(forward)


_ONE_INPUT: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()  # forward function -> takes one input


def _one_input(layer: Any) -> bool:
    """Whether ``layer.forward`` takes exactly one argument, positional or by keyword (no ``*args``,
    ``**kwargs``, keyword-only ones): a call gives it as the one positional argument or by keyword."""
    forward = getattr(layer, "forward", None)
    func = getattr(forward, "__func__", None)
    if func is None or forward is None:
        return False
    try:
        one = _ONE_INPUT.get(func)
    except TypeError:
        return False
    if one is None:
        try:
            params = list(inspect.signature(forward).parameters.values())
        except (TypeError, ValueError):
            params = []
        kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        one = _ONE_INPUT[func] = len(params) == 1 and params[0].kind in kinds
    return one


def _signature_names(forward: Any) -> list[str]:
    try:
        sig = inspect.signature(forward)
    except (TypeError, ValueError, AttributeError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in sig.parameters.values() if p.kind in kinds]


class _ParamCounts:
    """Parameters of each layer, sublayers included, each counted once; computed at the first
    question (after the forward), from each layer's own parameters. Without a parameter or a layer
    shared between two places a layer's count is its own plus its children's; else the exact sets."""

    def __init__(self, be: Any, named: list[tuple[str, Any]], children: dict[int, list]):
        self.be, self.named, self.children = be, named, children
        self.counts: dict[int, int] | None = None

    def __call__(self, layer: Any) -> int:
        if self.counts is None:
            self.counts = self._count()
        return self.counts.get(id(layer), 0)

    def _count(self) -> dict[int, int]:
        be, children, numel, parameters = self.be, self.children, self.be.numel, self.be.parameters
        counts: dict[int, int] = {}  # own parameters first; sublayers' added below when nothing is shared
        seen: set[int] = set()
        listed = 0  # parameters listed so far: more than ``seen`` holds when one is shared
        for _, layer in self.named:
            total = 0
            for p in parameters(layer, recurse=False):
                try:
                    total += numel(p)
                except ValueError:  # a lazy layer's parameter before its first forward
                    pass
                seen.add(id(p))
                listed += 1
            counts[id(layer)] = total
        kids = [id(c) for cs in children.values() for c in cs]
        if listed == len(seen) and len(kids) == len(set(kids)):
            for _, layer in reversed(self.named):  # children after their parents in named_layers
                sub = children[id(layer)]
                if sub:
                    counts[id(layer)] += sum([counts.get(id(c), 0) for c in sub])
            return counts
        own: dict[int, list[tuple[int, int]]] = {
            id(layer): [(id(p), _numel(be, p)) for p in parameters(layer, recurse=False)] for _, layer in self.named
        }
        sets: dict[int, dict[int, int]] = {}

        def below(layer: Any) -> dict[int, int]:  # a shared layer is listed once: children first, by recursion
            got = sets.get(id(layer))
            if got is None:
                got = sets[id(layer)] = dict(own.get(id(layer), ()))
                for child in children.get(id(layer), ()):
                    got.update(below(child))
            return got

        return {id(layer): sum(below(layer).values()) for _, layer in self.named}


def _numel(be: Any, p: Any) -> int:
    try:
        return int(be.numel(p))
    except ValueError:  # a lazy layer's parameter before its first forward
        return 0


def _op_sites(model: Any, ops: LayerSpec) -> tuple[list[tuple[str, Any]], dict[str, str]]:
    """Operation sites (``"layer::op"`` specs, ``hookkit.ops``) as the pseudo-layers the router hooks,
    and what each calls as written (``"torch.relu"``, ``"+"``): each becomes a node inside its layer.
    A site that is a sublayer's call is left out: that call is a node already."""

    found, calls = [], {}
    listings: dict[str, Any] = {}
    for name, site in select(model, ops):
        layer_name, sep, op_name = name.rpartition(SEP)
        if not sep:  # a layer spec among the operations: its calls are nodes already
            continue
        if layer_name not in listings:
            listings[layer_name] = listing(model, layer_name)
        op = listings[layer_name][op_name]
        if op.kind == "submodule":
            continue
        found.append((name, site))
        calls[name] = op.call
    return found, calls
