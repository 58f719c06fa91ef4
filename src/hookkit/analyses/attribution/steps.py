"""The steps every attribution method shares: the probe forwards at the inputs and baselines, one
forward of scaled rows (with the model's keyword arguments picked for them), scores, gradients,
quadrature sums, the chunk plan and the completeness delta."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hookkit.analyses.attribution.budget import DEFAULT_FRACTION, Plan, plan_chunks, row_cost
from hookkit.analyses.targets import expand_target, resolve_target, target_scores
from hookkit.core.entry import entry_name
from hookkit.core.tree import leaves
from hookkit.core.validate import InvalidArgument, fail

if TYPE_CHECKING:  # annotations only: job.py reads the table of methods, which runs these steps
    from hookkit.analyses.attribution.job import Job


def probe(job: Job, x: Any, key: str, measure: bool = False, sizes: dict | None = None) -> tuple[Any, int]:
    """One forward of the ``N`` samples: the per-sample scores under ``key``, the layer's value
    (detached) and, with ``measure``, the bytes the forward kept for a backward plus its output's
    (``sizes["largest"]``: the bytes of the largest tensor it kept, with ``measure``, or returned)."""
    be, tap = job.be, job.tap
    if tap is not None:
        tap.replace, tap.stop = None, False
    saved = 0
    if measure:  # record what the chunks will: the graph down to the inputs, or from the layer on
        if job.layer is None or job.neuron is not None:
            x = leaf(job, x)
        else:
            tap.replace = Cut(job)
        with job.ops.saved_bytes(job.model) as counter:
            out = forward(job, x, range(job.n))
        # what autograd keeps for the backward, and the output (an LM's logits for every position)
        outputs = [be.numel(t) * be.itemsize(t) for t in leaves(out, be.is_tensor)]
        saved = counter.bytes + sum(outputs)
        if sizes is not None:
            sizes["largest"] = max([counter.largest, *outputs])
    else:
        out = forward(job, x, range(job.n))
        if sizes is not None:
            sizes["largest"] = max([0, *(be.numel(t) * be.itemsize(t) for t in leaves(out, be.is_tensor))])
    if job.neuron is None or job.method == "conductance":  # the other neuron methods explain the neuron alone
        if key == "input":
            job.target = resolve_target(be, out, job.target, job.n)
        job.scores[key] = be.detach(target_scores(be, out, job.target, job.n))
    value = None
    if tap is not None:
        _check_ran(job)
        value = be.detach(tap.value)
        if job.method != "activation" and be.dtype_kind(value) != "float":
            raise InvalidArgument(
                f"{entry_name()}(): layer {job.name!r} has integer values at its {job.opts.attribute_to} (token ids?), which take no gradient; "
                "attribute to a layer with floating-point values (e.g. the embedding's output)"
            )
    return value, saved


def forward(job: Job, x: Any, samples: Sequence[int]) -> Any:
    """The model on rows ``x`` made from ``samples`` (with ``forward_kwargs`` picked for them);
    None when the tap ended the forward early."""
    kwargs = {}
    if job.kwargs:
        same = len(samples) == job.n and list(samples) == list(range(job.n))
        for k, v in job.kwargs.items():
            if job.be.is_tensor(v) and len(job.be.shape(v)) and job.be.shape(v)[0] == job.n and not same:
                v = job.m.index_select(v, 0, list(samples))
            kwargs[k] = v
    model = job.model if job.packing is None else job.packing.caller(job.model)  # several inputs (inputs.py)
    if job.tap is None:
        return model(x, **kwargs)
    return job.tap.run(model, x, kwargs)


def _check_ran(job: Job) -> None:
    tap, where = job.tap, "output" if job.opts.attribute_to == "output" else "tensor input"
    if tap.calls == 0:
        raise InvalidArgument(f"{entry_name()}(): layer {job.name or '(root)'!r} did not run in the model's forward")
    if tap.calls > 1:
        raise InvalidArgument(
            f"{entry_name()}(): layer {job.name or '(root)'!r} ran {tap.calls} times in one forward; attribution needs a layer that runs once (name one of its uses)"
        )
    if tap.value is None:
        raise InvalidArgument(f"{entry_name()}(): layer {job.name or '(root)'!r} has no tensor {where} to attribute to")


def plan(job: Job, n_points: int, saved: int, layer_value: Any = None, endpoint: bool = False) -> Plan:
    be = job.be
    budget = 0
    if job.opts.internal_batch_size == "auto":
        budget = int(job.opts.max_memory) if job.opts.max_memory is not None else int(DEFAULT_FRACTION * job.ops.free_bytes(job.x))
    per_row = 3 * be.numel(job.x) // job.n * be.itemsize(job.x)
    if layer_value is not None:
        per_row += 4 * be.numel(layer_value) // job.n * be.itemsize(layer_value)
    return plan_chunks(
        job.n, n_points, job.opts.internal_batch_size, budget=budget, row_bytes=row_cost(saved, job.n, per_row), endpoint=endpoint
    )


def scaled(job: Job, start: Any, end: Any, alphas: Sequence[float], j0: int, j1: int) -> Any:
    """Rows ``start + a * (end - start)`` for each alpha (alpha-major), samples ``j0:j1``."""
    s, d = start[j0:j1], end[j0:j1] - start[j0:j1]
    return job.m.cat([s + a * d for a in alphas], 0)


def score(job: Job, out: Any, samples: list[int]) -> Any:
    s = target_scores(job.be, out, expand_target(job.target, samples), len(samples))
    return s.sum() if len(job.be.shape(s)) else s


def neuron_of(job: Job, value: Any) -> Any:
    """The selected neuron's value per row ``[rows]``."""
    neuron, shape = tuple(job.neuron or ()), tuple(job.be.shape(value))[1:]
    if len(neuron) != len(shape) or not all(-s <= i < s for i, s in zip(neuron, shape)):
        fail(entry_name(), "neuron", f"an index into the layer's output per sample, shape {list(shape)}", job.neuron)
    return value[(slice(None),) + neuron]


