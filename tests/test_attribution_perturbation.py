"""hookkit.attribute's perturbation methods (occlusion, feature ablation, feature permutation, exact
Shapley, Shapley sampling, KernelSHAP, LIME): each against a hand computation that calls the model
on one perturbed input at a time, on both frameworks; Shapley efficiency; the sampling methods
converge to exact Shapley values; torch and Paddle agree on twin models; captum (where importable)
gives the same numbers in float64; bad calls fail naming the argument."""

from __future__ import annotations

import itertools
from math import factorial

import numpy as np
import pytest

import hookkit
from hookkit.core.errors import HookkitError
from models import hooks_left
from tolerance import assert_close

# the model runs in float32 in both frameworks: a hand sum of a few float32 differences
TOL = {"rtol": 1e-5, "atol": 2e-6}


def tanh_mlp(fw, sizes=(6, 7, 3)):
    fw.seed(0)
    return fw.sequential(fw.linear(sizes[0], sizes[1]), fw.nn.Tanh(), fw.linear(sizes[1], sizes[2]))


def scorer(fw, model, target):
    """f(rows) -> float64 scores of ``target``, one forward per call."""

    def f(rows):
        with fw.no_grad():
            out = fw.numpy(model(fw.tensor(np.asarray(rows, dtype=np.float32))))
        return out[:, target].astype(np.float64)

    return f


def np_(fw, t):
    return fw.numpy(t).astype(np.float64)


def _groups_of(mask):
    return [mask.reshape(-1) == g for g in np.unique(mask)]


def test_feature_ablation_with_groups_by_hand(fw, rng):
    model = tanh_mlp(fw)
    x = rng.normal(size=(3, 6)).astype(np.float32)
    b = rng.normal(size=(3, 6)).astype(np.float32)
    mask = np.array([0, 0, 1, 1, 2, 2])
    got = np_(fw, hookkit.attribute(model, None, fw.tensor(x), "feature_ablation", target=1, baselines=fw.tensor(b), feature_mask=mask))
    f = scorer(fw, model, 1)
    want = np.zeros((3, 6))
    for g in _groups_of(mask):
        rows = np.where(g, b, x)
        want[:, g] = (f(x) - f(rows))[:, None]
    np.testing.assert_allclose(got, want, **TOL)
    assert hooks_left(model) == []


def test_occlusion_windows_strides_and_the_cut_last_window_by_hand(fw, rng):
    fw.seed(0)
    model = fw.small_cnn(in_ch=1, n_classes=4)
    x = rng.normal(size=(2, 1, 8, 8)).astype(np.float32)
    got = np_(
        fw,
        hookkit.attribute(
            model, None, fw.tensor(x), "occlusion", target=[0, 3], sliding_window_shapes=(1, 3, 3), strides=(1, 2, 3), baselines=0.5
        ),
    )
    with fw.no_grad():
        model.eval()
        f = lambda rows: fw.numpy(model(fw.tensor(rows)))[[0, 1], [0, 3]].astype(np.float64)  # noqa: E731
        total, times = np.zeros(x.shape), np.zeros(x.shape[1:])
        # captum's windows: ceil((size - w) / stride) + 1 per axis, the last one cut at the edge
        for r, c in itertools.product(range(0, 7, 2), range(0, 7, 3)):
            rows = x.copy()
            rows[:, :, r : r + 3, c : c + 3] = 0.5
            total[:, :, r : r + 3, c : c + 3] += (f(x) - f(rows))[:, None, None, None]
            times[:, r : r + 3, c : c + 3] += 1
    np.testing.assert_allclose(got, total / times, **TOL)


def exact_shapley(f, x, b, groups):
    """Shapley values of ``groups`` by enumerating every coalition (kept features from x, the rest b)."""
    n_f = len(groups)
    phi = np.zeros((len(x), n_f))
    for i in range(n_f):
        others = [j for j in range(n_f) if j != i]
        for size in range(n_f):
            for s in itertools.combinations(others, size):
                w = factorial(size) * factorial(n_f - size - 1) / factorial(n_f)
                keep = np.zeros(x.shape[1:], bool)
                for j in s:
                    keep |= groups[j].reshape(x.shape[1:])
                with_i = keep | groups[i].reshape(x.shape[1:])
                phi[:, i] += w * (f(np.where(with_i, x, b)) - f(np.where(keep, x, b)))
    return phi


