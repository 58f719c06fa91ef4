"""What an attribution call asks for, checked before anything runs: ``check_call`` turns the
arguments of ``hookkit.attribute`` into a ``Job`` (framework, layer, inputs, baselines, target,
options), or fails naming the argument and what would be valid."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hookkit.analyses.attribution_rules import RULES, min_steps
from hookkit.analyses.targets import Target, check_target
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

FN = "attribute"
LAYER_METHODS = ("integrated_gradients", "conductance", "gradient_x_activation", "activation", "gradient")
INPUT_METHODS = ("integrated_gradients", "gradient_x_activation", "gradient", "saliency", "smoothgrad")
NEURON_METHODS = ("integrated_gradients", "conductance", "gradient_x_activation", "gradient")
METHODS = LAYER_METHODS + ("saliency", "smoothgrad")
PATH_METHODS = ("integrated_gradients", "conductance")


@dataclass
class Job:
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


def check_call(
    model: Any,
    layer: Any,
    inputs: Any,
    method: str,
    target: Target,
    baselines: Any,
    n_steps: Any,
    rule: str,
    attribute_to: str,
    internal_batch_size: Any,
    max_memory: Any,
    neuron: Any,
    stdevs: Any,
    nt_samples: Any,
    seed: Any,
    forward_kwargs: Any,
    return_delta: bool,
    eval: bool,
) -> Job:
    """The ``Job`` of a call of ``hookkit.attribute`` (its arguments by name), every argument checked."""
    batch = internal_batch_size
    be = check_model(model, fn=FN)
    check_runnable(be, model, fn=FN)
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
    job = Job(
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
