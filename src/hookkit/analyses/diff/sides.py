"""The two runs of ``hookkit.diff``: ``SideA`` runs ``a`` and keeps each paired call's output (and
gradients) on the host as it is produced; ``SideB`` runs ``b`` and compares each call with ``a``'s
record as soon as ``b`` produces it, dropping the record."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from hookkit.analyses.diff.inputs import float_tensors, model_place, to_model
from hookkit.analyses.diff.metrics import compare, host, looser, precision, tolerance
from hookkit.analyses.diff.pairing import Plan, StructureAligner
from hookkit.analyses.diff.result import Row, Unpaired
from hookkit.analyses.passes import analysis_pass
from hookkit.core.entry import entry_name
from hookkit.core.errors import HookkitError
from hookkit.core.handles import HandleGroup
from hookkit.core.router import INTERVENTION, OBSERVER, attach
from hookkit.core.tree import leaves
from hookkit.core.validate import fail


class _Record:
    """One of ``a``'s calls kept on the host."""

    __slots__ = ("arrays", "shapes", "dtypes", "depth", "inputs")

    def __init__(self, arrays: list, shapes: tuple, dtypes: tuple, depth: int):
        self.arrays, self.shapes, self.dtypes, self.depth = arrays, shapes, dtypes, depth
        self.inputs: list | None = None  # local=True: a leaf's positional float inputs (None elsewhere)


def run_model(
    model: Any, be: Any, host_args: list, host_kwargs: dict, backward: bool, loss: Any, on_grads: Callable[[list, tuple], None]
) -> None:
    """One forward (and backward through ``grads_of``) of ``model`` on the host inputs; ``on_grads``
    gets the tensors differentiated and their gradients."""
    like, float_dtype = model_place(model, be)
    args, kwargs = to_model(host_args, host_kwargs, be, like, float_dtype)
    with analysis_pass(model, be, grad=backward):
        if not backward:
            with be.no_grad():
                model(*args, **kwargs)
            return
        targets, seen = [], set()
        for p in be.parameters(model):
            if be.requires_grad(p) and id(p) not in seen:
                seen.add(id(p))
                targets.append(p)
        if not targets:  # a model without trainable parameters: differentiate w.r.t. its float inputs
            targets = [be.set_requires_grad(t) for t in float_tensors(args, kwargs, be)]
            if not targets:
                raise HookkitError(
                    f"diff(): backward=True needs trainable parameters or floating-point inputs; {type(model).__name__} has neither"
                )
        output = model(*args, **kwargs)
        score = _loss(be, output, loss)
        on_grads(targets, be.grads_of(score, targets, allow_unused=True))


def _loss(be: Any, output: Any, loss: Any) -> Any:
    if loss is not None:
        score = loss(output)
        if not be.is_tensor(score):
            fail(entry_name(), "loss", "a callable returning a scalar tensor of the model's framework", score)
        return score
    floats = [t for t in leaves(output, be.is_tensor) if be.dtype_kind(t) == "float" and be.requires_grad(t)]
    if not floats:
        raise HookkitError("diff(): the model's output holds no floating tensor that takes a gradient; give loss=f(output) -> scalar")
    total = None
    for t in floats:
        s = (t if be.dtype_name(t) in ("float32", "float64") else be.cast(t, "float32")).sum()
        total = s if total is None else total + s
    return total


def _own_params(be: Any, layer: Any) -> list:
    """The layer's trainable state in canonical names (``porting`` family)."""
    return [e for e in be.family("porting").layer_state(layer) if be.is_tensor(e.tensor) and be.requires_grad(e.tensor)]


