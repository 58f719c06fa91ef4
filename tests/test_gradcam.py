"""Grad-CAM / Grad-CAM++ on both frameworks: known answers by construction, an independent
computation on a real CNN, nothing left behind; and the feature-map / overlay figures."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit
import hookkit.viz
from hookkit.core import router

K, H, W = 4, 8, 8


def _region_masks() -> np.ndarray:
    """Four quadrants of an 8x8 image: mask k is 1 on quadrant k."""
    m = np.zeros((K, H, W), np.float32)
    m[0, :4, :4] = m[1, :4, 4:] = m[2, 4:, :4] = m[3, 4:, 4:] = 1
    return m


def _quadrant_model(fw, pool: bool = False):
    """``regions`` outputs channel k = x * mask_k (optionally 2x2 average-pooled); class k's logit is the
    sum of channel k, so it depends only on quadrant k of the image."""
    masks = fw.tensor(_region_masks()[None])

    class Regions(fw.Layer):
        def forward(self, x):
            a = x * masks
            return fw.F.avg_pool2d(a, 2) if pool else a

    class Net(fw.Layer):
        def __init__(self):
            super().__init__()
            self.regions = Regions()
            self.head = fw.flatten()

        def forward(self, x):
            a = self.regions(x)
            return a.sum((2, 3)) if fw.name == "torch" else a.sum(axis=[2, 3])

    return Net()


def _minmax(a: np.ndarray) -> np.ndarray:
    a = a - a.min()
    return a / (1e-7 + a.max())


def _positive_images(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.5, 1.5, size=(n, 1, H, W)).astype(np.float32)


@pytest.mark.parametrize("method", [hookkit.gradcam, hookkit.gradcam_plus_plus])
def test_heatmap_lands_on_the_region_of_the_target_class(fw, method):
    model = _quadrant_model(fw)
    x = _positive_images(4)
    targets = [0, 1, 2, 3]
    cams = method(model, "regions", fw.tensor(x), target=targets)
    assert cams.shape == (4, H, W) and cams.dtype == np.float32
    masks = _region_masks()
    for i, k in enumerate(targets):
        # the class-k logit is linear in channel k only: the map is that channel, scaled to [0, 1]
        np.testing.assert_allclose(cams[i], _minmax(x[i, 0] * masks[k]), atol=1e-6)
        assert cams[i][masks[k] == 0].max() == 0
        peak = np.unravel_index(cams[i].argmax(), cams[i].shape)
        assert masks[k][peak] == 1


def test_default_target_is_the_predicted_class(fw):
    model = _quadrant_model(fw)
    x = np.full((4, 1, H, W), 0.5, np.float32)
    brightest = [2, 0, 3, 1]
    masks = _region_masks()
    for i, k in enumerate(brightest):
        x[i, 0] += masks[k]  # quadrant k is brightest, so class k wins
    cams = hookkit.gradcam(model, "regions", fw.tensor(x))
    for i, k in enumerate(brightest):
        assert cams[i][masks[k] == 1].min() > 0.99 and cams[i][masks[k] == 0].max() == 0
    # a callable target: the sum of class 3's logits
    cams3 = hookkit.gradcam(model, "regions", fw.tensor(x), target=lambda out: out[:, 3])
    assert all(masks[3][np.unravel_index(c.argmax(), c.shape)] == 1 for c in cams3)


def test_upsampling_is_bilinear_with_half_pixel_centers(fw):
    """The layer's 4x4 map is upsampled to 8x8 like OpenCV's INTER_LINEAR / interpolate(align_corners=False)."""
    model = _quadrant_model(fw, pool=True)
    x = _positive_images(2, seed=1)
    cams = hookkit.gradcam(model, "regions", fw.tensor(x), target=[1, 2])
    masks = _region_masks()
    for i, k in enumerate([1, 2]):
        small = _minmax((x[i, 0] * masks[k]).reshape(4, 2, 4, 2).mean(axis=(1, 3)))
        t = fw.tensor(small[None, None])
        if fw.name == "torch":
            up = fw.F.interpolate(t, size=(H, W), mode="bilinear", align_corners=False)
        else:
            up = fw.F.interpolate(t, size=(H, W), mode="bilinear", align_corners=False, align_mode=0)
        np.testing.assert_allclose(cams[i], _minmax(fw.numpy(up)[0, 0]), atol=1e-6)


def _reference_gradcam(fw, model, x, target):
    """Grad-CAM computed by hand: run the small CNN's layers one by one, take d logit / d conv2 output."""
    be = fw.lib
    xt = fw.tensor(x)
    a = model.conv2(model.pool1(model.relu1(model.bn1(model.conv1(xt)))))
    if fw.name == "torch":
        a = a.detach().requires_grad_(True)
    else:
        a = a.detach()
        a.stop_gradient = False
    logits = model.fc(model.flatten(model.pool2(model.relu2(a))))
    score = sum(logits[i, t] for i, t in enumerate(target))
    (g,) = be.autograd.grad(score, a) if fw.name == "torch" else be.grad([score], [a])
    acts, grads = fw.numpy(a), fw.numpy(g)
    cam = np.maximum((grads.mean(axis=(2, 3))[:, :, None, None] * acts).sum(axis=1), 0)
    small = np.stack([_minmax(c) for c in cam])
    t = fw.tensor(small[:, None])
    kw = {} if fw.name == "torch" else {"align_mode": 0}
    up = fw.numpy(fw.F.interpolate(t, size=x.shape[-2:], mode="bilinear", align_corners=False, **kw))[:, 0]
    return np.stack([_minmax(np.maximum(c, 0)) for c in up])


