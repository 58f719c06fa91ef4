"""hookkit.cam and hookkit.cam_metric on both frameworks: every method against a hand computation (numpy,
the paper's arithmetic) on a tiny CNN; every layout (channels-last, ViT tokens, 1-D, 3-D, reshape=);
targets; smoothing; several layers; metrics; the out= stream; Paddle = torch with the same weights;
bad input; nothing left behind."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit
from hookkit.analyses.cam.layouts import token_grid
from hookkit.analyses.cam.metrics import impute
from hookkit.core import router
from tolerance import MAP_OPS, assert_close, tolerance

METHODS = ["gradcam", "hirescam", "gradcam++", "xgradcam", "gradcam-elementwise", "layercam", "eigencam", "eigengradcam",
           "scorecam", "ablationcam", "fullgrad"]  # fmt: skip
TOL = tolerance("float32", MAP_OPS)  # a map against the numpy reference, both in [0, 1]


# -- numpy references -------------------------------------------------------------------------------
def interp_axis(a: np.ndarray, axis: int, n_out: int, aligned: bool = False) -> np.ndarray:
    """1-D linear interpolation along ``axis``: half-pixel centres, edges clamped (or corners aligned)."""
    n_in = a.shape[axis]
    if aligned:
        src = np.linspace(0, n_in - 1, n_out) if n_out > 1 else np.zeros(1)
    else:
        src = np.clip((np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5, 0, n_in - 1)
    lo = np.floor(src).astype(int)
    hi = np.minimum(lo + 1, n_in - 1)
    f = (src - lo).reshape([-1 if i == axis else 1 for i in range(a.ndim)])
    return np.take(a, lo, axis=axis) * (1 - f) + np.take(a, hi, axis=axis) * f


def resize(a: np.ndarray, size: tuple[int, ...], aligned: bool = False) -> np.ndarray:
    """``[..., *S]`` -> ``[..., *size]``, separable (bi/tri)linear."""
    k = len(size)
    for i, n in enumerate(size):
        a = interp_axis(a, a.ndim - k + i, n, aligned)
    return a


def minmax(a: np.ndarray) -> np.ndarray:
    axes = tuple(range(1, a.ndim))
    a = a - a.min(axis=axes, keepdims=True)
    return a / (1e-7 + a.max(axis=axes, keepdims=True))


def project(w: np.ndarray) -> np.ndarray:
    out = []
    for a in w.astype(np.float64):
        r = a.reshape(a.shape[0], -1).T
        r = r - r.mean(0)
        p = r @ np.linalg.svd(r, full_matrices=False)[2][0]
        out.append((-p if abs(p.min()) > abs(p.max()) else p).reshape(a.shape[1:]))
    return np.float32(out)


def finish(cam: np.ndarray, size: tuple[int, ...]) -> np.ndarray:
    return minmax(np.maximum(resize(minmax(np.maximum(cam, 0)), size), 0))


# -- tiny models ------------------------------------------------------------------------------------
def nn_layer(fw, kind: str, *args, **kw):
    name = {"Conv1d": "Conv1D", "Conv2d": "Conv2D", "Conv3d": "Conv3D", "BatchNorm2d": "BatchNorm2D"}.get(kind, kind)
    return getattr(fw.nn, kind if fw.name == "torch" else name)(*args, **kw)


def spatial_mean(a):
    return a.flatten(2).mean(-1)


def tiny_cnn(fw):
    class TinyCNN(fw.Layer):
        def __init__(self):
            super().__init__()
            self.conv1 = fw.conv2d(2, 4, 3, padding=1)
            self.bn = nn_layer(fw, "BatchNorm2d", 4)
            self.conv2 = fw.conv2d(4, 6, 3, stride=2, padding=1)
            self.fc = fw.linear(6, 3)
            self.fail = False

        def trunk(self, x):
            return self.conv2(fw.F.relu(self.bn(self.conv1(x))))

        def head(self, a):
            if self.fail:
                raise RuntimeError("the head failed")
            return self.fc(spatial_mean(fw.F.relu(a)))

        def forward(self, x):
            return self.head(self.trunk(x))

    fw.seed(1)
    model = TinyCNN()
    model.eval()
    return model


def grad_of(fw, out, inp):
    if fw.name == "torch":
        return fw.lib.autograd.grad(out, inp)[0]
    return fw.lib.grad([out], [inp])[0]


def leaf(fw, t):
    t = t.detach()
    if fw.name == "torch":
        return t.requires_grad_(True)
    t.stop_gradient = False
    return t


def reference(fw, model, method: str, x: np.ndarray, classes: list[int], eigen: bool = False) -> np.ndarray:
    """The method's map by hand: the tiny CNN run in two halves, the gradient at ``conv2`` by autograd,
    the paper's arithmetic in numpy."""
    xt = fw.tensor(x)
    n, size = len(x), x.shape[2:]
    if method == "fullgrad":
        return fullgrad_reference(fw, model, x, classes)
    a_t = leaf(fw, model.trunk(xt))
    logits = model.head(a_t)
    g = fw.numpy(grad_of(fw, sum(logits[i, c] for i, c in enumerate(classes)), a_t))
    a = fw.numpy(a_t)
    sp = (2, 3)
    if method == "gradcam":
        w = g.mean(sp)
    elif method == "gradcam++":
        aij = g**2 / (2 * g**2 + a.sum(sp, keepdims=True) * g**3 + 1e-6)
        w = (np.maximum(g, 0) * np.where(g != 0, aij, 0)).sum(sp)
    elif method == "xgradcam":
        w = (g * a / (a.sum(sp, keepdims=True) + 1e-7)).sum(sp)
    elif method == "scorecam":
        up = resize(a, size, aligned=True)
        lo, hi = up.min(sp, keepdims=True), up.max(sp, keepdims=True)
        up = (up - lo) / (hi - lo + 1e-8)
        scores = np.zeros((n, a.shape[1]), np.float32)
        for i in range(n):
            masked = x[i][None] * up[i][:, None]  # [C, Cin, H, W]
            scores[i] = fw.numpy(model(fw.tensor(masked)))[:, classes[i]]
        e = np.exp(scores - scores.max(1, keepdims=True))
        w = e / e.sum(1, keepdims=True)
    elif method == "ablationcam":
        base = fw.numpy(model.head(fw.tensor(a)))[np.arange(n), classes]
        w = np.zeros((n, a.shape[1]), np.float32)
        for i in range(n):
            value = 0.0 if a[i].min() == 0 else a[i].min() - 1e7
            for c in range(a.shape[1]):
                ab = a[i].copy()
                ab[c] = value
                w[i, c] = (base[i] - fw.numpy(model.head(fw.tensor(ab[None])))[0, classes[i]]) / base[i]
    if method in ("gradcam", "gradcam++", "xgradcam", "scorecam", "ablationcam"):
        weighted = w[:, :, None, None] * a
    elif method == "hirescam":
        weighted = g * a
    elif method == "gradcam-elementwise":
        weighted = np.maximum(g * a, 0)
    elif method == "layercam":
        weighted = np.maximum(g, 0) * a
    if method == "eigencam":
        cam = project(a)
    elif method == "eigengradcam":
        cam = project(g * a)
    else:
        cam = project(weighted) if eigen else weighted.sum(1)
    return finish(cam, size)


