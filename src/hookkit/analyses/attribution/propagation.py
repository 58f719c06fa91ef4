"""The propagation methods: the gradient with its backward modified at chosen layers, through
router consumers ("forward" records a layer's values, "backward" replaces the gradient at its
input). No module is replaced, no native hook placed here; everything is removed when the method
returns or raises.

``deeplift``: captum's DeepLift (Rescale rule): the inputs and the baselines run in one batch; at
each ReLU, ELU, LeakyReLU, Sigmoid, Tanh or Softplus layer the gradient at its input becomes
``grad_out * Δout / Δin`` (the plain gradient where ``|Δin| < 1e-10``); the multipliers times
``inputs - baselines``. ``guided_backprop`` / ``deconvolution``: at each ReLU layer, the gradient at
its input is the positive part of the gradient at its input / at its output.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from hookkit.analyses.attribution import steps as st
from hookkit.analyses.attribution.budget import spans
from hookkit.core.router import attach

if TYPE_CHECKING:
    from hookkit.analyses.attribution.job import Job

#: the nonlinear layer types DeepLift's Rescale rule applies to (captum's list, max pooling and softmax aside)
RESCALE_TYPES = ("ReLU", "ELU", "LeakyReLU", "Sigmoid", "Tanh", "Softplus")
EPS = 1e-10  # captum's DeepLift eps


def layers_of_type(job: Job, types: Sequence[str]) -> list[tuple[str, Any]]:
    """The model's layers whose class is named in ``types`` (the same names in both frameworks)."""
    return [(n, layer) for n, layer in job.be.named_layers(job.model) if type(layer).__name__ in types]


@contextlib.contextmanager
def placed(job: Job, consumers: Sequence[tuple[str, list[tuple[str, Any]], Callable]]) -> Iterator[None]:
    """``(event, layers, fn)`` router consumers, in place for the block and removed after it, also
    when it raises."""
    groups = []
    try:
        for event, named, fn in consumers:
            if named:
                groups.append(attach(job.model, named, event, fn))
        yield
    finally:
        for g in reversed(groups):
            g.remove()


def _chunks(job: Job, x: Any, per_chunk: int, factor: Callable[[Any, int, int], Any] | None) -> Any:
    blocks = []
    for j0, j1 in spans(job.n, max(1, per_chunk)):
        leaf = st.leaf(job, x[j0:j1])
        g = st.grad(job, st.score(job, st.forward(job, leaf, range(j0, j1)), list(range(j0, j1))), leaf)
        blocks.append(job.be.detach(g if factor is None else factor(g, j0, j1)))
    return job.m.cat(blocks, 0)


def guided(job: Job) -> Any:
    """guided_backprop and deconvolution at the inputs (captum's GuidedBackprop / Deconvolution)."""
    return job.be.detach(guided_gradients(job, job.x))


def guided_gradients(job: Job, x: Any) -> Any:
    relu = job.m.relu
    use_output = job.method == "deconvolution"

    def modify(ev: Any) -> Any:
        src = ev.grad_outputs if use_output else ev.grad_inputs
        if not src or src[0] is None:
            return None
        return (relu(src[0]), *ev.grad_inputs[1:])

    _, saved = st.probe(job, job.x, "input", measure=True)
    plan = st.plan(job, 1, saved)
    with placed(job, [("backward", layers_of_type(job, ("ReLU",)), modify)]):
        return _chunks(job, x, plan.samples * plan.points, None)


def deeplift(job: Job) -> Any:
    """DeepLift at the inputs: the Rescale multipliers times ``inputs - baselines``."""
    _, saved = st.probe(job, job.x, "input", measure=True)
    st.probe(job, job.base, "baseline")
    return multipliers(job, job.x, job.base, saved) * (job.x - job.base)


def multipliers(job: Job, x: Any, base: Any, saved: int) -> Any:
    """DeepLift's multipliers of each row of ``x`` against the same row of ``base`` (``saved``: the
    bytes one forward of the samples keeps, from ``steps.probe``)."""
    plan = st.plan(job, 2, saved)
    ops, be = job.be.family("propagation"), job.be
    seen: dict[int, tuple[Any, Any]] = {}

    def record(ev: Any) -> None:
        if ev.args and be.is_tensor(ev.args[0]) and be.is_tensor(ev.output):
            seen[id(ev.layer)] = (be.detach(ev.args[0]), be.detach(ev.output))

    def rescale(ev: Any) -> Any:
        values = seen.get(id(ev.layer))
        g_in, g_out = ev.grad_inputs[0] if ev.grad_inputs else None, ev.grad_outputs[0] if ev.grad_outputs else None
        if values is None or g_in is None or g_out is None:
            return None
        v_in, v_out = values
        half = be.shape(v_in)[0] // 2
        d_in, d_out = v_in[:half] - v_in[half:], v_out[:half] - v_out[half:]
        d_in, d_out = job.m.cat([d_in, d_in], 0), job.m.cat([d_out, d_out], 0)
        return (ops.rescale(g_in, g_out, d_in, d_out, EPS), *ev.grad_inputs[1:])

    named = layers_of_type(job, RESCALE_TYPES)
    blocks = []
    with placed(job, [("forward", named, record), ("backward", named, rescale)]):
        for j0, j1 in spans(job.n, max(1, plan.samples * plan.points // 2)):
            leaf = st.leaf(job, x[j0:j1])
            samples = list(range(j0, j1)) * 2
            out = st.forward(job, job.m.cat([leaf, base[j0:j1]], 0), samples)
            g = st.grad(job, st.score(job, out, samples), leaf)
            seen.clear()
            blocks.append(be.detach(g))
    return job.m.cat(blocks, 0)
