"""``method="lrp"``: layer-wise relevance propagation, zennit's rules through router consumers.

Each leaf layer gets a rule: a "forward" consumer records its input, a "backward" consumer replaces
the gradient at its input by the relevance the rule gives from the relevance at its output (zennit's
``BasicHook``: the layer's function evaluated again on the recorded input with the rule's modified
inputs and parameters, through ``propagation.call_with``, never by changing the layer). Layers that
only move values (flatten, dropout, max pooling in zennit's composites) pass the relevance as the
gradient does. Where the framework cannot take a gradient inside a backward (Paddle), each rule is
built into the layer's output in the forward instead (``_modified_output``), with the same numbers.
The target's relevance starts at its score (captum's ``LRP``), so the attributions of a
sample sum to its score where the rules conserve.

Rules (zennit's definitions and defaults): "epsilon" (``epsilon=1e-6``), "gamma" (``gamma=0.25``),
"zplus", "alpha_beta" (``alpha=2, beta=1``), "flat", "zbox" (``low=``, ``high=``), "norm" (epsilon with
the layer's own function, for pooling), "pass" (the relevance unchanged); each takes ``stabilizer=1e-6``
(epsilon: ``epsilon``). A rule is a name or ``(name, {param: value})``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hookkit.analyses.attribution import steps as st
from hookkit.analyses.attribution.budget import spans
from hookkit.analyses.attribution.propagation import _chunks, placed
from hookkit.core.entry import entry_name
from hookkit.core.select import select
from hookkit.core.validate import ArgumentTypeError, InvalidArgument, fail

if TYPE_CHECKING:
    from hookkit.analyses.attribution.job import Job

LINEAR = ("Linear",)
CONV = ("Conv1d", "Conv2d", "Conv3d", "Conv1D", "Conv2D", "Conv3D")
AVGPOOL = tuple(f"{a}AvgPool{d}{s}" for a in ("", "Adaptive") for d in "123" for s in "dD")
MAXPOOL = tuple(f"{a}MaxPool{d}{s}" for a in ("", "Adaptive") for d in "123" for s in "dD")
BATCHNORM = tuple(f"BatchNorm{d}{s}" for d in "123" for s in "dD") + ("BatchNorm",)
ACTIVATION = (
    "ReLU", "ReLU6", "LeakyReLU", "PReLU", "RReLU", "ELU", "SELU", "CELU", "GELU", "SiLU", "Silu", "Swish", "Mish",
    "Sigmoid", "LogSigmoid", "Tanh", "Tanhshrink", "Softplus", "Softsign", "Softshrink", "Hardshrink", "Hardtanh",
    "Hardsigmoid", "Hardswish", "Threshold", "Softmax", "LogSoftmax", "Softmin",
)  # fmt: skip
#: layers that move values without mixing them: the relevance passes as the gradient does
NEUTRAL = ("Flatten", "Unflatten", "Identity", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "Dropout2D", "Dropout3D", "AlphaDropout")

DEFAULTS: dict[str, dict[str, float | None]] = {
    "epsilon": {"epsilon": 1e-6},
    "gamma": {"gamma": 0.25, "stabilizer": 1e-6},
    "zplus": {"stabilizer": 1e-6},
    "alpha_beta": {"alpha": 2.0, "beta": 1.0, "stabilizer": 1e-6},
    "flat": {"stabilizer": 1e-6},
    "zbox": {"low": None, "high": None, "stabilizer": 1e-6},
    "norm": {"stabilizer": 1e-6},
    "pass": {},
}
RULE_NAMES = tuple(DEFAULTS)
COMPOSITES = ("epsilon_plus_flat", "epsilon_gamma_box")
_COMPOSITE_ALIASES = {"EpsilonPlusFlat": "epsilon_plus_flat", "EpsilonGammaBox": "epsilon_gamma_box"}
#: the layers a rule evaluates with modified parameters (the others run the layer's own function)
_WEIGHTED = ("gamma", "zplus", "alpha_beta", "flat", "zbox")


@dataclass(frozen=True)
class Rule:
    """One LRP rule: its name and its parameters (defaults filled in)."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)


