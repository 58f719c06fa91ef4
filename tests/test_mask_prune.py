"""Activation masks and weight pruning (issue 6, part 2), on both frameworks."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit
from models import hooks_left


def _mlp(fw):
    return fw.sequential(fw.linear(5, 10), fw.relu(), fw.linear(10, 3))


def _sd_numpy(fw, model) -> dict[str, np.ndarray]:
    return {k: fw.numpy(v).copy() for k, v in model.state_dict().items()}


def _load(fw, model, sd) -> None:
    """Load strictly: no missing and no unexpected keys."""
    if fw.name == "torch":
        import torch

        r = model.load_state_dict({k: torch.tensor(v) for k, v in sd.items()}, strict=True)
        assert not r.missing_keys and not r.unexpected_keys
    else:
        import paddle

        missing, unexpected = model.set_state_dict({k: paddle.to_tensor(v) for k, v in sd.items()})
        assert not missing and not unexpected


# -- activation masks ---------------------------------------------------------------------------
def test_threshold_mask_matches_numpy(fw):
    model = _mlp(fw)
    x = fw.randn(4, 5)
    h = fw.numpy(model[0](x))
    thr = float(np.median(np.abs(h)))
    expected_h = np.where(np.abs(h) >= thr, h, 0.0).astype("float32")
    expected = fw.numpy(model[2](model[1](fw.tensor(expected_h))))
    with hookkit.mask_activations(model, "0", threshold=thr), hookkit.capture(model, "0") as cap:
        out = fw.numpy(model(x))
    np.testing.assert_array_equal(out, expected)  # bit for bit: the masked value (below) through the same tail
    # an observer on the same layer sees the masked value
    np.testing.assert_array_equal(fw.numpy(cap["0"]), expected_h)
    assert (expected_h == 0).sum() >= h.size // 2
    assert not hooks_left(model)


def test_top_k_keeps_k_largest_per_sample(fw):
    conv = fw.conv2d(2, 3, 3, padding=1)
    model = fw.sequential(conv, fw.relu())
    x = fw.randn(3, 2, 4, 4)
    h = fw.numpy(conv(x))
    flat = h.reshape(3, -1)
    keep = np.zeros_like(flat)
    for i, row in enumerate(np.abs(flat)):
        keep[i, np.argsort(-row)[:7]] = 1
    expected = np.maximum(np.where(keep > 0, flat, 0).reshape(h.shape), 0)
    with hookkit.mask_activations(model, "0", top_k=7):
        out = fw.numpy(model(x))
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    with hookkit.mask_activations(model, "0", top_k=7), hookkit.capture(model, "0") as cap:
        model(x)
    assert ((fw.numpy(cap["0"]).reshape(3, -1) != 0).sum(axis=1) == 7).all()


def test_channel_mask(fw):
    conv = fw.conv2d(2, 4, 3, padding=1)
    model = fw.sequential(conv)
    x = fw.randn(2, 2, 5, 6)
    plain = fw.numpy(model(x))
    mask = np.array([1, 0, 0.5, 1], dtype="float32")
    with hookkit.mask_activations(model, "0", channels=mask):
        out = fw.numpy(model(x))
    np.testing.assert_allclose(out, plain * mask[None, :, None, None], rtol=1e-6)
    # a framework tensor works as well
    with hookkit.mask_activations(model, "0", channels=fw.tensor(mask)):
        np.testing.assert_allclose(fw.numpy(model(x)), out, rtol=1e-6)
    np.testing.assert_array_equal(fw.numpy(model(x)), plain)


def test_mask_errors(fw):
    model = _mlp(fw)
    x = fw.randn(2, 5)
    with pytest.raises(ValueError, match="exactly one of threshold=, top_k=, channels="):
        hookkit.mask_activations(model, "0")
    with pytest.raises(ValueError, match="got threshold, top_k"):
        hookkit.mask_activations(model, "0", threshold=0.1, top_k=2)
    with pytest.raises(ValueError, match="top_k must be an int >= 1"):
        hookkit.mask_activations(model, "0", top_k=0)
    with pytest.raises(
        ValueError, match=r"mask_activations\(\): channels must be a mask of shape \[10\]: layer '0' has 10 channels .*; got .*shape \[3\]"
    ):
        with hookkit.mask_activations(model, "0", channels=[1, 0, 1]):
            model(x)
    with pytest.raises(ValueError, match=r"mask_activations\(\): top_k must be at most the 10 values per sample of layer '0' .*; got 11"):
        with hookkit.mask_activations(model, "0", top_k=11):
            model(x)
    assert not hooks_left(model)


# -- weight pruning -----------------------------------------------------------------------------
def test_l1_unstructured_sparsity_and_forward(fw):
    model = fw.small_cnn()
    model.eval()
    x = fw.randn(2, 1, 8, 8)
    before = _sd_numpy(fw, model)
    p = hookkit.prune(model, ["conv1", "conv2", "fc"], amount=0.3)
    assert set(p.masks) == {"conv1.weight", "conv2.weight", "fc.weight"}
    total = 0
    for key, mask in p.masks.items():
        n = before[key].size
        total += n
        assert p.sparsity(key) == pytest.approx(round(0.3 * n) / n)
        m = fw.numpy(mask)
        # the smallest |w| are the pruned ones
        assert np.abs(before[key][m == 0]).max() <= np.abs(before[key][m == 1]).min()
    assert p.sparsity() == pytest.approx(sum(round(0.3 * before[k].size) for k in p.masks) / total)
    # the forward equals a plain model holding manually masked weights
    manual = fw.small_cnn()
    manual.eval()
    _load(fw, manual, {k: v * fw.numpy(p.masks[k]) if k in p.masks else v for k, v in before.items()})
    # bit for bit: the pruned weights are w * mask (exact) in place, the same kernels run on the same values
    np.testing.assert_array_equal(fw.numpy(model(x)), fw.numpy(manual(x)))
    # state_dict keys are unchanged and load into a plain model
    assert list(model.state_dict()) == list(before)
    _load(fw, fw.small_cnn(), _sd_numpy(fw, model))
    p.remove()
    # remove() restores the original weights
    for k, v in _sd_numpy(fw, model).items():
        np.testing.assert_array_equal(v, before[k])
    assert not hooks_left(model)


def test_pruned_weights_stay_zero_while_training(fw):
    model = fw.small_cnn()
    x = fw.randn(8, 1, 8, 8)
    y = fw.labels(np.arange(8) % 10)
    opt = fw.adam(model, lr=1e-2)
    # a few steps before pruning: Adam's moments are non-zero where weights get pruned
    for _ in range(2):
        fw.cross_entropy(model(x), y).backward()
        fw.step(opt)
    p = hookkit.prune(model, ["conv1", "conv2", "fc"], amount=0.5)
    masks = {k: fw.numpy(m) for k, m in p.masks.items()}
    losses = []
    for _ in range(4):
        loss = fw.cross_entropy(model(x), y)
        loss.backward()
        losses.append(float(fw.numpy(loss)))
        params = dict(model.named_parameters())
        for k, m in masks.items():
            assert (fw.grad(params[k])[m == 0] == 0).all(), f"{k}: pruned entries got a gradient"
            assert (fw.numpy(params[k])[m == 0] == 0).all(), f"{k}: effective weight not masked in forward"
        fw.step(opt)
        _load(fw, fw.small_cnn(), _sd_numpy(fw, model))  # loads at every stage
    assert losses[-1] < losses[0]
    model(x)  # the next forward re-masks what the momentum moved
    sd = _sd_numpy(fw, model)
    for k, m in masks.items():
        assert (sd[k][m == 0] == 0).all()
        assert (sd[k][m == 1] != 0).all()
    p.make_permanent()
    assert not hooks_left(model)
    model.eval()
    plain = fw.small_cnn()
    plain.eval()
    _load(fw, plain, _sd_numpy(fw, model))
    np.testing.assert_array_equal(fw.numpy(model(x)), fw.numpy(plain(x)))
    # hooks are gone: a backward now gives pruned entries a gradient again
    model.train()
    fw.cross_entropy(model(x), y).backward()
    g = fw.grad(dict(model.named_parameters())["fc.weight"])
    assert (g[masks["fc.weight"] == 0] != 0).any()


def test_ln_structured_prunes_whole_channels(fw):
    model = fw.small_cnn()
    w = fw.numpy(model.conv2.weight).copy()  # [16, 8, 3, 3] on both frameworks
    p = hookkit.prune(model, "conv2", amount=0.25, method="ln_structured", n=2, dim=0)
    norms = np.sqrt((w.reshape(16, -1) ** 2).sum(1))
    dropped = set(np.argsort(norms)[:4])
    m = fw.numpy(p.masks["conv2.weight"])
    for c in range(16):
        assert (m[c] == 0).all() if c in dropped else (m[c] == 1).all()
    wz = fw.numpy(model.conv2.weight)
    assert (wz[list(dropped)] == 0).all()
    assert p.sparsity() == pytest.approx(0.25)
    p.make_permanent()
    assert not hooks_left(model)
    with pytest.raises(hookkit.HookkitError, match="after remove"):
        p.make_permanent()


def test_prune_errors(fw):
    model = fw.small_cnn()
    with pytest.raises(ValueError, match=r"prune\(\): method must be one of 'l1_unstructured', 'ln_structured'; got 'l3'"):
        hookkit.prune(model, "fc", method="l3")
    with pytest.raises(ValueError, match=r"prune\(\): amount must be a finite number in \[0, 1\]; got 1.5"):
        hookkit.prune(model, "fc", amount=1.5)
    with pytest.raises(
        ValueError,
        match=r"prune\(\): param must be the name of a parameter one of the selected layers \(relu1\) has as its own; got 'weight'",
    ):
        hookkit.prune(model, "relu1")
    with pytest.raises(ValueError, match=r"prune\(\): dim must be a dim of conv1.weight \(shape \[8, 1, 3, 3\]\): in \[-4, 3\]; got 4"):
        hookkit.prune(model, "conv1", method="ln_structured", dim=4)
    with pytest.raises(ValueError, match=r"prune\(\): amount must be a count in \[0, 72\] \(conv1.weight has 72 entries"):
        hookkit.prune(model, ["fc", "conv1"], amount=100)
    assert not hooks_left(model)
    assert all((fw.numpy(v) != 0).all() for k, v in model.state_dict().items() if k.endswith("weight") and "bn" not in k)
