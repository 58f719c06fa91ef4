"""hookkit.attribute: each method against a hand computation, on both frameworks; torch and Paddle
agree with the same weights; chunking changes nothing; bad calls fail naming the argument and leave
nothing behind. (The comparison with captum itself is benchmarks/bench_attribution.py.)"""

from __future__ import annotations

import numpy as np
import pytest

import hookkit
from hookkit.core.errors import HookkitError
from models import hooks_left
from tolerance import assert_close

RULES = ["gausslegendre", "riemann_left", "riemann_right", "riemann_middle", "riemann_trapezoid"]


def weights(fw, layer):
    """(W [out, in], b [out]) of a Linear layer as numpy, whatever the framework's layout."""
    w = fw.numpy(layer.weight)
    return (w if fw.name == "torch" else w.T), fw.numpy(layer.bias)


def tanh_mlp(fw, sizes=(4, 5, 3)):
    """Linear -> Tanh -> Linear: "0", "1", "2"."""
    fw.seed(0)
    return fw.sequential(fw.linear(sizes[0], sizes[1]), fw.nn.Tanh(), fw.linear(sizes[1], sizes[2]))


def np_(fw, t):
    return fw.numpy(t).astype(np.float64)


def data(rng, n=3, d=4):
    return rng.normal(size=(n, d)).astype(np.float32), 0.1 * rng.normal(size=(n, d)).astype(np.float32)


# -- integrated gradients ---------------------------------------------------------------------------
@pytest.mark.parametrize("rule", RULES)
def test_ig_of_a_linear_model_is_weight_times_difference(fw, rng, rule):
    fw.seed(0)
    model = fw.linear(4, 3)
    x, b = data(rng)
    W, _ = weights(fw, model)
    attr, delta = hookkit.attribute(
        model, None, fw.tensor(x), target=[0, 2, 1], baselines=fw.tensor(b), n_steps=4, rule=rule, return_delta=True
    )
    # the gradient is constant: every rule integrates it exactly, but captum's trapezoid weights
    # (1/n, halved at both ends) sum to (n - 1) / n, and hookkit keeps captum's rule
    scale = 3 / 4 if rule == "riemann_trapezoid" else 1.0
    want = scale * W[[0, 2, 1]] * (x - b)
    assert_close(np_(fw, attr), want, dtype="float32", n_ops=8)  # a 4-step weighted sum of W, a difference, a product
    f = x @ W[[0, 2, 1]].T - b @ W[[0, 2, 1]].T
    np.testing.assert_allclose(np_(fw, delta), (scale - 1) * np.diag(f), atol=1e-5)
    assert fw.numpy(attr).shape == x.shape


def test_layer_ig_at_output_and_input(fw, rng):
    model = tanh_mlp(fw)
    x, b = data(rng)
    W1, b1 = weights(fw, model[0])
    W2, _ = weights(fw, model[2])
    h = lambda v: np.tanh(v @ W1.T + b1)  # noqa: E731
    want = W2[1] * (h(x) - h(b))  # after layer "1" the model is linear
    # h(x) - h(b) by hand and by the framework: a 4-term dot, a bias, tanh on each side, a difference,
    # the 3-step sum of the (exact) gradient W2[1] and a product; the error scales with |W2[1]| |h|
    kw = dict(dtype="float32", n_ops=12, scale=float(np.abs(W2[1]).max() * np.abs([h(x), h(b)]).max()))
    out = hookkit.attribute(model, "1", fw.tensor(x), target=1, baselines=fw.tensor(b), n_steps=3)
    assert_close(np_(fw, out), want, **kw)
    into = hookkit.attribute(model, "2", fw.tensor(x), target=1, baselines=fw.tensor(b), n_steps=3, attribute_to="input")
    assert_close(np_(fw, into), want, **kw)


def test_ig_completeness_on_a_nonlinear_model(fw, rng):
    model = tanh_mlp(fw)
    x, b = data(rng)
    attr, delta = hookkit.attribute(model, None, fw.tensor(x), target=2, baselines=fw.tensor(b), n_steps=16, return_delta=True)
    f = lambda v: np_(fw, model(fw.tensor(v)))[:, 2]  # noqa: E731
    np.testing.assert_allclose(np_(fw, attr).sum(1), f(x) - f(b), atol=1e-4)  # Gauss-Legendre: converged
    np.testing.assert_allclose(np_(fw, delta), np_(fw, attr).sum(1) - (f(x) - f(b)), atol=1e-5)
    assert np.abs(np_(fw, delta)).max() < 1e-4


