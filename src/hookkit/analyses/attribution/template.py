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
from typing import Any

from hookkit.analyses.attribution.inputs import unpacked
from hookkit.analyses.attribution.job import AttributeOptions, check_call
from hookkit.analyses.attribution.methods import RUNNERS
from hookkit.analyses.attribution.steps import delta
from hookkit.analyses.attribution_tap import LayerTap
from hookkit.analyses.passes import analysis_pass
from hookkit.analyses.targets import Target
from hookkit.core.entry import public_entry
from hookkit.core.failures import explains_failures
from hookkit.core.types import Layer


@public_entry("attribute")
@explains_failures("attribute")
def attribute(
    model: Layer,
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
    stdevs: float | None = None,
    nt_samples: int = 5,
    seed: int | None = None,
    forward_kwargs: dict[str, Any] | None = None,
    return_delta: bool = False,
    eval: bool = True,
    composite: Any = None,
    rules: dict[str, Any] | None = None,
    feature_mask: Any = None,
    sliding_window_shapes: int | Sequence[int] | None = None,
    strides: int | Sequence[int] | None = None,
    n_samples: int | None = None,
    permutation: Sequence[int] | None = None,
) -> Any:
    """Attributions of the target's score, as framework tensors shaped like what they attribute to.

    ``layer``: a name, glob or layer object matching one layer (attributions to its output, or to
    its first tensor input with ``attribute_to="input"``), or None (to the model's inputs).
    ``method``: "integrated_gradients" (``rule`` and ``n_steps`` as captum's), "conductance",
    "gradient_x_activation", "activation", "gradient"; at the inputs also "saliency" (the
    gradient's absolute value) and "smoothgrad" (the mean gradient over ``nt_samples`` copies with
    N(0, ``stdevs``²) noise, 1.0 by default, ``seed`` to repeat it). ``neuron``: an index into the layer's output
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

    Propagation methods (the gradient modified at layers through router consumers; docs/attribution.md):
    "deeplift" (captum's Rescale rule; at the inputs or a layer; ``return_delta``), "deeplift_shap" and
    "gradient_shap" (at the inputs or a layer; ``baselines``: a distribution ``[B, ...]``; ``n_samples`` draws per input for
    gradient_shap, ``stdevs`` its input noise (0.0 by default, captum's), ``seed``), "guided_backprop", "deconvolution" (at the
    inputs), "guided_gradcam" (at a convolutional layer), "lrp" (at the inputs or a layer): captum's
    defaults, or ``composite="EpsilonPlusFlat"`` / ``("EpsilonGammaBox", {"low": l, "high": h})``, and
    ``rules={"Linear": "epsilon", "features.0": ("gamma", {"gamma": 0.5})}`` by layer type or layer.

    Perturbation methods (forwards only; at the inputs, also token ids, or at a layer's value, where
    ``baselines`` is the layer's replacement value): "occlusion" (``sliding_window_shapes``, ``strides``),
    "feature_ablation", "feature_permutation" (values permuted across the batch; ``permutation`` to fix
    it), "shapley" (exact, up to 12 features), "shapley_sampling", "kernel_shap", "lime" (captum's
    kernel and Lasso). ``feature_mask``: ints shaped like one sample, one feature per id (default:
    every element); ``[N, ...]``: each sample its own grouping; axes of size 1 broadcast. ``n_samples``: orders / coalitions of the random ones, drawn with ``seed``. With
    ``neuron=``, the neuron's value is explained by perturbing the inputs. The
    perturbed copies run many per forward, as many as ``internal_batch_size`` / ``max_memory`` allow.

    Several input tensors (``model(x1, x2)``): ``inputs=(x1, x2)``, ``baselines`` / ``feature_mask`` /
    ``sliding_window_shapes`` / ``strides`` as tuples of the same length, the attributions a tuple shaped
    like the inputs; feature ids are shared across the tensors (docs/attribution.md).

    >>> attr = hookkit.attribute(model, "features.3", x, target=7)                       # doctest: +SKIP
    >>> attr, delta = hookkit.attribute(model, None, x, n_steps=64, return_delta=True)     # doctest: +SKIP
    >>> attr = hookkit.attribute(bert, "bert.embeddings", ids, baselines=pad_ids)          # doctest: +SKIP
    >>> rel = hookkit.attribute(cnn, None, x, method="lrp", composite="EpsilonPlusFlat")    # doctest: +SKIP
    >>> attr = hookkit.attribute(cnn, None, x, "occlusion", target=3, sliding_window_shapes=(3, 8, 8), strides=4)  # doctest: +SKIP
    """
    opts = AttributeOptions(
        baselines=baselines, n_steps=n_steps, rule=rule, attribute_to=attribute_to, internal_batch_size=internal_batch_size,
        max_memory=max_memory, neuron=neuron, stdevs=stdevs, nt_samples=nt_samples, seed=seed, forward_kwargs=forward_kwargs,
        return_delta=return_delta, eval=eval,
        composite=composite, rules=rules, feature_mask=feature_mask, sliding_window_shapes=sliding_window_shapes,
        strides=strides, n_samples=n_samples, permutation=permutation,
    )  # fmt: skip
    job = check_call(model, layer, inputs, method, target, opts)
    with analysis_pass(model, job.be, eval=eval):
        tap = LayerTap(model, job.name, job.layer, job.be, attribute_to) if job.layer is not None else None
        try:
            job.tap = tap
            attr = RUNNERS[job.kind](job)
            if return_delta:
                return unpacked(job, job.be.detach(attr)), delta(job, attr)
            return unpacked(job, job.be.detach(attr))
        finally:
            if tap is not None:
                tap.remove()