def test_matches_an_independent_computation_and_leaves_no_trace(fw):
    model = fw.small_cnn(width=8)
    x = np.random.default_rng(3).standard_normal((3, 1, 8, 8)).astype(np.float32)
    # parameter gradients from an earlier step must survive untouched
    loss = model(fw.tensor(x)).sum()
    loss.backward()
    before = [fw.grad(p) for p in model.parameters()]  # paddle's BN statistics have none
    model.train()
    model.bn1.eval()  # a mixed mode must come back as it was
    target = [1, 5, 9]
    cams = hookkit.gradcam(model, "conv2", fw.tensor(x), target=target)
    assert model.training and not model.bn1.training and model.conv1.training
    model.eval()
    np.testing.assert_allclose(cams, _reference_gradcam(fw, model, x, target), atol=1e-5)
    for p, b in zip(model.parameters(), before):
        after = fw.grad(p)
        assert (after is None) == (b is None)
        if b is not None:
            np.testing.assert_array_equal(after, b)
    for name in ("", "conv2", "conv1"):
        layer = model if name == "" else getattr(model, name)
        assert router.attached(layer) == {e: 0 for e in router.EVENTS}
    assert hookkit.remove_all(model) == 0


def test_errors_name_the_layer(fw):
    model = fw.small_cnn()
    x = fw.randn(2, 1, 8, 8)
    with pytest.raises(hookkit.LayerNotFound, match="conv9"):
        hookkit.gradcam(model, "conv9", x)
    with pytest.raises(ValueError, match="exactly one layer.*conv\\*"):
        hookkit.gradcam(model, "conv*", x)
    with pytest.raises(ValueError, match="'fc'.*\\[N, C, h, w\\]"):
        hookkit.gradcam(model, "fc", x)
    with pytest.raises(ValueError, match=r"target must be a list of 2 entries, one per sample .*; got \[1, 2, 3\]"):
        hookkit.gradcam(model, "conv2", x, target=[1, 2, 3])
    assert hookkit.remove_all(model) == 0


