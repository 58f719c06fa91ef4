"""hookkit.attribute on several input tensors (captum's ``inputs=(x1, x2)``: an image and tabular
features) and with one feature mask per sample, on both frameworks: each against a hand computation or
against the same model taking the inputs packed side by side as one tensor (a path the other tests
check by hand); captum (where importable) gives the same numbers in float64; bad calls fail naming the
argument, what was given and what is valid."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import hookkit
from hookkit.core.errors import HookkitError
from models import hooks_left
from test_attribution_perturbation import _groups_of, exact_shapley, scorer, tanh_mlp

# float32 models: a hand sum of a few float32 differences
TOL = {"rtol": 1e-5, "atol": 2e-6}
IMG, TAB = (1, 4, 4), (3,)


def two_input(fw, act="ReLU"):
    """f(image [N, 1, 4, 4], table [N, 3]) -> [N, 3]: a convolution of the image, its features beside the table."""
    fw.seed(0)

    class TwoInput(fw.Layer):
        def __init__(self):
            super().__init__()
            self.conv = fw.conv2d(1, 2, 3, padding=1)
            self.act = getattr(fw.nn, act)()
            self.flat = fw.flatten()
            self.head = fw.linear(2 * 16 + 3, 3)

        def forward(self, img, tab):
            return self.head(fw.lib.concat([self.flat(self.act(self.conv(img))), tab], 1))

    return TwoInput()


def packed_twin(fw, inner):
    """The same model on the inputs side by side: one tensor [N, 16 + 3]."""

    class Packed(fw.Layer):
        def __init__(self):
            super().__init__()
            self.inner = inner

        def forward(self, p):
            return self.inner(p[:, :16].reshape([-1, *IMG]), p[:, 16:])

    return Packed()


def pack(*arrays):
    return np.concatenate([a.reshape(len(a), -1) for a in arrays], 1)


def split(a):
    a = np.asarray(a)
    return a[:, :16].reshape(-1, *IMG), a[:, 16:]


def np_(fw, t):
    return fw.numpy(t).astype(np.float64)


def data(rng, n=3):
    return rng.normal(size=(n, *IMG)).astype(np.float32), rng.normal(size=(n, *TAB)).astype(np.float32)


# -- several input tensors --------------------------------------------------------------------------------------
def test_several_inputs_equal_the_packed_model(fw, rng):
    model = two_input(fw)
    twin = packed_twin(fw, model)
    img, tab = data(rng)
    b_img, b_tab = rng.normal(size=(1, *IMG)).astype(np.float32), rng.normal(size=(1, *TAB)).astype(np.float32)
    d_img, d_tab = rng.normal(size=(4, *IMG)).astype(np.float32), rng.normal(size=(4, *TAB)).astype(np.float32)
    m_img, m_tab = np.arange(16).reshape(1, *IMG) // 4, np.array([[0, 4, 5]])  # id 0 in both tensors: one feature
    t = fw.tensor
    cases = [
        ("integrated_gradients", {"baselines": (t(b_img), t(b_tab))}, {"baselines": t(pack(b_img, b_tab))}),
        ("saliency", {}, {}),
        ("gradient", {}, {}),
        ("gradient_x_activation", {}, {}),
        ("smoothgrad", {"seed": 1, "stdevs": 0.3}, {"seed": 1, "stdevs": 0.3}),
        ("deeplift", {"baselines": (t(b_img), 0.5)}, {"baselines": t(pack(b_img, np.full((1, 3), 0.5, np.float32)))}),
        ("deeplift_shap", {"baselines": (t(d_img), t(d_tab))}, {"baselines": t(pack(d_img, d_tab))}),
        ("gradient_shap", {"baselines": (t(d_img), t(d_tab)), "seed": 2, "n_samples": 3}, {"baselines": t(pack(d_img, d_tab)), "seed": 2, "n_samples": 3}),
        ("guided_backprop", {}, {}),
        ("deconvolution", {}, {}),
        ("feature_ablation", {"baselines": (t(b_img), t(b_tab))}, {"baselines": t(pack(b_img, b_tab))}),
        ("feature_ablation", {"feature_mask": (m_img, m_tab)}, {"feature_mask": pack(m_img, m_tab)}),
        ("feature_permutation", {"feature_mask": (m_img, None), "permutation": [2, 0, 1]}, {"feature_mask": pack(m_img, 4 + np.arange(3)[None]), "permutation": [2, 0, 1]}),
        ("shapley", {"feature_mask": (m_img, m_tab), "baselines": (None, 1.0)}, {"feature_mask": pack(m_img, m_tab), "baselines": t(pack(np.zeros((1, *IMG)), np.ones((1, 3))))}),
        ("shapley_sampling", {"feature_mask": (m_img, m_tab), "n_samples": 4, "seed": 0}, {"feature_mask": pack(m_img, m_tab), "n_samples": 4, "seed": 0}),
        ("kernel_shap", {"feature_mask": (m_img, m_tab), "n_samples": 20, "seed": 0}, {"feature_mask": pack(m_img, m_tab), "n_samples": 20, "seed": 0}),
        ("lime", {"feature_mask": (m_img, m_tab), "n_samples": 20, "seed": 0}, {"feature_mask": pack(m_img, m_tab), "n_samples": 20, "seed": 0}),
    ]  # fmt: skip
    for method, kw, packed_kw in cases:
        got = hookkit.attribute(model, None, (t(img), t(tab)), method, target=[2, 0, 1], **kw)
        assert isinstance(got, tuple) and [list(g.shape) for g in got] == [[3, *IMG], [3, *TAB]], method
        want = split(np_(fw, hookkit.attribute(twin, None, t(pack(img, tab)), method, target=[2, 0, 1], **packed_kw)))
        for g, w in zip(got, want):
            np.testing.assert_allclose(np_(fw, g), w, **TOL, err_msg=method)
    for method in ("integrated_gradients", "gradient", "feature_ablation"):  # the neuron variants: to the inputs
        got = hookkit.attribute(model, "conv", (t(img), t(tab)), method, neuron=(1, 2, 2), n_steps=8)
        want = split(np_(fw, hookkit.attribute(twin, "inner.conv", t(pack(img, tab)), method, neuron=(1, 2, 2), n_steps=8)))
        for g, w in zip(got, want):
            np.testing.assert_allclose(np_(fw, g), w, **TOL, err_msg=f"neuron {method}")
        assert np.abs(w).max() == 0  # the table is not on the neuron's path
    assert hooks_left(model) == []


def test_several_inputs_grouped_across_tensors_by_hand(fw, rng):
    """One feature id in both tensors is ablated at once (captum's grouping); None: each element its own."""
    model = two_input(fw, act="Tanh")
    img, tab = data(rng, 2)
    m_img = np.zeros(IMG, int)
    m_img[:, :2] = 1  # the image's top half is feature 1, its bottom half feature 0, as the table's first column
    m_tab = np.array([0, 2, 2])
    got = hookkit.attribute(model, None, (fw.tensor(img), fw.tensor(tab)), "feature_ablation", target=1, feature_mask=(m_img, m_tab))

    def f(i, t_):
        with fw.no_grad():
            return fw.numpy(model(fw.tensor(i), fw.tensor(t_)))[:, 1].astype(np.float64)

    want_img, want_tab = np.zeros(img.shape), np.zeros(tab.shape)
    for g in range(3):
        drop = f(img, tab) - f(np.where(m_img == g, 0, img), np.where(m_tab == g, 0, tab))
        want_img[:, m_img == g] = drop[:, None]
        want_tab[:, m_tab == g] = drop[:, None]
    np.testing.assert_allclose(np_(fw, got[0]), want_img, **TOL)
    np.testing.assert_allclose(np_(fw, got[1]), want_tab, **TOL)
    # no mask for the table: its elements are features 2, 3, 4 after the image's ids 0 and 1
    got = hookkit.attribute(model, None, (fw.tensor(img), fw.tensor(tab)), "feature_ablation", target=1, feature_mask=(m_img, None))
    for c in range(3):
        drop = f(img, tab) - f(img, np.where(np.arange(3) == c, 0, tab))
        np.testing.assert_allclose(np_(fw, got[1])[:, c], drop, **TOL)


def test_several_inputs_occlusion_by_hand(fw, rng):
    model = two_input(fw, act="Tanh")
    img, tab = data(rng, 2)
    got = hookkit.attribute(
        model,
        None,
        (fw.tensor(img), fw.tensor(tab)),
        "occlusion",
        target=0,
        sliding_window_shapes=((1, 2, 3), (2,)),
        strides=((1, 2, 1), 1),
    )

    def f(i, t_):
        with fw.no_grad():
            return fw.numpy(model(fw.tensor(i), fw.tensor(t_)))[:, 0].astype(np.float64)

    total, times = np.zeros(img.shape), np.zeros(IMG)
    for r, c in itertools.product((0, 2), (0, 1)):  # the image's windows; the table untouched meanwhile
        occluded = img.copy()
        occluded[:, :, r : r + 2, c : c + 3] = 0
        total[:, :, r : r + 2, c : c + 3] += (f(img, tab) - f(occluded, tab))[:, None, None, None]
        times[:, r : r + 2, c : c + 3] += 1
    np.testing.assert_allclose(np_(fw, got[0]), total / times, **TOL)
    total, times = np.zeros(tab.shape), np.zeros(3)
    for c in (0, 1):
        occluded = tab.copy()
        occluded[:, c : c + 2] = 0
        total[:, c : c + 2] += (f(img, tab) - f(img, occluded))[:, None]
        times[c : c + 2] += 1
    np.testing.assert_allclose(np_(fw, got[1]), total / times, **TOL)


def test_several_inputs_delta_layer_and_mixed_dtypes(fw, rng):
    model = two_input(fw, act="Tanh")
    twin = packed_twin(fw, model)
    img, tab = data(rng, 2)
    x = (fw.tensor(img), fw.tensor(tab))
    attr, delta = hookkit.attribute(model, None, x, target=1, n_steps=64, return_delta=True)
    with fw.no_grad():
        gap = fw.numpy(model(*x))[:, 1] - fw.numpy(model(fw.tensor(0 * img), fw.tensor(0 * tab)))[:, 1]
    total = sum(np_(fw, a).reshape(2, -1).sum(1) for a in attr)
    np.testing.assert_allclose(np_(fw, delta), total - gap, rtol=1e-4, atol=1e-5)  # the delta covers both inputs
    assert np.abs(np_(fw, delta)).max() < 1e-2 * np.abs(gap).max()  # completeness, 64 Gauss-Legendre steps
    # at a layer the inputs are several and the attribution is the layer's (captum's LayerIntegratedGradients)
    got = hookkit.attribute(model, "conv", x, target=1, baselines=(fw.tensor(img[:1]), 0.0))
    want = hookkit.attribute(twin, "inner.conv", fw.tensor(pack(img, tab)), target=1, baselines=fw.tensor(pack(img[:1], np.zeros((1, 3)))))
    np.testing.assert_allclose(np_(fw, got), np_(fw, want), **TOL)
    got = hookkit.attribute(model, "act", x, "feature_ablation", target=1)  # the layer's units, the inputs as given
    want = hookkit.attribute(twin, "inner.act", fw.tensor(pack(img, tab)), "feature_ablation", target=1)
    np.testing.assert_allclose(np_(fw, got), np_(fw, want), **TOL)
    # token ids beside float features (perturbation methods): each tensor keeps its dtype in the forward
    fw.seed(0)
    emb, lin = fw.nn.Embedding(10, 2), fw.linear(2 * 4 + 3, 2)

    class Mixed(fw.Layer):
        def __init__(self):
            super().__init__()
            self.emb, self.lin, self.flat = emb, lin, fw.flatten()

        def forward(self, ids, feats):
            return self.lin(fw.lib.concat([self.flat(self.emb(ids)), feats], 1))

    mixed = Mixed()
    ids = rng.integers(1, 10, size=(2, 4))
    got = hookkit.attribute(mixed, None, (fw.tensor(ids, dtype="int64"), fw.tensor(tab[:2])), "feature_ablation", target=0)
    assert fw.numpy(got[0]).dtype == np.float32 and fw.numpy(got[1]).dtype == np.float32  # the scores' dtype

    def f(i, t_):
        with fw.no_grad():
            return fw.numpy(mixed(fw.tensor(i, dtype="int64"), fw.tensor(t_)))[:, 0].astype(np.float64)

    want = np.stack([f(ids, tab[:2]) - f(np.where(np.arange(4) == i, 0, ids), tab[:2]) for i in range(4)], 1)
    np.testing.assert_allclose(np_(fw, got[0]), want, **TOL)


@pytest.mark.parametrize(
    ("method", "kw", "arg", "valid"),
    [
        ("integrated_gradients", {"baselines": (0.0, 0.0, 0.0)}, "baselines", "a tuple of 2"),
        ("integrated_gradients", {"baselines": "img"}, "baselines", "a tuple of 2"),
        ("integrated_gradients", {"baselines": (np.zeros((2, 3), np.float32), None)}, r"baselines\[0\]", r"\[3 or 1, 1, 4, 4\]"),
        ("feature_ablation", {"feature_mask": (np.zeros(IMG, int),)}, "feature_mask", "a tuple of 2"),
        ("feature_ablation", {"feature_mask": np.zeros(IMG, int)}, "feature_mask", "a tuple of 2"),
        ("feature_ablation", {"feature_mask": (np.zeros(IMG, int), np.zeros(4, int))}, r"feature_mask\[1\]", r"input 1 \[3\]"),
        ("occlusion", {"sliding_window_shapes": (1, 2, 2)}, "sliding_window_shapes", "a tuple of 2"),
        ("occlusion", {"sliding_window_shapes": ((1, 2, 2), (2,)), "strides": (1, 1, 1)}, "strides", "a tuple of 2"),
        ("occlusion", {"sliding_window_shapes": ((1, 2, 2), (4,))}, "sliding_window_shapes", r"input 1 \[3\]"),
        ("lrp", {}, "inputs", "one tensor"),
    ],
)
def test_several_inputs_bad_calls(fw, rng, method, kw, arg, valid):
    model = two_input(fw)
    img, tab = data(rng)
    kw = {
        k: tuple(fw.tensor(b) if isinstance(b, np.ndarray) else b for b in v) if k == "baselines" and isinstance(v, tuple) else v
        for k, v in kw.items()
    }
    if kw.get("baselines") == "img":
        kw["baselines"] = fw.tensor(img)
    with pytest.raises(HookkitError, match=rf"attribute\(\).*{arg}.*{valid}"):
        hookkit.attribute(model, None, (fw.tensor(img), fw.tensor(tab)), method, target=0, **kw)
    assert hooks_left(model) == []


def test_several_inputs_of_different_batches_or_ids_for_gradients(fw, rng):
    model = two_input(fw)
    img, tab = data(rng)
    with pytest.raises(HookkitError, match=r"attribute\(\): inputs.*same number of samples.*\[\[3, 1, 4, 4\], \[2, 3\]\]"):
        hookkit.attribute(model, None, (fw.tensor(img), fw.tensor(tab[:2])), target=0)
    with pytest.raises(HookkitError, match=r"attribute\(\): inputs.*floating-point"):
        hookkit.attribute(model, None, (fw.tensor(img), fw.tensor(np.ones((3, 3)), dtype="int64")), "saliency", target=0)


# -- one feature mask per sample --------------------------------------------------------------------------------
def test_per_sample_masks_by_hand(fw, rng):
    model = tanh_mlp(fw)
    x = rng.normal(size=(3, 6)).astype(np.float32)
    b = rng.normal(size=(1, 6)).astype(np.float32)
    masks = np.array([[0, 0, 1, 1, 2, 2], [2, 0, 2, 0, 1, 1], [0, 1, 1, 1, 1, 5]])  # sample 2: two features, ids 0 and 1 and 5
    f = scorer(fw, model, 1)
    ablated = np_(
        fw, hookkit.attribute(model, None, fw.tensor(x), "feature_ablation", target=1, baselines=fw.tensor(b), feature_mask=masks)
    )
    shap = np_(fw, hookkit.attribute(model, None, fw.tensor(x), "shapley", target=1, baselines=fw.tensor(b), feature_mask=masks))
    one_row = hookkit.attribute(model, None, fw.tensor(x), "shapley", target=1, baselines=fw.tensor(b), feature_mask=masks, max_memory=1)
    np.testing.assert_allclose(np_(fw, one_row), shap, **TOL)  # chunks of one sample: each takes its own mask rows
    for j in range(3):
        xj, bj = x[j : j + 1], b
        want = np.zeros(6)
        for g in _groups_of(masks[j]):
            want[g] = (f(xj) - f(np.where(g, bj, xj)))[0]
        np.testing.assert_allclose(ablated[j], want, **TOL)
        groups = _groups_of(masks[j])
        phi = exact_shapley(f, xj, bj, groups)[0]
        want = np.zeros(6)
        for i, g in enumerate(groups):
            want[g] = phi[i]
        np.testing.assert_allclose(shap[j], want, **TOL)
        np.testing.assert_allclose(phi.sum(), (f(xj) - f(bj))[0], rtol=1e-5, atol=1e-5)  # efficiency per sample


def test_per_sample_masks_of_the_random_methods_equal_each_sample_alone(fw, rng):
    """With the same ids in every sample, the batch draws the same orders / coalitions as one sample alone."""
    model = tanh_mlp(fw)
    x = rng.normal(size=(3, 6)).astype(np.float32)
    masks = np.stack([rng.permutation([0, 0, 1, 1, 2, 3]) for _ in range(3)])
    for method, n in (("shapley_sampling", 3), ("kernel_shap", 12), ("lime", 12)):
        kw = {"n_samples": n, "seed": 4}
        got = np_(fw, hookkit.attribute(model, None, fw.tensor(x), method, target=0, feature_mask=masks, **kw))
        for j in range(3):
            alone = hookkit.attribute(model, None, fw.tensor(x[j : j + 1]), method, target=0, feature_mask=masks[j], **kw)
            np.testing.assert_allclose(got[j], np_(fw, alone)[0], rtol=1e-4, atol=1e-5, err_msg=f"{method} {j}")


def test_a_mask_axis_of_size_one_is_broadcast(fw, rng):
    fw.seed(0)
    model = fw.sequential(fw.flatten(), fw.linear(8, 3), fw.nn.Tanh(), fw.linear(3, 2))
    x = fw.tensor(rng.normal(size=(2, 2, 4)))
    over_channels = np.array([[[0, 0, 1, 2]], [[1, 1, 0, 0]]])  # [N, 1, 4]: per sample, the same across channels
    got = hookkit.attribute(model, None, x, "feature_ablation", target=1, feature_mask=over_channels)
    want = hookkit.attribute(model, None, x, "feature_ablation", target=1, feature_mask=np.repeat(over_channels, 2, 1))
    np.testing.assert_allclose(np_(fw, got), np_(fw, want), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("method", "mask", "shown"),
    [
        ("feature_ablation", np.zeros((2, 6), int), r"shape \[2, 6\]"),  # 2 masks, 3 samples
        ("shapley", np.zeros((3, 5), int), r"shape \[3, 5\]"),
        ("kernel_shap", np.zeros((1, 1, 6), int), r"shape \[1, 1, 6\]"),
        ("lime", np.zeros((3, 2), int), r"shape \[3, 2\]"),
        ("shapley_sampling", np.zeros((4, 6), int), r"shape \[4, 6\]"),
    ],
)
def test_a_mask_of_the_wrong_shape_names_what_is_valid(fw, rng, method, mask, shown):
    model = tanh_mlp(fw)
    with pytest.raises(
        HookkitError, match=rf"attribute\(\): feature_mask.*\[6\], \[1, 6\] or \[3, 6\] \(one grouping per sample\).*{shown}"
    ):
        hookkit.attribute(model, None, fw.tensor(rng.normal(size=(3, 6))), method, target=0, feature_mask=mask)
    assert hooks_left(model) == []


def test_feature_permutation_needs_one_grouping_for_the_batch(fw, rng):
    model = tanh_mlp(fw)
    masks = np.array([[0, 0, 1, 1, 2, 2], [0, 1, 2, 0, 1, 2], [0, 0, 0, 1, 1, 1]])
    with pytest.raises(HookkitError, match=r"attribute\(\): feature_mask.*the same grouping for every sample.*3 different masks"):
        hookkit.attribute(model, None, fw.tensor(rng.normal(size=(3, 6))), "feature_permutation", target=0, feature_mask=masks)
    # the same mask repeated per sample is the shared one
    x = fw.tensor(rng.normal(size=(3, 6)))
    one = hookkit.attribute(model, None, x, "feature_permutation", target=0, feature_mask=masks[:1], permutation=[1, 2, 0])
    rows = hookkit.attribute(
        model, None, x, "feature_permutation", target=0, feature_mask=np.repeat(masks[:1], 3, 0), permutation=[1, 2, 0]
    )
    np.testing.assert_allclose(np_(fw, rows), np_(fw, one), rtol=0, atol=0)


# -- captum, where it is installed (the benchmark environment), in float64 ------------------------------------
def test_equal_to_captum_in_float64(rng):
    torch = pytest.importorskip("torch")
    attr = pytest.importorskip("captum.attr")
    from models import make_framework

    model = two_input(make_framework("torch")).double()
    img, tab = torch.tensor(rng.normal(size=(3, *IMG))), torch.tensor(rng.normal(size=(3, *TAB)))
    b = (torch.tensor(rng.normal(size=(1, *IMG))), torch.tensor(rng.normal(size=(1, *TAB))))
    x, t = (img, tab), [0, 2, 1]
    mask = (torch.tensor(np.arange(16).reshape(1, *IMG) // 4), torch.tensor([[0, 4, 5]]))
    perm = lambda v, m: v[[1, 2, 0]] * m + v * ~m  # noqa: E731
    # captum's Gauss-Legendre points are float32 (1e-6), it sums Shapley and occlusion in float32 (1e-5)
    cases = [
        ("integrated_gradients", {"baselines": b}, attr.IntegratedGradients(model).attribute(x, b, target=t), 1e-6),
        ("saliency", {}, attr.Saliency(model).attribute(x, target=t), 1e-9),
        ("gradient_x_activation", {}, attr.InputXGradient(model).attribute(x, target=t), 1e-9),
        ("deeplift", {"baselines": b}, attr.DeepLift(model).attribute(x, b, target=t), 1e-9),
        ("guided_backprop", {}, attr.GuidedBackprop(model).attribute(x, target=t), 1e-9),
        ("feature_ablation", {}, attr.FeatureAblation(model).attribute(x, target=t), 1e-9),
        ("feature_ablation", {"baselines": b, "feature_mask": mask}, attr.FeatureAblation(model).attribute(x, b, t, feature_mask=mask), 1e-9),
        ("feature_permutation", {"feature_mask": mask, "permutation": [1, 2, 0]}, attr.FeaturePermutation(model, perm).attribute(x, target=t, feature_mask=mask), 1e-9),
        ("shapley", {"baselines": b, "feature_mask": mask}, attr.ShapleyValues(model).attribute(x, b, t, feature_mask=mask), 1e-5),
        ("occlusion", {"baselines": b, "sliding_window_shapes": ((1, 2, 2), (2,)), "strides": ((1, 2, 1), 1)},
         attr.Occlusion(model).attribute(x, ((1, 2, 2), (2,)), strides=((1, 2, 1), 1), baselines=b, target=t), 1e-5),
    ]  # fmt: skip
    for method, kw, want, rtol in cases:
        got = hookkit.attribute(model, None, x, method, target=t, **kw)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.detach().numpy(), w.detach().numpy(), rtol=rtol, atol=1e-12, err_msg=method)
    got = hookkit.attribute(model, "conv", x, target=t, baselines=b)
    want = attr.LayerIntegratedGradients(model, model.conv).attribute(x, b, target=t)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-6, atol=1e-12)
    # one grouping per sample
    mlp = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3), torch.nn.Tanh(), torch.nn.Linear(3, 3)).double()
    per_sample = torch.tensor(rng.integers(0, 4, size=(3, *IMG)))
    over_rows = torch.tensor(rng.integers(0, 4, size=(3, 1, 1, 4)))
    for mask, method, ref, rtol in [
        (per_sample, "feature_ablation", attr.FeatureAblation(mlp), 1e-9),
        (over_rows, "feature_ablation", attr.FeatureAblation(mlp), 1e-9),
        (per_sample, "shapley", attr.ShapleyValues(mlp), 1e-5),
    ]:
        got = hookkit.attribute(mlp, None, img, method, target=t, feature_mask=mask)
        want = ref.attribute(img, target=t, feature_mask=mask)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=rtol, atol=1e-12, err_msg=method)