def fullgrad_reference(fw, model, x, classes):
    """|input x its gradient| + sum over conv1 / bn / conv2 of |bias x output gradient|, each channel scaled."""
    xt = leaf(fw, fw.tensor(x))
    o1 = model.conv1(xt)
    o2 = model.bn(o1)
    o3 = model.conv2(fw.F.relu(o2))
    logits = model.head(o3)
    score = sum(logits[i, c] for i, c in enumerate(classes))
    tensors = [xt, o1, o2, o3]
    grads = fw.lib.autograd.grad(score, tensors) if fw.name == "torch" else fw.lib.grad([score], tensors)
    grads = [fw.numpy(g) for g in grads]
    bn = model.bn
    if fw.name == "torch":
        bn_bias = (bn.bias - bn.running_mean * bn.weight / (bn.running_var + bn.eps).sqrt()).detach().numpy()
    else:
        bn_bias = fw.numpy(bn.bias - bn._mean * bn.weight / (bn._variance + bn._epsilon).sqrt())
    biases = [fw.numpy(model.conv1.bias), bn_bias, fw.numpy(model.conv2.bias)]
    size = x.shape[2:]

    def per_channel(t):
        n, c = t.shape[:2]
        return resize(minmax(t.reshape(n * c, *t.shape[2:])).reshape(t.shape), size)

    total = per_channel(np.abs(grads[0] * x)).sum(1)
    for b, g in zip(biases, grads[1:]):
        total += per_channel(np.abs(b[None, :, None, None] * g)).sum(1)
    return minmax(total)


def images(n=3, seed=0, c=2, size=(8, 8)):
    return np.random.default_rng(seed).standard_normal((n, c, *size)).astype(np.float32)


def randomize_bn(fw, model):
    rng = np.random.default_rng(7)
    bn = model.bn
    if fw.name == "torch":
        import torch

        with torch.no_grad():
            bn.running_mean.copy_(torch.tensor(rng.uniform(-0.5, 0.5, 4), dtype=torch.float32))
            bn.running_var.copy_(torch.tensor(rng.uniform(0.5, 2, 4), dtype=torch.float32))
            bn.bias.copy_(torch.tensor(rng.uniform(-0.3, 0.3, 4), dtype=torch.float32))
    else:
        bn._mean.set_value(rng.uniform(-0.5, 0.5, 4).astype(np.float32))
        bn._variance.set_value(rng.uniform(0.5, 2, 4).astype(np.float32))
        bn.bias.set_value(rng.uniform(-0.3, 0.3, 4).astype(np.float32))
    return model


