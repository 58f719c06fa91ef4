"""The propagation methods: the gradient with its backward modified at chosen layers, through
router consumers ("forward" records a layer's values, "backward" replaces the gradient at its
input). No module is replaced, no native hook placed here; everything is removed when the method
returns or raises.

``deeplift``: captum's DeepLift (Rescale rule): the inputs and the baselines run in one batch; at
each ReLU, ELU, LeakyReLU, Sigmoid, Tanh or Softplus layer the gradient at its input becomes
``grad_out * Δout / Δin`` (the plain gradient where ``|Δin| < 1e-10``); the multipliers times
``inputs - baselines``; max-pooling layers get captum's max-pooling rule where the framework's ops
have it (``propagation.maxpool_rescale``). ``guided_backprop`` / ``deconvolution``: at each ReLU layer, the gradient at
its input is the positive part of the gradient at its input / at its output.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from hookkit.analyses.attribution import steps as st
from hookkit.analyses.attribution.budget import Plan, spans
from hookkit.core.entry import entry_name
from hookkit.core.router import attach
from hookkit.core.validate import check_tensor_like, fail

if TYPE_CHECKING:
    from hookkit.analyses.attribution.job import Job

#: the nonlinear layer types DeepLift's Rescale rule applies to (captum's list, max pooling and softmax aside)
RESCALE_TYPES = ("ReLU", "ELU", "LeakyReLU", "Sigmoid", "Tanh", "Softplus")
#: max pooling: captum's maxpool rule where the framework's ops have it, else the gradient
MAXPOOL_TYPES = ("MaxPool1d", "MaxPool2d", "MaxPool3d", "MaxPool2D")
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


def distribution(job: Job) -> Any:
    """The baselines of deeplift_shap and gradient_shap: ``[B, ...]`` samples drawn from (zeros
    when None; a number; a tensor of B samples shaped like one input sample, or one such sample)."""
    be, m, x = job.be, job.m, job.x
    one = tuple(be.shape(x))[1:]
    given = job.opts.baselines
    if given is None:
        return be.zeros_like(x[:1])
    if isinstance(given, (int, float)) and not isinstance(given, bool):
        return m.full((1, *one), float(given), x)
    b = check_tensor_like(given, be, arg="baselines")
    got = tuple(be.shape(b))
    if got == one:
        got, b = (1, *one), m.reshape(b, (1, *one))
    if len(got) != len(one) + 1 or got[1:] != one or got[0] < 1:
        fail(
            entry_name(),
            "baselines",
            f"None, a number, or a tensor of baseline samples [B, {', '.join(map(str, one))}]",
            f"a tensor of shape {list(got)}",
        )
    if be.device_of(b) != be.device_of(x):
        b = be.to(b, be.device_of(x))
    return b if be.dtype_name(b) == be.dtype_name(x) else be.cast(b, be.dtype_name(x))


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
    if job.tap is not None:  # guided Grad-CAM: the tap records, the gradient runs down to the inputs
        job.tap.replace = None
    plan = st.plan(job, 1, saved)
    with placed(job, [("backward", layers_of_type(job, ("ReLU",)), modify)]):
        return _chunks(job, x, plan.samples * plan.points, None)


def deeplift(job: Job) -> Any:
    """DeepLift at the inputs or at a layer: the Rescale multipliers times ``inputs - baselines``
    (at a layer: times the difference of its values)."""
    y_x, saved = st.probe(job, job.x, "input", measure=True)
    st.probe(job, job.base, "baseline")
    return rescaled(job, job.x, job.base, st.plan(job, 2, saved, y_x))


def deeplift_shap(job: Job) -> Any:
    """captum's DeepLiftShap: DeepLift of each input against each baseline sample, averaged."""
    dist = distribution(job)
    k = job.be.shape(dist)[0]
    y_x, saved = st.probe(job, job.x, "input", measure=True)
    x, base = job.m.repeat_rows(job.x, k), job.m.tile_rows(dist, job.n)
    owners = [j for j in range(job.n) for _ in range(k)]
    attr = rescaled(job, x, base, st.plan(job, 2 * k, saved, y_x), owners)
    return job.m.mean(job.m.reshape(attr, [job.n, k, *job.be.shape(attr)[1:]]), [1])