# -- conductance ------------------------------------------------------------------------------------
def test_conductance_sums_to_ig(fw, rng):
    model = tanh_mlp(fw)
    x, b = data(rng)
    kw = dict(target=0, baselines=fw.tensor(b), n_steps=400, rule="riemann_trapezoid")
    cond, delta = hookkit.attribute(model, "1", fw.tensor(x), "conductance", return_delta=True, **kw)
    ig = hookkit.attribute(model, None, fw.tensor(x), **kw)
    assert fw.numpy(cond).shape == (3, 5)
    np.testing.assert_allclose(np_(fw, cond).sum(1), np_(fw, ig).sum(1), atol=1e-3)
    assert np.abs(np_(fw, delta)).max() < 1e-3
    # the neuron variant splits input IG over the layer's units exactly (the chain rule at each point)
    kw["n_steps"] = 8
    per_unit = [np_(fw, hookkit.attribute(model, "1", fw.tensor(x), "conductance", neuron=j, **kw)) for j in range(5)]
    np.testing.assert_allclose(sum(per_unit), np_(fw, hookkit.attribute(model, None, fw.tensor(x), **kw)), rtol=1e-4, atol=1e-6)


def test_conductance_of_a_linear_head_by_hand(fw, rng):
    model = tanh_mlp(fw)
    x, b = data(rng)
    W1, b1 = weights(fw, model[0])
    W2, _ = weights(fw, model[2])
    n = 4
    alphas = np.linspace(0, 1, n + 1)  # riemann_trapezoid over n + 1 points, as captum's
    ys = [np.tanh((b + a * (x - b)) @ W1.T + b1) for a in alphas]
    want = sum(W2[2] * (ys[i + 1] - ys[i]) for i in range(n))
    got = hookkit.attribute(model, "1", fw.tensor(x), "conductance", target=2, baselines=fw.tensor(b), n_steps=n, rule="riemann_trapezoid")
    # float32 against float64: the end points' forwards (an interpolation, a 4-term dot, a bias, tanh:
    # about 10 roundings each; the inner points telescope since the gradient W2[2] is exact), then per
    # step a difference, a product and a sum; the differences cancel terms of size |W2[2]| |y|
    assert_close(np_(fw, got), want, dtype="float32", n_ops=32, scale=float(np.abs(W2[2]).max() * np.abs(ys).max()))


# -- one-point methods ------------------------------------------------------------------------------
def test_layer_gradient_activation_and_their_product(fw, rng):
    model = tanh_mlp(fw)
    x, _ = data(rng)
    W1, b1 = weights(fw, model[0])
    W2, _ = weights(fw, model[2])
    act = np.tanh(x @ W1.T + b1)
    grad = np.broadcast_to(W2[[1, 0, 2]], act.shape)
    t = [1, 0, 2]
    np.testing.assert_allclose(np_(fw, hookkit.attribute(model, "1", fw.tensor(x), "activation")), act, rtol=1e-5)
    np.testing.assert_allclose(np_(fw, hookkit.attribute(model, "1", fw.tensor(x), "gradient", target=t)), grad, rtol=1e-5)
    gxa = hookkit.attribute(model, "1", fw.tensor(x), "gradient_x_activation", target=t)
    assert_close(np_(fw, gxa), grad * act, dtype="float32", n_ops=8)  # a 4-term dot, a bias, tanh, a product


def test_input_gradient_saliency_and_input_x_gradient(fw, rng):
    fw.seed(0)
    model = fw.linear(4, 3)
    x, _ = data(rng)
    W, _ = weights(fw, model)
    g = np.broadcast_to(W[2], x.shape)
    got = {m: np_(fw, hookkit.attribute(model, None, fw.tensor(x), m, target=2)) for m in ("gradient", "saliency", "gradient_x_activation")}
    np.testing.assert_allclose(got["gradient"], g, rtol=1e-6)
    np.testing.assert_allclose(got["saliency"], np.abs(g), rtol=1e-6)
    np.testing.assert_allclose(got["gradient_x_activation"], g * x, rtol=1e-6)