def rule_of(spec: Any, arg: str = "rules") -> Rule:
    """A rule from a name or ``(name, {param: value})``, checked."""
    fn = entry_name()
    name, params = (spec, {}) if isinstance(spec, str) else (spec if isinstance(spec, tuple) and len(spec) == 2 else (None, None))
    if not isinstance(name, str) or not isinstance(params, Mapping):
        fail(fn, arg, f"a rule: one of {', '.join(map(repr, RULE_NAMES))}, or (name, {{param: value}})", spec, kind=ArgumentTypeError)
    if name not in DEFAULTS:
        fail(fn, arg, f"a rule named one of {', '.join(map(repr, RULE_NAMES))}", name)
    unknown = sorted(set(params) - set(DEFAULTS[name]))
    if unknown:
        fail(fn, arg, f"parameters of rule {name!r}: {', '.join(DEFAULTS[name]) or 'none'}", f"{unknown}")
    merged = {**DEFAULTS[name], **params}
    for k, v in merged.items():
        if v is None:
            fail(fn, arg, f"rule {name!r} with {k}= (a number)", spec)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            fail(fn, arg, f"rule {name!r} with {k}= a number", v, kind=ArgumentTypeError)
    if name == "alpha_beta" and (merged["alpha"] < 0 or merged["beta"] < 0 or abs(merged["alpha"] - merged["beta"] - 1) > 1e-12):
        fail(fn, arg, "alpha_beta with alpha, beta >= 0 and alpha - beta == 1", spec)
    return Rule(name, {k: float(v) for k, v in merged.items()})


def _composite(spec: Any) -> tuple[str, dict[str, Any]]:
    fn = entry_name()
    name, params = (spec, {}) if isinstance(spec, str) else (spec if isinstance(spec, tuple) and len(spec) == 2 else (None, None))
    name = _COMPOSITE_ALIASES.get(name, name) if isinstance(name, str) else name
    if name not in COMPOSITES or not isinstance(params, Mapping):
        fail(
            fn, "composite", f"None, one of {', '.join(map(repr, COMPOSITES))} (or zennit's class name), or (name, {{param: value}})", spec
        )
    allowed = {"epsilon", "stabilizer"} | ({"gamma", "low", "high"} if name == "epsilon_gamma_box" else set())
    unknown = sorted(set(params) - allowed)
    if unknown:
        fail(fn, "composite", f"parameters of composite {name!r}: {', '.join(sorted(allowed))}", f"{unknown}")
    if name == "epsilon_gamma_box" and not {"low", "high"} <= set(params):
        fail(fn, "composite", '("epsilon_gamma_box", {"low": ..., "high": ...}): the bounds of the input box (zennit\'s ZBox)', spec)
    return name, dict(params)


def assign(job: Job) -> dict[int, tuple[str, Any, Rule | None]]:
    """The rule of each leaf layer (None: the relevance passes as the gradient does), by ``id``: the
    composite's (captum's defaults without one), then ``rules=`` by layer type name, then by layer;
    a leaf layer left without one is refused, named."""
    be, fn = job.be, entry_name()
    leaves = [(n, layer) for n, layer in be.named_layers(job.model) if not be.children(layer)]
    if job.opts.composite is None:
        out = _captum_defaults(leaves)
    else:
        out = _composite_rules(leaves, *_composite(job.opts.composite))
    _given_rules(job, leaves, out)
    for n, layer in leaves:
        if id(layer) not in out:
            t = type(layer).__name__
            raise InvalidArgument(
                f"{fn}(): layer {n or '(root)'!r} of type {t} has no LRP rule; give it one with "
                f"rules={{{t!r}: 'epsilon'}} (rules: {', '.join(RULE_NAMES)})"
            )
    ops = be.family("propagation")
    for n, layer, given in out.values():
        if given is not None and given.name in _WEIGHTED and not ops.can_call_with(layer):
            raise InvalidArgument(
                f"{fn}(): LRP rule {given.name!r} modifies weights and needs a linear or convolution layer; layer {n!r} is a {type(layer).__name__}"
            )
    return out


def _captum_defaults(leaves: list[tuple[str, Any]]) -> dict[int, tuple[str, Any, Rule | None]]:
    """captum's LRP: epsilon 1e-9 on the layers with weights and pooling, activations pass."""
    eps, out = Rule("epsilon", {"epsilon": 1e-9}), {}
    for n, layer in leaves:
        t = type(layer).__name__
        rule: Rule | None = eps if t in LINEAR + CONV + AVGPOOL + MAXPOOL + BATCHNORM else Rule("pass") if t in ACTIVATION else None
        if rule is not None or t in NEUTRAL:
            out[id(layer)] = (n, layer, rule)
    return out