# -- every method against the hand computation --------------------------------------------------------
@pytest.mark.parametrize("method", METHODS)
def test_every_method_matches_a_hand_computation(fw, method):
    model = randomize_bn(fw, tiny_cnn(fw))
    x = images()
    classes = [2, 0, 1]
    maps = hookkit.cam(model, "conv2", fw.tensor(x), method, target=classes, batch_size=4)
    assert maps.shape == (3, 8, 8) and maps.dtype == np.float32
    assert maps.min() >= 0 and maps.max() <= 1
    np.testing.assert_allclose(maps, reference(fw, model, method, x, classes), atol=TOL)


@pytest.mark.parametrize("method", ["gradcam", "layercam", "scorecam"])
def test_eigen_smooth_projects_the_weighted_activations(fw, method):
    model = tiny_cnn(fw)
    x = images(seed=1)
    maps = hookkit.cam(model, "conv2", fw.tensor(x), method, target=[0, 1, 2], eigen_smooth=True)
    np.testing.assert_allclose(maps, reference(fw, model, method, x, [0, 1, 2], eigen=True), atol=TOL)


def test_aug_smooth_is_the_mean_over_flips_and_intensities(fw):
    model = tiny_cnn(fw)
    x = images(seed=2)
    smooth = hookkit.cam(model, "conv2", fw.tensor(x), target=1, aug_smooth=True)
    parts = []
    for flip in (False, True):
        for factor in (0.9, 1.0, 1.1):
            xa = (x[..., ::-1] if flip else x) * np.float32(factor)
            m = hookkit.cam(model, "conv2", fw.tensor(np.ascontiguousarray(xa)), target=1)
            parts.append(m[..., ::-1] if flip else m)
    assert_close(smooth, np.mean(parts, 0), dtype="float32", n_ops=MAP_OPS)


def test_several_layers_are_averaged_and_rescaled(fw):
    model = randomize_bn(fw, tiny_cnn(fw))
    x = fw.tensor(images(seed=3))
    # two layers at the input's size (no resizing): each layer's map is its single-layer map
    one = [hookkit.cam(model, name, x, "layercam", target=0) for name in ("conv1", "bn")]
    both = hookkit.cam(model, ["conv1", "bn"], x, "layercam", target=0)
    np.testing.assert_allclose(both, minmax(np.mean(one, 0)), atol=1e-5)
    assert not np.allclose(both, one[0], atol=1e-3) and not np.allclose(both, one[1], atol=1e-3)
    np.testing.assert_array_equal(
        hookkit.cam(model, "conv*", x, "layercam", target=0), hookkit.cam(model, ["conv1", "conv2"], x, "layercam", target=0)
    )


def test_as_tensor_stays_a_framework_tensor(fw):
    model = tiny_cnn(fw)
    x = fw.tensor(images())
    t = hookkit.cam(model, "conv2", x, as_tensor=True)
    assert type(t).__module__.split(".")[0] == fw.name
    np.testing.assert_array_equal(fw.numpy(t), hookkit.cam(model, "conv2", x))


# -- layouts ----------------------------------------------------------------------------------------
def permute_layer(fw, perm):
    class Permute(fw.Layer):
        def forward(self, x):
            return x.permute(*perm) if fw.name == "torch" else x.transpose(list(perm))

    return Permute()


def nhwc_model(fw):
    class NHWC(fw.Layer):
        def __init__(self):
            super().__init__()
            self.conv = fw.conv2d(2, 6, 3, stride=2, padding=1)
            self.to_nhwc = permute_layer(fw, (0, 2, 3, 1))
            self.norm = fw.nn.LayerNorm(6)
            self.fc = fw.linear(6, 3)

        def forward(self, x):
            h = self.norm(self.to_nhwc(self.conv(x)))  # [N, 4, 4, 6], channels last
            return self.fc(h.mean(1).mean(1))

    fw.seed(2)
    return NHWC()


@pytest.mark.parametrize("method", ["gradcam", "hirescam", "eigencam", "scorecam", "ablationcam"])
def test_channels_last_is_read_as_channels(fw, method):
    model = nhwc_model(fw)
    x = fw.tensor(images())
    # the permutation only relabels axes: the channels-last layer gives the conv's maps
    np.testing.assert_allclose(
        hookkit.cam(model, "to_nhwc", x, method, target=[0, 1, 2]), hookkit.cam(model, "conv", x, method, target=[0, 1, 2]), atol=1e-5
    )
    explicit = hookkit.cam(
        model, "norm", x, method, target=1, reshape=lambda t: t.permute(0, 3, 1, 2) if fw.name == "torch" else t.transpose([0, 3, 1, 2])
    )
    assert_close(hookkit.cam(model, "norm", x, method, target=1), explicit, dtype="float32", n_ops=MAP_OPS)
    assert_close(hookkit.cam(model, "norm", x, method, target=1, reshape="channels_last"), explicit, dtype="float32", n_ops=MAP_OPS)


