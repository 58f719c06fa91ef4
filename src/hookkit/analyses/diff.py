"""``hookkit.diff``: run two models on the same inputs and name the first layer, call and pass where
they part ways (a port to another framework, a precision change, a refactor, two checkpoints).

How it runs, memory bounded: ``a`` runs first and each of its paired calls' outputs (and, with
``backward=True``, output gradients and parameter gradients) is copied to the host (numpy) as it is
produced; then ``b`` runs and each of its calls is compared with ``a``'s record as soon as ``b``
produces it, and that record is dropped. Device memory never holds more than one model's ordinary
forward and backward; host memory holds ``a``'s records once. Both run in eval mode with their
training flags restored after; gradients are taken with ``grads_of`` (no ``.grad`` is touched).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hookkit.analyses.diff_inputs import float_tensors, model_place, to_host, to_model
from hookkit.analyses.diff_metrics import compare, host, looser, precision, tolerance
from hookkit.analyses.diff_pairing import Map, StructureAligner, check_map, name_pairs, resolve
from hookkit.analyses.diff_result import Diff, Row, Unpaired
from hookkit.analyses.passes import analysis_pass
from hookkit.core.errors import HookkitError
from hookkit.core.handles import HandleGroup
from hookkit.core.router import OBSERVER, attach
from hookkit.core.select import ALL, LayerSpec, select
from hookkit.core.tree import leaves
from hookkit.core.validate import check_bool, check_callable, check_model, check_number, fail

FN = "diff"


class _Record:
    """One of ``a``'s calls kept on the host."""

    __slots__ = ("arrays", "shapes", "dtypes", "depth")

    def __init__(self, arrays: list, shapes: tuple, dtypes: tuple, depth: int):
        self.arrays, self.shapes, self.dtypes, self.depth = arrays, shapes, dtypes, depth


class _Plan:
    """Which layers of each model take part, and how they pair."""

    def __init__(self, a: Any, be_a: Any, b: Any, be_b: Any, layers: LayerSpec | None, map: Map):
        sel_a = [(n, m) for n, m in select(a, ALL if layers is None else layers) if be_a.has_forward(m)]
        all_b = [(n, m) for n, m in select(b, ALL) if be_b.has_forward(m)]
        names_b = [n for n, _ in all_b if n]
        leaves_a = [n for n, m in sel_a if n and not be_a.children(m)]
        if map == "structure" or (map is None and leaves_a and 2 * sum(n in set(names_b) for n in leaves_a) < len(leaves_a)):
            self.mode = "structure"
            self.layers_a = [(n, m) for n, m in sel_a if not n or not be_a.children(m)]
            self.layers_b = [(n, m) for n, m in all_b if not n or not be_b.children(m)]
            self.b_to_a: dict[str, list[str]] = {"": [""]} if any(not n for n, _ in self.layers_a) else {}
            return
        self.mode = "map" if map is not None and map != "name" else "name"
        all_a = [n for n, m in select(a, ALL) if n and be_a.has_forward(m)]
        covered = resolve(map, all_a, names_b, FN)
        pairs = name_pairs([n for n, _ in sel_a if n], names_b, covered)
        if any(not n for n, _ in sel_a):
            pairs[""] = ""  # the models' outputs always pair
        self.layers_a = sel_a
        b_layers = dict(all_b)
        # with the default layers, b's layers nobody pairs with are attached too, to list their calls
        wanted = set(pairs.values()) if layers is not None else set(b_layers)
        self.layers_b = [(n, m) for n, m in all_b if n in wanted]
        self.b_to_a = {}
        for na, nb in pairs.items():
            self.b_to_a.setdefault(nb, []).append(na)
        del b_layers