def _composite_rules(leaves: list[tuple[str, Any]], name: str, params: dict[str, Any]) -> dict[int, tuple[str, Any, Rule | None]]:
    """zennit's EpsilonPlusFlat / EpsilonGammaBox: a rule for the first linear (or convolution)
    layer in the model's order, one per layer type for the others."""
    stab = {"stabilizer": params.get("stabilizer", 1e-6)}
    eps = rule_of(("epsilon", {"epsilon": params.get("epsilon", 1e-6)}), "composite")
    first_types: tuple[str, ...]
    if name == "epsilon_plus_flat":
        conv, first_types, first = rule_of(("zplus", stab), "composite"), LINEAR + CONV, rule_of(("flat", stab), "composite")
    else:
        conv = rule_of(("gamma", {**stab, "gamma": params.get("gamma", 0.25)}), "composite")
        first_types, first = CONV, rule_of(("zbox", {**stab, "low": params["low"], "high": params["high"]}), "composite")
    by_type = [(CONV, conv), (LINEAR, eps), (ACTIVATION + BATCHNORM, Rule("pass")), (AVGPOOL, rule_of(("norm", stab), "composite"))]
    out: dict[int, tuple[str, Any, Rule | None]] = {}
    seen_first = False
    for n, layer in leaves:
        t = type(layer).__name__
        if not seen_first and t in first_types:
            out[id(layer)], seen_first = (n, layer, first), True
            continue
        for types, rule in by_type:
            if t in types:
                out[id(layer)] = (n, layer, rule)
                break
        else:
            if t in NEUTRAL + MAXPOOL:
                out[id(layer)] = (n, layer, None)
    return out


def _given_rules(job: Job, leaves: list[tuple[str, Any]], out: dict[int, tuple[str, Any, Rule | None]]) -> None:
    """``rules=`` over the defaults: by layer type name, then by layer name or glob (a known type
    absent from the model: nothing to do)."""
    rules = job.opts.rules or {}
    if not isinstance(rules, Mapping) or not all(isinstance(k, str) for k in rules):
        fail(entry_name(), "rules", "None or a dict {layer type name or layer name: rule}", rules, kind=ArgumentTypeError)
    types = {type(layer).__name__ for _, layer in leaves}
    by_type = {k: rule_of(v) for k, v in rules.items() if k in types}
    for n, layer in leaves:
        if type(layer).__name__ in by_type:
            out[id(layer)] = (n, layer, by_type[type(layer).__name__])
    known = set(LINEAR + CONV + AVGPOOL + MAXPOOL + BATCHNORM + ACTIVATION + NEUTRAL)
    for k, v in rules.items():
        if k not in types and k not in known:
            rule = rule_of(v)
            for n, layer in select(job.model, k):
                if not job.be.children(layer):
                    out[id(layer)] = (n, layer, rule)


def lrp(job: Job) -> Any:
    """LRP at the inputs, or at a layer (its output's or input's relevance, captum's ``LayerLRP``):
    the target's score shared out by the rules."""
    table = assign(job)
    y_x, saved = st.probe(job, job.x, "input", measure=True)
    plan = st.plan(job, 1, saved, y_x)
    be, ops = job.be, job.be.family("propagation")
    inputs: dict[int, Any] = {}

    def record(ev: Any) -> None:
        if ev.args and be.is_tensor(ev.args[0]):
            inputs[id(ev.layer)] = be.detach(ev.args[0])

    def relevance(ev: Any) -> Any:
        _, layer, rule = table[id(ev.layer)]
        r_out = ev.grad_outputs[0] if ev.grad_outputs else None
        x0 = inputs.get(id(ev.layer))
        if rule is None or r_out is None or x0 is None or not ev.grad_inputs or ev.grad_inputs[0] is None:
            return None
        if rule.name == "pass":
            r_in = r_out
        else:
            with be.enable_grad():
                r_in = _propagate(job, ops, rule, layer, x0, r_out)
        return (r_in, *ev.grad_inputs[1:])

    # at a layer's output its own rule plays no part (and its input takes no gradient)
    skip = job.layer if job.tap is not None and job.opts.attribute_to == "output" else None
    ruled = [(n, layer) for n, layer, rule in table.values() if rule is not None and layer is not skip]
    if ops.grad_in_backward:
        consumers = [("forward", ruled, record), ("backward", ruled, relevance)]
    else:  # the rule built into the forward: an output whose gradient is the rule's relevance
        consumers = [("forward", ruled, lambda ev: _modified_output(job, ops, table[id(ev.layer)][2], ev))]
    with placed(job, consumers):
        if job.tap is None:
            attr = _chunks(job, job.x, plan.samples * plan.points, None)
        else:  # the relevance arriving at the layer's value: the gradient there, what ran before cut off
            blocks = []
            for j0, j1 in spans(job.n, plan.samples * plan.points):
                cut = st.Cut(job)
                job.tap.replace = cut
                out = st.forward(job, job.x[j0:j1], range(j0, j1))
                blocks.append(be.detach(st.grad(job, st.score(job, out, list(range(j0, j1))), cut.leaf)))
            attr = job.m.cat(blocks, 0)
    score = job.scores["input"]
    return attr * job.m.reshape(score, [-1] + [1] * (len(be.shape(attr)) - 1))