def gradient_shap(job: Job) -> Any:
    """captum's GradientShap: for ``n_samples`` draws per input (a baseline sample, N(0, stdevs²) noise
    on the input, a point uniform on the path), the gradient there times ``noisy input - baseline``,
    averaged. ``seed`` makes the draws repeatable; they run in chunks within the memory budget."""
    be, m, k = job.be, job.m, job.opts.n_samples or 5  # check_call filled in the default (5)
    dist = distribution(job)
    y_x, saved = st.probe(job, job.x, "input", measure=True)
    plan = st.plan(job, k, saved, y_x)
    if job.opts.seed is not None:
        m.seed(job.opts.seed)
    draw = np.random.default_rng(job.opts.seed)
    rows = job.n * k
    pick = draw.integers(0, be.shape(dist)[0], size=rows).tolist()
    alphas = draw.uniform(0.0, 1.0, size=(rows,) + (1,) * (len(be.shape(job.x)) - 1))
    noisy = m.repeat_rows(job.x, k)
    stdevs = job.opts.stdevs or 0.0  # check_call filled in the default
    if stdevs > 0:
        noisy = noisy + be.randn_like(noisy) * stdevs
    base = m.index_select(dist, 0, pick)
    alpha = be.cast(be.from_numpy(alphas, like=job.x), be.dtype_name(job.x))
    owners = [j for j in range(job.n) for _ in range(k)]
    blocks = []
    for r0, r1 in spans(rows, max(k, (plan.samples * plan.points) // k * k)):
        rows_of = owners[r0:r1]
        scaled = base[r0:r1] + alpha[r0:r1] * (noisy[r0:r1] - base[r0:r1])
        if job.tap is None:
            leaf = st.leaf(job, scaled)
            g = st.grad(job, st.score(job, st.forward(job, leaf, rows_of), rows_of), leaf)
            blocks.append(be.detach(g * (noisy[r0:r1] - base[r0:r1])))
            continue
        # at a layer (captum's LayerGradientShap): the gradient at the layer's value for the scaled
        # rows, times the difference of its values for the noisy inputs and the baselines
        cut = st.Cut(job)
        job.tap.replace = cut
        g = st.grad(job, st.score(job, st.forward(job, scaled, rows_of), rows_of), cut.leaf)
        job.tap.replace, job.tap.stop = None, True
        try:
            st.forward(job, noisy[r0:r1], rows_of)
            y_noisy = be.detach(job.tap.value)
            st.forward(job, base[r0:r1], rows_of)
            y_base = be.detach(job.tap.value)
        finally:
            job.tap.stop = False
        blocks.append(be.detach(g * (y_noisy - y_base)))
    attr = m.cat(blocks, 0)
    return m.mean(m.reshape(attr, [job.n, k, *be.shape(attr)[1:]]), [1])


def rescaled(job: Job, x: Any, base: Any, plan: Plan, owners: Sequence[int] | None = None) -> Any:
    """DeepLift of each row of ``x`` against the same row of ``base`` (at the inputs, or at the
    layer of ``job.tap``); ``owners``: the sample each row belongs to (the rows are the samples when
    None); ``plan`` from ``steps.plan``."""
    owners = list(range(job.n)) if owners is None else list(owners)
    ops, be = job.be.family("propagation"), job.be
    seen: dict[int, tuple[Any, Any]] = {}

    # copies: an in-place layer (ReLU(inplace=True)) overwrites its input with its output
    def record_in(ev: Any) -> None:
        if ev.args and be.is_tensor(ev.args[0]):
            seen[id(ev.layer)] = (be.clone(be.detach(ev.args[0])), None)

    def record(ev: Any) -> None:
        v_in = seen.get(id(ev.layer), (None, None))[0]
        if v_in is not None and be.is_tensor(ev.output):
            seen[id(ev.layer)] = (v_in, be.clone(be.detach(ev.output)))

    def rescale(ev: Any) -> Any:
        values = seen.get(id(ev.layer))
        g_in, g_out = ev.grad_inputs[0] if ev.grad_inputs else None, ev.grad_outputs[0] if ev.grad_outputs else None
        if values is None or values[1] is None or g_in is None or g_out is None:
            return None
        v_in, v_out = values
        if type(ev.layer).__name__ in MAXPOOL_TYPES:
            new = ops.maxpool_rescale(ev.layer, v_in, v_out, g_in, g_out, EPS)
            return None if new is None else (new, *ev.grad_inputs[1:])
        half = be.shape(v_in)[0] // 2
        d_in, d_out = v_in[:half] - v_in[half:], v_out[:half] - v_out[half:]
        d_in, d_out = job.m.cat([d_in, d_in], 0), job.m.cat([d_out, d_out], 0)
        return (ops.rescale(g_in, g_out, d_in, d_out, EPS), *ev.grad_inputs[1:])

    named = layers_of_type(job, RESCALE_TYPES + MAXPOOL_TYPES)
    blocks = []
    with placed(job, [("forward_pre", named, record_in), ("forward", named, record), ("backward", named, rescale)]):
        for j0, j1 in spans(len(owners), max(1, plan.samples * plan.points // 2)):
            samples, h = owners[j0:j1] * 2, j1 - j0
            if job.tap is None:
                leaf = st.leaf(job, x[j0:j1])
                out = st.forward(job, job.m.cat([leaf, base[j0:j1]], 0), samples)
                g = st.grad(job, st.score(job, out, samples), leaf)
                part = g * (x[j0:j1] - base[j0:j1])
            else:  # the gradient at the layer's value, what ran before it cut off
                cut = st.Cut(job)
                job.tap.replace = cut
                out = st.forward(job, job.m.cat([x[j0:j1], base[j0:j1]], 0), samples)
                g = st.grad(job, st.score(job, out, samples), cut.leaf)
                part = g[:h] * (cut.leaf[:h] - cut.leaf[h:])
            seen.clear()
            blocks.append(be.detach(part))
    return job.m.cat(blocks, 0)


def guided_gradcam(job: Job) -> Any:
    """captum's GuidedGradCam: guided backprop at the inputs times the layer's Grad-CAM (the ReLU of
    the channels' sum weighted by their mean gradient) upsampled to the inputs (nearest)."""
    be, m = job.be, job.m
    y_x, saved = st.probe(job, job.x, "input", measure=True)
    if len(be.shape(y_x)) < 3 or len(be.shape(job.x)) != len(be.shape(y_x)):
        fail(
            entry_name(),
            "layer",
            f"a layer whose value is [N, C, *spatial] with as many spatial axes as the inputs {list(be.shape(job.x))} (Grad-CAM)",
            f"{job.name!r} with a value of shape {list(be.shape(y_x))}",
        )
    plan = st.plan(job, 1, saved, y_x)
    tap, cut, cams = job.tap, st.Cut(job), []
    for j0, j1 in spans(job.n, plan.samples):
        tap.replace = cut
        out = st.forward(job, job.x[j0:j1], range(j0, j1))
        g = st.grad(job, st.score(job, out, list(range(j0, j1))), cut.leaf)
        weights = m.mean(g, list(range(2, len(be.shape(g)))), keepdim=True)
        cams.append(be.detach(m.relu(m.sum(weights * cut.leaf, [1], keepdim=True))))
    tap.replace = None
    cam = m.interpolate(m.cat(cams, 0), list(be.shape(job.x))[2:], "nearest")
    return guided_gradients(job, job.x) * cam