def test_smoothgrad(fw, rng):
    fw.seed(0)
    linear = fw.linear(4, 3)
    x, _ = data(rng)
    W, _ = weights(fw, linear)
    sg = hookkit.attribute(linear, None, fw.tensor(x), "smoothgrad", target=1, nt_samples=3, stdevs=0.5)
    np.testing.assert_allclose(np_(fw, sg), np.broadcast_to(W[1], x.shape), rtol=1e-5)  # a constant gradient
    model = tanh_mlp(fw)
    one = hookkit.attribute(model, None, fw.tensor(x), "smoothgrad", target=1, nt_samples=4, stdevs=0.5, seed=7)
    two = hookkit.attribute(
        model, None, fw.tensor(x), "smoothgrad", target=1, nt_samples=4, stdevs=0.5, seed=7, internal_batch_size="auto", max_memory=200
    )
    other = hookkit.attribute(model, None, fw.tensor(x), "smoothgrad", target=1, nt_samples=4, stdevs=0.5, seed=8)
    assert_close(np_(fw, one), np_(fw, two), dtype="float32", n_ops=16)  # other batch splits: a forward and a backward of the MLP
    assert not np.allclose(np_(fw, one), np_(fw, other))
    plain = hookkit.attribute(model, None, fw.tensor(x), "gradient", target=1)
    still = hookkit.attribute(model, None, fw.tensor(x), "smoothgrad", target=1, stdevs=0.0, nt_samples=2)
    np.testing.assert_allclose(np_(fw, still), np_(fw, plain), rtol=1e-5)


def test_neuron_gradient_and_integrated_gradients(fw, rng):
    model = tanh_mlp(fw)
    x, b = data(rng)
    W1, b1 = weights(fw, model[0])
    z = x @ W1.T + b1
    grad = (1 - np.tanh(z[:, 3:4]) ** 2) * W1[3]
    got = hookkit.attribute(model, "1", fw.tensor(x), "gradient", neuron=3)
    assert_close(np_(fw, got), grad, dtype="float32", n_ops=8)
    assert_close(
        np_(fw, hookkit.attribute(model, "1", fw.tensor(x), "gradient_x_activation", neuron=(3,))), grad * x, dtype="float32", n_ops=8
    )
    ig = hookkit.attribute(model, "1", fw.tensor(x), neuron=3, baselines=fw.tensor(b), n_steps=24)
    want = np.tanh(z[:, 3]) - np.tanh((b @ W1.T + b1)[:, 3])  # completeness of the neuron's own value
    np.testing.assert_allclose(np_(fw, ig).sum(1), want, atol=1e-4)
    # a neuron of the layer before: the linear pre-activation "0", IG exact
    lin = hookkit.attribute(model, "0", fw.tensor(x), neuron=2, baselines=fw.tensor(b), n_steps=2)
    assert_close(np_(fw, lin), W1[2] * (x - b), dtype="float32", n_ops=4)  # 2 steps of the exact W1[2], a difference, a product


# -- targets ----------------------------------------------------------------------------------------
def test_target_kinds(fw, rng):
    fw.seed(0)
    model = fw.linear(4, 3)
    x, b = data(rng)
    W, bias = weights(fw, model)
    kw = dict(baselines=fw.tensor(b), n_steps=2)
    pred = (x @ W.T + bias).argmax(1)
    cases = {
        None: W[pred],
        1: W[[1, 1, 1]],
        (2, 0, 1): W[[2, 0, 1]],
    }
    for target, w in cases.items():
        got = hookkit.attribute(model, None, fw.tensor(x), target=list(target) if isinstance(target, tuple) else target, **kw)
        assert_close(np_(fw, got), w * (x - b), dtype="float32", n_ops=4)  # 2 steps of the gradient W, a difference, a product
    got = hookkit.attribute(model, None, fw.tensor(x), target=lambda out: out[:, 0] - out[:, 2], **kw)
    assert_close(np_(fw, got), (W[0] - W[2]) * (x - b), dtype="float32", n_ops=4)
    got = hookkit.attribute(model, None, fw.tensor(x), target=[lambda row: row[0] * 2, 1, 1], **kw)
    assert_close(np_(fw, got), W[[0, 1, 1]] * np.array([[2], [1], [1]]) * (x - b), dtype="float32", n_ops=4)