def token_model(fw, prefix: int):
    """Patch embedding (2 x 2 patches of an 8 x 8 image: a 4 x 4 grid), ``prefix`` class / register tokens
    in front, a token-wise layer ``mix``, a head on the mean token."""

    class Tokens(fw.Layer):
        def __init__(self):
            super().__init__()
            self.embed = fw.conv2d(2, 8, 2, stride=2)
            self.mix = fw.linear(8, 8)
            self.fc = fw.linear(8, 3)
            self.prefix = fw.tensor(np.random.default_rng(3).standard_normal((1, prefix, 8)))

        def forward(self, x):
            t = self.embed(x).flatten(2)
            t = t.transpose(1, 2) if fw.name == "torch" else t.transpose([0, 2, 1])
            n = t.shape[0]
            cls = self.prefix.expand(n, -1, -1) if fw.name == "torch" else self.prefix.expand([n, prefix, 8])
            t = fw.lib.cat([cls, t], 1) if fw.name == "torch" else fw.lib.concat([cls, t], 1)
            return self.fc(fw.F.gelu(self.mix(t)).mean(1))

    fw.seed(3)
    return Tokens()


@pytest.mark.parametrize("prefix", [1, 3])
def test_vit_tokens_drop_the_prefix_and_find_the_grid(fw, prefix):
    model = token_model(fw, prefix)
    x = fw.tensor(images())

    def by_hand(t):
        g = t[:, prefix:, :].reshape([t.shape[0], 4, 4, 8])
        return g.permute(0, 3, 1, 2) if fw.name == "torch" else g.transpose([0, 3, 1, 2])

    for method in ("gradcam", "gradcam++", "ablationcam"):
        auto = hookkit.cam(model, "mix", x, method, target=[0, 2, 1])
        # the same maps by other slicing and reduction paths: float32 rounding of a forward, a backward,
        # a 16-token mean and an 8-channel sum, scaled to [0, 1] (64 roundings is an upper estimate)
        assert_close(auto, hookkit.cam(model, "mix", x, method, target=[0, 2, 1], reshape=by_hand), dtype="float32", n_ops=MAP_OPS)
        assert_close(auto, hookkit.cam(model, "mix", x, method, target=[0, 2, 1], prefix_tokens=prefix), dtype="float32", n_ops=MAP_OPS)
    with pytest.raises(ValueError, match="mix.*prefix_tokens=2.*reshape="):
        hookkit.cam(model, "mix", x, prefix_tokens=2)


def test_token_grid_inference():
    assert token_grid(197, (224, 224)) == (1, (14, 14))  # ViT-B/16: class token
    assert token_grid(261, (224, 224)) == (5, (16, 16))  # DINOv2 with 4 registers
    assert token_grid(49, (224, 224)) == (0, (7, 7))  # Swin tokens, no prefix
    assert token_grid(9, (32, 64)) == (1, (2, 4))  # a wide image
    assert token_grid(13, (32, 32), prefix=0) is None


def conv_nd_model(fw, dims: int):
    kind = f"Conv{dims}d"

    class ConvNd(fw.Layer):
        def __init__(self):
            super().__init__()
            self.conv1 = nn_layer(fw, kind, 2, 4, 3, padding=1)
            self.conv2 = nn_layer(fw, kind, 4, 5, 3, stride=2, padding=1)
            self.fc = fw.linear(5, 3)

        def trunk(self, x):
            return self.conv2(fw.F.relu(self.conv1(x)))

        def forward(self, x):
            return self.fc(spatial_mean(fw.F.relu(self.trunk(x))))

    fw.seed(4)
    return ConvNd()


@pytest.mark.parametrize("dims,size", [(1, (16,)), (3, (4, 6, 6))])
def test_1d_and_3d_maps_at_the_input_size(fw, dims, size):
    model = conv_nd_model(fw, dims)
    x = images(n=2, size=size)
    maps = hookkit.cam(model, "conv2", fw.tensor(x), "gradcam", target=[1, 2])
    assert maps.shape == (2, *size)
    a = leaf(fw, model.trunk(fw.tensor(x)))
    logits = model.fc(spatial_mean(fw.F.relu(a)))
    g = fw.numpy(grad_of(fw, logits[0, 1] + logits[1, 2], a))
    axes = tuple(range(2, 2 + dims))
    cam = (g.mean(axes, keepdims=True) * fw.numpy(a)).sum(1)
    np.testing.assert_allclose(maps, finish(cam, size), atol=TOL)
    for method in ("scorecam", "eigencam", "fullgrad"):
        m = hookkit.cam(model, "conv2", fw.tensor(x), method, target=[1, 2])
        assert m.shape == (2, *size) and np.isfinite(m).all() and m.max() > 0.99


# -- targets ----------------------------------------------------------------------------------------
def dict_model(fw):
    inner = tiny_cnn(fw)

    class DictOut(fw.Layer):
        def __init__(self):
            super().__init__()
            self.net = inner

        def forward(self, x):
            logits = self.net(x)
            return {"logits": logits, "aux": logits * 2}

    return DictOut()