class SideA:
    """Runs ``a``, keeping each paired call's output (and gradients) on the host."""

    def __init__(self, a: Any, be: Any, plan: Plan, backward: bool, local: bool = False):
        self.model, self.be, self.plan, self.backward, self.local = a, be, plan, backward, local
        self.records: dict[tuple[str, int], _Record] = {}
        self.grads: dict[tuple[str, int, int], Any] = {}
        self.param_grads: dict[tuple[str, str], tuple[Any, str]] = {}  # (layer, canonical) -> (array, dtype)
        self.sequence: list[tuple[tuple[str, int], tuple]] = []  # leaf calls in order, for structure pairing
        self.depth_of: dict[str, int] = {}
        self.unpaired: list[Unpaired] = []
        if plan.mode == "structure":
            self.recorded = {n for n, _ in plan.layers_a}
        else:
            self.recorded = {na for names in plan.b_to_a.values() for na in names}
        self.leaf_names = {n for n, m in plan.layers_a if n and not be.children(m)}
        self._seen: dict[int, tuple[Any, Any]] = {}  # id(tensor) -> (weak ref, host copy), during a's forward

    def run(self, host_args: list, host_kwargs: dict, loss: Any) -> None:
        be, group = self.be, HandleGroup()
        try:
            named = self.plan.layers_a
            group.add(attach(self.model, named, "forward", self._on_forward, OBSERVER))
            if self.backward:
                group.add(attach(self.model, [(n, m) for n, m in named if n in self.recorded], "grad", self._on_grad, OBSERVER))
            run_model(self.model, be, host_args, host_kwargs, self.backward, loss, self._on_params)
        finally:
            group.remove()
            self._seen.clear()

    def _on_forward(self, ev: Any) -> None:
        key = (ev.name, ev.call)
        if ev.name not in self.recorded:
            self.unpaired.append(Unpaired("a", ev.name, ev.call, "forward", "no layer of b pairs with it"))
            return
        be = self.be
        outs = leaves(ev.output, be.is_tensor)
        shapes = tuple(be.shape(t) for t in outs)
        depth = len(self.records) + len(self.unpaired)
        self.depth_of.setdefault(ev.name, depth)
        rec = self.records[key] = _Record([self._host(t) for t in outs], shapes, tuple(be.dtype_name(t) for t in outs), depth)
        if ev.name in self.leaf_names:
            self.sequence.append((key, shapes))
            if self.local:  # usually the previous layer's output: shared, not copied again
                rec.inputs = [self._host(t) if be.is_tensor(t) and be.dtype_kind(t) == "float" else None for t in ev.args]

    def _host(self, t: Any) -> Any:
        """``t`` on the host, copied once: a container returning its last child's output tensor
        (a Sequential, an attention block returning its projection) shares that child's record."""
        seen = self._seen.get(id(t))
        if seen is not None and seen[0]() is t:
            return seen[1]
        arr = host(self.be.to_numpy(t))
        try:
            self._seen[id(t)] = (weakref.ref(t), arr)
        except TypeError:  # a tensor type without weak references: copied each time
            pass
        return arr

    def _on_grad(self, ev: Any) -> None:
        self.grads[ev.name, ev.call, ev.index] = (host(self.be.to_numpy(ev.grad)), self.be.dtype_name(ev.grad))

    def _on_params(self, targets: list, grads: tuple) -> None:
        be = self.be
        by_id = {id(t): g for t, g in zip(targets, grads)}
        done: set[int] = set()
        for name, layer in self.plan.layers_a:
            if name not in self.recorded:
                continue
            for e in _own_params(be, layer):
                g = by_id.get(id(e.tensor))
                if g is None or id(e.tensor) in done:
                    continue
                done.add(id(e.tensor))  # a tied weight is compared once, at its first owner
                arr = host(be.to_numpy(g))
                self.param_grads[name, e.canonical] = (arr.T if e.transposed else arr, be.dtype_name(g))


