"""ScoreCAM's and AblationCAM's many forwards, on both frameworks: each shortcut gives the maps of the
plain path. AblationCAM's rows multiply at the smallest enclosing layer that passes them on (a ViT-style
block whose skip connection starts before the layer), and the inputs are copied where a skip connection
crosses every enclosing layer (U-Net-style); ScoreCAM's all-zero masks share one forward; torch models
on the CPU get ScoreCAM's rows channels-last, unless they refuse them."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit
from hookkit.core.validate import InvalidArgument
from test_cam import TOL, images, reference
from tolerance import MAP_OPS, assert_close


def transpose(fw, t, dims):
    return t.permute(*dims) if fw.name == "torch" else t.transpose(list(dims))


def concat(fw, ts, axis):
    return fw.lib.cat(ts, axis) if fw.name == "torch" else fw.lib.concat(ts, axis)


def vit_model(fw):
    """2 x 2 patches of 8 x 8 images (a 4 x 4 grid) and a class token, two pre-norm blocks (attention and
    an MLP, each with its skip connection), the head on the class token."""

    class Block(fw.Layer):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = fw.nn.LayerNorm(8), fw.nn.LayerNorm(8)
            self.q, self.k, self.v = fw.linear(8, 8), fw.linear(8, 8), fw.linear(8, 8)
            self.mlp = fw.sequential(fw.linear(8, 16), fw.nn.GELU(), fw.linear(16, 8))

        def forward(self, x):
            h = self.norm1(x)
            att = fw.F.softmax(self.q(h) @ transpose(fw, self.k(h), (0, 2, 1)) / 8**0.5, -1)
            x = x + att @ self.v(h)
            return x + self.mlp(self.norm2(x))

    class ViT(fw.Layer):
        def __init__(self):
            super().__init__()
            self.embed = fw.conv2d(2, 8, 2, stride=2)
            self.cls = fw.linear(1, 8)  # the class token: cls(1)
            self.blocks = fw.sequential(Block(), Block())
            self.head = fw.linear(8, 3)
            self.skip = False  # True: the class token also skips past the blocks (no enclosing layer passes rows on)

        def forward(self, x):
            t = transpose(fw, self.embed(x).flatten(2), (0, 2, 1))  # [N, 16, 8]
            one = x[:, :1, :1, :1].flatten(1) * 0 + 1  # [N, 1]
            t = concat(fw, [self.cls(one).unsqueeze(1), t], 1)  # [N, 17, 8]
            out = self.blocks(t)[:, 0]
            return self.head(out + t[:, 0] if self.skip else out)

    fw.seed(11)
    model = ViT()
    model.eval()
    return model


def unet_model(fw):
    """An encoder's first feature map skips across ``enc2`` to the decoder (concatenated): no layer
    enclosing ``enc2.0`` but the model passes multiplied rows on."""

    class UNet(fw.Layer):
        def __init__(self):
            super().__init__()
            self.enc1 = fw.conv2d(2, 4, 3, padding=1)
            self.enc2 = fw.sequential(fw.conv2d(4, 4, 3, padding=1), fw.nn.ReLU())
            self.dec = fw.conv2d(8, 4, 3, padding=1)
            self.fc = fw.linear(4, 3)

        def forward(self, x):
            e1 = fw.F.relu(self.enc1(x))
            d = fw.F.relu(self.dec(concat(fw, [self.enc2(e1), e1], 1)))
            return self.fc(d.flatten(2).mean(-1))

    fw.seed(12)
    model = UNet()
    model.eval()
    return model


def rows_seen(model, names):
    """Record the number of rows each named layer's output (its first, when a tuple) has at each call."""
    seen = {n: [] for n in names}

    def record(name):
        return lambda layer, args, out: seen[name].append((out[0] if isinstance(out, tuple) else out).shape[0])

    handles = [hookkit.on_forward(model, n, record(n)) for n in names]
    return seen, handles