@pytest.mark.parametrize("method", ["gradcam", "scorecam", "ablationcam"])
def test_targets_int_per_sample_callable_and_predicted(fw, method):
    model = dict_model(fw)
    x = fw.tensor(images(n=4))
    by_int = hookkit.cam(model, "net.conv2", x, method, target=2)
    # 1e-6: a later call batches AblationCAM's rows differently (it starts where the first found them multiply)
    assert_close(hookkit.cam(model, "net.conv2", x, method, target=[2, 2, 2, 2]), by_int, dtype="float32", n_ops=MAP_OPS)
    # a callable gets the whole output (a dict here) and returns one score per sample
    assert_close(hookkit.cam(model, "net.conv2", x, method, target=lambda out: out["logits"][:, 2]), by_int, dtype="float32", n_ops=MAP_OPS)
    predicted = fw.numpy(model(x)["logits"]).argmax(1).tolist()
    assert_close(
        hookkit.cam(model, "net.conv2", x, method),
        hookkit.cam(model, "net.conv2", x, method, target=predicted),
        dtype="float32",
        n_ops=MAP_OPS,
    )


def test_segmentation_style_target_on_a_masked_region(fw):
    """Regression / segmentation: a callable scoring class 1's logit times a per-sample weight."""
    model = tiny_cnn(fw)
    x = fw.tensor(images())
    weights = fw.tensor(np.array([1.0, 2.0, 3.0], np.float32))
    maps = hookkit.cam(model, "conv2", x, "scorecam", target=lambda out: out[:, 1] * weights)
    assert maps.shape == (3, 8, 8) and np.isfinite(maps).all()


# -- no_grad, nothing left behind ---------------------------------------------------------------------
def test_works_under_no_grad(fw):
    model = tiny_cnn(fw)
    x = fw.tensor(images())
    expected = hookkit.cam(model, "conv2", x, "gradcam++", target=1)
    with fw.no_grad():
        np.testing.assert_array_equal(hookkit.cam(model, "conv2", x, "gradcam++", target=1), expected)
        np.testing.assert_array_equal(hookkit.gradcam(model, "conv2", x, target=1), hookkit.cam(model, "conv2", x, target=1))
        assert hookkit.cam(model, "conv2", x, "fullgrad").shape == (3, 8, 8)


@pytest.mark.parametrize("method", ["gradcam", "scorecam", "ablationcam", "fullgrad"])
def test_nothing_left_behind_when_the_forward_raises(fw, method):
    model = tiny_cnn(fw)
    model.train()
    model.bn.eval()
    model.fail = True
    with pytest.raises(RuntimeError, match="the head failed"):
        hookkit.cam(model, "conv2", fw.tensor(images()), method)
    assert model.training and not model.bn.training and model.conv1.training
    assert all(p.grad is None for p in model.parameters())
    for layer in (model, model.conv1, model.bn, model.conv2, model.fc):
        assert router.attached(layer) == {e: 0 for e in router.EVENTS}
    assert hookkit.remove_all(model) == 0
    # ... and after a successful call: training flags and .grad as they were
    model.fail = False
    hookkit.cam(model, "conv2", fw.tensor(images()), method)
    assert model.training and not model.bn.training and all(p.grad is None for p in model.parameters())
    assert hookkit.remove_all(model) == 0


def test_eval_false_keeps_the_mode(fw):
    model = tiny_cnn(fw)
    model.train()
    x = fw.tensor(images(n=4))
    kept = hookkit.cam(model, "conv2", x, target=0, eval=False)  # batch statistics
    assert model.training
    assert not np.allclose(kept, hookkit.cam(model, "conv2", x, target=0))


# -- bad input ----------------------------------------------------------------------------------------
def test_bad_input_names_the_argument(fw):
    model = tiny_cnn(fw)
    x = fw.tensor(images())
    with pytest.raises(ValueError, match=r"cam\(\): layer 'fc' outputs \[3, 3\].*reshape="):
        hookkit.cam(model, "fc", x)
    with pytest.raises(ValueError, match=r"target must be a class index in \[0, 2\]"):
        hookkit.cam(model, "conv2", x, target=5)
    with pytest.raises(ValueError, match=r"target must be a class index in \[0, 2\]"):
        hookkit.cam(model, "conv2", x, "scorecam", target=[0, 1, 9])
    with pytest.raises(TypeError, match=r"inputs must be floating-point"):
        hookkit.cam(model, "conv2", fw.tensor(images() * 10, dtype="int64"))
    with pytest.raises(ValueError, match=r"reshape must return \[N, C, h, w\].*'conv2'.*\[3, 6, 16\]"):
        hookkit.cam(model, "conv2", x, reshape=lambda t: t.flatten(2))
    with pytest.raises(ValueError, match=r"method must be one of 'gradcam'.*got 'gradcam\+'"):
        hookkit.cam(model, "conv2", x, "gradcam+")
    with pytest.raises(ValueError, match=r"batch_size must be"):
        hookkit.cam(model, "conv2", x, "scorecam", batch_size=0)
    with pytest.raises(ValueError, match=r"reshape must be None, a callable"):
        hookkit.cam(model, "conv2", x, reshape="nhwc")
    with pytest.raises(ValueError, match=r"target must be a callable returning one score per sample \(\[3\]\)"):
        hookkit.cam(model, "conv2", x, "scorecam", target=lambda out: out[:, 0].sum())
    with pytest.raises(ValueError, match=r"inputs must be inputs \[N, C, \*spatial\]"):
        hookkit.cam(model, "conv2", fw.tensor(np.zeros((3, 8), np.float32)))
    assert hookkit.remove_all(model) == 0