def diff(
    a: Any,
    b: Any,
    inputs: Any,
    *,
    layers: LayerSpec | None = None,
    map: Map = None,
    backward: bool = False,
    loss: Callable[[Any], Any] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
) -> Diff:
    """Run ``a`` and ``b`` on the same ``inputs`` and compare them layer by layer, call by call:
    outputs, and with ``backward=True`` each layer's output gradient and each parameter's gradient
    after ``loss(output)`` (default: the sum of the output's floating tensors).

    ``a``, ``b``: models of either framework (PyTorch, PaddlePaddle), of any dtype or device.
    ``inputs``: a tensor or numpy array, a tuple / list (positional inputs) or a dict (keyword
    inputs); each model gets them in its own framework, device and float dtype.
    ``layers``: which of ``a``'s layers to compare (a layer spec; default: every layer with a forward,
    the model itself included). Pairing: by name where the names agree; by structure (the order of
    leaf calls with matching output shapes) where most do not; ``map`` says it: a dict from ``a``'s
    names to ``b``'s (globs allowed), a callable ``f(a_name) -> b_name``, or "name" / "structure".
    ``rtol`` / ``atol``: override the defaults taken from the dtypes compared (see the docs' table).

    >>> d = hookkit.diff(torch_model, paddle_model, x, backward=True)   # doctest: +SKIP
    >>> d.first
    Row(phase='forward', layer='blocks.7.mlp.fc1', call=0, max_abs=0.0021, ...)
    >>> print(d)        # the table, first divergence and growing errors marked
    """
    be_a = check_model(a, fn=FN, arg="a")
    be_b = check_model(b, fn=FN, arg="b")
    if a is b:
        fail(FN, "b", "a model other than a (to compare a model with itself changed, compare it with a copy: copy.deepcopy(a))", b)
    backward = check_bool(backward, fn=FN, arg="backward")
    check_callable(loss, fn=FN, arg="loss", signature="loss(output) -> scalar tensor", optional=True)
    rtol = check_number(rtol, fn=FN, arg="rtol", low=0, optional=True)
    atol = check_number(atol, fn=FN, arg="atol", low=0, optional=True)
    check_map(map, FN)
    host_args, host_kwargs = to_host(inputs, FN)
    plan = _Plan(a, be_a, b, be_b, layers, map)
    side = _SideA(a, be_a, plan, backward)
    side.run(host_args, host_kwargs, loss)
    rows, unpaired = _SideB(b, be_b, plan, side, rtol, atol).run(host_args, host_kwargs, loss)
    if not rows:
        raise HookkitError(
            f"diff(): no call of a pairs with a call of b (pairing by {plan.mode}): "
            f"a's layers: {_names(plan.layers_a)}; b's: {_names(plan.layers_b)}. "
            "Give map={a name or glob: b name} to say which layers correspond."
        )
    return Diff(rows, unpaired, plan.mode, (be_a.name, be_b.name))


def _names(named: list) -> str:
    names = [n or "(root)" for n, _ in named]
    return ", ".join(names[:8]) + (f" ... ({len(names)} in all)" if len(names) > 8 else "")


def _run(
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
            fail(FN, "loss", "a callable returning a scalar tensor of the model's framework", score)
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


class _SideA:
    """Runs ``a``, keeping each paired call's output (and gradients) on the host."""

    def __init__(self, a: Any, be: Any, plan: _Plan, backward: bool):
        self.model, self.be, self.plan, self.backward = a, be, plan, backward
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

    def run(self, host_args: list, host_kwargs: dict, loss: Any) -> None:
        be, group = self.be, HandleGroup()
        try:
            named = self.plan.layers_a
            group.add(attach(self.model, named, "forward", self._on_forward, OBSERVER))
            if self.backward:
                group.add(attach(self.model, [(n, m) for n, m in named if n in self.recorded], "grad", self._on_grad, OBSERVER))
            _run(self.model, be, host_args, host_kwargs, self.backward, loss, self._on_params)
        finally:
            group.remove()

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
        self.records[key] = _Record([host(be.to_numpy(t)) for t in outs], shapes, tuple(be.dtype_name(t) for t in outs), depth)
        if ev.name in self.leaf_names:
            self.sequence.append((key, shapes))

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


class _SideB:
    """Runs ``b``, comparing each call with ``a``'s record as it is produced."""

    def __init__(self, b: Any, be: Any, plan: _Plan, side_a: _SideA, rtol: float | None, atol: float | None):
        self.model, self.be, self.plan, self.a = b, be, plan, side_a
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
            if self.a.backward:
                group.add(attach(self.model, named, "grad", self._on_grad, OBSERVER))
            _run(self.model, self.be, host_args, host_kwargs, self.a.backward, loss, self._on_params)
        finally:
            group.remove()
        left = self.aligner.rest() if self.aligner is not None else []
        for key in [*left, *self.a.records]:
            if key in self.a.records:
                self.a.records.pop(key)
                self.unpaired.append(Unpaired("a", key[0], key[1], "forward", "b made no call that pairs with it"))
        for (name, call, index), _ in self.a.grads.items():
            if (name, call) in {k for ks in self.pairs.values() for k in ks}:
                self.unpaired.append(Unpaired("a", name, call, "output-grad", f"b's paired output {index} took no gradient"))
        self.a.grads.clear()
        for (name, canonical), _ in self.a.param_grads.items():
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
    def _on_grad(self, ev: Any) -> None:
        be = self.be
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
