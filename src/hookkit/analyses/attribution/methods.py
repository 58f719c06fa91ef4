"""The attribution methods, one function each over a checked ``Job``: at a layer, for a neuron, at
the inputs. Each runs the scaled rows in the chunks of its plan and sums on the model's device."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hookkit.analyses.attribution import lrp
from hookkit.analyses.attribution import perturbation as pt
from hookkit.analyses.attribution import propagation as pr
from hookkit.analyses.attribution import steps as st
from hookkit.analyses.attribution.budget import spans
from hookkit.analyses.attribution.rules import quadrature

if TYPE_CHECKING:  # annotations only: job.py reads this module's table
    from hookkit.analyses.attribution.job import Job


def _layer_ig(job: Job) -> Any:
    y_x, saved = st.probe(job, job.x, "input", measure=True)
    y_b, _ = st.probe(job, job.base, "baseline")
    weights, alphas = quadrature(job.opts.rule, job.opts.n_steps)
    plan = st.plan(job, job.opts.n_steps, saved, y_x)
    tap, blocks = job.tap, []
    for j0, j1 in spans(job.n, plan.samples):
        acc = None
        for s0, s1 in spans(job.opts.n_steps, plan.points):
            k = s1 - s0
            leaf = st.leaf(job, st.scaled(job, y_b, y_x, alphas[s0:s1], j0, j1))
            tap.replace = st.replacer(job, leaf)
            out = st.forward(job, job.m.tile_rows(job.x[j0:j1], k), st.rows(j0, j1, k))
            part = st.weighted(job, st.grad(job, st.score(job, out, st.rows(j0, j1, k)), leaf), weights[s0:s1], j1 - j0)
            acc = part if acc is None else acc + job.be.detach(part)
        blocks.append(acc)
    return job.m.cat(blocks, 0) * (y_x - y_b)


def _layer_conductance(job: Job) -> Any:
    y_x, saved = st.probe(job, job.x, "input", measure=True)
    st.probe(job, job.base, "baseline")
    _, alphas = quadrature(job.opts.rule, job.opts.n_steps + 1)
    plan = st.plan(job, job.opts.n_steps + 1, saved, y_x, endpoint=True)
    tap, blocks = job.tap, []
    cut = st.Cut(job)
    for j0, j1 in spans(job.n, plan.samples):
        acc, b = None, j1 - j0
        for p0, p1 in spans(job.opts.n_steps + 1, plan.points, overlap=1):
            k = p1 - p0
            tap.replace = cut
            out = st.forward(job, st.scaled(job, job.base, job.x, alphas[p0:p1], j0, j1), st.rows(j0, j1, k))
            y = cut.leaf
            g = st.grad(job, st.score(job, out, st.rows(j0, j1, k)), y)
            part = None
            for i in range(k - 1):
                term = g[i * b : (i + 1) * b] * (y[(i + 1) * b : (i + 2) * b] - y[i * b : (i + 1) * b])
                part = term if part is None else part + term
            acc = part if acc is None else acc + job.be.detach(part)
        blocks.append(acc)
    return job.m.cat(blocks, 0)


def _layer_point(job: Job) -> Any:
    """gradient, gradient_x_activation, activation at a layer: one point per sample."""
    y_x, saved = st.probe(job, job.x, "input", measure=job.method != "activation")
    if job.method == "activation":
        return y_x
    plan = st.plan(job, 1, saved, y_x)
    tap, cut, blocks = job.tap, st.Cut(job), []
    for j0, j1 in spans(job.n, plan.samples):
        tap.replace = cut
        out = st.forward(job, job.x[j0:j1], range(j0, j1))
        g = st.grad(job, st.score(job, out, list(range(j0, j1))), cut.leaf)
        blocks.append(job.be.detach(g * cut.leaf if job.method == "gradient_x_activation" else g))
    return job.m.cat(blocks, 0)


def _neuron_path(job: Job) -> Any:
    """Neuron integrated gradients and conductance: attributions of one neuron to the inputs."""
    conductance = job.method == "conductance"
    _, saved = st.probe(job, job.x, "input", measure=True)
    weights, alphas = quadrature(job.opts.rule, job.opts.n_steps)
    plan = st.plan(job, job.opts.n_steps, saved)
    tap, blocks = job.tap, []
    cut = st.Cut(job)
    for j0, j1 in spans(job.n, plan.samples):
        acc, b = None, j1 - j0
        for s0, s1 in spans(job.opts.n_steps, plan.points):
            k = s1 - s0
            x = st.leaf(job, st.scaled(job, job.base, job.x, alphas[s0:s1], j0, j1))
            tap.replace, tap.stop = (cut if conductance else None), not conductance
            out = st.forward(job, x, st.rows(j0, j1, k))
            g = st.grad(job, st.neuron_of(job, tap.value).sum(), x)
            if conductance:  # dF/dneuron from the part after the layer, dneuron/dx from the part before
                g_n = st.neuron_of(job, st.grad(job, st.score(job, out, st.rows(j0, j1, k)), cut.leaf))
                g = g * job.m.reshape(g_n, [-1] + [1] * (len(job.be.shape(g)) - 1))
            part = st.weighted(job, g, weights[s0:s1], b)
            acc = part if acc is None else acc + job.be.detach(part)
        blocks.append(acc)
    return job.m.cat(blocks, 0) * (job.x - job.base)


def _neuron_point(job: Job) -> Any:
    """Neuron gradient and gradient x input."""
    _, saved = st.probe(job, job.x, "input", measure=True)
    plan = st.plan(job, 1, saved)
    tap, blocks = job.tap, []
    for j0, j1 in spans(job.n, plan.samples):
        x = st.leaf(job, job.x[j0:j1])
        tap.replace, tap.stop = None, True
        st.forward(job, x, range(j0, j1))
        g = st.grad(job, st.neuron_of(job, tap.value).sum(), x)
        blocks.append(job.be.detach(g * x if job.method == "gradient_x_activation" else g))
    return job.m.cat(blocks, 0)


def _input_ig(job: Job) -> Any:
    _, saved = st.probe(job, job.x, "input", measure=True)
    st.probe(job, job.base, "baseline")
    weights, alphas = quadrature(job.opts.rule, job.opts.n_steps)
    plan = st.plan(job, job.opts.n_steps, saved)
    blocks = []
    for j0, j1 in spans(job.n, plan.samples):
        acc = None
        for s0, s1 in spans(job.opts.n_steps, plan.points):
            k = s1 - s0
            x = st.leaf(job, st.scaled(job, job.base, job.x, alphas[s0:s1], j0, j1))
            part = st.weighted(
                job, st.grad(job, st.score(job, st.forward(job, x, st.rows(j0, j1, k)), st.rows(j0, j1, k)), x), weights[s0:s1], j1 - j0
            )
            acc = part if acc is None else acc + job.be.detach(part)
        blocks.append(acc)
    return job.m.cat(blocks, 0) * (job.x - job.base)


def _input_point(job: Job) -> Any:
    """gradient, saliency, gradient_x_activation (captum's InputXGradient) at the inputs."""
    _, saved = st.probe(job, job.x, "input", measure=True)
    plan = st.plan(job, 1, saved)
    blocks = []
    for j0, j1 in spans(job.n, plan.samples):
        x = st.leaf(job, job.x[j0:j1])
        g = st.grad(job, st.score(job, st.forward(job, x, range(j0, j1)), list(range(j0, j1))), x)
        g = g * x if job.method == "gradient_x_activation" else job.m.abs(g) if job.method == "saliency" else g
        blocks.append(job.be.detach(g))
    return job.m.cat(blocks, 0)


def _smoothgrad(job: Job) -> Any:
    """The mean gradient over ``nt_samples`` noisy copies of each sample (captum's NoiseTunnel on
    Saliency with abs=False: the same noise for the same seed, sample-major)."""
    _, saved = st.probe(job, job.x, "input", measure=True)
    nt, be = job.opts.nt_samples, job.be
    if job.opts.seed is not None:
        job.m.seed(job.opts.seed)
    noisy = job.m.repeat_rows(job.x, nt)
    noisy = noisy + be.randn_like(noisy) * job.opts.stdevs
    plan = st.plan(job, nt, saved)
    blocks = []
    for j0, j1 in spans(job.n, max(1, plan.samples * plan.points // nt)):
        x = st.leaf(job, noisy[j0 * nt : j1 * nt])
        samples = [j for j in range(j0, j1) for _ in range(nt)]
        g = st.grad(job, st.score(job, st.forward(job, x, samples), samples), x)
        shape = list(be.shape(g))
        blocks.append(be.detach(job.m.mean(job.m.reshape(g, [j1 - j0, nt, *shape[1:]]), [1])))
    return job.m.cat(blocks, 0)


#: the table of methods: a method is one runner function and one entry per place it attributes to
#: ("layer": the layer's output or input, "neuron": one neuron of it, to the inputs; "input": the model's
#: inputs). Adding a method touches this file only: the lists of valid methods below derive from it.
RUNNERS = {
    "layer:integrated_gradients": _layer_ig,
    "layer:conductance": _layer_conductance,
    "layer:gradient_x_activation": _layer_point,
    "layer:activation": _layer_point,
    "layer:gradient": _layer_point,
    "neuron:integrated_gradients": _neuron_path,
    "neuron:conductance": _neuron_path,
    "neuron:gradient_x_activation": _neuron_point,
    "neuron:gradient": _neuron_point,
    "input:integrated_gradients": _input_ig,
    "input:gradient_x_activation": _input_point,
    "input:gradient": _input_point,
    "input:saliency": _input_point,
    "input:smoothgrad": _smoothgrad,
    "input:deeplift": pr.deeplift,
    "input:guided_backprop": pr.guided,
    "input:deconvolution": pr.guided,
    "input:lrp": lrp.lrp,
    "input:deeplift_shap": pr.deeplift_shap,
    "input:gradient_shap": pr.gradient_shap,
    "layer:guided_gradcam": pr.guided_gradcam,
    "layer:deeplift": pr.deeplift,
    "layer:deeplift_shap": pr.deeplift_shap,
    "layer:lrp": lrp.lrp,
    "layer:gradient_shap": pr.gradient_shap,
    # perturbation methods (perturbation.py): forwards only, at the inputs or at a layer's value
    "layer:occlusion": pt.ablation,
    "layer:feature_ablation": pt.ablation,
    "layer:feature_permutation": pt.ablation,
    "layer:shapley": pt.shapley,
    "layer:shapley_sampling": pt.shapley_sampling,
    "layer:kernel_shap": pt.kernel_shap,
    "layer:lime": pt.lime,
    "neuron:occlusion": pt.ablation,
    "neuron:feature_ablation": pt.ablation,
    "neuron:feature_permutation": pt.ablation,
    "neuron:shapley": pt.shapley,
    "neuron:shapley_sampling": pt.shapley_sampling,
    "neuron:kernel_shap": pt.kernel_shap,
    "neuron:lime": pt.lime,
    "input:occlusion": pt.ablation,
    "input:feature_ablation": pt.ablation,
    "input:feature_permutation": pt.ablation,
    "input:shapley": pt.shapley,
    "input:shapley_sampling": pt.shapley_sampling,
    "input:kernel_shap": pt.kernel_shap,
    "input:lime": pt.lime,
}
#: methods along a path from baselines to the inputs: they take ``baselines`` and give a completeness delta
PATH_METHODS = ("integrated_gradients", "conductance", "deeplift")
#: methods that perturb and run forwards only (their options: feature_mask, sliding_window_shapes, ...)
PERTURBATION_METHODS = pt.PERTURBATION_METHODS


def _at(where: str) -> tuple[str, ...]:
    return tuple(k.split(":", 1)[1] for k in RUNNERS if k.startswith(where + ":"))


LAYER_METHODS, NEURON_METHODS, INPUT_METHODS = _at("layer"), _at("neuron"), _at("input")
METHODS = tuple(dict.fromkeys(LAYER_METHODS + INPUT_METHODS))