# -- metrics ------------------------------------------------------------------------------------------
def test_imputation_solves_roads_linear_system():
    rng = np.random.default_rng(0)
    img = rng.standard_normal((1, 2, 6, 7)).astype(np.float32)
    keep = (rng.random((1, 6, 7)) > 0.6).astype(np.float32)
    filled = impute(img, keep, noise=0.0, rng=rng)
    # by hand: every removed pixel is the weighted mean of its in-image neighbours (a dense solve)
    H, W = 6, 7
    miss = [(y, x) for y in range(H) for x in range(W) if keep[0, y, x] == 0]
    idx = {p: k for k, p in enumerate(miss)}
    A = np.zeros((len(miss), len(miss)))
    b = np.zeros((len(miss), 2))
    for k, (y, x) in enumerate(miss):
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                yy, xx = y + dy, x + dx
                if (dy, dx) == (0, 0) or not (0 <= yy < H and 0 <= xx < W):
                    continue
                w = 1 / 12 if dy and dx else 1 / 6
                A[k, k] += w
                if keep[0, yy, xx]:
                    b[k] += w * img[0, :, yy, xx]
                else:
                    A[k, idx[yy, xx]] -= w
    sol = np.linalg.solve(A, b)
    for k, (y, x) in enumerate(miss):
        np.testing.assert_allclose(filled[0, :, y, x], sol[k], atol=1e-5)
    kept = keep[0] == 1
    np.testing.assert_array_equal(filled[0][:, kept], img[0][:, kept])
    noisy1 = impute(img, keep, 0.5, np.random.default_rng(3))
    assert np.array_equal(noisy1, impute(img, keep, 0.5, np.random.default_rng(3)))
    assert not np.array_equal(noisy1, impute(img, keep, 0.5, np.random.default_rng(4)))


def test_metrics_against_hand_computations(fw):
    model = tiny_cnn(fw)
    x = images(n=3, seed=5)
    xt = fw.tensor(x)
    maps = hookkit.cam(model, "conv2", xt, target=[0, 1, 2])
    logits = fw.numpy(model(xt))
    base = logits[np.arange(3), [0, 1, 2]]
    drop = hookkit.cam_metric(model, xt, maps, target=[0, 1, 2], metric="confidence-drop")
    after = fw.numpy(model(fw.tensor(x * maps[:, None])))[np.arange(3), [0, 1, 2]]
    np.testing.assert_allclose(drop, after - base, atol=1e-5)

    def road(most_first, p):
        ranked = maps if most_first else 1 - maps
        keep = np.stack([(r < np.float32(np.percentile(r, p))) for r in ranked]).astype(np.float32)
        filled = impute(x, keep, 0.0, np.random.default_rng(0))
        return fw.numpy(model(fw.tensor(filled)))[np.arange(3), [0, 1, 2]] - base

    morf = hookkit.cam_metric(model, xt, maps, target=[0, 1, 2], metric="road-most-relevant-first", percentiles=[20, 60], noise=0)
    np.testing.assert_allclose(morf, (road(True, 20) + road(True, 60)) / 2, atol=1e-5)
    lerf = hookkit.cam_metric(model, xt, maps, target=[0, 1, 2], metric="road-least-relevant-first", percentiles=50, noise=0)
    np.testing.assert_allclose(lerf, road(False, 50), atol=1e-5)
    both = hookkit.cam_metric(model, xt, maps, target=[0, 1, 2], metric="road-combined", percentiles=[20, 60], noise=0)
    np.testing.assert_allclose(both, ((road(False, 20) + road(False, 60)) / 2 - morf) / 2, atol=1e-5)
    # seeded noise: the same seed gives the same scores; the default target is the predicted class
    a = hookkit.cam_metric(model, xt, maps, seed=1, percentiles=[50])
    assert np.array_equal(a, hookkit.cam_metric(model, xt, maps, seed=1, percentiles=[50]))
    assert not np.array_equal(a, hookkit.cam_metric(model, xt, maps, seed=2, percentiles=[50]))
    with pytest.raises(ValueError, match=r"maps must be maps of shape \[3, 8, 8\]"):
        hookkit.cam_metric(model, xt, maps[:2])
    with pytest.raises(ValueError, match=r"metric must be one of"):
        hookkit.cam_metric(model, xt, maps, metric="road")


# -- over a data set ------------------------------------------------------------------------------------
def test_out_streams_maps_and_resumes(fw, tmp_path):
    model = tiny_cnn(fw)
    x = images(n=7, seed=6)
    batches = [x[:3], x[3:5], x[5:]]
    expected = hookkit.cam(model, "conv2", fw.tensor(x), "layercam")

    def interrupted():
        yield batches[0]
        yield batches[1]
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        hookkit.cam(model, "conv2", interrupted(), "layercam", out=tmp_path / "c", shard_size=1)
    assert hookkit.remove_all(model) == 0
    feats = hookkit.cam(model, "conv2", batches, "layercam", out=tmp_path / "c", shard_size=1)
    assert_close(feats["cam"].numpy(), expected, dtype="float32", n_ops=MAP_OPS)
    again = hookkit.load_features(tmp_path / "c")
    assert again.count == 7 and again["cam"].shape == (7, 8, 8)
    with pytest.raises(hookkit.ExtractError, match="other arguments"):
        hookkit.cam(model, "conv2", batches, "gradcam", out=tmp_path / "c")
    with pytest.raises(ValueError, match="target must be None, a class index or a callable with out="):
        hookkit.cam(model, "conv2", batches, target=[1, 2, 3], out=tmp_path / "d")