def grad(job: Job, score: Any, wrt: Any) -> Any:
    g = job.ops.grads_or_none(score, [wrt])[0]
    if g is None:
        what = "the inputs" if job.layer is None else f"layer {job.name or '(root)'!r}"
        raise InvalidArgument(
            f"{entry_name()}(): the target's score does not depend on {what}: it is not on the path from the inputs to the target"
        )
    return g


def weighted(job: Job, g: Any, weights: Sequence[float], b: int) -> Any:
    """``sum_i weights[i] * g[i*b:(i+1)*b]`` (g holds len(weights) blocks of b rows)."""
    acc = None
    for i, w in enumerate(weights):
        part = g[i * b : (i + 1) * b] * w
        acc = part if acc is None else acc + part
    return acc


def leaf(job: Job, t: Any) -> Any:
    return job.be.set_requires_grad(job.be.detach(t))


def rows(j0: int, j1: int, k: int) -> list[int]:
    return [j for _ in range(k) for j in range(j0, j1)]


def delta(job: Job, attr: Any) -> Any:
    shape = job.be.shape(job.scores["input"])
    if len(shape) != 1:
        raise InvalidArgument(f"{entry_name()}(): return_delta needs one score per sample; the target gave shape {list(shape)}")
    dims = list(range(1, len(job.be.shape(attr))))
    total = job.m.sum(attr, dims) if dims else attr
    return job.be.detach(total - (job.scores["input"] - job.scores["baseline"]))


def replacer(job: Job, new: Any) -> Any:
    def replace(value: Any) -> Any:
        if tuple(job.be.shape(value)) != tuple(job.be.shape(new)):
            raise InvalidArgument(
                f"{entry_name()}(): layer {job.name!r} gave a value of shape {list(job.be.shape(value))} for scaled inputs; expected {list(job.be.shape(new))}"
            )
        return new

    return replace


class Cut:
    """Replaces the layer's value by a detached copy that takes a gradient (``leaf``): what runs
    after the layer is differentiated, what ran before it is not."""

    def __init__(self, job: Job):
        self.job = job
        self.leaf: Any = None

    def __call__(self, value: Any) -> Any:
        if self.job.be.dtype_kind(value) != "float":  # token ids: left alone, refused by ``probe``
            return None
        self.leaf = leaf(self.job, value)
        return self.leaf
