"""What an attribution call asks for, checked before anything runs: ``check_call`` turns the
arguments of ``hookkit.attribute`` into a ``Job`` (framework, layer, inputs, baselines, target,
options), or fails naming the argument and what would be valid."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, TypedDict

import numpy as np

from hookkit.analyses.attribution import inputs as several_inputs
from hookkit.analyses.attribution import perturbation
from hookkit.analyses.attribution.baselines import baselines_like
from hookkit.analyses.attribution.methods import INPUT_METHODS, LAYER_METHODS, METHODS, NEURON_METHODS, PATH_METHODS, PERTURBATION_METHODS
from hookkit.analyses.attribution.rules import RULES, min_steps
from hookkit.analyses.targets import Target, check_target
from hookkit.core.entry import entry_name
from hookkit.core.keywords import Default, KeywordOptions, keyword_options
from hookkit.core.select import select
from hookkit.core.validate import (
    ArgumentTypeError,
    InvalidArgument,
    check_bool,
    check_choice,
    check_int,
    check_model,
    check_number,
    check_runnable,
    check_tensor_like,
    fail,
    shown,
)

#: the methods that take ``n_samples`` (the perturbation ones default to captum's, in perturbation.py)
SAMPLED_METHODS = ("gradient_shap", *perturbation.DEFAULT_SAMPLES)
#: the methods whose ``baselines`` are the inputs' (a tuple for several inputs), at the inputs or at a layer
INPUT_BASELINE_METHODS = (*PATH_METHODS, "deeplift_shap", "gradient_shap")


class AttributeKeywords(TypedDict, total=False):
    """``attribute``'s keyword arguments, declared once: name, type and default (their meaning:
    ``hookkit.attribute``'s docstring). ``attribute`` takes them as ``**options:
    Unpack[AttributeKeywords]``; ``AttributeOptions`` holds one call's."""

    baselines: Annotated[Any, Default(None)]
    n_steps: Annotated[int, Default(50)]
    rule: Annotated[str, Default("gausslegendre")]
    attribute_to: Annotated[str, Default("output")]
    internal_batch_size: Annotated[int | str | None, Default("auto")]
    max_memory: Annotated[float | None, Default(None)]
    neuron: Annotated[int | Sequence[int] | None, Default(None)]
    stdevs: Annotated[float | None, Default(None)]
    nt_samples: Annotated[int, Default(5)]
    seed: Annotated[int | None, Default(None)]
    forward_kwargs: Annotated[dict[str, Any] | None, Default(None)]
    return_delta: Annotated[bool, Default(False)]
    eval: Annotated[bool, Default(True)]
    # the propagation methods: LRP's composite and per-layer rules
    composite: Annotated[Any, Default(None)]
    rules: Annotated[dict[str, Any] | None, Default(None)]
    # the perturbation methods' options (perturbation.py); n_samples also GradientShap's samples per input
    feature_mask: Annotated[Any, Default(None)]
    sliding_window_shapes: Annotated[int | Sequence[int] | None, Default(None)]
    strides: Annotated[int | Sequence[int] | None, Default(None)]
    n_samples: Annotated[int | None, Default(None)]
    permutation: Annotated[Sequence[int] | None, Default(None)]


@keyword_options(AttributeKeywords)
class AttributeOptions(KeywordOptions):
    """The keywords of one call of ``attribute`` (``AttributeKeywords``' fields, as a frozen dataclass).
    Checked once by ``check_call``, which returns them with the numbers normalized."""


@dataclass
class Job:
    """One checked call of ``attribute``: the model and its backend (``m``: ``tensor_math`` ops, ``ops``: the
    ``attribution`` family), the layer (``name``, ``layer``; None at the inputs), the inputs ``x`` of ``n``
    samples and the baselines ``base``, the method, the target and the options; ``tap`` (the layer's
    consumer), ``kind`` (the ``RUNNERS`` key) and ``scores`` (per-sample scores by "input" / "baseline")."""

    be: Any
    m: Any
    ops: Any
    model: Any
    name: str
    layer: Any
    x: Any
    n: int
    method: str
    target: Target
    opts: AttributeOptions
    neuron: tuple[int, ...] | None  # opts.neuron checked
    base: Any = None
    kwargs: dict = field(default_factory=dict)
    tap: Any = None
    kind: str = ""
    scores: dict = field(default_factory=dict)
    packing: Any = None  # several input tensors side by side in ``x`` (inputs.Packing)