class SideB:
    """Runs ``b``, comparing each call with ``a``'s record as it is produced."""

    def __init__(self, b: Any, be: Any, plan: Plan, side_a: SideA, rtol: float | None, atol: float | None):
        self.model, self.be, self.plan, self.a = b, be, plan, side_a
        self.local = side_a.local
        self.leaves_b = {n for n, m in plan.layers_b if n and not be.children(m)}
        self.rtol, self.atol = rtol, atol
        self.kind = "exact"  # the least precise dtype compared so far: tolerances loosen with it
        self.rows: list[Row] = []
        self.back: list[Row] = []
        self.unpaired = list(side_a.unpaired)
        self.pairs: dict[tuple[str, int], list[tuple[str, int]]] = {}
        self.layer_pairs: dict[str, str] = {}  # a name -> b name, as paired
        self.aligner = StructureAligner(side_a.sequence) if plan.mode == "structure" else None

    def run(self, host_args: list, host_kwargs: dict, loss: Any) -> tuple[list[Row], list[Unpaired]]:
        group = HandleGroup()
        try:
            named = self.plan.layers_b
            group.add(attach(self.model, named, "forward", self._on_forward, OBSERVER))
            if self.local:
                leaves_b = [(n, m) for n, m in named if n in self.leaves_b]
                group.add(attach(self.model, leaves_b, "forward_pre", self._feed_inputs, INTERVENTION))
            if self.a.backward:
                # local: the consumer also hands a's gradient on, so it runs among the interventions
                group.add(attach(self.model, named, "grad", self._on_grad, INTERVENTION if self.local else OBSERVER))
            run_model(self.model, self.be, host_args, host_kwargs, self.a.backward, loss, self._on_params)
        finally:
            group.remove()
        left = self.aligner.rest() if self.aligner is not None else []
        for key in [*left, *self.a.records]:
            if key in self.a.records:
                self.a.records.pop(key)
                self.unpaired.append(Unpaired("a", key[0], key[1], "forward", "b made no call that pairs with it"))
        paired = {k for ks in self.pairs.values() for k in ks}
        for name, call, index in self.a.grads:
            if (name, call) in paired:
                self.unpaired.append(Unpaired("a", name, call, "output-grad", f"b's paired output {index} took no gradient"))
        self.a.grads.clear()
        for name, canonical in self.a.param_grads:
            if name in self.layer_pairs:
                self.unpaired.append(
                    Unpaired(
                        "a",
                        f"{name}.{canonical}" if name else canonical,
                        0,
                        "param-grad",
                        "b's paired layer has no such trainable parameter",
                    )
                )
        self.a.param_grads.clear()
        return self.rows + self.back, self.unpaired

    # -- forward --------------------------------------------------------------------------------
    def _partners(self, name: str, call: int, shapes: tuple) -> list[tuple[str, int]]:
        if self.aligner is None or not name:
            return [(na, call) for na in self.plan.b_to_a.get(name, [])]
        key = self.aligner.match(shapes)
        return [key] if key is not None else []

    def _on_forward(self, ev: Any) -> None:
        be = self.be
        outs = leaves(ev.output, be.is_tensor)
        shapes = tuple(be.shape(t) for t in outs)
        partners = self._partners(ev.name, ev.call, shapes)
        if not partners:
            why = (
                "no call of a with the same output shapes is left"
                if self.aligner is not None and ev.name
                else "no layer of a pairs with it"
            )
            self.unpaired.append(Unpaired("b", ev.name, ev.call, "forward", why))
            return
        ys = None
        for ka in partners:
            rec = self.a.records.pop(ka, None)
            if rec is None:
                self.unpaired.append(Unpaired("b", ev.name, ev.call, "forward", f"a made no call {ka[1]} of {ka[0] or '(root)'}"))
                continue
            if rec.shapes != shapes:
                why = f"output shapes differ: a {list(map(list, rec.shapes))}, b {list(map(list, shapes))}"
                self.unpaired += [Unpaired("a", ka[0], ka[1], "forward", why), Unpaired("b", ev.name, ev.call, "forward", why)]
                continue
            if ys is None:
                ys = [be.to_numpy(t) for t in outs]
            dtypes_b = tuple(be.dtype_name(t) for t in outs)
            self.pairs.setdefault((ev.name, ev.call), []).append(ka)
            self.layer_pairs.setdefault(ka[0], ev.name)
            self.rows.append(self._row("forward", ka, (ev.name, ev.call), "", rec.arrays, ys, rec.dtypes, dtypes_b, shapes, rec.depth))

    def _feed_inputs(self, ev: Any) -> Any:
        """local=True: a leaf of ``b`` gets the inputs its partner in ``a`` got (same values; the
        gradient still flows to ``b``'s own upstream layers). The input ``b`` computed itself is
        compared first: while nothing has diverged, every earlier leaf ran on ``a``'s inputs and
        agreed, so a difference here comes from the code between the leaves (inside a container's
        forward) and gets an "input" row."""
        names = self.plan.b_to_a.get(ev.name)
        if not names:
            return None
        ka = (names[0], ev.call)
        rec = self.a.records.get(ka)
        if rec is None or rec.inputs is None:
            return None
        be, args, changed = self.be, list(ev.args), False
        for i, arr in enumerate(rec.inputs[: len(args)]):
            t = args[i]
            if arr is None or not be.is_tensor(t) or tuple(be.shape(t)) != arr.shape:
                continue
            part = "input" if i == 0 else f"input {i}"
            dtype = (be.dtype_name(t),)
            row = self._row("forward", ka, (ev.name, ev.call), part, [arr], [be.to_numpy(t)], dtype, dtype, (arr.shape,), rec.depth)
            # Agreeing inputs are the rule here: only a difference earns a row, and only before any
            # forward row diverged (after that, container code such as a residual add carries the
            # earlier difference into every later input)
            if row.diverged and not any(r.diverged for r in self.rows):
                self.rows.append(row)
            v = self._like(arr, t)
            args[i] = t + be.detach(v - t) if be.requires_grad(t) else v
            changed = True
        return (tuple(args), ev.kwargs) if changed else None

    def _like(self, arr: Any, t: Any) -> Any:
        """A copy of host ``arr`` as a tensor like ``t`` (framework, device, dtype)."""
        v = self.be.from_numpy(np.array(arr, copy=True), like=t)
        return self.be.cast(v, self.be.dtype_name(t))

    def _row(self, phase: str, ka: tuple, kb: tuple, part: str, xs: list, ys: list, da: tuple, db: tuple, shapes: tuple, depth: int) -> Row:
        for d in (*da, *db):
            self.kind = looser(self.kind, precision(d))
        rtol, atol = tolerance(self.kind, self.rtol, self.atol)
        m = compare(xs, ys, rtol, atol)
        shape = shapes[0] if shapes else ()
        return Row(
            phase, ka[0], kb[0], ka[1], kb[1], part, tuple(shape), ",".join(da) or "-", ",".join(db) or "-",
            **m, rtol=rtol, atol=atol, diverged=m["mismatch"] > 0, depth=depth,
        )  # fmt: skip

    # -- backward -------------------------------------------------------------------------------
    def _on_grad(self, ev: Any) -> Any:
        be = self.be
        local = None
        for ka in self.pairs.get((ev.name, ev.call), []):
            got = self.a.grads.pop((ka[0], ka[1], ev.index), None)
            if got is None:
                self.unpaired.append(Unpaired("b", ev.name, ev.call, "output-grad", f"a's output {ev.index} took no gradient"))
                continue
            arr, dtype_a = got
            y = be.to_numpy(ev.grad)
            depth = self.a.depth_of.get(ka[0], 0)
            part = "" if ev.index == 0 else f"output {ev.index}"
            self.back.append(
                self._row(
                    "output-grad",
                    ka,
                    (ev.name, ev.call),
                    part,
                    [arr],
                    [y],
                    (dtype_a,),
                    (be.dtype_name(ev.grad),),
                    (tuple(arr.shape),),
                    depth,
                )
            )
            if self.local and local is None and ev.name in self.leaves_b and tuple(arr.shape) == tuple(be.shape(ev.grad)):
                local = self._like(arr, ev.grad)  # the layers before this one get a's gradient
        return local

    def _on_params(self, targets: list, grads: tuple) -> None:
        be = self.be
        by_id = {id(t): g for t, g in zip(targets, grads)}
        layers_b = dict(self.plan.layers_b)
        done: set[int] = set()
        for na, nb in self.layer_pairs.items():
            layer = layers_b.get(nb)
            if layer is None:
                continue
            for e in _own_params(be, layer):
                g = by_id.get(id(e.tensor))
                if g is None or id(e.tensor) in done:
                    continue
                done.add(id(e.tensor))
                got = self.a.param_grads.pop((na, e.canonical), None)
                if got is None:
                    self.unpaired.append(
                        Unpaired(
                            "b", f"{nb}.{e.native}" if nb else e.native, 0, "param-grad", "a's paired layer has no such trainable parameter"
                        )
                    )
                    continue
                arr, dtype_a = got
                y = be.to_numpy(g)
                y = y.T if e.transposed else y
                if y.shape != arr.shape:
                    why = f"shapes differ: a {list(arr.shape)}, b {list(y.shape)} (in PyTorch's layout)"
                    self.unpaired.append(Unpaired("b", f"{nb}.{e.native}" if nb else e.native, 0, "param-grad", why))
                    continue
                row = self._row(
                    "param-grad",
                    (na, 0),
                    (nb, 0),
                    e.canonical,
                    [arr],
                    [y],
                    (dtype_a,),
                    (be.dtype_name(g),),
                    (tuple(arr.shape),),
                    self.a.depth_of.get(na, 0),
                )
                self._insert(row)

    def _insert(self, row: Row) -> None:
        """After the last output-gradient row of its layer (its gradient is complete then), else at the end."""
        for i in range(len(self.back) - 1, -1, -1):
            r = self.back[i]
            if r.phase == "output-grad" and r.layer == row.layer:
                j = i + 1
                while j < len(self.back) and self.back[j].phase == "param-grad" and self.back[j].layer == row.layer:
                    j += 1
                self.back.insert(j, row)
                return
        self.back.append(row)