def test_exact_shapley_by_enumeration_and_efficiency(fw, rng):
    model = tanh_mlp(fw)
    x = rng.normal(size=(2, 6)).astype(np.float32)
    b = rng.normal(size=(1, 6)).astype(np.float32)
    mask = np.array([[0, 1, 1, 2, 3, 0]])
    got = np_(fw, hookkit.attribute(model, None, fw.tensor(x), "shapley", target=2, baselines=fw.tensor(b), feature_mask=mask))
    f = scorer(fw, model, 2)
    groups = _groups_of(mask)
    phi = exact_shapley(f, x, np.broadcast_to(b, x.shape), groups)
    want = np.zeros((2, 6))
    for i, g in enumerate(groups):
        want[:, g] = phi[:, i : i + 1]
    np.testing.assert_allclose(got, want, **TOL)
    per_feature = np.stack([got[:, g][:, 0] for g in groups], 1)
    np.testing.assert_allclose(per_feature.sum(1), f(x) - f(np.broadcast_to(b, x.shape)), rtol=1e-5, atol=1e-5)  # efficiency


def test_feature_permutation_with_a_given_permutation(fw, rng):
    model = tanh_mlp(fw)
    x = rng.normal(size=(4, 6)).astype(np.float32)
    perm = [2, 0, 3, 1]
    mask = np.array([0, 1, 1, 2, 2, 2])
    got = np_(fw, hookkit.attribute(model, None, fw.tensor(x), "feature_permutation", target=0, feature_mask=mask, permutation=perm))
    f = scorer(fw, model, 0)
    want = np.zeros((4, 6))
    for g in _groups_of(mask):
        want[:, g] = (f(x) - f(np.where(g, x[perm], x)))[:, None]
    np.testing.assert_allclose(got, want, **TOL)
    # a random one per feature, never the identity, repeated by the seed
    a = hookkit.attribute(model, None, fw.tensor(x), "feature_permutation", target=0, seed=3)
    np.testing.assert_array_equal(
        fw.numpy(a), fw.numpy(hookkit.attribute(model, None, fw.tensor(x), "feature_permutation", target=0, seed=3))
    )