def test_out_resumed_with_other_batches_is_refused(fw, tmp_path):
    """``cam(out=)`` writes through extract's folder writer: a resume checks the batches written before
    (sizes, and no fewer batches than written), as ``extract`` does."""
    model = tiny_cnn(fw)
    x = images(n=7, seed=6)

    def interrupted():
        yield x[:3]
        yield x[3:5]
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        hookkit.cam(model, "conv2", interrupted(), out=tmp_path / "c", shard_size=1)
    with pytest.raises(hookkit.ExtractError, match=r"cam\(out=.*batch 1 holds 1 samples but held 2 in the interrupted run; resuming"):
        hookkit.cam(model, "conv2", [x[:3], x[3:4]], out=tmp_path / "c", shard_size=1)
    with pytest.raises(hookkit.ExtractError, match=r"cam\(out=.*data gave 1 batches, fewer than the 2 already written"):
        hookkit.cam(model, "conv2", [x[:3]], out=tmp_path / "c", shard_size=1)
    with pytest.raises(hookkit.ExtractError, match=r"cam\(inputs=\.\.\.\): the data gave no batches"):
        hookkit.cam(model, "conv2", iter([]), out=tmp_path / "e")
    assert hookkit.cam(model, "conv2", [x[:3], x[3:5], x[5:]], out=tmp_path / "c", shard_size=1).count == 7


# -- Paddle = torch, on paddle.vision's LeNet with the same weights ----------------------------------------------
def test_paddle_lenet_gives_torch_maps_with_the_same_weights(torch_fw, paddle_fw):
    import paddle
    import torch
    from torch import nn

    paddle.seed(0)
    pd_model = paddle.vision.models.LeNet()
    pd_model.eval()
    th_model = nn.Module()
    th_model.features = nn.Sequential(
        nn.Conv2d(1, 6, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2, 2), nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2, 2)
    )
    th_model.fc = nn.Sequential(nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, 10))
    th_model.forward = lambda x: th_model.fc(th_model.features(x).flatten(1))
    with torch.no_grad():
        for name, p in th_model.named_parameters():
            value = pd_model.state_dict()[name].numpy()
            p.copy_(torch.tensor(value.T if name.startswith("fc") and name.endswith("weight") else value))
    th_model.eval()
    x = np.random.default_rng(0).standard_normal((2, 1, 28, 28)).astype(np.float32)
    for method in METHODS:
        a = hookkit.cam(pd_model, "features.3", paddle.to_tensor(x), method, target=[3, 7], batch_size=8)
        b = hookkit.cam(th_model, "features.3", torch.tensor(x), method, target=[3, 7], batch_size=8)
        # Grad-CAM++'s weights g^2 / (2 g^2 + sum(A) g^3 + 1e-6) amplify the last bits in which the
        # frameworks' gradients differ (1e-7 here) about a thousandfold where g is small
        np.testing.assert_allclose(a, b, atol=5e-4 if method == "gradcam++" else 1e-4, err_msg=method)


def residual_model(fw):
    class Residual(fw.Layer):
        def __init__(self):
            super().__init__()
            self.conv1 = fw.conv2d(2, 4, 3, padding=1)
            self.conv2 = fw.conv2d(4, 4, 3, padding=1)
            self.fc = fw.linear(4, 3)

        def forward(self, x):
            h = fw.F.relu(self.conv1(x))
            return self.fc(spatial_mean(fw.F.relu(self.conv2(h) + h)))  # a skip connection around conv2

    fw.seed(5)
    return Residual()


@pytest.mark.parametrize("n", [3, 1])
def test_ablation_rows_multiply_at_the_layer_or_inputs_are_copied(fw, n):
    """With k channels per forward, the layers before run once on the inputs and the ablated rows multiply
    at the layer; a skip connection from before the layer makes hookkit copy the inputs instead (or, for one
    sample, broadcast): the same maps as one channel per forward."""
    x = fw.tensor(images(n=n, seed=8))
    for model in (tiny_cnn(fw), residual_model(fw)):
        one_by_one = hookkit.cam(model, "conv2", x, "ablationcam", target=1, batch_size=n)
        assert_close(hookkit.cam(model, "conv2", x, "ablationcam", target=1, batch_size=64), one_by_one, dtype="float32", n_ops=MAP_OPS)
        assert hookkit.remove_all(model) == 0