def _propagate(job: Job, ops: Any, rule: Rule, layer: Any, x0: Any, r_out: Any) -> Any:
    """The relevance at the layer's input from ``r_out`` at its output (zennit's ``BasicHook.backward``)."""
    be, m, p = job.be, job.m, rule.params
    leaf = lambda t: be.set_requires_grad(be.detach(t))  # noqa: E731
    pos = lambda t: ops.clamp(t, low=0.0) if t is not None else None  # noqa: E731
    neg = lambda t: ops.clamp(t, high=0.0) if t is not None else None  # noqa: E731
    stab = lambda z: ops.stabilize(z, p.get("stabilizer", p.get("epsilon", 1e-6)))  # noqa: E731
    w, b = ops.params(layer) if rule.name in _WEIGHTED else (None, None)
    w, b = (be.detach(w) if w is not None else None), (be.detach(b) if b is not None else None)
    f: Callable[[Any, Any, Any], Any] = lambda x, w_, b_: ops.call_with(layer, x, w_, b_)  # noqa: E731

    def vjp(terms: list[tuple[Any, Any]], mapped: list[Any]) -> list[Any]:
        total = None
        for (_, z), s in zip(terms, mapped):
            part = (z * be.detach(s)).sum()
            total = part if total is None else total + part
        return list(job.ops.grads_or_none(total, [x for x, _ in terms]))

    def zero_if_none(g: Any, like: Any) -> Any:
        return g if g is not None else be.zeros_like(like)

    if rule.name in ("epsilon", "norm"):
        x = leaf(x0)
        z = layer.forward(x)
        (g,) = vjp([(x, z)], [r_out / stab(z)])
        return x * zero_if_none(g, x)
    if rule.name == "flat":
        ones = leaf(m.full(be.shape(x0), 1.0, x0))
        z = f(ones, m.full(be.shape(w), 1.0, w), None)
        (g,) = vjp([(ones, z)], [r_out / stab(z)])
        return zero_if_none(g, ones)
    if rule.name == "zbox":
        x, lo, hi = leaf(x0), leaf(m.full(be.shape(x0), p["low"], x0)), leaf(m.full(be.shape(x0), p["high"], x0))
        terms = [(x, f(x, w, b)), (lo, f(lo, pos(w), pos(b))), (hi, f(hi, neg(w), neg(b)))]
        s = r_out / stab(terms[0][1] - terms[1][1] - terms[2][1])
        gx, gl, gh = vjp(terms, [s, s, s])
        return x * zero_if_none(gx, x) - lo * zero_if_none(gl, lo) - hi * zero_if_none(gh, hi)
    xp, xn = leaf(pos(x0)), leaf(neg(x0))
    if rule.name == "zplus":
        terms = [(xp, f(xp, pos(w), pos(b))), (xn, f(xn, neg(w), None))]
        s = r_out / stab(terms[0][1] + terms[1][1])
        gp, gn = vjp(terms, [s, s])
        return xp * zero_if_none(gp, xp) + xn * zero_if_none(gn, xn)
    if rule.name == "alpha_beta":
        xp2, xn2 = leaf(pos(x0)), leaf(neg(x0))
        terms = [(xp, f(xp, pos(w), pos(b))), (xn, f(xn, neg(w), None)), (xp2, f(xp2, neg(w), neg(b))), (xn2, f(xn2, pos(w), None))]
        s_a = r_out / stab(terms[0][1] + terms[1][1])
        s_b = r_out / stab(terms[2][1] + terms[3][1])
        g = [zero_if_none(gi, x) for gi, (x, _) in zip(vjp(terms, [s_a, s_a, s_b, s_b]), terms)]
        return p["alpha"] * (xp * g[0] + xn * g[1]) - p["beta"] * (xp2 * g[2] + xn2 * g[3])
    # gamma (zennit's generalized rule): positive outputs share through the positive-boosted weights
    gamma = p["gamma"]
    up = lambda t: t + gamma * pos(t) if t is not None else None  # noqa: E731
    down = lambda t: t + gamma * neg(t) if t is not None else None  # noqa: E731
    xp2, xn2 = leaf(pos(x0)), leaf(neg(x0))
    terms = [(xp, f(xp, up(w), up(b))), (xn, f(xn, down(w), None)), (xp2, f(xp2, down(w), down(b))), (xn2, f(xn2, up(w), None))]
    z = be.detach(f(x0, w, b))
    ones = m.full(be.shape(z), 1.0, z)
    positive, negative = ops.clamp(ops.sign(z), low=0.0) * ones, ops.clamp(-ops.sign(z), low=0.0) * ones
    s_p = positive * r_out / stab(terms[0][1] + terms[1][1])
    s_n = negative * r_out / stab(terms[2][1] + terms[3][1])
    g = [zero_if_none(gi, x) for gi, (x, _) in zip(vjp(terms, [s_p, s_p, s_n, s_n]), terms)]
    return xp * g[0] + xn * g[1] + xp2 * g[2] + xn2 * g[3]