@pytest.mark.parametrize("n", [3, 1])
def test_ablation_rows_multiply_at_the_enclosing_block(fw, n):
    """The layer's own output cannot take the rows (the block's skip connection has N): the rows multiply at
    the block's inputs, the patch embedding and the first block run on the N inputs only; the maps are
    those of one channel per forward (nothing multiplies)."""
    model, x = vit_model(fw), fw.tensor(images(n=n, seed=4))
    one_by_one = hookkit.cam(vit_model(fw), "blocks.1.norm1", x, "ablationcam", target=2, batch_size=n)  # same weights
    seen, handles = rows_seen(model, ["embed", "blocks.0", "blocks.1"])
    maps = hookkit.cam(model, "blocks.1.norm1", x, "ablationcam", target=2, batch_size=8 * n)
    assert_close(maps, one_by_one, dtype="float32", n_ops=MAP_OPS)
    assert set(seen["embed"]) == set(seen["blocks.0"]) == {n}
    assert seen["blocks.1"] == [n, 2 * n, 6 * n]  # the first forward, 2 channels (trying levels), the 6 others
    # a second call starts where the first found the rows multiply: no level tried, all 8 channels in one forward
    seen["blocks.1"].clear()
    again = hookkit.cam(model, "blocks.1.norm1", x, "ablationcam", target=2, batch_size=8 * n)
    for h in handles:
        h.remove()
    assert_close(again, one_by_one, dtype="float32", n_ops=MAP_OPS)
    assert seen["blocks.1"] == [n, 8 * n]
    assert hookkit.remove_all(model) == 0


def test_ablation_level_learned_on_a_model_that_changed_since_moves_up(fw):
    """The level an earlier call found is a hint: when the model no longer passes the rows on from there (a
    skip connection now crosses the block), the next level is tried and the maps are still right."""
    model, x = vit_model(fw), fw.tensor(images(n=2, seed=6))
    hookkit.cam(model, "blocks.1.norm1", x, "ablationcam", target=1)  # learns: at blocks.1's inputs
    model.skip = fresh_skip = True
    expected_model = vit_model(fw)
    expected_model.skip = fresh_skip
    expected = hookkit.cam(expected_model, "blocks.1.norm1", x, "ablationcam", target=1, batch_size=2)
    seen, handles = rows_seen(model, ["embed"])
    maps = hookkit.cam(model, "blocks.1.norm1", x, "ablationcam", target=1, batch_size=16)
    for h in handles:
        h.remove()
    assert_close(maps, expected, dtype="float32", n_ops=MAP_OPS)
    # the first forward; the hinted level (blocks.1's inputs) on all 8 channels, refused; the levels above as
    # untried ones, on 2 channels (blocks' inputs: refused; copies of the inputs); copies for the 6 others
    assert seen["embed"] == [2, 2, 2, 4, 12]
    assert hookkit.remove_all(model) == 0


def test_ablation_copies_the_inputs_when_a_skip_crosses_every_enclosing_layer(fw):
    model, x = unet_model(fw), fw.tensor(images(n=3, seed=5))
    one_by_one = hookkit.cam(model, "enc2.0", x, "ablationcam", target=[0, 1, 2], batch_size=3)
    seen, handles = rows_seen(model, ["enc1"])
    maps = hookkit.cam(model, "enc2.0", x, "ablationcam", target=[0, 1, 2], batch_size=12)
    for h in handles:
        h.remove()
    assert_close(maps, one_by_one, dtype="float32", n_ops=MAP_OPS)
    # the first forward, the two levels tried (enc2.0's output, enc2's inputs) on 2 channels, then copies of the
    # inputs: 2 channels, the 2 others
    assert seen["enc1"] == [3, 3, 3, 6, 6]
    assert hookkit.remove_all(model) == 0


def test_ablation_level_is_kept_over_the_batches_of_a_stream(fw, tmp_path):
    model = vit_model(fw)
    batches = [fw.tensor(images(n=2, seed=s)) for s in (1, 2)]
    feats = hookkit.cam(model, "blocks.1.norm1", batches, "ablationcam", target=1, out=tmp_path / "cams")
    for i, b in enumerate(batches):
        expected = hookkit.cam(model, "blocks.1.norm1", b, "ablationcam", target=1, batch_size=2)
        assert_close(feats["cam"][2 * i : 2 * i + 2], expected, dtype="float32", n_ops=MAP_OPS)