def test_frozen_model_and_detection_style_outputs(fw):
    """No parameter takes gradients and the input does not either: the layer's output is made a leaf.
    A model returning one dict per sample (detections): a callable target scores them."""
    model = tiny_cnn(fw)
    x = fw.tensor(images())
    expected = hookkit.cam(model, "conv2", x, target=[0, 1, 2])
    for p in model.parameters():
        if fw.name == "torch":
            p.requires_grad_(False)
        else:
            p.stop_gradient = True
    # a frozen model's backward skips the weight gradients: other kernels, same maps to float32 rounding
    assert_close(hookkit.cam(model, "conv2", x, target=[0, 1, 2]), expected, dtype="float32", n_ops=MAP_OPS)

    class Detector(fw.Layer):
        def __init__(self):
            super().__init__()
            self.net = model

        def forward(self, x):
            logits = self.net(x)
            return [{"scores": logits[i], "labels": 1} for i in range(logits.shape[0])]

    def box_scores(out):
        return fw.lib.stack([d["scores"][d["labels"]] for d in out])

    det = Detector()
    for method in ("gradcam", "scorecam", "ablationcam"):
        assert_close(
            hookkit.cam(det, "net.conv2", x, method, target=box_scores),
            hookkit.cam(model, "conv2", x, method, target=1),
            dtype="float32",
            n_ops=MAP_OPS,
        )


def test_paddle_nhwc_convolution(paddle_fw):
    import paddle

    paddle.seed(0)
    conv = paddle.nn.Conv2D(2, 6, 3, stride=2, padding=1, data_format="NHWC")
    fc = paddle.nn.Linear(6, 3)
    model = paddle.nn.Sequential(conv, paddle.nn.ReLU(), paddle.nn.AdaptiveAvgPool2D(1, data_format="NHWC"), paddle.nn.Flatten(), fc)
    x = images(n=2, size=(8, 8)).transpose(0, 2, 3, 1)  # [N, H, W, C] images
    xt = paddle.to_tensor(np.ascontiguousarray(x))
    # hookkit's inputs are channels-first: a permute in front feeds the NHWC model
    first = paddle.nn.Sequential(permute_layer(paddle_fw, (0, 2, 3, 1)), model)
    maps = hookkit.cam(first, "1.0", paddle.to_tensor(np.ascontiguousarray(x.transpose(0, 3, 1, 2))), target=[1, 2])
    a = leaf(paddle_fw, conv(xt))
    logits = fc(paddle.nn.functional.relu(a).mean([1, 2]))
    g = paddle_fw.numpy(grad_of(paddle_fw, logits[0, 1] + logits[1, 2], a)).transpose(0, 3, 1, 2)
    cam = (g.mean((2, 3), keepdims=True) * paddle_fw.numpy(a).transpose(0, 3, 1, 2)).sum(1)
    np.testing.assert_allclose(maps, finish(cam, (8, 8)), atol=TOL)


def test_cam_options_are_cams_keywords_with_its_defaults(fw):
    """``cam``'s keywords are typed once (``CamKeywords``, besides ``as_tensor`` / ``out``) and held with their
    defaults in ``CamOptions``: the two agree, and an unknown keyword is refused as Python refuses it."""
    import dataclasses
    import inspect

    from hookkit.analyses.cam.call import CamKeywords, CamOptions

    keywords = [n for n, p in inspect.signature(hookkit.cam).parameters.items() if p.kind is p.KEYWORD_ONLY]
    assert set(CamKeywords.__annotations__) | set(keywords) == {f.name for f in dataclasses.fields(CamOptions)}
    assert keywords == ["as_tensor", "out"]
    with pytest.raises(TypeError, match=r"^cam\(\) got an unexpected keyword argument 'smooth'") as info:
        hookkit.cam(tiny_cnn(fw), "conv2", fw.tensor(images(n=2)), smooth=True)
    assert "did you mean aug_smooth= or eigen_smooth=?" in info.value.__notes__[-1]  # the typed keywords count


def test_old_module_paths_import_the_moved_modules_with_one_warning():
    import importlib
    import sys

    from hookkit.analyses.cam import layouts
    from hookkit.core import deprecation

    for old in ("hookkit.analyses.cam_layouts", "hookkit.observers.gradcam"):
        sys.modules.pop(old, None)
        deprecation._warned.discard(old)
    with pytest.warns(FutureWarning, match=r"hookkit\.analyses\.cam_layouts is deprecated .*use hookkit\.analyses\.cam\.layouts"):
        from hookkit.analyses.cam_layouts import token_grid  # noqa: F401
    assert importlib.import_module("hookkit.analyses.cam_layouts") is layouts
    assert token_grid is layouts.token_grid
    with pytest.warns(FutureWarning, match=r"hookkit\.observers\.gradcam is deprecated .*use hookkit\.analyses\.cam\.shortcuts"):
        assert importlib.import_module("hookkit.observers.gradcam").gradcam is hookkit.gradcam
    for old, (new, _) in deprecation._MOVED.moved.items():  # every moved module: the same module object
        if old.startswith("hookkit.analyses."):
            sys.modules.pop(old, None)
            deprecation._warned.discard(old)
            with pytest.warns(FutureWarning, match=f"use {new}"):
                assert importlib.import_module(old) is importlib.import_module(new)
