"""Plug-in regularization: dropout, channel dropout, DropBlock, DropPath, Gaussian noise."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit
from hookkit.core import router
from hookkit.interventions.regularize import drop_block_2d
from tolerance import assert_close

OPS = {
    "dropout": lambda m, layers: hookkit.dropout(m, layers, p=0.5),
    "channel_dropout": lambda m, layers: hookkit.channel_dropout(m, layers, p=0.5),
    "drop_block": lambda m, layers: hookkit.drop_block(m, layers, p=0.5, block_size=3),
    "drop_path": lambda m, layers: hookkit.drop_path(m, layers, p=0.5),
    "gaussian_noise": lambda m, layers: hookkit.gaussian_noise(m, layers, std=0.5),
}


def conv_model(fw, c: int = 3):
    """conv -> relu: a 4-D output of any H, W, no BatchNorm (train and eval forwards agree)."""
    return fw.sequential(fw.conv2d(1, c, 3, padding=1), fw.relu())


def rand_like(fw, t):
    """The uniform draw DropBlock makes, from the framework's generator."""
    return fw.lib.rand_like(t) if fw.name == "torch" else fw.lib.rand(t.shape, dtype=t.dtype)


def all_layers(fw, model):
    return [layer for _, layer in (model.named_modules() if fw.name == "torch" else model.named_sublayers(include_self=True))]


def assert_nothing_attached(fw, model):
    for layer in all_layers(fw, model):
        assert set(router.attached(layer).values()) == {0}


# -- train / eval ---------------------------------------------------------------------------------
@pytest.mark.parametrize("op", list(OPS))
def test_eval_is_plain_model_bit_for_bit_and_train_changes(fw, op):
    model = conv_model(fw)
    x = fw.randn(2, 1, 6, 9)
    model.eval()
    plain = fw.numpy(model(x))
    with OPS[op](model, "0"):
        for _ in range(2):  # toggling needs no re-registration
            model.eval()
            assert np.array_equal(fw.numpy(model(x)), plain)
            model.train()
            fw.seed(3)
            assert not np.array_equal(fw.numpy(model(x)), plain)
        # the flag is read from the hooked layer at call time
        model[0].eval()
        assert np.array_equal(fw.numpy(model(x)), plain)
    model.train()
    assert np.array_equal(fw.numpy(model(x)), plain)
    assert_nothing_attached(fw, model)


@pytest.mark.parametrize("op", list(OPS))
def test_seeded_reproducibility(fw, op):
    model = fw.small_cnn()
    x = fw.randn(4, 1, 8, 8)
    with OPS[op](model, ["conv1", "relu2"]):
        fw.seed(7)
        a = fw.numpy(model(x))
        fw.seed(7)
        b = fw.numpy(model(x))
        fw.seed(8)
        c = fw.numpy(model(x))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_one_handle_removes_all_ops(fw):
    model = fw.small_cnn()
    x = fw.randn(4, 1, 8, 8)
    model.eval()
    plain = fw.numpy(model(x))
    group = hookkit.HandleGroup([make(model, ["conv1", "conv2"]) for make in OPS.values()])
    assert router.attached(model.conv1)["forward"] == len(OPS)
    group.remove()
    group.remove()  # idempotent
    assert_nothing_attached(fw, model)
    assert np.array_equal(fw.numpy(model(x)), plain)


def test_observer_sees_dropped_output(fw):
    model = fw.sequential(fw.linear(6, 40))
    x = fw.randn(5, 6)
    plain = fw.numpy(model(x))
    # the observer is attached first: interventions still run before it
    with hookkit.capture(model, "0") as cap, hookkit.dropout(model, "0", p=0.5):
        out = fw.numpy(model(x))
    seen = fw.numpy(cap["0"])
    assert np.array_equal(seen, out)
    assert (seen == 0).any()
    assert not np.array_equal(seen, plain)


# -- each op's values -----------------------------------------------------------------------------
def test_dropout_zeroes_and_rescales(fw):
    model = fw.sequential(fw.linear(8, 500))
    x = fw.randn(8, 8)
    plain = fw.numpy(model(x))
    with hookkit.dropout(model, "0", p=0.25):
        out = fw.numpy(model(x))
    kept = out != 0
    assert 0.65 < kept.mean() < 0.85
    np.testing.assert_allclose(out[kept], plain[kept] / 0.75, rtol=1e-6)


def test_channel_dropout_is_dropout2d(fw):
    model = conv_model(fw, c=16)
    x = fw.randn(4, 1, 5, 7)
    plain_t = model(x)
    plain = fw.numpy(plain_t)
    with hookkit.channel_dropout(model, "1", p=0.3):
        fw.seed(11)
        out = fw.numpy(model(x))
    per_channel = out.reshape(4, 16, -1)
    dropped = (per_channel == 0).all(-1)
    assert dropped.any() and not dropped.all()
    np.testing.assert_allclose(per_channel[~dropped], (plain.reshape(4, 16, -1) / 0.7)[~dropped], rtol=1e-6)
    # the framework's own Dropout2d under the same seed makes the same draw
    fw.seed(11)
    ref = fw.dropout2d(0.3)
    ref.train()
    np.testing.assert_array_equal(out, fw.numpy(ref(plain_t)))