def _modified_output(job: Job, ops: Any, rule: Rule | None, ev: Any) -> Any:
    """The layer's output with the rule in its gradient (for a framework that cannot take a
    gradient inside the backward): the same value, ``out + mod - detach(mod)``, where ``mod`` is
    built from the layer's input so that the gradient reaching the input is the rule's relevance.
    ``x ⊙`` of the rules comes from evaluating on ``x + x·x̄ - detach(x·x̄)`` (value x, gradient x̄ ⊙ g)."""
    be, m = job.be, job.m
    x, out = (ev.args[0] if ev.args else None), ev.output
    if rule is None or not (be.is_tensor(x) and be.is_tensor(out)) or not be.requires_grad(x):
        return None
    det, p = be.detach, rule.params
    xd = det(x)
    if rule.name == "pass":
        return det(out) + (x - xd)
    x_used = xd + x * xd - det(x * xd)  # value x; gradient xd ⊙ g
    pos = lambda t: ops.clamp(t, low=0.0) if t is not None else None  # noqa: E731
    neg = lambda t: ops.clamp(t, high=0.0) if t is not None else None  # noqa: E731
    stab = lambda z: ops.stabilize(z, p.get("stabilizer", p.get("epsilon", 1e-6)))  # noqa: E731
    layer = ev.layer
    if rule.name in ("epsilon", "norm"):
        z = layer.forward(x_used)
        mod = z / stab(det(z))
        return det(out) + mod - det(mod)
    w, b = ops.params(layer)
    w, b = det(w), (det(b) if b is not None else None)
    f = lambda t, w_, b_: ops.call_with(layer, t, w_, b_)  # noqa: E731
    if rule.name == "flat":
        ones_w = m.full(be.shape(w), 1.0, w)
        z = f(m.full(be.shape(xd), 1.0, xd), ones_w, None)
        mod = f(x, ones_w, None) / stab(z)
    elif rule.name == "zbox":
        lo, hi = m.full(be.shape(xd), p["low"], xd), m.full(be.shape(xd), p["high"], xd)
        z = f(xd, w, b) - f(lo, pos(w), pos(b)) - f(hi, neg(w), neg(b))
        mod = (f(x_used, w, b) - f(lo * x, pos(w), None) - f(hi * x, neg(w), None)) / stab(z)
    elif rule.name == "zplus":
        zs = f(pos(x_used), pos(w), pos(b)) + f(neg(x_used), neg(w), None)
        mod = zs / stab(det(zs))
    elif rule.name == "alpha_beta":
        za = f(pos(x_used), pos(w), pos(b)) + f(neg(x_used), neg(w), None)
        zb = f(pos(x_used), neg(w), neg(b)) + f(neg(x_used), pos(w), None)
        mod = p["alpha"] * za / stab(det(za)) - p["beta"] * zb / stab(det(zb))
    else:  # gamma
        gamma = p["gamma"]
        up = lambda t: t + gamma * pos(t) if t is not None else None  # noqa: E731
        down = lambda t: t + gamma * neg(t) if t is not None else None  # noqa: E731
        zp = f(pos(x_used), up(w), up(b)) + f(neg(x_used), down(w), None)
        zn = f(pos(x_used), down(w), down(b)) + f(neg(x_used), up(w), None)
        sign = ops.sign(det(out))
        mod = ops.clamp(sign, low=0.0) * zp / stab(det(zp)) + ops.clamp(-sign, low=0.0) * zn / stab(det(zn))
    return det(out) + mod - det(mod)