def test_predicted_class_is_taken_at_the_input_not_along_the_path(fw, rng):
    model = tanh_mlp(fw)
    x, b = data(rng)
    pred = np_(fw, model(fw.tensor(x))).argmax(1).tolist()
    auto = hookkit.attribute(model, "1", fw.tensor(x), baselines=fw.tensor(b), n_steps=5)
    given = hookkit.attribute(model, "1", fw.tensor(x), target=pred, baselines=fw.tensor(b), n_steps=5)
    np.testing.assert_array_equal(fw.numpy(auto), fw.numpy(given))


# -- chunking ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["integrated_gradients", "conductance"])
def test_internal_batching_gives_the_same_result(fw, rng, method):
    model = tanh_mlp(fw)
    x, b = data(rng, n=4)
    kw = dict(target=[0, 1, 2, 0], baselines=fw.tensor(b), n_steps=7, return_delta=True)
    whole, d_whole = hookkit.attribute(model, "1", fw.tensor(x), method, internal_batch_size=None, **kw)
    # chunks regroup the 7-step sum (the gradient W2[t] after tanh is exact); conductance also differences
    # the layer's values, computed in forwards of other batch sizes (a 4-term dot, a bias, tanh at each end)
    n_ops = 9 if method == "integrated_gradients" else 40
    for batch, memory in ((8, None), (9, None), (1, None), ("auto", 1), ("auto", 3000), ("auto", None)):
        got, d = hookkit.attribute(model, "1", fw.tensor(x), method, internal_batch_size=batch, max_memory=memory, **kw)
        assert_close(np_(fw, got), np_(fw, whole), dtype="float32", n_ops=n_ops, err_msg=str(batch))
        np.testing.assert_allclose(np_(fw, d), np_(fw, d_whole), atol=1e-5)


def test_chunk_plans():
    from hookkit.analyses.attribution.budget import Plan, plan_chunks, spans

    assert plan_chunks(4, 50, None) == Plan(4, 50)
    assert plan_chunks(4, 50, 10) == Plan(4, 2)  # captum: internal_batch_size // N points per forward
    assert plan_chunks(4, 50, 2, endpoint=True) == Plan(4, 2)
    assert plan_chunks(4, 50, "auto", budget=4000, row_bytes=100) == Plan(4, 10)
    assert plan_chunks(4, 50, "auto", budget=250, row_bytes=100) == Plan(2, 1)  # less than one point of all samples
    assert plan_chunks(4, 50, "auto", budget=10**9, row_bytes=100) == Plan(4, 50)
    assert spans(5, 2) == [(0, 2), (2, 4), (4, 5)]
    assert spans(5, 3, overlap=1) == [(0, 3), (2, 5)]


# -- both frameworks agree ----------------------------------------------------------------------------
def test_paddle_equals_torch_with_the_same_weights(torch_fw, paddle_fw, rng):
    tm, pm = tanh_mlp(torch_fw), tanh_mlp(paddle_fw)
    for i in (0, 2):
        pm[i].weight.set_value(torch_fw.numpy(tm[i].weight).T)
        pm[i].bias.set_value(torch_fw.numpy(tm[i].bias))
    x, b = data(rng)
    calls = [
        ("1", "integrated_gradients", {}),
        ("1", "conductance", {}),
        ("1", "gradient_x_activation", {}),
        (None, "integrated_gradients", {"rule": "riemann_middle"}),
        ("1", "conductance", {"neuron": 2}),
    ]
    for layer, method, extra in calls:
        out = []
        for fw, model in ((torch_fw, tm), (paddle_fw, pm)):
            kw = dict(extra, target=[2, 0, 1])
            if method in ("integrated_gradients", "conductance"):
                kw.update(baselines=fw.tensor(b), n_steps=6)
            out.append(fw.numpy(hookkit.attribute(model, layer, fw.tensor(x), method, **kw)))
        np.testing.assert_allclose(out[1], out[0], rtol=1e-4, atol=1e-6, err_msg=f"{layer} {method} {extra}")