def relu_cnn(fw, per_input: bool):
    """A CNN whose layer ``act`` (the ReLU after conv2) has channels 1 and 4 at zero for every input (weights
    zeroed, bias negative), or, with ``per_input``, channels at zero for some inputs only (negative biases).
    (A channel constant at another value is no dead channel: its upsampled map varies by the interpolation's
    rounding, and the min-max scaling turns that into a mask, as pytorch-grad-cam computes it too.)"""

    class ReluCNN(fw.Layer):
        def __init__(self):
            super().__init__()
            self.conv1 = fw.conv2d(2, 4, 3, padding=1)
            self.conv2 = fw.conv2d(4, 6, 3, stride=2, padding=1)
            self.act = fw.nn.ReLU()
            self.fc = fw.linear(6, 3)

        def trunk(self, x):
            return self.act(self.conv2(fw.F.relu(self.conv1(x))))

        def head(self, a):
            return self.fc(a.flatten(2).mean(-1))

        def forward(self, x):
            return self.head(self.trunk(x))

    fw.seed(13)
    model = ReluCNN()
    model.eval()
    w, b = fw.numpy(model.conv2.weight).copy(), fw.numpy(model.conv2.bias).copy()
    if per_input:  # each channel but 0 all-zero for the 2 inputs whose largest value before the bias is lowest
        z = fw.numpy(model.conv2(fw.F.relu(model.conv1(fw.tensor(DEAD_INPUTS))))) - b[None, :, None, None]
        top = np.sort(z.reshape(len(z), 6, -1).max(-1), 0)  # [N, C], ascending over the inputs
        b[1:] = -(top[1, 1:] + top[2, 1:]) / 2
    else:
        w[[1, 4]], b[[1, 4]] = 0, -1
    set_values(fw, model.conv2, w, b)
    return model


def set_values(fw, layer, weight, bias):
    for p, v in ((layer.weight, weight), (layer.bias, bias)):
        p.set_value(v) if fw.name == "paddle" else p.data.copy_(fw.lib.tensor(v))


DEAD_INPUTS = images(n=4, seed=6)


@pytest.mark.parametrize("per_input", [False, True])
def test_scorecam_dead_channels_share_one_forward(fw, per_input):
    """Rows whose mask is all zero (a channel at zero over the whole input) all run as one zero input: the maps
    are the paper's (every row run, by hand) and the callable target's (every row run by hookkit)."""
    model = relu_cnn(fw, per_input)
    x = DEAD_INPUTS
    classes = [0, 2, 1, 2]
    flat = fw.numpy(model.trunk(fw.tensor(x))).reshape(4, 6, -1)
    dead = flat.max(-1) == 0  # [N, C]: zero everywhere (a ReLU's output)
    if per_input:
        assert dead.sum(0).tolist() == [0, 2, 2, 2, 2, 2]  # dead for some inputs only
    else:
        assert dead[:, [1, 4]].all()  # and others the ReLU leaves at zero
    seen, handles = rows_seen(model, ["conv1"])
    maps = hookkit.cam(model, "act", fw.tensor(x), "scorecam", target=classes, batch_size=8)
    for h in handles:
        h.remove()
    np.testing.assert_allclose(maps, reference(fw, model, "scorecam", x, classes), atol=TOL)
    assert sum(seen["conv1"]) == 4 + (24 - dead.sum()) + 1  # the first forward, the live rows, one zero input
    by_callable = hookkit.cam(
        model, "act", fw.tensor(x), "scorecam", target=lambda out: out[fw.lib.arange(4), fw.tensor(classes, dtype="int64")]
    )
    assert_close(maps, by_callable, dtype="float32", n_ops=MAP_OPS)