def check_call(model: Any, layer: Any, inputs: Any, method: str, target: Target, opts: AttributeOptions) -> Job:
    """The ``Job`` of a call of ``hookkit.attribute``, every argument checked; errors name the public function."""
    fn = entry_name()
    be = check_model(model)
    check_runnable(be, model)
    opts = _checked_options(opts, method)
    name, found, neuron = _checked_layer(model, layer, method, opts)
    x, packed = _inputs(be, inputs, opts, method, layer is None or neuron is not None)
    shape = be.shape(x)
    if len(shape) < 1 or shape[0] < 1:
        fail(fn, "inputs", "a batch [N, ...] with N >= 1", inputs)
    floats = packed.float_inputs() if packed is not None else be.dtype_kind(x) == "float"
    _check_floats(floats, inputs, method, layer, neuron)
    check_target(target, shape[0])
    m, ops = be.family("tensor_math"), be.family("attribution")
    if packed is not None:
        opts = _packed_baselines(be, opts, x, packed, method, layer is None or neuron is not None)
    job = Job(be, m, ops, model, name, found, x, shape[0], method, target, opts, neuron, packing=packed)
    kwargs = opts.forward_kwargs
    if kwargs is not None and not (isinstance(kwargs, dict) and all(isinstance(k, str) for k in kwargs)):
        fail(fn, "forward_kwargs", "None or a dict of the model's keyword arguments", kwargs, kind=ArgumentTypeError)
    job.kwargs = dict(kwargs or {})
    if method in PERTURBATION_METHODS:
        job.kwargs = without_cache(be.unwrap(model), job.kwargs)
    if method in PATH_METHODS:
        job.base = _baselines(be, opts.baselines, x)
    job.kind = ("input" if layer is None else "neuron" if neuron is not None else "layer") + ":" + method
    return job


#: keyword arguments that continue a cache: given, the model's own cache settings stay
_CACHE_ARGS = ("use_cache", "past_key_values", "past_key_value", "cache", "cache_params")


