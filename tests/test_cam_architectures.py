"""hookkit.cam on Hugging Face vision architectures built from small configs (random weights, no
download) and on the edge cases an outside check against pytorch-grad-cam found: the layout hookkit
infers equals the reshape a user would write, a layer that folds positions into the batch axis is
refused, register tokens behind a small grid, tensor targets, non-float32 models."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit
from hookkit.analyses.cam.layouts import token_grid
from hookkit.core.validate import InvalidArgument
from tolerance import MAP_OPS, assert_close

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SMALL = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32, "num_labels": 4,
         "image_size": 32, "patch_size": 8}  # fmt: skip


def tokens(prefix: int, h: int, w: int):
    """The reshape_transform users write for pytorch-grad-cam: drop the prefix, tokens to [N, C, h, w]."""
    return lambda t: t[:, prefix:, :].reshape(t.size(0), h, w, t.size(2)).permute(0, 3, 1, 2)


def hf(name: str, config: str, **kw):
    torch.manual_seed(0)
    return getattr(transformers, name)(getattr(transformers, config)(**kw)).eval()


def inputs(n: int = 3, size: tuple[int, int] = (32, 32)):
    return torch.randn(n, 3, *size, generator=torch.Generator().manual_seed(1))


def test_token_grid_prefers_the_exact_grid_over_fewer_prefix_tokens():
    # 1 class + 4 register tokens before a 4 x 4 grid: 21 tokens also read as 1 prefix + 4 x 5 (within rounding)
    assert token_grid(21, (32, 32)) == (5, (4, 4))
    assert token_grid(37, (32, 64)) == (5, (4, 8))  # 1 + 4 registers + 4 x 8; not 1 + 4 x 9
    assert token_grid(17, (32, 32)) == (1, (4, 4))  # ties (1 + 4 x 4, 8 + 3 x 3): the fewest prefix tokens
    assert token_grid(197, (224, 224)) == (1, (14, 14))
    assert token_grid(66, (32, 32)) == (2, (8, 8))  # DeiT: class + distillation token


@pytest.mark.parametrize(
    ("name", "config", "kw", "layer", "reshape"),
    [
        ("ViTForImageClassification", "ViTConfig", SMALL, "vit.layers.0.layernorm_before", tokens(1, 4, 4)),
        ("DeiTForImageClassificationWithTeacher", "DeiTConfig", SMALL, "deit.layers.0.layernorm_before", tokens(2, 4, 4)),
        ("Dinov2WithRegistersForImageClassification", "Dinov2WithRegistersConfig", {**SMALL, "num_register_tokens": 4},
         "dinov2_with_registers.encoder.layer.0.norm1", tokens(5, 4, 4)),
        ("SwinForImageClassification", "SwinConfig",
         {"image_size": 32, "patch_size": 4, "embed_dim": 8, "depths": [1], "num_heads": [2], "window_size": 4, "num_labels": 4},
         "swin.encoder.layers.0.blocks.0.layernorm_before", tokens(0, 8, 8)),
        ("ConvNextForImageClassification", "ConvNextConfig", {"num_stages": 2, "hidden_sizes": [6, 12], "depths": [1, 1], "num_labels": 4},
         "convnext.encoder.stages.1.layers.0.layernorm", lambda t: t.permute(0, 3, 1, 2)),
    ],
)  # fmt: skip
def test_hf_layout_inferred_equals_the_users_reshape(torch_fw, name, config, kw, layer, reshape):
    if not hasattr(transformers, name):
        pytest.skip(f"transformers has no {name}")
    model = hf(name, config, **kw)
    x = inputs()
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    for method in ("gradcam", "ablationcam"):
        inferred = hookkit.cam(model, layer, x, method, target=[0, 1, 3])  # the ModelOutput taken as it is
        explicit = hookkit.cam(model, layer, x, method, target=[0, 1, 3], reshape=reshape)
        assert inferred.shape == (3, 32, 32)
        assert_close(inferred, explicit, dtype="float32", n_ops=MAP_OPS)
        assert inferred.reshape(3, -1).std(1).min() > 0.01  # a real map, not a constant
    assert hookkit.remove_all(model) == 0
    assert all(bool((p.grad == 1).all()) for p in model.parameters())


class Folding(torch.nn.Module):
    """MobileViT's pattern: 2 x 2 patches folded into the batch axis, tokens [N * 4, P, C] in between."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, 2, 1)
        self.mix = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        h = self.conv(x)  # [N, 8, 16, 16]
        n, c, hh, ww = h.shape
        t = h.reshape(n, c, hh // 2, 2, ww // 2, 2).permute(0, 3, 5, 2, 4, 1).reshape(n * 4, hh * ww // 4, c)
        t = self.mix(t)  # [N * 4, 64, 8]
        return self.head(t.reshape(n, -1, c).mean(1))


def test_layer_folding_positions_into_the_batch_is_refused(torch_fw):
    model = Folding().eval()
    with pytest.raises(InvalidArgument, match=r"layer 'mix' outputs \[12, 64, 8\].*12 rows for the 3 inputs.*reshape="):
        hookkit.cam(model, "mix", inputs())
    assert hookkit.remove_all(model) == 0
    unfold = lambda t: t.reshape(3, 2, 2, 8, 8, 8).permute(0, 5, 3, 1, 4, 2).reshape(3, 8, 16, 16)  # noqa: E731
    assert hookkit.cam(model, "mix", inputs(), reshape=unfold).shape == (3, 32, 32)  # reshape= still unfolds it


def test_mobilevit_stage_maps_and_its_transformer_refused(torch_fw):
    if not hasattr(transformers, "MobileViTForImageClassification"):
        pytest.skip("transformers has no MobileViT")
    cfg = {"image_size": 32, "patch_size": 2, "hidden_sizes": [8, 8, 8], "neck_hidden_sizes": [4, 4, 8, 8, 8, 8, 16],
           "num_labels": 4}  # fmt: skip
    model = hf("MobileViTForImageClassification", "MobileViTConfig", **cfg)
    assert hookkit.cam(model, "mobilevit.encoder.layer.2", inputs(2), "gradcam").shape == (2, 32, 32)
    with pytest.raises(InvalidArgument, match="rows for the 2 inputs"):
        hookkit.cam(model, "mobilevit.encoder.layer.2.transformer", inputs(2))
    assert hookkit.remove_all(model) == 0


def small_cnn():
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 6, 3, 2, 1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6, 3)).eval()  # fmt: skip