def test_scorecam_rows_go_channels_last_on_the_cpu_unless_the_model_refuses(torch_fw):
    fw = torch_fw
    model, x, classes = relu_cnn(fw, False), DEAD_INPUTS, [0, 2, 1, 2]
    expected = reference(fw, model, "scorecam", x, classes)
    for refuses in (False, True):
        if refuses:  # a view of the features as rows needs them channels-first
            model.head = lambda a: model.fc(a.view(len(a), -1).reshape(len(a), 6, -1).mean(-1))
        layouts = []
        h = hookkit.on_forward_pre(
            model, "conv1", lambda layer, args, seen=layouts: seen.append(args[0].is_contiguous(memory_format=fw.lib.channels_last))
        )
        maps = hookkit.cam(model, "act", fw.tensor(x), "scorecam", target=classes, batch_size=8)
        h.remove()
        np.testing.assert_allclose(maps, expected, atol=TOL)
        # the first forward as given; the masked rows channels-last (once, when refused, then as given)
        assert layouts == ([False, True, False, False] if refuses else [False, True, True])
    layouts = []
    h = hookkit.on_forward_pre(
        model, "conv1", lambda layer, args: layouts.append(args[0].is_contiguous(memory_format=fw.lib.channels_last))
    )
    np.testing.assert_allclose(hookkit.cam(model, "act", fw.tensor(x), "scorecam", target=classes, batch_size=8), expected, atol=TOL)
    h.remove()
    assert layouts == [False, False, False]  # a later call remembers the refusal: no forward wasted on trying again
    assert hookkit.remove_all(model) == 0


def test_ablation_on_transformers_vit_and_swin_blocks(torch_fw):
    """Hugging Face's ViT and Swin (random weights, from configs): the rows multiply at the block holding the
    layer, the embeddings run once on the inputs, the maps are those of one channel per forward."""
    import torch
    from transformers import SwinConfig, SwinForImageClassification, ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    vit = ViTForImageClassification(
        ViTConfig(
            image_size=16, patch_size=4, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, num_labels=3
        )
    ).eval()
    swin = SwinForImageClassification(
        SwinConfig(image_size=16, patch_size=2, embed_dim=8, depths=[2], num_heads=[2], window_size=4, num_labels=3)
    ).eval()
    x = torch.randn(2, 3, 16, 16)
    for model, layer, embeddings in ((vit, "vit.layers.1.layernorm_before", "vit.embeddings"),
                                     (swin, "swin.encoder.layers.0.blocks.1.layernorm_after", "swin.embeddings")):  # fmt: skip
        one_by_one = hookkit.cam(model, layer, x, "ablationcam", target=[0, 2], batch_size=2)
        seen, handles = rows_seen(model, [embeddings])
        maps = hookkit.cam(model, layer, x, "ablationcam", target=[0, 2])
        for h in handles:
            h.remove()
        assert_close(maps, one_by_one, dtype="float32", n_ops=MAP_OPS)
        assert maps.std() > 0.05 and set(seen[embeddings]) == {2}
        assert hookkit.remove_all(model) == 0


def test_ablated_rows_go_channels_last_on_the_cpu_unless_the_model_refuses(torch_fw):
    """Once the level is known, a channels-first layer's ablated rows go on channels-last (pools and
    convolutions after the layer run on oneDNN's layout); a model that refuses them gets them as they are."""
    fw = torch_fw
    model, x, classes = relu_cnn(fw, False), DEAD_INPUTS, [0, 2, 1, 2]
    expected = reference(fw, model, "ablationcam", x, classes)  # the ReLU's output ablated by hand
    layouts = []

    def head(a, refuses):
        layouts.append(a.is_contiguous(memory_format=fw.lib.channels_last))
        if refuses:  # a view of the features as rows needs them channels-first
            a = a.view(len(a), -1).reshape(len(a), 6, -1)
        return model.fc(a.flatten(2).mean(-1))

    for refuses in (False, True):
        layouts.clear()
        model.head = lambda a, refuses=refuses: head(a, refuses)
        maps = hookkit.cam(model, "act", fw.tensor(x), "ablationcam", target=classes, batch_size=8)
        np.testing.assert_allclose(maps, expected, atol=TOL)
        # the first forward and the first 2 channels as they are; then channels-last (once, when refused)
        assert layouts == ([False, False, True, False, False] if refuses else [False, False, True, True])
    layouts.clear()
    np.testing.assert_allclose(hookkit.cam(model, "act", fw.tensor(x), "ablationcam", target=classes, batch_size=8), expected, atol=TOL)
    assert layouts == [False, False, False, False]  # a later call remembers the refusal: no forward wasted on trying again
    assert hookkit.remove_all(model) == 0