# -- figures -----------------------------------------------------------------------------------------
def test_feature_maps_grid(fw):
    model = fw.small_cnn(width=8)
    with hookkit.capture(model, ["conv1", "conv2"]) as cap:
        model(fw.randn(2, 1, 8, 8))
    fig = hookkit.viz.feature_maps(cap, "conv2", sample=1, max_channels=12, ncols=5)
    grid = fig.axes[0]
    assert [t.get_text() for t in grid.texts] == [f"ch {i}" for i in range(12)]
    assert "16 channels" in fig._suptitle.get_text() and "first 12 shown" in fig._suptitle.get_text()
    assert len(fig.axes) == 2  # the grid and its colorbar
    # every tile is one channel of sample 1, each stretched to [0, 1]; the gaps are empty (NaN)
    tiles = np.asarray(grid.images[0].get_array().filled(np.nan), dtype=np.float64)
    chans = fw.numpy(cap["conv2"])[1, :12].reshape(12, -1).astype(np.float64)
    expected = (chans - chans.min(1, keepdims=True)) / (chans.max(1, keepdims=True) - chans.min(1, keepdims=True) + 1e-12)
    np.testing.assert_allclose(np.sort(tiles[~np.isnan(tiles)]), np.sort(expected.ravel()), atol=1e-6)
    h, w = fw.numpy(cap["conv2"]).shape[-2:]
    assert tiles.shape[1] >= 5 * w and tiles.shape[0] >= 3 * h  # 5 columns, 3 rows
    shared = hookkit.viz.feature_maps(fw.numpy(cap["conv1"]), scale="shared", colorbar=False)
    first = fw.numpy(cap["conv1"])[0]
    assert len(shared.axes) == 1 and shared.axes[0].images[0].get_clim() == pytest.approx((first.min(), first.max()))
    with pytest.raises(
        ValueError, match=r"feature_maps\(\): layer must be one of the captured layers conv1, conv2 \(the capture holds 2\); got None"
    ):
        hookkit.viz.feature_maps(cap)
    with pytest.raises(ValueError, match=r"feature_maps\(\): scale must be one of 'channel', 'shared'; got 'global'"):
        hookkit.viz.feature_maps(cap, "conv1", scale="global")
    import matplotlib.pyplot as plt

    plt.close("all")


def test_gradcam_overlay_titles(fw):
    x = _positive_images(3)
    cams = hookkit.gradcam(_quadrant_model(fw), "regions", fw.tensor(x), target=[0, 1, 2])
    fig = hookkit.viz.gradcam_overlay(x, cams, predicted=[0, 1, 3], labels=[0, 1, 2])
    titles = [ax.get_title() for ax in fig.axes[:3]]
    assert titles == ["pred 0 / true 0", "pred 1 / true 1", "pred 3 / true 2"]
    assert fig.axes[2].title.get_color() == "crimson"
    with pytest.raises(
        ValueError, match=r"gradcam_overlay\(\): cams must be one heatmap per image \(3\); got numpy ndarray of shape \[2, "
    ):
        hookkit.viz.gradcam_overlay(x, cams[:2])
    import matplotlib.pyplot as plt

    plt.close("all")


def test_feature_maps_by_layer_one_sample_across_layers(fw):
    """One figure: the input, then a channel grid per layer, for the sample asked (its own maps, not sample 0's)."""
    import matplotlib.pyplot as plt

    model = fw.small_cnn()
    x = fw.randn(3, 1, 8, 8)
    with hookkit.capture(model, ["conv1", "conv2"]) as cap:
        model(x)
    fig = hookkit.viz.feature_maps_by_layer(cap, ["conv1", "conv2"], sample=2, image=fw.numpy(x)[2, 0], ncols=(4, 8), title="sample 2")
    subs = fig.subfigs
    assert len(subs) == 3 and fig._suptitle.get_text() == "sample 2"
    np.testing.assert_array_equal(subs[0].axes[0].get_images()[0].get_array(), fw.numpy(x)[2, 0])
    assert [s._suptitle.get_text() for s in subs[1:]] == ["conv1: 8 channels", "conv2: 16 channels"]
    tiles = np.asarray(subs[2].axes[0].get_images()[0].get_array())
    first = fw.numpy(cap["conv2"])[2, 0]  # channel 0 of sample 2, stretched to [0, 1]
    stretched = (first - first.min()) / (first.max() - first.min() + 1e-12)
    rows = range(tiles.shape[0] - first.shape[0] + 1)
    assert any(np.allclose(tiles[r : r + first.shape[0], : first.shape[1]], stretched, atol=1e-6) for r in rows)
    other = fw.numpy(cap["conv2"])[0, 0]
    other = (other - other.min()) / (other.max() - other.min() + 1e-12)
    assert not any(np.allclose(tiles[r : r + first.shape[0], : first.shape[1]], other, atol=1e-6) for r in rows)
    assert len(subs[1].axes) == 1 and len(subs[2].axes) == 2  # one colorbar, on the last grid
    with pytest.raises(ValueError, match=r"feature_maps_by_layer\(\): ncols must be an int, or one per layer \(2\); got \[4\]"):
        hookkit.viz.feature_maps_by_layer(cap, ["conv1", "conv2"], ncols=[4])
    plt.close("all")