@pytest.mark.parametrize("method", ["gradcam", "eigencam", "scorecam", "ablationcam", "fullgrad"])
def test_maps_are_float32_for_float64_and_bfloat16_models(torch_fw, method):
    model, x = small_cnn(), inputs(3, (16, 16))
    ref = hookkit.cam(model, "2", x, method)
    double = hookkit.cam(model.double(), "2", x.double(), method)
    assert double.dtype == np.float32
    np.testing.assert_allclose(double, ref, atol=1e-5)
    half = hookkit.cam(model.bfloat16(), "2", x.bfloat16(), method, target=lambda o: o[:, 1])  # ScoreCAM's masks: bfloat16
    assert half.dtype == np.float32 and np.isfinite(half).all()
    if method != "fullgrad":  # FullGrad sums every bias term's bfloat16 gradient: coarse
        np.testing.assert_allclose(half, hookkit.cam(small_cnn(), "2", x, method, target=1), atol=0.1)


def test_stream_takes_numpy_and_tensor_class_indices(torch_fw, tmp_path):
    model = small_cnn()
    batches = [inputs(2, (16, 16)), inputs(3, (16, 16)) * 2]
    expected = np.concatenate([hookkit.cam(model, "2", b, target=2) for b in batches])
    for i, target in enumerate((np.int64(2), torch.tensor(2))):
        feats = hookkit.cam(model, "2", batches, target=target, out=tmp_path / f"cams{i}")
        assert_close(feats["cam"][:], expected, dtype="float32", n_ops=MAP_OPS)