@pytest.mark.parametrize("method", ["scorecam", "ablationcam"])
def test_host_copies_per_layer_not_per_forward(fw, method, monkeypatch):
    """A copy between host and device waits for the device (on a GPU it stops it between forwards): ScoreCAM
    and AblationCAM make the same few per call whether the rows take 2 forwards or 12, and the maps agree."""
    from hookkit.backends import backend_for

    model, x, classes = relu_cnn(fw, False), DEAD_INPUTS, [0, 2, 1, 2]
    be = backend_for(model)
    copies: list[str] = []
    for name in ("from_numpy", "to_numpy"):
        real = getattr(be, name)
        monkeypatch.setattr(be, name, lambda *a, _real=real, _name=name, **k: copies.append(_name) or _real(*a, **k))
    counts, maps = [], []
    for batch_size in (4, 24):  # rows per forward: ScoreCAM 4 or all 24; AblationCAM 1 channel (4 rows) or 2 then 4
        copies.clear()
        seen, handles = rows_seen(model, ["conv1"])
        maps.append(hookkit.cam(model, "act", fw.tensor(x), method, target=classes, batch_size=batch_size))
        for h in handles:
            h.remove()
        counts.append((len(copies), len(seen["conv1"])))
    (few, forwards_small), (many, forwards_big) = counts[0], counts[1]
    assert forwards_small > forwards_big + 2  # the small batches ran more forwards...
    assert few == many  # ...with no more host copies
    assert_close(maps[0], maps[1], dtype="float32", n_ops=MAP_OPS)
    assert hookkit.remove_all(model) == 0


def test_tensor_targets_are_labels(fw):
    """A tensor of class indices (a loader's labels) is the list; a 0-d one the int; also for cam_metric."""
    model, x = relu_cnn(fw, False), fw.tensor(DEAD_INPUTS)
    labels = np.array([0, 2, 1, 2], np.int64)
    for method in ("gradcam", "scorecam", "ablationcam"):  # not bit-equal: a later AblationCAM call batches its rows otherwise
        by_list = hookkit.cam(model, "act", x, method, target=labels.tolist())
        tensor_target = hookkit.cam(model, "act", x, method, target=fw.tensor(labels, dtype="int64"))
        assert_close(tensor_target, by_list, dtype="float32", n_ops=MAP_OPS)  # a forward, a backward, the weighted sum, scaled to [0, 1]
        scalar = hookkit.cam(model, "act", x, method, target=fw.tensor(np.array(2), dtype="int64"))
        assert_close(scalar, hookkit.cam(model, "act", x, method, target=2), dtype="float32", n_ops=MAP_OPS)
    with pytest.raises(InvalidArgument, match="target"):
        hookkit.cam(model, "act", x, target=fw.tensor(np.array([0, 1, 3, 0]), dtype="int64"))
    maps = hookkit.cam(model, "act", x)
    for metric in ("confidence-drop", "road-combined"):
        by_list = hookkit.cam_metric(model, x, maps, target=labels.tolist(), metric=metric)
        np.testing.assert_array_equal(hookkit.cam_metric(model, x, maps, target=fw.tensor(labels, dtype="int64"), metric=metric), by_list)


def shared_relu(fw, separate: bool):
    """One ReLU module called on 4 then 6 channels (a ResNet bottleneck's); ``separate``: one each."""

    class Shared(fw.Layer):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2, self.fc = fw.conv2d(2, 4, 3, padding=1), fw.conv2d(4, 6, 3, padding=1), fw.linear(6, 3)
            self.act = fw.nn.ReLU()
            self.act2 = fw.nn.ReLU() if separate else None

        def forward(self, x):
            h = self.act(self.conv1(x))
            return self.fc((self.act2 or self.act)(self.conv2(h)).flatten(2).mean(-1))

    fw.seed(14)
    model = Shared()
    model.eval()
    return model


@pytest.mark.parametrize("method", ["gradcam", "scorecam", "ablationcam"])
def test_layer_called_twice_explains_its_last_call(fw, method):
    """The map of a module called twice per forward is the map of its last call (AblationCAM replaces that
    call only: replacing both fed 6-channel rows to the 4-channel call, an error)."""
    x = fw.tensor(images(n=2, seed=7))
    shared, separate = shared_relu(fw, False), shared_relu(fw, True)
    np.testing.assert_allclose(hookkit.cam(shared, "act", x, method), hookkit.cam(separate, "act2", x, method), atol=1e-5)
    assert hookkit.remove_all(shared) == 0