def test_sampling_methods_converge_to_exact_shapley(fw, rng):
    model = tanh_mlp(fw)
    x = rng.normal(size=(2, 6)).astype(np.float32)
    exact = np_(fw, hookkit.attribute(model, None, fw.tensor(x), "shapley", target=1))
    scale = np.abs(exact).max()
    sampled = np_(fw, hookkit.attribute(model, None, fw.tensor(x), "shapley_sampling", target=1, n_samples=3000, seed=0))
    kernel = np_(fw, hookkit.attribute(model, None, fw.tensor(x), "kernel_shap", target=1, n_samples=4000, seed=0))
    # Monte Carlo error ~ 1/sqrt(samples): a few percent of the largest value
    np.testing.assert_allclose(sampled, exact, atol=0.03 * scale)
    np.testing.assert_allclose(kernel, exact, atol=0.03 * scale)
    # both keep efficiency exactly: the sampled orders telescope, KernelSHAP is fitted under it
    np.testing.assert_allclose(sampled.sum(1), exact.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(kernel.sum(1), exact.sum(1), rtol=1e-5, atol=1e-5)
    few = np_(fw, hookkit.attribute(model, None, fw.tensor(x), "shapley_sampling", target=1, n_samples=2, seed=0))
    assert not np.allclose(few, exact, atol=1e-4)  # two orders are not enough: the samples are used


def test_lasso_is_sklearns_and_lime_recovers_a_linear_model(fw, rng):
    from sklearn.linear_model import Lasso

    from hookkit.analyses.attribution.perturbation import lasso

    z = (rng.random((60, 5)) < 0.5).astype(float)
    y = z @ np.array([1.0, -2.0, 0.0, 0.5, 0.02]) + 0.3 + 0.01 * rng.normal(size=60)
    w = rng.random(60) + 0.1
    ref = Lasso(alpha=0.01, tol=1e-12, max_iter=100000).fit(z, y, sample_weight=w).coef_
    np.testing.assert_allclose(lasso(z, y, w, 0.01), ref, atol=1e-8)

    fw.seed(0)
    model = fw.linear(4, 2)
    x = 3 * rng.normal(size=(2, 4)).astype(np.float32)
    got = np_(fw, hookkit.attribute(model, None, fw.tensor(x), "lime", target=0, n_samples=400, seed=1))
    w0 = fw.numpy(model.weight)
    w0 = (w0 if fw.name == "torch" else w0.T)[0]
    # a linear model is fitted exactly but for the Lasso's shrinkage (alpha / var(z) ~ 0.04)
    np.testing.assert_allclose(got, w0 * x, atol=0.1)


def test_layer_feature_ablation_and_layer_shapley_by_hand(fw, rng):
    model = tanh_mlp(fw)
    x = rng.normal(size=(3, 6)).astype(np.float32)
    got = np_(fw, hookkit.attribute(model, "1", fw.tensor(x), "feature_ablation", target=2))
    with fw.no_grad():
        h = fw.numpy(model[1](model[0](fw.tensor(x)))).astype(np.float32)
    head = scorer(fw, model[2], 2)
    want = np.stack([head(h) - head(np.where(np.arange(7) == i, 0, h)) for i in range(7)], 1)
    np.testing.assert_allclose(got, want, **TOL)
    mask = np.array([0, 0, 1, 1, 2, 2, 2])
    shap = np_(fw, hookkit.attribute(model, "1", fw.tensor(x), "shapley", target=2, feature_mask=mask, baselines=0.1))
    np.testing.assert_allclose(shap[:, [0, 2, 4]].sum(1), head(h) - head(np.full_like(h, 0.1)), rtol=1e-5, atol=1e-5)


def test_neuron_feature_ablation_and_shapley_by_hand(fw, rng):
    model = tanh_mlp(fw)
    x = rng.normal(size=(3, 6)).astype(np.float32)
    got = np_(fw, hookkit.attribute(model, "1", fw.tensor(x), "feature_ablation", neuron=4))

    def h(rows):
        with fw.no_grad():
            return fw.numpy(model[1](model[0](fw.tensor(np.asarray(rows, np.float32)))))[:, 4].astype(np.float64)

    want = np.stack([h(x) - h(np.where(np.arange(6) == i, 0, x)) for i in range(6)], 1)
    np.testing.assert_allclose(got, want, **TOL)
    shap = np_(fw, hookkit.attribute(model, "1", fw.tensor(x), "shapley", neuron=4, feature_mask=np.array([0, 0, 1, 1, 2, 2])))
    np.testing.assert_allclose(shap[:, ::2].sum(1), h(x) - h(np.zeros_like(x)), rtol=1e-5, atol=1e-5)  # efficiency


def test_token_ids_ablated_to_a_pad_id(fw, rng):
    fw.seed(0)
    model = fw.sequential(fw.nn.Embedding(10, 3), fw.flatten(), fw.linear(15, 2))
    ids = rng.integers(1, 10, size=(2, 5))
    t = fw.tensor(ids, dtype="int64")
    got = np_(fw, hookkit.attribute(model, None, t, "feature_ablation", target=1, baselines=0))
    with fw.no_grad():
        f = lambda a: fw.numpy(model(fw.tensor(a, dtype="int64")))[:, 1].astype(np.float64)  # noqa: E731
        want = np.stack([f(ids) - f(np.where(np.arange(5) == i, 0, ids)) for i in range(5)], 1)
    np.testing.assert_allclose(got, want, **TOL)


@pytest.mark.parametrize("batch", [1, 5, None])
def test_chunks_change_nothing(fw, rng, batch):
    model = tanh_mlp(fw)
    x = rng.normal(size=(3, 6)).astype(np.float32)
    for method, kw in (("shapley", {"feature_mask": np.array([0, 1, 1, 2, 3, 3])}), ("occlusion", {"sliding_window_shapes": (2,)})):
        whole = np_(fw, hookkit.attribute(model, None, fw.tensor(x), method, target=0, internal_batch_size="auto", **kw))
        got = np_(fw, hookkit.attribute(model, None, fw.tensor(x), method, target=0, internal_batch_size=batch, **kw))
        np.testing.assert_allclose(got, whole, **TOL)
    tiny = np_(fw, hookkit.attribute(model, None, fw.tensor(x), "feature_ablation", target=0, max_memory=1))  # one row a forward
    np.testing.assert_allclose(tiny, np_(fw, hookkit.attribute(model, None, fw.tensor(x), "feature_ablation", target=0)), **TOL)


def _layout_net(torch, flat):
    class Net(torch.nn.Module):
        """A CNN that records the layout of the rows it gets; ``flat="view"`` needs contiguous rows."""

        def __init__(self):
            super().__init__()
            self.conv, self.fc, self.seen = torch.nn.Conv2d(2, 3, 3, padding=1), torch.nn.Linear(48, 2), []

        def forward(self, x):
            self.seen.append("channels_last" if not x.is_contiguous() and x.dim() == 4 else "rows")
            h = torch.relu(self.conv(x))
            return self.fc(h.view(len(h), -1) if flat == "view" else h.flatten(1))

    torch.manual_seed(0)
    return Net().eval()


@pytest.mark.parametrize("flat", ["flatten", "view"])
def test_conv_rows_in_the_fast_layout_and_a_model_that_refuses_it(torch_fw, rng, device, flat):
    """The perturbed images reach a CNN channels-last on the CPU (the layout oneDNN's convolutions run
    fastest on), with the same attributions; a model whose ``view`` refuses them gets them as they are,
    after one refused forward, and later calls do not try again."""
    torch = pytest.importorskip("torch")
    model = _layout_net(torch, flat)
    x = rng.normal(size=(2, 2, 4, 4)).astype(np.float32)
    kw = {"sliding_window_shapes": (2, 2, 2), "strides": 2, "baselines": 0.25}
    got = np_(torch_fw, hookkit.attribute(model, None, torch_fw.tensor(x), "occlusion", target=[0, 1], **kw))
    perturbed = model.seen[1:]  # after the probe forward: one forward of the 8 perturbed rows
    with torch.no_grad():
        f = lambda rows: model(torch_fw.tensor(rows)).cpu().numpy()[[0, 1], [0, 1]].astype(np.float64)  # noqa: E731
        want = np.zeros(x.shape)
        for r, c in itertools.product((0, 2), (0, 2)):
            rows = x.copy()
            rows[:, :, r : r + 2, c : c + 2] = 0.25
            want[:, :, r : r + 2, c : c + 2] = (f(x) - f(rows))[:, None, None, None]
    np.testing.assert_allclose(got, want, **TOL)
    fast = device == "cpu"
    if flat == "flatten":
        assert perturbed == ["channels_last" if fast else "rows"]
    else:  # refused once (on the CPU), then as they are; the next call goes straight to the rows
        assert perturbed == (["channels_last", "rows"] if fast else ["rows"])
        model.seen.clear()
        again = hookkit.attribute(model, "conv", torch_fw.tensor(x), "feature_ablation", neuron=(0, 1, 1), baselines=0.25)
        assert model.seen == ["rows", "rows"] and hooks_left(model) == []
        with torch.no_grad():
            h = lambda rows: model.conv(torch_fw.tensor(rows))[:, 0, 1, 1].cpu().numpy().astype(np.float64)  # noqa: E731
            for e in zip(*np.nonzero(np.ones(x.shape[1:]))):  # every element its own feature
                rows = x.copy()
                rows[(slice(None), *e)] = 0.25
                np.testing.assert_allclose(np_(torch_fw, again)[(slice(None), *e)], h(x) - h(rows), **TOL)


@pytest.mark.parametrize("method", ["feature_ablation", "occlusion", "shapley"])
def test_features_already_at_their_baseline_run_no_forward(fw, rng, method):
    """A perturbation that replaces only elements equal to their baseline (a black border, a pad token)
    leaves the input as it is: its score is the unperturbed one, without a forward; the attributions
    equal the hand computation's (which runs them all)."""
    model = tanh_mlp(fw)
    x = rng.normal(size=(2, 6)).astype(np.float32)
    x[:, :2] = 0.5  # features 0 and 1 of both samples at the baseline, feature 4 of sample 0 only
    x[0, 4] = 0.5
    kw = {"sliding_window_shapes": (2,), "strides": 2} if method == "occlusion" else {}
    if method == "shapley":  # 5 coalitions a forward: the live ones gathered across blocks with skipped ones
        kw["internal_batch_size"] = 10
    rows = []
    hook = model.register_forward_pre_hook(lambda mod, args: rows.append(len(args[0])))
    try:
        got = np_(fw, hookkit.attribute(model, None, fw.tensor(x), method, target=1, baselines=0.5, **kw))
    finally:
        hook.remove()
    f = scorer(fw, model, 1)
    if method == "shapley":
        groups = [np.arange(6) == i for i in range(6)]
        want = exact_shapley(f, x, np.full_like(x, 0.5), groups)
        assert sum(rows) == 2 + 2 * (2**6 - 2**2)  # f(x); coalitions replacing only features 0, 1 skipped
        assert rows == [2 + 10] + [10] * 11  # a chunk size given: no probe, the 2 samples ride in the first forward
    else:
        feats = [[0, 1], [2, 3], [4, 5]] if method == "occlusion" else [[i] for i in range(6)]
        want = np.zeros(x.shape)
        for g in feats:
            p = x.copy()
            p[:, g] = 0.5
            want[:, g] = (f(x) - f(p))[:, None]
        assert sum(rows) == 2 + 2 * (len(feats) - (1 if method == "occlusion" else 2))  # sample 1's feature 4 still runs
    np.testing.assert_allclose(got, want, **TOL)
    if method != "shapley":  # f(x) - f(x): exactly 0 (Shapley's null players come from differences of forwards)
        assert (got[:, :2] == 0).all()


def test_default_chunks_on_a_cpu_follow_the_largest_activation(fw, rng, device):
    """Without ``max_memory``, on a CPU, the perturbed rows of a model with small activations run in one
    forward, and those of a model with a wide layer in chunks of ``HOST_BUDGET`` at ``HOST_LIVE`` times
    that layer's output per row; the attributions are the same either way."""
    if device != "cpu":
        pytest.skip("the default on a GPU is half its free memory")
    from hookkit.analyses.attribution.perturbation import HOST_BUDGET, HOST_LIVE

    wide = 1 << 18  # a [rows, 2**18] float32 hidden layer: 1 MB a row
    fw.seed(0)
    big = fw.sequential(fw.linear(6, wide), fw.nn.Tanh(), fw.linear(wide, 2))
    x = rng.normal(size=(2, 6)).astype(np.float32)
    for model, target in ((tanh_mlp(fw), 1), (big, 0)):
        rows: list[int] = []
        hook = model.register_forward_pre_hook(lambda mod, args, rows=rows: rows.append(len(args[0])))
        try:
            got = np_(fw, hookkit.attribute(model, None, fw.tensor(x), "feature_ablation", target=target))
        finally:
            hook.remove()
        f = scorer(fw, model, target)
        want = np.stack([f(x) - f(np.where(np.arange(6) == i, 0.0, x)) for i in range(6)], 1)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        if model is big:
            per_forward = max(1, HOST_BUDGET // (HOST_LIVE * wide * 4) // 2) * 2  # whole samples' coalitions
            assert rows[1:] == [per_forward] * (12 // per_forward) and per_forward < 12
        else:
            assert rows[1:] == [12]


def test_default_probe_on_a_cpu_records_no_graph_and_leaves_nothing(fw, rng, device):
    """On a CPU without ``max_memory`` the first forward (the probe sizing the chunks from the largest layer
    output) runs without autograd, as the perturbed ones do: no backward graph is built beside them; with
    ``max_memory=`` it records one (the budget counts what autograd would keep). The probe's observers are
    gone after the call, also when the forward raises; a second call sizes its chunks the same."""
    if device != "cpu":
        pytest.skip("the default on a GPU sizes the chunks by autograd's bytes")
    model = tanh_mlp(fw)
    x = fw.tensor(rng.normal(size=(2, 6)))
    first_rows = None
    for extra, probe_grad in (({}, False), ({"max_memory": 1 << 20}, True), ({}, False)):
        grads: list[bool] = []
        rows: list[int] = []

        def seen(mod, args, out, grads=grads, rows=rows):
            grads.append(fw.requires_grad(out))
            rows.append(len(out))

        hook = (model[0].register_forward_hook if fw.name == "torch" else model[0].register_forward_post_hook)(seen)
        try:
            hookkit.attribute(model, None, x, "feature_ablation", target=1, **extra)
        finally:
            hook.remove()
        assert grads[0] is probe_grad and not any(grads[1:])
        if not extra and first_rows is None:
            first_rows = rows
        elif not extra:  # the chunk size known: no probe, the 2 samples ride in the first chunk
            assert rows == [first_rows[0] + first_rows[1], *first_rows[2:]]
    assert hooks_left(model) == []

    class Boom(fw.Layer):
        def forward(self, h):
            raise ValueError("boom")

    broken = fw.sequential(fw.linear(6, 3), Boom())
    with pytest.raises(ValueError, match="boom"):
        hookkit.attribute(broken, None, x, "feature_ablation", target=0)
    assert hooks_left(broken) == []


def test_paddle_equals_torch_on_twin_models(torch_fw, paddle_fw, rng):
    tm, pm = tanh_mlp(torch_fw), tanh_mlp(paddle_fw)
    for i in (0, 2):
        pm[i].weight.set_value(torch_fw.numpy(tm[i].weight).T)
        pm[i].bias.set_value(torch_fw.numpy(tm[i].bias))
    x = rng.normal(size=(3, 6)).astype(np.float32)
    mask = np.array([0, 1, 1, 2, 3, 3])
    calls = [
        (None, "occlusion", {"sliding_window_shapes": (3,), "strides": 2}),
        (None, "feature_ablation", {"feature_mask": mask}),
        (None, "feature_permutation", {"permutation": [1, 2, 0]}),
        (None, "shapley", {"feature_mask": mask}),
        (None, "shapley_sampling", {"n_samples": 5, "seed": 0}),
        (None, "kernel_shap", {"n_samples": 30, "seed": 0, "feature_mask": mask}),
        (None, "lime", {"n_samples": 30, "seed": 0, "feature_mask": mask}),
        ("1", "feature_ablation", {}),
    ]
    for layer, method, kw in calls:
        out = [
            fw.numpy(hookkit.attribute(m, layer, fw.tensor(x), method, target=[2, 0, 1], **kw))
            for fw, m in ((torch_fw, tm), (paddle_fw, pm))
        ]
        np.testing.assert_allclose(out[1], out[0], rtol=1e-4, atol=1e-5, err_msg=f"{layer} {method}")


@pytest.mark.parametrize(
    ("method", "kw", "arg"),
    [
        ("feature_ablation", {"feature_mask": np.zeros((5,), int)}, "feature_mask"),
        ("feature_ablation", {"feature_mask": np.zeros((6,))}, "feature_mask"),
        ("feature_ablation", {"feature_mask": np.arange(12).reshape(2, 6)}, "feature_mask"),  # 2 masks for 3 samples
        ("occlusion", {"sliding_window_shapes": (7,)}, "sliding_window_shapes"),
        ("occlusion", {}, "sliding_window_shapes"),
        ("occlusion", {"sliding_window_shapes": (2, 2)}, "sliding_window_shapes"),
        ("occlusion", {"sliding_window_shapes": (2,), "strides": 3}, "strides"),
        ("occlusion", {"sliding_window_shapes": (2,), "feature_mask": np.zeros(6, int)}, "feature_mask"),
        ("shapley", {}, "feature_mask"),  # 6 features are fine; 13 are not (below)
        ("feature_permutation", {"permutation": [0, 0, 1]}, "permutation"),
        ("feature_ablation", {"n_samples": 3}, "n_samples"),
        ("integrated_gradients", {"feature_mask": np.zeros(6, int)}, "feature_mask"),
        ("feature_ablation", {"baselines": np.zeros((2, 6), np.float32)}, "baselines"),
    ],
)
def test_bad_calls_name_the_argument_and_leave_nothing(fw, rng, method, kw, arg):
    model = tanh_mlp(fw)
    width = 13 if method == "shapley" else 6
    if method == "shapley":
        fw.seed(0)
        model = fw.linear(13, 2)
    x = fw.tensor(rng.normal(size=(3, width)))
    kw = {k: fw.tensor(v) if k == "baselines" else v for k, v in kw.items()}
    with pytest.raises(HookkitError, match=rf"attribute\(\).*{arg}"):
        hookkit.attribute(model, None, x, method, target=0, **kw)
    assert hooks_left(model) == []


def test_feature_permutation_needs_two_samples(fw, rng):
    with pytest.raises(HookkitError, match=r"attribute\(\): inputs.*at least 2 samples"):
        hookkit.attribute(tanh_mlp(fw), None, fw.tensor(rng.normal(size=(1, 6))), "feature_permutation", target=0)


# -- captum, where it is installed (the benchmark environment), in float64 ------------------------------------
def test_equal_to_captum_in_float64(rng):
    torch = pytest.importorskip("torch")
    attr = pytest.importorskip("captum.attr")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(2, 3, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(3 * 5 * 5, 4)
    ).double()
    x = torch.tensor(rng.normal(size=(3, 2, 5, 5)))
    b = torch.tensor(rng.normal(size=(1, 2, 5, 5)))
    mask = torch.tensor(np.arange(50).reshape(1, 2, 5, 5) // 5)  # 10 groups
    small = torch.tensor((np.arange(50).reshape(1, 2, 5, 5) // 9).clip(0, 4))  # 5 groups for exact Shapley
    target = [0, 3, 1]

    def ours(method, **kw):
        return hookkit.attribute(model, None, x, method, target=target, **kw).numpy()

    cases = [
        (ours("feature_ablation", baselines=b, feature_mask=mask), attr.FeatureAblation(model).attribute(x, b, target, feature_mask=mask)),
        (ours("feature_ablation"), attr.FeatureAblation(model).attribute(x, target=target)),
        (
            ours("feature_permutation", feature_mask=mask, permutation=[1, 2, 0]),
            attr.FeaturePermutation(model, perm_func=lambda t, m: t[[1, 2, 0]] * m + t * ~m).attribute(x, target=target, feature_mask=mask),
        ),
        (
            hookkit.attribute(model, "1", x, "feature_ablation", target=target).numpy(),
            attr.LayerFeatureAblation(model, model[1]).attribute(x, target=target),
        ),
        (
            hookkit.attribute(model, "1", x, "feature_ablation", neuron=(1, 2, 3), feature_mask=mask).numpy(),
            attr.NeuronFeatureAblation(model, model[1]).attribute(x, neuron_selector=(1, 2, 3), feature_mask=mask),
        ),
    ]
    for i, (got, want) in enumerate(cases):
        np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-9, atol=1e-12, err_msg=str(i))
    # captum sums Shapley values and divides occlusion's sums in float32: 1e-5 against it, 1e-9 against float64 by hand
    shap = ours("shapley", baselines=b, feature_mask=small)
    want = attr.ShapleyValues(model).attribute(x, b, target, feature_mask=small)
    np.testing.assert_allclose(shap, want.numpy(), rtol=1e-5, atol=1e-7)
    with torch.no_grad():
        f = lambda rows: model(torch.tensor(rows)).numpy()[[0, 1, 2], target]  # noqa: E731
        groups = _groups_of(small.numpy())
        phi = exact_shapley(f, x.numpy(), np.broadcast_to(b.numpy(), x.shape), groups)
    for i, g in enumerate(groups):
        np.testing.assert_allclose(shap.reshape(3, -1)[:, g], np.repeat(phi[:, i : i + 1], g.sum(), 1), rtol=1e-9, atol=1e-12)
    want = attr.Occlusion(model).attribute(x, (1, 3, 2), strides=(1, 2, 2), baselines=b, target=target)
    # captum's float64 sums cast to float32 (single_attrib.float()), divided by float32 counts: two roundings
    assert_close(ours("occlusion", sliding_window_shapes=(1, 3, 2), strides=(1, 2, 2), baselines=b), want, dtype="float32", n_ops=2)


@pytest.mark.parametrize("method", ["feature_ablation", "occlusion", "shapley_sampling", "kernel_shap"])
def test_a_second_call_runs_the_unperturbed_rows_in_its_first_forward(fw, rng, method):
    """The first call of a model and call shape runs f(x) alone (the probe sizing the chunks); a later
    one knows the chunk size and runs f(x)'s rows in the first perturbed forward: one forward fewer,
    the same attributions (float32: the rows computed in another batch), the hand computation's. A
    target to predict (None) needs f(x) first: it keeps the probe."""
    model = tanh_mlp(fw)
    x = fw.tensor(rng.normal(size=(3, 6)).astype(np.float32))
    kw = {"sliding_window_shapes": (2,), "strides": 2} if method == "occlusion" else {}
    kw |= {"n_samples": 5, "seed": 0} if method in ("shapley_sampling", "kernel_shap") else {}
    calls: list[int] = []
    hook = model.register_forward_pre_hook(lambda mod, args: calls.append(len(args[0])))
    try:
        runs = []
        for target in (1, 1, None, None):
            calls.clear()
            runs.append((np_(fw, hookkit.attribute(model, None, x, method, target=target, baselines=0.25, **kw)), list(calls)))
    finally:
        hook.remove()
    (first, rows1), (second, rows2), (predicted, rows3), (_, rows4) = runs
    assert rows1[0] == 3 and rows2[0] == 3 + rows1[1] and rows2[1:] == rows1[2:]  # f(x)'s 3 rows in the first chunk
    assert sum(rows2) == sum(rows1) and len(rows2) == len(rows1) - 1
    assert rows3[0] == 3 and rows4[0] == 3  # target=None: the probe predicts the class first
    np.testing.assert_allclose(second, first, **TOL)
    if method == "feature_ablation":
        f = scorer(fw, model, 1)
        xs = np_(fw, x)
        for i in range(6):
            rows = xs.copy()
            rows[:, i] = 0.25
            np.testing.assert_allclose(second[:, i], f(xs) - f(rows), **TOL)
    assert hooks_left(model) == []


def test_perturbed_forwards_of_a_language_model_build_no_key_value_cache():
    """A model whose forward takes ``use_cache`` (transformers' LMs) gets ``use_cache=False`` in the
    perturbed forwards: single forwards decode nothing after them. The attributions equal those with
    the cache on, bit for bit; a cache setting in ``forward_kwargs`` is left as given."""
    torch = pytest.importorskip("torch")
    T = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = T.GPT2LMHeadModel(T.GPT2Config(n_layer=2, n_head=2, n_embd=16, vocab_size=40, n_positions=16)).eval()
    ids = torch.tensor([[3, 7, 1, 9, 4], [2, 5, 8, 6, 11]])
    seen = []
    hook = model.register_forward_pre_hook(lambda m, a, k: seen.append(k.get("use_cache")), with_kwargs=True)
    target = lambda o: o.logits[:, -1, 5]  # noqa: E731
    try:
        off = hookkit.attribute(model, None, ids, "occlusion", target=target, sliding_window_shapes=(2,), baselines=0)
        assert seen and all(u is False for u in seen)
        seen.clear()
        on = hookkit.attribute(
            model, None, ids, "occlusion", target=target, sliding_window_shapes=(2,), baselines=0, forward_kwargs={"use_cache": True}
        )
        assert seen and all(u is True for u in seen)
    finally:
        hook.remove()
    assert torch.equal(off, on)
    with torch.no_grad():  # and by hand: token 1 lies in the windows [0, 2) and [1, 3); each at the pad id 0
        f = model(ids).logits[0, -1, 5]
        drops = []
        for w in (slice(0, 2), slice(1, 3)):
            rows = ids[:1].clone()
            rows[0, w] = 0
            drops.append(float(f - model(rows).logits[0, -1, 5]))
    # float32: the logits of a 2-block width-16 model (a few hundred roundings), at their own scale
    assert_close(float(on[0, 1]), sum(drops) / 2, dtype="float32", n_ops=256, scale=abs(float(f)))