# -- a text model at its embedding layer ----------------------------------------------------------------
def test_bert_classifier_at_the_embeddings(torch_fw):
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        num_labels=3,
        initializer_range=0.3,  # logits of O(1): f(x) - f(baseline) far above the rounding of the logits
    )
    model = BertForSequenceClassification(cfg)
    model.train()  # left as found: eval inside, train after
    ids = torch.tensor([[2, 11, 23, 7, 3], [2, 31, 5, 3, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]])  # the second sample is padded
    pad = torch.tensor([[2, 0, 0, 0, 3]])  # [CLS] pad ... [SEP], one sample for the batch
    kw = dict(target=lambda out: out.logits[:, 1], baselines=pad, n_steps=20, forward_kwargs={"attention_mask": mask})
    attr, delta = hookkit.attribute(model, "bert.embeddings", ids, return_delta=True, **kw)
    assert attr.shape == (2, 5, 16) and delta.shape == (2,)
    model.eval()
    with torch.no_grad():
        li, lb = model(ids, attention_mask=mask).logits, model(pad.repeat(2, 1), attention_mask=mask).logits
        f = li[:, 1] - lb[:, 1]
    model.train()
    # delta is attr.sum - (f(x) - f(b)) with the scores of hookkit's own (hooked, grad-mode) forwards: f here
    # cancels logits of size |logits| (two layers of width 16 and 32, a pooler, a head: 256 roundings at most)
    scale = float(max(logits.abs().max() for logits in (li, lb)))
    assert_close(attr.sum((1, 2)), f + delta, dtype="float32", n_ops=256, scale=scale)
    assert delta.abs().max() < 0.05 * f.abs().max()
    assert model.training and all(p.grad is None for p in model.parameters()) and not hooks_left(model)
    chunked = hookkit.attribute(model, "bert.embeddings", ids, internal_batch_size=6, **kw)
    torch.testing.assert_close(chunked, attr, rtol=1e-4, atol=1e-6)
    one = hookkit.attribute(model, "bert.embeddings", ids, internal_batch_size="auto", max_memory=1, **kw)  # one sample at a time
    torch.testing.assert_close(one, attr, rtol=1e-4, atol=1e-6)
    with pytest.raises(HookkitError, match="inputs"):
        hookkit.attribute(model, None, ids)  # token ids cannot be interpolated
    for method in ("integrated_gradients", "gradient"):
        with pytest.raises(HookkitError, match="integer values at its input"):
            hookkit.attribute(model, "bert.embeddings.word_embeddings", ids, method, target=0, attribute_to="input")
    assert not hooks_left(model) and model.training


# -- the model is left as it was, bad input fails clearly -----------------------------------------------
def test_model_left_as_found(fw, rng):
    model = tanh_mlp(fw)
    model.train()
    x, _ = data(rng)
    for method in ("integrated_gradients", "conductance", "gradient"):
        hookkit.attribute(model, "1", fw.tensor(x), method, n_steps=3)
    assert model.training and all(fw.grad(p) is None for p in fw.params(model))
    assert hooks_left(model) == []


@pytest.mark.parametrize(
    "call, arg",
    [
        (dict(n_steps=0), "n_steps"),
        (dict(n_steps=1, rule="riemann_trapezoid"), "n_steps"),
        (dict(rule="simpson"), "rule"),
        (dict(method="deep_taylor"), "method"),
        (dict(baselines=np.zeros((3, 2), np.float32)), "baselines"),
        (dict(internal_batch_size=0), "internal_batch_size"),
        (dict(attribute_to="middle"), "attribute_to"),
        (dict(method="smoothgrad"), "method"),  # needs layer=None
        (dict(method="activation", neuron=1), "neuron"),
        (dict(method="gradient", return_delta=True), "return_delta"),
        (dict(neuron=(1, 2)), "neuron"),
        (dict(neuron=99), "neuron"),
        (dict(target=7), "target"),
        (dict(target=[0, 1]), "target"),
        (dict(max_memory=-5), "max_memory"),
        (dict(layer="nope"), "nope"),
        (dict(layer=None, method="conductance"), "method"),
    ],
)
def test_bad_calls_name_the_argument_and_leave_nothing(fw, rng, call, arg):
    model = tanh_mlp(fw)
    model.train()
    x, _ = data(rng)
    call = dict(call)
    layer = call.pop("layer", "1")
    with pytest.raises((HookkitError, ValueError, TypeError), match=arg):
        hookkit.attribute(model, layer, fw.tensor(x), **call)
    assert hooks_left(model) == [] and model.training
    assert all(fw.grad(p) is None for p in fw.params(model))