def without_cache(model: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` plus ``use_cache=False`` for a model whose forward takes it (transformers' and
    PaddleNLP's decoders): the perturbed forwards are single forwards that decode nothing after them,
    and the key/value cache would only hold memory at their peak (a tenth of the GPT-2-style LM's,
    BENCHMARKS.md). Left as given where ``kwargs`` name a cache setting."""
    if any(k in kwargs for k in _CACHE_ARGS):
        return kwargs
    try:
        takes = "use_cache" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError, AttributeError):  # no signature to read: the model's own settings
        return kwargs
    return {**kwargs, "use_cache": False} if takes else kwargs


def _check_floats(floats: bool, inputs: Any, method: str, layer: Any, neuron: Any) -> None:
    """Floating-point inputs where the path runs through them (not token ids)."""
    to_inputs = layer is None or neuron is not None or method in ("conductance", "guided_gradcam")
    if to_inputs and method not in PERTURBATION_METHODS and not floats:
        what = "layer=None" if layer is None else f"method={method!r}" + (" with neuron=" if neuron is not None else "")
        fail(
            entry_name(),
            "inputs",
            f"floating-point for {what} (the path runs through the inputs); for token ids attribute at the embedding layer",
            inputs,
        )


def _packed_baselines(be: Any, opts: AttributeOptions, x: Any, packed: Any, method: str, to_inputs: bool) -> AttributeOptions:
    """With several inputs, the inputs' ``baselines`` (a tuple) packed as the inputs are."""
    if method in INPUT_BASELINE_METHODS or (method in PERTURBATION_METHODS and to_inputs):
        dist = method in ("deeplift_shap", "gradient_shap")
        return replace(opts, baselines=several_inputs.packed_baselines(be, opts.baselines, x, packed, distribution=dist))
    return opts


def _inputs(be: Any, inputs: Any, opts: AttributeOptions, method: str, to_inputs: bool) -> tuple[Any, Any]:
    """``(x, packing)``: the inputs as one tensor; several tensors (captum's ``inputs=(x1, x2)``) packed
    side by side, their per-input options checked (inputs.py), else ``packing`` None."""
    if not several_inputs.is_several(be, inputs):
        return check_tensor_like(inputs, be, arg="inputs"), None
    packed = several_inputs.packing(be, inputs)
    several_inputs.check_several(opts, method, packed, to_inputs)
    return packed.pack(inputs), packed


def _checked_options(opts: AttributeOptions, method: str) -> AttributeOptions:
    """The options checked one by one (in the order the user reads them), numbers normalized."""
    fn = entry_name()
    check_bool(opts.eval, arg="eval")
    check_bool(opts.return_delta, arg="return_delta")
    check_choice(method, METHODS, arg="method")
    check_choice(opts.rule, RULES, arg="rule")
    check_choice(opts.attribute_to, ("output", "input"), arg="attribute_to")
    batch = opts.internal_batch_size
    checked = replace(
        opts,
        n_steps=check_int(opts.n_steps, arg="n_steps", low=min_steps(opts.rule)),
        stdevs=check_number(opts.stdevs, arg="stdevs", low=0.0, optional=True),
        nt_samples=check_int(opts.nt_samples, arg="nt_samples", low=1),
        seed=check_int(opts.seed, arg="seed", optional=True),
        max_memory=check_number(opts.max_memory, arg="max_memory", low=1.0, optional=True),
    )
    checked = replace(checked, n_samples=check_int(opts.n_samples, arg="n_samples", low=1, optional=True))
    if checked.n_samples is not None and method not in SAMPLED_METHODS:
        fail(fn, "n_samples", f"None for method={method!r} (an option of {', '.join(SAMPLED_METHODS)})", checked.n_samples)
    if checked.n_samples is None and method == "gradient_shap":  # captum's GradientShap default
        checked = replace(checked, n_samples=5)
    if checked.stdevs is None:  # captum's defaults: NoiseTunnel (smoothgrad) 1.0, GradientShap 0.0
        checked = replace(checked, stdevs=0.0 if method == "gradient_shap" else 1.0)
    for arg in ("composite", "rules"):
        if getattr(opts, arg) is not None and method != "lrp":
            fail(fn, arg, f"None for method={method!r} (LRP's {arg}: method='lrp')", getattr(opts, arg))
    if not (batch is None or batch == "auto" or (isinstance(batch, int) and not isinstance(batch, bool) and batch >= 1)):
        fail(fn, "internal_batch_size", '"auto", None (all scaled inputs at once) or an int >= 1', batch, kind=ArgumentTypeError)
    perturbation.check_options(checked, method)
    return checked


def _checked_layer(model: Any, layer: Any, method: str, opts: AttributeOptions) -> tuple[str, Any, tuple[int, ...] | None]:
    """The one layer attributed to (``("", None)`` at the inputs), and ``neuron`` / ``return_delta`` checked
    against it: ``(name, layer, neuron as a tuple)``."""
    fn = entry_name()
    name, found = "", None
    if layer is None:
        if method not in INPUT_METHODS:
            fail(
                fn,
                "method",
                f"one of {', '.join(map(repr, INPUT_METHODS))} with layer=None (the model's inputs); {method!r} needs a layer",
                method,
            )
        if opts.attribute_to != "output":
            fail(fn, "attribute_to", '"output" with layer=None (attribute_to="input" names a layer\'s input)', opts.attribute_to)
        if opts.neuron is not None:
            fail(fn, "neuron", "None with layer=None (a neuron is an index into a layer's output)", opts.neuron)
    else:
        if method not in LAYER_METHODS:
            fail(
                fn,
                "method",
                f"one of {', '.join(map(repr, LAYER_METHODS))} at a layer; {method!r} works at the inputs (layer=None)",
                method,
            )
        named = select(model, layer)
        if len(named) != 1:
            names = ", ".join(n or "(root)" for n, _ in named[:6]) + (", ..." if len(named) > 6 else "")
            raise InvalidArgument(f"{fn}(): layer must match exactly one layer; {shown(layer)} matched {len(named)}: {names}")
        name, found = named[0]
    neuron = opts.neuron
    if neuron is not None:
        if method not in NEURON_METHODS:
            fail(fn, "neuron", f"None for method={method!r}; neuron variants: {', '.join(NEURON_METHODS)}", neuron)
        neuron = _check_neuron(neuron)
    if opts.return_delta and (method not in PATH_METHODS or opts.neuron is not None):
        fail(
            fn,
            "return_delta",
            "False for this method: the delta is defined for integrated_gradients, conductance and deeplift (without neuron=)",
            opts.return_delta,
        )
    return name, found, neuron


def _check_neuron(neuron: Any) -> tuple[int, ...]:
    items = (neuron,) if isinstance(neuron, (int, np.integer)) and not isinstance(neuron, bool) else neuron
    try:
        items = tuple(items)
    except TypeError:
        items = ()  # not a sequence: refused below
    if not items or not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in items):
        fail(
            entry_name(),
            "neuron",
            "an int or a tuple of ints indexing the layer's output (without the batch axis)",
            neuron,
            kind=ArgumentTypeError,
        )
    return tuple(int(i) for i in items)


def _baselines(be: Any, baselines: Any, x: Any) -> Any:
    return baselines_like(be, baselines, x)
