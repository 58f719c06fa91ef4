"""Gradient clipping through hooks, proved against gradients clipped by hand."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit
from hookkit.core import router
from tolerance import assert_close

# roundings on the longest path of the tiny model's gradients in float32: x @ w0 (3 terms), tanh, the
# output gradient back through w2 (2 terms), a clip norm over 8-10 values, a sum over 5 samples; the
# framework and numpy sum in different orders, so values made by cancellation carry the error of the
# largest terms (assert_close's scale, ``term_scale``)
N_OPS = 16


def term_scale(fw, x, c) -> float:
    """A bound on the terms the gradients sum: the output gradient ``c`` through weights under 1 in
    magnitude (two outputs), times the inputs (clipping only shrinks them, and their rounding with them)."""
    return 2.0 * max(1.0, float(np.abs(fw.numpy(x)).max())) * float(np.abs(fw.numpy(c)).max())


def clip_value(g: np.ndarray, v: float) -> np.ndarray:
    return np.clip(g, -v, v)


def clip_norm(g: np.ndarray, n: float) -> np.ndarray:
    return g * min(1.0, n / (np.linalg.norm(g) + 1e-6))


def grads(fw, model) -> dict[str, np.ndarray]:
    return {n: fw.grad(p) for n, p in model.named_parameters()}


def zero_grads(fw, model) -> None:
    model.zero_grad() if fw.name == "torch" else model.clear_gradients()


def backward(fw, model, x, c) -> None:
    (model(x) * c).sum().backward()


def w_in_out(fw, w: np.ndarray) -> np.ndarray:
    """A Linear weight as (in, out): Paddle's layout; PyTorch stores (out, in)."""
    return w.T if fw.name == "torch" else w


def tiny(fw):
    """Linear(3, 4) -> Tanh -> Linear(4, 2), its input and the loss weights c (loss = sum(out * c))."""
    model = fw.sequential(fw.linear(3, 4), fw.nn.Tanh(), fw.linear(4, 2))
    x = fw.tensor(np.random.randn(5, 3) * 2)
    c = fw.tensor(np.random.randn(5, 2) * 3)
    return model, x, c


def manual(fw, model, x, c, clip_out=None, clip_out_layer: str = "2", clip_param=None):
    """The chain rule of the tiny model in numpy, with optional clipping of an output gradient."""
    xs, cs = fw.numpy(x), fw.numpy(c)
    w0, b0 = w_in_out(fw, fw.numpy(model[0].weight)), fw.numpy(model[0].bias)
    w2 = w_in_out(fw, fw.numpy(model[2].weight))
    a = np.tanh(xs @ w0 + b0)
    d_y = cs  # d loss / d output of layer 2
    if clip_out and clip_out_layer == "2":
        d_y = clip_out(d_y)
    d_h = (d_y @ w2.T) * (1 - a**2)  # d loss / d output of layer 0
    if clip_out and clip_out_layer == "0":
        d_h = clip_out(d_h)
    out = {"0.weight": xs.T @ d_h, "0.bias": d_h.sum(0), "2.weight": a.T @ d_y, "2.bias": d_y.sum(0)}
    out = {k: (w_in_out(fw, g) if k.endswith("weight") else g) for k, g in out.items()}  # back to the layout
    if clip_param:
        out = {k: (clip_param(g) if k.startswith(clip_param.layer) else g) for k, g in out.items()}
    return out


class ParamClip:
    def __init__(self, layer: str, fn) -> None:
        self.layer, self.fn = layer, fn

    def __call__(self, g):
        return self.fn(g)


def test_manual_chain_rule_is_autograd(fw):
    model, x, c = tiny(fw)
    backward(fw, model, x, c)
    for k, g in manual(fw, model, x, c).items():
        assert_close(grads(fw, model)[k], g, dtype="float32", n_ops=N_OPS, scale=term_scale(fw, x, c))


@pytest.mark.parametrize("kind", ["value", "norm"])
def test_param_clipping_is_what_the_optimizer_sees(fw, kind):
    model, x, c = tiny(fw)
    backward(fw, model, x, c)
    raw = grads(fw, model)
    zero_grads(fw, model)
    bound = 0.5 * float(np.abs(raw["0.weight"]).max()) if kind == "value" else 0.5 * float(np.linalg.norm(raw["0.weight"]))
    clip = (lambda g: clip_value(g, bound)) if kind == "value" else (lambda g: clip_norm(g, bound))
    with hookkit.clip_grad(model, "0", target="params", **{kind: bound}):
        backward(fw, model, x, c)
    got = grads(fw, model)
    for name in ("0.weight", "0.bias"):
        assert_close(got[name], clip(raw[name]), dtype="float32", n_ops=N_OPS, scale=term_scale(fw, x, c))
    assert not np.allclose(got["0.weight"], raw["0.weight"])  # the bound did bite
    for name in ("2.weight", "2.bias"):  # layers not selected are untouched
        np.testing.assert_array_equal(got[name], raw[name])
    # an SGD step with lr=1 moves each weight by exactly the clipped gradient
    w_before = fw.numpy(model[0].weight).copy()
    if fw.name == "torch":
        opt = fw.lib.optim.SGD(model.parameters(), lr=1.0)
    else:
        opt = fw.lib.optimizer.SGD(learning_rate=1.0, parameters=model.parameters())
    opt.step()
    assert_close(fw.numpy(model[0].weight), w_before - clip(raw["0.weight"]), dtype="float32", n_ops=N_OPS, scale=term_scale(fw, x, c))