def test_channel_dropout_on_3d_outputs(fw):
    model = fw.sequential(fw.linear(5, 30))
    x = fw.randn(6, 20, 5)  # (N, C, L): Linear acts on the last dim
    plain = fw.numpy(model(x))
    with hookkit.channel_dropout(model, "0", p=0.5):
        out = fw.numpy(model(x))
    dropped = (out == 0).all(-1)
    assert dropped.any() and not dropped.all()
    np.testing.assert_allclose(out[~dropped], plain[~dropped] * 2, rtol=1e-6)


def residual(fw, d: int = 6):
    """x + branch(x): drop_path goes on the branch."""

    class Residual(fw.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.branch = fw.linear(d, d)

        def forward(self, x):
            return x + self.branch(x)

    return Residual()


def test_drop_path_keeps_per_sample_scale(fw):
    model = residual(fw)
    x = fw.randn(64, 6)
    branch = fw.numpy(model.branch(x))
    with hookkit.drop_path(model, "branch", p=0.4):
        fw.seed(2)
        delta = fw.numpy(model(x)) - fw.numpy(x)
    # each sample's branch: wholly dropped (the block is the identity) or wholly scaled by 1/(1-p)
    kept = ~(delta == 0).all(1)
    assert 0.2 < (~kept).mean() < 0.6
    # the mask 1 / 0.6, its product with the branch, the sum with x and (here) x taken off again: the
    # sum rounds relative to |x| + |branch| / 0.6
    scale = float(np.abs(fw.numpy(x)).max() + np.abs(branch).max() / 0.6)
    assert_close(delta[kept], branch[kept] / 0.6, dtype="float32", n_ops=4, scale=scale)


def test_gaussian_noise_matches_framework_draw(fw):
    model = fw.sequential(fw.linear(4, 300))
    x = fw.randn(20, 4)
    plain_t = model(x)
    with hookkit.gaussian_noise(model, "0", std=0.3):
        fw.seed(5)
        out = fw.numpy(model(x))
    noise = out - fw.numpy(plain_t)
    assert abs(noise.std() - 0.3) < 0.01 and abs(noise.mean()) < 0.01
    fw.seed(5)
    eps = fw.lib.randn_like(plain_t) if fw.name == "torch" else fw.lib.randn(plain_t.shape, dtype=plain_t.dtype)
    assert_close(out, fw.numpy(plain_t + 0.3 * eps), dtype="float32", n_ops=2)  # one product, one sum; the same noise


# -- DropBlock against timm's formula -------------------------------------------------------------
def timm_drop_block_ref(x: np.ndarray, noise: np.ndarray, p: float, k: int, gamma_scale: float = 1.0) -> np.ndarray:
    """timm's drop_block_2d (layers/drop.py) in numpy, for an odd square block <= min(H, W)."""
    _, _, H, W = x.shape
    k = min(k, H, W)
    gamma = gamma_scale * p * (W * H) / k**2 / ((W - k + 1) * (H - k + 1))
    hi, wi = np.meshgrid(np.arange(H), np.arange(W), indexing="ij")
    valid = ((hi >= k // 2) & (hi < H - (k - 1) // 2) & (wi >= k // 2) & (wi < W - (k - 1) // 2)).astype(x.dtype)
    block_mask = ((2 - gamma - valid + noise) >= 1).astype(x.dtype)
    # -max_pool2d(-block_mask, k, stride=1, padding=k // 2): a min-pool with +inf padding
    pad = k // 2
    padded = np.pad(block_mask, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=np.inf)
    win = np.lib.stride_tricks.sliding_window_view(padded, (k, k), axis=(2, 3))
    block_mask = win.min(axis=(-2, -1))
    scale = block_mask.size / (block_mask.astype(np.float32).sum() + 1e-7)
    return x * block_mask * scale


def loop_drop_block_ref(x: np.ndarray, noise: np.ndarray, p: float, bh: int, bw: int) -> np.ndarray:
    """DropBlock by hand: every seed whose (bh, bw) block fits zeroes that block (any size, even)."""
    N, C, H, W = x.shape
    bh, bw = min(bh, H), min(bw, W)
    gamma = p * H * W / (bh * bw) / ((H - bh + 1) * (W - bw + 1))
    keep = np.ones_like(x)
    for n, c, i, j in zip(*np.nonzero(noise < gamma)):
        top, left = i - bh // 2, j - bw // 2
        if top >= 0 and left >= 0 and top + bh <= H and left + bw <= W:
            keep[n, c, top : top + bh, left : left + bw] = 0
    return x * keep * (keep.size / (keep.sum() + 1e-7))


@pytest.mark.parametrize("k", [1, 3, 5, 7])
@pytest.mark.parametrize("hw", [(9, 9), (7, 13), (11, 8)])
def test_drop_block_matches_timm_on_fixed_noise(fw, k, hw):
    rng = np.random.default_rng(k)
    x = rng.standard_normal((2, 3, *hw)).astype("float32")
    noise = (rng.random((2, 3, *hw)) * 0.5).astype("float32")  # more seeds, so blocks overlap
    out = fw.numpy(drop_block_2d(fw.tensor(x), fw.tensor(noise), 0.3, k))
    ref = timm_drop_block_ref(x, noise, 0.3, k)
    assert (out == 0).any() and (out != 0).any()
    # x times a 0/1 mask (exact) times numel / kept (a count, exact in float32): a quotient and a product
    assert_close(out, ref, dtype="float32", n_ops=2)
    assert_close(out, loop_drop_block_ref(x, noise, 0.3, k, k), dtype="float32", n_ops=2)


@pytest.mark.parametrize("block", [2, 4, 6, 20, (2, 5), (3, 1), (8, 30)])
def test_drop_block_any_block_size_and_shape(fw, block):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 2, 6, 11)).astype("float32")
    noise = (rng.random(x.shape) * 0.3).astype("float32")
    bh, bw = (block, block) if isinstance(block, int) else block
    if isinstance(block, int):  # an int block is clipped square, as timm does
        bh = bw = min(block, 6, 11)
    out = fw.numpy(drop_block_2d(fw.tensor(x), fw.tensor(noise), 0.4, block))
    assert out.shape == x.shape
    assert_close(out, loop_drop_block_ref(x, noise, 0.4, bh, bw), dtype="float32", n_ops=2)  # a quotient, a product


def test_drop_block_hook_uses_the_framework_draw(fw):
    model = conv_model(fw, c=4)
    x = fw.randn(2, 1, 10, 14)
    plain_t = model(x)
    with hookkit.drop_block(model, "1", p=0.3, block_size=3):
        fw.seed(9)
        out = fw.numpy(model(x))
    fw.seed(9)
    noise = rand_like(fw, plain_t)
    ref = timm_drop_block_ref(fw.numpy(plain_t), fw.numpy(noise), 0.3, 3)
    assert_close(out, ref, dtype="float32", n_ops=2)  # the hooked conv is the plain one's; then a quotient, a product
    assert (out == 0).any()


@pytest.mark.parametrize("op", list(OPS))
def test_gradient_is_the_ops_chain_rule(fw, op):
    model = fw.sequential(fw.linear(5, 9))  # Linear on the last dim of a 4-D input: a 4-D output
    x = fw.randn(2, 4, 6, 5, requires_grad=True)
    plain = fw.numpy(model(x))
    with OPS[op](model, "0"):
        fw.seed(4)
        out = model(x)
        out.sum().backward()
    out = fw.numpy(out)
    # every op is out = plain * M (+ noise): d sum(out) / d plain = M
    mult = np.ones_like(plain) if op == "gaussian_noise" else out / plain
    weight = fw.numpy(model[0].weight)
    w_out_in = weight if fw.name == "torch" else weight.T
    np.testing.assert_allclose(fw.grad(x), mult @ w_out_in, rtol=1e-4, atol=1e-5)
    assert (mult != 1).any() or op == "gaussian_noise"


# -- errors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call, words",
    [
        (lambda m: hookkit.dropout(m, "0", p=1.5), ["dropout", "p", "1.5"]),
        (lambda m: hookkit.channel_dropout(m, "0", p=-0.1), ["channel_dropout", "p"]),
        (lambda m: hookkit.drop_path(m, "0", p="x"), ["drop_path", "p"]),
        (lambda m: hookkit.drop_block(m, "0", block_size=0), ["block_size", "0"]),
        (lambda m: hookkit.drop_block(m, "0", block_size=(3,)), ["block_size"]),
        (lambda m: hookkit.gaussian_noise(m, "0", std=-1), ["std", "-1"]),
    ],
)
def test_bad_arguments_are_named_and_attach_nothing(fw, call, words):
    model = conv_model(fw)
    with pytest.raises(ValueError) as err:
        call(model)
    for w in words:
        assert w in str(err.value)
    assert_nothing_attached(fw, model)


def test_unknown_layer_attaches_nothing(fw):
    model = conv_model(fw)
    with pytest.raises(hookkit.LayerNotFound):
        hookkit.dropout(model, ["0", "nope"], p=0.1)
    assert_nothing_attached(fw, model)


def test_drop_block_on_a_2d_output_names_the_layer(fw):
    model = fw.sequential(fw.linear(3, 4))
    with hookkit.drop_block(model, "0", p=0.1):
        with pytest.raises(ValueError, match=r"N, C, H, W") as err:
            model(fw.randn(2, 3))
    assert "'0'" in "\n".join(getattr(err.value, "__notes__", []))
