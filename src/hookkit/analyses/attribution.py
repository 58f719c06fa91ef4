"""``attribute``: integrated gradients, conductance, gradient x activation, activation and gradient
at any layer (its output or its input), at the model's inputs (with saliency and SmoothGrad), and
for one neuron; for PyTorch and PaddlePaddle, equal to captum's methods of the same names.

The scaled inputs (``n_steps`` per sample) run in chunks that fit a memory budget, accumulated on
the model's device. The layer's value is recorded and replaced through one router consumer
(``attribution_tap.LayerTap``); gradients come from ``grads_or_none`` (never ``backward``), so the
parameters' ``.grad``, the model's mode and its hooks are left as they were.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hookkit.analyses.attribution_budget import DEFAULT_FRACTION, Plan, plan_chunks, row_cost, spans
from hookkit.analyses.attribution_rules import RULES, min_steps, quadrature
from hookkit.analyses.attribution_tap import LayerTap
from hookkit.analyses.passes import analysis_pass
from hookkit.analyses.targets import Target, check_target, expand_target, resolve_target, target_scores
from hookkit.core.select import select
from hookkit.core.validate import (
    ArgumentTypeError,
    InvalidArgument,
    check_bool,
    check_choice,
    check_int,
    check_model,
    check_number,
    check_tensor_like,
    fail,
    shown,
)

FN = "attribute"
LAYER_METHODS = ("integrated_gradients", "conductance", "gradient_x_activation", "activation", "gradient")
INPUT_METHODS = ("integrated_gradients", "gradient_x_activation", "gradient", "saliency", "smoothgrad")
NEURON_METHODS = ("integrated_gradients", "conductance", "gradient_x_activation", "gradient")
METHODS = LAYER_METHODS + ("saliency", "smoothgrad")
PATH_METHODS = ("integrated_gradients", "conductance")


def attribute(
    model: Any,
    layer: Any,
    inputs: Any,
    method: str = "integrated_gradients",
    target: Target = None,
    *,
    baselines: Any = None,
    n_steps: int = 50,
    rule: str = "gausslegendre",
    attribute_to: str = "output",
    internal_batch_size: int | str | None = "auto",
    max_memory: float | None = None,
    neuron: int | Sequence[int] | None = None,
    stdevs: float = 1.0,
    nt_samples: int = 5,
    seed: int | None = None,
    forward_kwargs: dict[str, Any] | None = None,
    return_delta: bool = False,
    eval: bool = True,
) -> Any:
    """Attributions of the target's score, as framework tensors shaped like what they attribute to.

    ``layer``: a name, glob or layer object matching one layer (attributions to its output, or to
    its first tensor input with ``attribute_to="input"``), or None (to the model's inputs).
    ``method``: "integrated_gradients" (``rule`` and ``n_steps`` as captum's), "conductance",
    "gradient_x_activation", "activation", "gradient"; at the inputs also "saliency" (the
    gradient's absolute value) and "smoothgrad" (the mean gradient over ``nt_samples`` copies with
    N(0, ``stdevs``²) noise, ``seed`` to repeat it). ``neuron``: an index into the layer's output
    (without the batch axis): the neuron variants, attributing that neuron's value to the inputs.
    ``target``: None (each sample's predicted class), an int, one per sample, or a callable
    ``f(output) -> scores [N]``. ``baselines``: the path's start, zeros by default; a number, or a
    tensor shaped like ``inputs`` (or one sample); token ids for a text model attributed at its
    embedding layer (e.g. a pad-token sequence). ``internal_batch_size``: "auto" runs the scaled
    inputs in chunks that fit ``max_memory`` bytes (default half the device's free memory), an int
    as captum's, None all at once. ``forward_kwargs``: more keyword arguments of the model (an
    ``attention_mask``): tensors with one row per sample follow their samples into the scaled
    batches (captum's ``additional_forward_args``). ``return_delta``: also the completeness delta per sample
    (integrated gradients and conductance): sum of attributions - (F(input) - F(baseline)).

    >>> attr = hookkit.attribute(model, "features.3", x, target=7)                       # doctest: +SKIP
    >>> attr, delta = hookkit.attribute(model, None, x, n_steps=64, return_delta=True)     # doctest: +SKIP
    >>> attr = hookkit.attribute(bert, "bert.embeddings", ids, baselines=pad_ids)          # doctest: +SKIP
    """
    job = _Job.check(
        model,
        layer,
        inputs,
        method,
        target,
        baselines,
        n_steps,
        rule,
        attribute_to,
        internal_batch_size,
        max_memory,
        neuron,
        stdevs,
        nt_samples,
        seed,
        forward_kwargs,
        return_delta,
        eval,
    )
    with analysis_pass(model, job.be, eval=eval):
        tap = LayerTap(model, job.name, job.layer, job.be, attribute_to) if job.layer is not None else None
        try:
            job.tap = tap
            attr = _METHODS[job.kind](job)
            if return_delta:
                return _detach(job, attr), _delta(job, attr)
            return _detach(job, attr)
        finally:
            if tap is not None:
                tap.remove()


# -- checking the call ------------------------------------------------------------------------------
@dataclass
class _Job:
    be: Any
    m: Any
    ops: Any
    model: Any
    name: str
    layer: Any
    x: Any
    base: Any
    n: int
    method: str
    target: Target
    n_steps: int
    rule: str
    where: str
    batch: int | str | None
    max_memory: float | None
    neuron: tuple[int, ...] | None
    stdevs: float
    nt_samples: int
    seed: int | None
    kwargs: dict = field(default_factory=dict)
    tap: Any = None
    kind: str = ""
    scores: dict = field(default_factory=dict)  # "input" / "baseline" -> per-sample scores

    @classmethod
    def check(
        cls,
        model,
        layer,
        inputs,
        method,
        target,
        baselines,
        n_steps,
        rule,
        attribute_to,
        batch,
        max_memory,
        neuron,
        stdevs,
        nt_samples,
        seed,
        forward_kwargs,
        return_delta,
        eval,
    ) -> _Job:  # noqa: ANN001
        be = check_model(model, fn=FN)
        check_bool(eval, fn=FN, arg="eval")
        check_bool(return_delta, fn=FN, arg="return_delta")
        check_choice(method, METHODS, fn=FN, arg="method")
        check_choice(rule, RULES, fn=FN, arg="rule")
        check_choice(attribute_to, ("output", "input"), fn=FN, arg="attribute_to")
        n_steps = check_int(n_steps, fn=FN, arg="n_steps", low=min_steps(rule))
        stdevs = check_number(stdevs, fn=FN, arg="stdevs", low=0.0)
        nt_samples = check_int(nt_samples, fn=FN, arg="nt_samples", low=1)
        seed = check_int(seed, fn=FN, arg="seed", optional=True)
        max_memory = check_number(max_memory, fn=FN, arg="max_memory", low=1.0, optional=True)
        if not (batch is None or batch == "auto" or (isinstance(batch, int) and not isinstance(batch, bool) and batch >= 1)):
            fail(FN, "internal_batch_size", '"auto", None (all scaled inputs at once) or an int >= 1', batch, kind=ArgumentTypeError)
        name, found = "", None
        if layer is None:
            if method not in INPUT_METHODS:
                fail(
                    FN,
                    "method",
                    f"one of {', '.join(map(repr, INPUT_METHODS))} with layer=None (the model's inputs); {method!r} needs a layer",
                    method,
                )
            if attribute_to != "output":
                fail(FN, "attribute_to", '"output" with layer=None (attribute_to="input" names a layer\'s input)', attribute_to)
            if neuron is not None:
                fail(FN, "neuron", "None with layer=None (a neuron is an index into a layer's output)", neuron)
        else:
            if method not in LAYER_METHODS:
                fail(
                    FN,
                    "method",
                    f"one of {', '.join(map(repr, LAYER_METHODS))} at a layer; {method!r} works at the inputs (layer=None)",
                    method,
                )
            named = select(model, layer)
            if len(named) != 1:
                names = ", ".join(n or "(root)" for n, _ in named[:6]) + (", ..." if len(named) > 6 else "")
                raise InvalidArgument(f"{FN}(): layer must match exactly one layer; {shown(layer)} matched {len(named)}: {names}")
            name, found = named[0]
        if neuron is not None:
            if method not in NEURON_METHODS:
                fail(FN, "neuron", f"None for method={method!r}; neuron variants: {', '.join(NEURON_METHODS)}", neuron)
            neuron = _check_neuron(neuron)
        if return_delta and (method not in PATH_METHODS or neuron is not None):
            fail(
                FN,
                "return_delta",
                "False for this method: the delta is defined for integrated_gradients and conductance (without neuron=)",
                return_delta,
            )
        x = check_tensor_like(inputs, be, fn=FN, arg="inputs")
        shape = be.shape(x)
        if len(shape) < 1 or shape[0] < 1:
            fail(FN, "inputs", "a batch [N, ...] with N >= 1", inputs)
        to_inputs = layer is None or neuron is not None or method == "conductance"
        if to_inputs and be.dtype_kind(x) != "float":
            what = "layer=None" if layer is None else f"method={method!r}" + (" with neuron=" if neuron is not None else "")
            fail(
                FN,
                "inputs",
                f"floating-point for {what} (the path runs through the inputs); for token ids attribute at the embedding layer",
                inputs,
            )
        check_target(target, shape[0], FN)
        job = cls(
            be,
            be.family("tensor_math"),
            be.family("attribution"),
            model,
            name,
            found,
            x,
            None,
            shape[0],
            method,
            target,
            n_steps,
            rule,
            attribute_to,
            batch,
            max_memory,
            neuron,
            stdevs,
            nt_samples,
            seed,
        )
        if forward_kwargs is not None and not (isinstance(forward_kwargs, dict) and all(isinstance(k, str) for k in forward_kwargs)):
            fail(FN, "forward_kwargs", "None or a dict of the model's keyword arguments", forward_kwargs, kind=ArgumentTypeError)
        job.kwargs = dict(forward_kwargs or {})
        if method in PATH_METHODS:
            job.base = _baselines(be, baselines, x)
        job.kind = ("input" if layer is None else "neuron" if neuron is not None else "layer") + ":" + method
        return job


def _check_neuron(neuron: Any) -> tuple[int, ...]:
    items = (neuron,) if isinstance(neuron, (int, np.integer)) and not isinstance(neuron, bool) else neuron
    try:
        items = tuple(items)
    except TypeError:
        fail(FN, "neuron", "an int or a tuple of ints indexing the layer's output (without the batch axis)", neuron, kind=ArgumentTypeError)
    if not items or not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in items):
        fail(FN, "neuron", "an int or a tuple of ints indexing the layer's output (without the batch axis)", neuron, kind=ArgumentTypeError)
    return tuple(int(i) for i in items)


def _baselines(be: Any, baselines: Any, x: Any) -> Any:
    m, shape = be.family("tensor_math"), tuple(be.shape(x))
    if baselines is None:
        return be.zeros_like(x)
    if isinstance(baselines, (int, float, np.integer, np.floating)) and not isinstance(baselines, bool):
        return m.full(shape, float(baselines), x)
    b = check_tensor_like(baselines, be, fn=FN, arg="baselines")
    got = tuple(be.shape(b))
    if got == shape[1:]:
        got, b = (1, *got), m.reshape(b, (1, *got))
    if got not in (shape, (1, *shape[1:])):
        fail(
            FN,
            "baselines",
            f"None, a number, or a tensor shaped like inputs {list(shape)} (or one sample {list(shape[1:])})",
            f"a tensor of shape {list(got)}",
        )
    if be.device_of(b) != be.device_of(x):
        b = be.to(b, be.device_of(x))
    if be.dtype_name(b) != be.dtype_name(x):
        b = be.cast(b, be.dtype_name(x))
    return b if got == shape else m.tile_rows(b, shape[0])


# -- shared steps -------------------------------------------------------------------------------------
def _probe(job: _Job, x: Any, key: str, measure: bool = False) -> tuple[Any, int]:
    """One forward of the ``N`` samples: the per-sample scores under ``key``, the layer's value
    (detached) and, with ``measure``, the bytes autograd kept for a backward."""
    be, tap = job.be, job.tap
    if tap is not None:
        tap.replace, tap.stop = None, False
    saved = 0
    if measure:
        with job.ops.saved_bytes(job.model) as counter:
            out = _forward(job, x, range(job.n))
        saved = counter.bytes
    else:
        out = _forward(job, x, range(job.n))
    if job.neuron is None or job.method == "conductance":  # the other neuron methods explain the neuron alone
        if key == "input":
            job.target = resolve_target(be, out, job.target, job.n)
        job.scores[key] = be.detach(target_scores(be, out, job.target, job.n, FN))
    value = None
    if tap is not None:
        _check_ran(job)
        value = be.detach(tap.value)
    return value, saved


def _forward(job: _Job, x: Any, samples: Sequence[int]) -> Any:
    """The model on rows ``x`` made from ``samples`` (with ``forward_kwargs`` picked for them);
    None when the tap ended the forward early."""
    kwargs = {}
    if job.kwargs:
        same = len(samples) == job.n and list(samples) == list(range(job.n))
        for k, v in job.kwargs.items():
            if job.be.is_tensor(v) and len(job.be.shape(v)) and job.be.shape(v)[0] == job.n and not same:
                v = job.m.index_select(v, 0, list(samples))
            kwargs[k] = v
    if job.tap is None:
        return job.model(x, **kwargs)
    return job.tap.run(job.model, x, kwargs)


def _check_ran(job: _Job) -> None:
    tap, where = job.tap, "output" if job.where == "output" else "tensor input"
    if tap.calls == 0:
        raise InvalidArgument(f"{FN}(): layer {job.name or '(root)'!r} did not run in the model's forward")
    if tap.calls > 1:
        raise InvalidArgument(
            f"{FN}(): layer {job.name or '(root)'!r} ran {tap.calls} times in one forward; attribution needs a layer that runs once (name one of its uses)"
        )
    if tap.value is None:
        raise InvalidArgument(f"{FN}(): layer {job.name or '(root)'!r} has no tensor {where} to attribute to")


def _plan(job: _Job, n_points: int, saved: int, layer_value: Any = None, endpoint: bool = False) -> Plan:
    be = job.be
    budget = 0
    if job.batch == "auto":
        budget = int(job.max_memory) if job.max_memory is not None else int(DEFAULT_FRACTION * job.ops.free_bytes(job.x))
    per_row = 3 * be.numel(job.x) // job.n * be.itemsize(job.x)
    if layer_value is not None:
        per_row += 4 * be.numel(layer_value) // job.n * be.itemsize(layer_value)
    return plan_chunks(job.n, n_points, job.batch, budget=budget, row_bytes=row_cost(saved, job.n, per_row), endpoint=endpoint)


def _scaled(job: _Job, start: Any, end: Any, alphas: Sequence[float], j0: int, j1: int) -> Any:
    """Rows ``start + a * (end - start)`` for each alpha (alpha-major), samples ``j0:j1``."""
    s, d = start[j0:j1], end[j0:j1] - start[j0:j1]
    return job.m.cat([s + a * d for a in alphas], 0)


def _score(job: _Job, out: Any, samples: list[int]) -> Any:
    s = target_scores(job.be, out, expand_target(job.target, samples), len(samples), FN)
    return s.sum() if len(job.be.shape(s)) else s


def _neuron_of(job: _Job, value: Any) -> Any:
    shape = tuple(job.be.shape(value))[1:]
    if len(job.neuron) != len(shape) or not all(-s <= i < s for i, s in zip(job.neuron, shape)):
        fail(FN, "neuron", f"an index into the layer's output per sample, shape {list(shape)}", job.neuron)
    return value[(slice(None), *job.neuron)]


def _grad(job: _Job, score: Any, wrt: Any) -> Any:
    g = job.ops.grads_or_none(score, [wrt])[0]
    if g is None:
        what = "the inputs" if job.layer is None else f"layer {job.name or '(root)'!r}"
        raise InvalidArgument(f"{FN}(): the target's score does not depend on {what}: it is not on the path from the inputs to the target")
    return g


def _weighted(job: _Job, g: Any, weights: Sequence[float], b: int) -> Any:
    """``sum_i weights[i] * g[i*b:(i+1)*b]`` (g holds len(weights) blocks of b rows)."""
    acc = None
    for i, w in enumerate(weights):
        part = g[i * b : (i + 1) * b] * w
        acc = part if acc is None else acc + part
    return acc


def _leaf(job: _Job, t: Any) -> Any:
    return job.be.set_requires_grad(job.be.detach(t))


def _blocks(job: _Job, plan: Plan) -> list[tuple[int, int]]:
    return spans(job.n, plan.samples)


def _rows(j0: int, j1: int, k: int) -> list[int]:
    return [j for _ in range(k) for j in range(j0, j1)]


def _detach(job: _Job, t: Any) -> Any:
    return job.be.detach(t)


def _delta(job: _Job, attr: Any) -> Any:
    shape = job.be.shape(job.scores["input"])
    if len(shape) != 1:
        raise InvalidArgument(f"{FN}(): return_delta needs one score per sample; the target gave shape {list(shape)}")
    dims = list(range(1, len(job.be.shape(attr))))
    total = job.m.sum(attr, dims) if dims else attr
    return job.be.detach(total - (job.scores["input"] - job.scores["baseline"]))


# -- the methods --------------------------------------------------------------------------------------
def _layer_ig(job: _Job) -> Any:
    y_x, saved = _probe(job, job.x, "input", measure=True)
    y_b, _ = _probe(job, job.base, "baseline")
    if job.be.dtype_kind(y_x) != "float":
        raise InvalidArgument(
            f"{FN}(): layer {job.name!r} gives integer values at its {job.where}; attribute to a layer with floating-point values (e.g. the embedding's output)"
        )
    weights, alphas = quadrature(job.rule, job.n_steps)
    plan = _plan(job, job.n_steps, saved, y_x)
    tap, blocks = job.tap, []
    for j0, j1 in _blocks(job, plan):
        acc = None
        for s0, s1 in spans(job.n_steps, plan.points):
            k = s1 - s0
            leaf = _leaf(job, _scaled(job, y_b, y_x, alphas[s0:s1], j0, j1))
            tap.replace = _replacer(job, leaf)
            out = _forward(job, job.m.tile_rows(job.x[j0:j1], k), _rows(j0, j1, k))
            part = _weighted(job, _grad(job, _score(job, out, _rows(j0, j1, k)), leaf), weights[s0:s1], j1 - j0)
            acc = part if acc is None else acc + job.be.detach(part)
        blocks.append(acc)
    return job.m.cat(blocks, 0) * (y_x - y_b)


def _replacer(job: _Job, new: Any) -> Any:
    def replace(value: Any) -> Any:
        if tuple(job.be.shape(value)) != tuple(job.be.shape(new)):
            raise InvalidArgument(
                f"{FN}(): layer {job.name!r} gave a value of shape {list(job.be.shape(value))} for scaled inputs; expected {list(job.be.shape(new))}"
            )
        return new

    return replace


def _layer_conductance(job: _Job) -> Any:
    y_x, saved = _probe(job, job.x, "input", measure=True)
    _probe(job, job.base, "baseline")
    _, alphas = quadrature(job.rule, job.n_steps + 1)
    plan = _plan(job, job.n_steps + 1, saved, y_x, endpoint=True)
    tap, blocks = job.tap, []
    cut = _cutter(job)
    for j0, j1 in _blocks(job, plan):
        acc, b = None, j1 - j0
        for p0, p1 in spans(job.n_steps + 1, plan.points, overlap=1):
            k = p1 - p0
            tap.replace = cut
            out = _forward(job, _scaled(job, job.base, job.x, alphas[p0:p1], j0, j1), _rows(j0, j1, k))
            y = cut.leaf
            g = _grad(job, _score(job, out, _rows(j0, j1, k)), y)
            part = None
            for i in range(k - 1):
                term = g[i * b : (i + 1) * b] * (y[(i + 1) * b : (i + 2) * b] - y[i * b : (i + 1) * b])
                part = term if part is None else part + term
            acc = part if acc is None else acc + job.be.detach(part)
        blocks.append(acc)
    return job.m.cat(blocks, 0)


class _Cut:
    """Replaces the layer's value by a detached copy that takes a gradient (``leaf``): what runs
    after the layer is differentiated, what ran before it is not."""

    def __init__(self, job: _Job):
        self.job, self.leaf = job, None

    def __call__(self, value: Any) -> Any:
        self.leaf = _leaf(self.job, value)
        return self.leaf


def _cutter(job: _Job) -> _Cut:
    return _Cut(job)


def _layer_point(job: _Job) -> Any:
    """gradient, gradient_x_activation, activation at a layer: one point per sample."""
    y_x, saved = _probe(job, job.x, "input", measure=job.method != "activation")
    if job.method == "activation":
        return y_x
    plan = _plan(job, 1, saved, y_x)
    tap, cut, blocks = job.tap, _cutter(job), []
    for j0, j1 in _blocks(job, plan):
        tap.replace = cut
        out = _forward(job, job.x[j0:j1], range(j0, j1))
        g = _grad(job, _score(job, out, list(range(j0, j1))), cut.leaf)
        blocks.append(job.be.detach(g * cut.leaf if job.method == "gradient_x_activation" else g))
    return job.m.cat(blocks, 0)


def _neuron_path(job: _Job) -> Any:
    """Neuron integrated gradients and conductance: attributions of one neuron to the inputs."""
    conductance = job.method == "conductance"
    _, saved = _probe(job, job.x, "input", measure=True)
    weights, alphas = quadrature(job.rule, job.n_steps)
    plan = _plan(job, job.n_steps, saved)
    tap, blocks = job.tap, []
    cut = _cutter(job) if conductance else None
    for j0, j1 in _blocks(job, plan):
        acc, b = None, j1 - j0
        for s0, s1 in spans(job.n_steps, plan.points):
            k = s1 - s0
            x = _leaf(job, _scaled(job, job.base, job.x, alphas[s0:s1], j0, j1))
            tap.replace, tap.stop = cut, not conductance
            out = _forward(job, x, _rows(j0, j1, k))
            g = _grad(job, _neuron_of(job, tap.value).sum(), x)
            if conductance:  # dF/dneuron from the part after the layer, dneuron/dx from the part before
                g_n = _neuron_of(job, _grad(job, _score(job, out, _rows(j0, j1, k)), cut.leaf))
                g = g * job.m.reshape(g_n, [-1] + [1] * (len(job.be.shape(g)) - 1))
            part = _weighted(job, g, weights[s0:s1], b)
            acc = part if acc is None else acc + job.be.detach(part)
        blocks.append(acc)
    return job.m.cat(blocks, 0) * (job.x - job.base)


def _neuron_point(job: _Job) -> Any:
    """Neuron gradient and gradient x input."""
    _, saved = _probe(job, job.x, "input", measure=True)
    plan = _plan(job, 1, saved)
    tap, blocks = job.tap, []
    for j0, j1 in _blocks(job, plan):
        x = _leaf(job, job.x[j0:j1])
        tap.replace, tap.stop = None, True
        _forward(job, x, range(j0, j1))
        g = _grad(job, _neuron_of(job, tap.value).sum(), x)
        blocks.append(job.be.detach(g * x if job.method == "gradient_x_activation" else g))
    return job.m.cat(blocks, 0)


def _input_ig(job: _Job) -> Any:
    _, saved = _probe(job, job.x, "input", measure=True)
    _probe(job, job.base, "baseline")
    weights, alphas = quadrature(job.rule, job.n_steps)
    plan = _plan(job, job.n_steps, saved)
    blocks = []
    for j0, j1 in _blocks(job, plan):
        acc = None
        for s0, s1 in spans(job.n_steps, plan.points):
            k = s1 - s0
            x = _leaf(job, _scaled(job, job.base, job.x, alphas[s0:s1], j0, j1))
            part = _weighted(job, _grad(job, _score(job, _forward(job, x, _rows(j0, j1, k)), _rows(j0, j1, k)), x), weights[s0:s1], j1 - j0)
            acc = part if acc is None else acc + job.be.detach(part)
        blocks.append(acc)
    return job.m.cat(blocks, 0) * (job.x - job.base)


def _input_point(job: _Job) -> Any:
    """gradient, saliency, gradient_x_activation (captum's InputXGradient) at the inputs."""
    _, saved = _probe(job, job.x, "input", measure=True)
    plan = _plan(job, 1, saved)
    blocks = []
    for j0, j1 in _blocks(job, plan):
        x = _leaf(job, job.x[j0:j1])
        g = _grad(job, _score(job, _forward(job, x, range(j0, j1)), list(range(j0, j1))), x)
        g = g * x if job.method == "gradient_x_activation" else job.m.abs(g) if job.method == "saliency" else g
        blocks.append(job.be.detach(g))
    return job.m.cat(blocks, 0)


def _smoothgrad(job: _Job) -> Any:
    """The mean gradient over ``nt_samples`` noisy copies of each sample (captum's NoiseTunnel on
    Saliency with abs=False: the same noise for the same seed, sample-major)."""
    _, saved = _probe(job, job.x, "input", measure=True)
    nt, be = job.nt_samples, job.be
    if job.seed is not None:
        be.seed(job.seed)
    noisy = job.m.repeat_rows(job.x, nt)
    noisy = noisy + be.randn_like(noisy) * job.stdevs
    plan = _plan(job, nt, saved)
    blocks = []
    for j0, j1 in spans(job.n, max(1, plan.samples * plan.points // nt)):
        x = _leaf(job, noisy[j0 * nt : j1 * nt])
        samples = [j for j in range(j0, j1) for _ in range(nt)]
        g = _grad(job, _score(job, _forward(job, x, samples), samples), x)
        shape = list(be.shape(g))
        blocks.append(be.detach(job.m.mean(job.m.reshape(g, [j1 - j0, nt, *shape[1:]]), [1])))
    return job.m.cat(blocks, 0)


_METHODS = {
    "layer:integrated_gradients": _layer_ig,
    "layer:conductance": _layer_conductance,
    "layer:gradient": _layer_point,
    "layer:gradient_x_activation": _layer_point,
    "layer:activation": _layer_point,
    "neuron:integrated_gradients": _neuron_path,
    "neuron:conductance": _neuron_path,
    "neuron:gradient": _neuron_point,
    "neuron:gradient_x_activation": _neuron_point,
    "input:integrated_gradients": _input_ig,
    "input:gradient": _input_point,
    "input:saliency": _input_point,
    "input:gradient_x_activation": _input_point,
    "input:smoothgrad": _smoothgrad,
}