@pytest.mark.parametrize("kind", ["value", "norm"])
def test_output_clipping_reaches_upstream_parameters(fw, kind):
    model, x, c = tiny(fw)
    cs = fw.numpy(c)
    bound = 0.4 * float(np.abs(cs).max()) if kind == "value" else 0.4 * float(np.linalg.norm(cs))
    clip = (lambda g: clip_value(g, bound)) if kind == "value" else (lambda g: clip_norm(g, bound))
    with hookkit.clip_grad(model, "2", target="output", **{kind: bound}):
        backward(fw, model, x, c)
    expected = manual(fw, model, x, c, clip_out=clip, clip_out_layer="2")
    unclipped = manual(fw, model, x, c)
    got = grads(fw, model)
    for name, g in expected.items():
        assert_close(got[name], g, dtype="float32", n_ops=N_OPS, scale=term_scale(fw, x, c))
    assert not np.allclose(got["0.weight"], unclipped["0.weight"])


def test_output_gradient_is_clipped_where_upstream_sees_it(fw):
    model, x, c = tiny(fw)
    x = fw.tensor(fw.numpy(x), requires_grad=True)
    with hookkit.clip_grad(model, "0", value=0.05, target="output"):
        with hookkit.capture(model, "0", grads=True) as cap:
            backward(fw, model, x, c)
    # observers on the same layer see the clipped gradient (interventions run first)
    g = fw.numpy(cap.grads["0"])
    assert np.abs(g).max() <= 0.05 + 1e-7
    d_h = np.clip(manual_d_h(fw, model, x, c), -0.05, 0.05)
    assert_close(g, d_h, dtype="float32", n_ops=N_OPS, scale=term_scale(fw, x, c))
    w0 = w_in_out(fw, fw.numpy(model[0].weight))
    assert_close(fw.grad(x), d_h @ w0.T, dtype="float32", n_ops=N_OPS, scale=term_scale(fw, x, c))


def manual_d_h(fw, model, x, c) -> np.ndarray:
    w0, b0 = w_in_out(fw, fw.numpy(model[0].weight)), fw.numpy(model[0].bias)
    w2 = w_in_out(fw, fw.numpy(model[2].weight))
    a = np.tanh(fw.numpy(x) @ w0 + b0)
    return (fw.numpy(c) @ w2.T) * (1 - a**2)


def test_both_clips_output_then_params(fw):
    model, x, c = tiny(fw)
    with hookkit.clip_grad(model, "0", value=0.1, norm=0.3, target="both"):
        backward(fw, model, x, c)

    def both(g):
        return clip_norm(clip_value(g, 0.1), 0.3)

    expected = manual(fw, model, x, c, clip_out=both, clip_out_layer="0", clip_param=ParamClip("0.", both))
    got = grads(fw, model)
    for name, g in expected.items():
        assert_close(got[name], g, dtype="float32", n_ops=N_OPS, scale=term_scale(fw, x, c))


def test_handle_removal_leaves_nothing(fw):
    model, x, c = tiny(fw)
    backward(fw, model, x, c)
    raw = grads(fw, model)
    zero_grads(fw, model)
    h = hookkit.clip_grad(model, ["0", "2"], value=1e-3, target="both")
    assert router.attached(model[0])["grad"] == 1
    h.remove()
    h.remove()
    for layer in [model, *model]:
        assert set(router.attached(layer).values()) == {0}
    if fw.name == "torch":
        assert all(not p._backward_hooks for p in model.parameters())
    backward(fw, model, x, c)
    for name, g in grads(fw, model).items():
        np.testing.assert_array_equal(g, raw[name])


def test_frozen_parameters_are_skipped(fw):
    model, x, c = tiny(fw)
    if fw.name == "torch":
        model[0].bias.requires_grad_(False)
    else:
        model[0].bias.stop_gradient = True
    with hookkit.clip_grad(model, "0", value=1e-3, target="params") as h:
        assert len(h) == 1  # the weight's hook only
        backward(fw, model, x, c)
    assert np.abs(grads(fw, model)["0.weight"]).max() <= 1e-3 + 1e-9


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({}, ["value=", "norm="]),
        ({"value": -1}, ["value", "-1"]),
        ({"norm": 0}, ["norm", "0"]),
        ({"value": 1, "target": "weights"}, ["target", "'output'", "'params'", "'both'", "'weights'"]),
    ],
)
def test_bad_arguments(fw, kwargs, words):
    model, _, _ = tiny(fw)
    with pytest.raises(ValueError) as err:
        hookkit.clip_grad(model, "0", **kwargs)
    for w in words:
        assert w in str(err.value)
    for layer in [model, *model]:
        assert set(router.attached(layer).values()) == {0}