def test_layer_off_the_path_and_layers_that_run_twice(fw, rng):
    fw.seed(0)

    class Side(fw.Layer):
        def __init__(self):
            super().__init__()
            self.aux, self.fc = fw.linear(4, 2), fw.linear(4, 3)

        def forward(self, x):
            self.aux(x)  # runs, but the output does not depend on it
            return self.fc(x)

    x, _ = data(rng)
    model = Side()
    for method in ("integrated_gradients", "gradient", "conductance"):
        with pytest.raises(HookkitError, match="not on the path"):
            hookkit.attribute(model, "aux", fw.tensor(x), method, n_steps=2)
    assert hooks_left(model) == []
    twice = fw.shared_block_model()
    with pytest.raises(HookkitError, match="ran 3 times"):
        hookkit.attribute(twice, "block", fw.tensor(x), n_steps=2)
    assert hooks_left(twice) == []
    with pytest.raises(HookkitError, match="inputs"):
        hookkit.attribute(model, None, fw.labels(np.ones((3, 4))))


def test_auto_chunks_follow_the_budget_also_for_a_frozen_model(fw, rng):
    class Recording(fw.Layer):
        def __init__(self):
            super().__init__()
            self.body = fw.sequential(fw.linear(4, 64), fw.nn.Tanh(), fw.linear(64, 3))
            self.rows: list[int] = []

        def forward(self, x):
            self.rows.append(int(x.shape[0]))
            return self.body(x)

    model = Recording()
    for p in fw.params(model):  # nothing requires a gradient: the cost is measured on the chunks' graph
        if fw.name == "paddle":
            p.stop_gradient = True
        else:
            p.requires_grad_(False)
    x, _ = data(rng, n=4)
    whole = hookkit.attribute(model, "body.1", fw.tensor(x), target=0, n_steps=32, internal_batch_size=None)
    for layer in ("body.1", None):
        model.rows.clear()
        got = hookkit.attribute(model, layer, fw.tensor(x), target=0, n_steps=32, max_memory=16 << 10)
        chunks = model.rows[2:]  # after the probes at the inputs and the baselines
        # a row keeps at least its 64 tanh values (256 B) for the backward: 16 KB hold at most 64 rows
        assert len(chunks) >= 4 and max(chunks) * 256 <= 16 << 10 and sum(chunks) == 32 * 4
        if layer is not None:
            # the gradient W2[0] after tanh is exact: the chunks only regroup the 32-step sum, then a product
            assert_close(np_(fw, got), np_(fw, whole), dtype="float32", n_ops=34)


def test_attribute_keywords_are_declared_once_with_their_defaults(fw):
    """``attribute``'s keywords are declared once (``AttributeKeywords``: name, type, default); the
    signature takes them as typed ``**options`` and ``AttributeOptions`` is made from them; an unknown
    keyword is refused as Python refuses it, with did-you-mean among the declared keys."""
    import dataclasses
    import inspect

    from hookkit.analyses.attribution.job import AttributeKeywords, AttributeOptions

    params = inspect.signature(hookkit.attribute).parameters
    assert list(params) == ["model", "layer", "inputs", "method", "target", "options"]  # positional use unchanged
    assert params["method"].default == "integrated_gradients" and params["target"].default is None
    fields = {f.name: f.default for f in dataclasses.fields(AttributeOptions)}
    assert list(fields) == list(AttributeKeywords.__annotations__)
    assert fields["n_steps"] == 50 and fields["internal_batch_size"] == "auto" and fields["eval"] is True
    assert AttributeOptions.of(n_steps=8).n_steps == 8
    model, x = fw.nn.Sequential(fw.nn.Linear(3, 2)), fw.randn(2, 3)
    with pytest.raises(TypeError, match=r"^attribute\(\) got an unexpected keyword argument 'n_step'") as info:
        hookkit.attribute(model, None, x, n_step=8)
    assert "did you mean n_steps=?" in info.value.__notes__[-1]
    with pytest.raises(ValueError, match=r"^attribute\(\): n_steps must be an int"):
        hookkit.attribute(model, None, x, "integrated_gradients", 0, n_steps="8")
    got = hookkit.attribute(model, None, x, "gradient", 0, return_delta=False)  # keywords given as before
    assert fw.numpy(got).shape == (2, 3)
