"""hookkit.cam against pytorch-grad-cam on Hugging Face vision architectures (small configs, random weights).

Run in the benchmark environment:

    PYTHONPATH=$PWD/src /work/bench-venv/bin/python benchmarks/bench_cam_hf.py [--extras] [--conditioning]

Models from ``transformers`` configs (no download): ViT, DeiT with teacher (class + distillation token),
DINOv2 with 4 register tokens (on an 8 x 8 and a 4 x 4 grid), BEiT, Swin (its stages are tokens
``[N, h*w, C]``), ConvNeXt (a stage, channels-first, and a block's channels-last layer norm), ResNet,
MobileViT. Biases and batch-norm statistics are randomized (Hugging Face initializes them to zero /
identity, which leaves FullGrad's bias terms empty) and MobileViT's weights re-drawn (its std-0.02 init
gives constant logits). hookkit gets the ``ModelOutput`` model and infers the layout; pytorch-grad-cam gets
a wrapper returning ``.logits`` and the ``reshape_transform`` a user writes. Their side is adjusted as in
``bench_cam.py`` (activation copied, SVD sign, AblationCAM's minimum once).

``--extras``: several layers (list and glob), ``aug_smooth`` / ``eigen_smooth``, a segmentation-style
callable target, ``batch_size`` below N, FullGrad on the ResNet with pytorch-grad-cam's biases put
in forward order, and ``cam_metric`` against its ROAD and confidence-change metrics. ``--conditioning``: the cases above 1e-4 again in float64, to tell float32 rounding
(amplified by min-max scaling) from a difference in arithmetic.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.modules["torchvision"] = None  # type: ignore[assignment]  # transformers must not import the broken torchvision
import torch  # noqa: E402
import transformers as T  # noqa: E402

del sys.modules["torchvision"]
import numpy as np  # noqa: E402

import hookkit  # noqa: E402
from bench_cam import METHODS, import_grad_cam  # noqa: E402

LABELS = 5


def build() -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, num_labels=LABELS,
                 image_size=32, patch_size=4)  # fmt: skip
    ms = {
        "ViT": T.ViTForImageClassification(T.ViTConfig(**small)),
        "DeiT": T.DeiTForImageClassificationWithTeacher(T.DeiTConfig(**small)),
        "Dinov2-reg": T.Dinov2WithRegistersForImageClassification(T.Dinov2WithRegistersConfig(**small, num_register_tokens=4)),
        "Dinov2-reg-4x4": T.Dinov2WithRegistersForImageClassification(
            T.Dinov2WithRegistersConfig(**{**small, "patch_size": 8}, num_register_tokens=4)
        ),
        "BEiT": T.BeitForImageClassification(T.BeitConfig(**small, use_mean_pooling=True)),
        "Swin": T.SwinForImageClassification(
            T.SwinConfig(image_size=32, patch_size=2, embed_dim=16, depths=[1, 1], num_heads=[2, 4], window_size=4, num_labels=LABELS)
        ),
        "ConvNeXt": T.ConvNextForImageClassification(
            T.ConvNextConfig(hidden_sizes=[12, 24, 40, 48], depths=[1, 1, 1, 1], num_labels=LABELS)
        ),
        "ResNet": T.ResNetForImageClassification(
            T.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16, 24, 32], depths=[1, 1, 1, 1], layer_type="basic", num_labels=LABELS)
        ),
        "MobileViT": T.MobileViTForImageClassification(
            T.MobileViTConfig(
                image_size=32, patch_size=2, hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 12, 12, 16, 16, 24], num_labels=LABELS
            )  # fmt: skip
        ),
    }
    for mod in ms["MobileViT"].modules():
        if isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear)):
            torch.nn.init.kaiming_normal_(mod.weight)
    for m in ms.values():
        for mod in m.modules():
            if isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear, torch.nn.LayerNorm)) and mod.bias is not None:
                mod.bias.data.uniform_(-0.2, 0.2)
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
                mod.weight.data.uniform_(0.5, 1.5)
                mod.bias.data.uniform_(-0.2, 0.2)
        m.eval()
    return ms


class Logits(torch.nn.Module):
    """What a pytorch-grad-cam user writes for a Hugging Face model."""

    def __init__(self, m: torch.nn.Module):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(x).logits


def tokens(prefix: int, h: int):
    return lambda t: t[:, prefix:, :].reshape(t.size(0), h, h, t.size(2)).permute(0, 3, 1, 2)


def cases(ms):
    nhwc = lambda t: t.permute(0, 3, 1, 2)  # noqa: E731
    return {  # name: model, layer, their reshape_transform, ViT-style ablation layer, input size
        "ViT": (ms["ViT"], "vit.layers.1.layernorm_before", tokens(1, 8), True, 32),
        "DeiT (2 prefix)": (ms["DeiT"], "deit.layers.1.layernorm_before", tokens(2, 8), True, 32),
        "DINOv2 + 4 registers": (ms["Dinov2-reg"], "dinov2_with_registers.encoder.layer.1.norm1", tokens(5, 8), True, 32),
        "DINOv2 + 4 reg., 4x4": (ms["Dinov2-reg-4x4"], "dinov2_with_registers.encoder.layer.1.norm1", tokens(5, 4), True, 32),
        "BEiT": (ms["BEiT"], "beit.layers.1.layernorm_before", tokens(1, 8), True, 32),
        "Swin (tokens)": (ms["Swin"], "swin.encoder.layers.1.blocks.0.layernorm_before", tokens(0, 8), True, 32),
        "ConvNeXt stage": (ms["ConvNeXt"], "convnext.encoder.stages.1", None, False, 64),
        "ConvNeXt NHWC norm": (ms["ConvNeXt"], "convnext.encoder.stages.1.layers.0.layernorm", nhwc, True, 64),
        "ResNet": (ms["ResNet"], "resnet.encoder.stages.2", None, False, 64),
        "MobileViT": (ms["MobileViT"], "mobilevit.encoder.layer.2", None, False, 64),
    }


def theirs(gc, method, model, layer, reshape, vit, x, target, **kw):
    from pytorch_grad_cam.ablation_layer import AblationLayer, AblationLayerVit
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    extra = {"ablation_layer": AblationLayerVit() if vit else AblationLayer()} if method == "ablationcam" else {}
    layers = layer if isinstance(layer, list) else [layer]
    targets = None if target is None else [ClassifierOutputTarget(int(t)) for t in target]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        reshape = None if method == "fullgrad" else reshape
        with getattr(gc, METHODS[method])(model=Logits(model), target_layers=layers, reshape_transform=reshape, **extra) as cam:
            if method == "scorecam":
                cam.batch_size = 16
            return cam(input_tensor=x, targets=targets, **kw)


def diff(a: np.ndarray, b: np.ndarray) -> float:
    if np.isnan(a).any() or np.isnan(b).any():
        return float("nan")
    return float(np.abs(a - b).max())


def table(gc, cs) -> dict[tuple[str, str], float]:
    rows, flats = {}, {}
    for name, (model, ln, reshape, vit, size) in cs.items():
        layer = model.get_submodule(ln)
        for method in METHODS:
            x = torch.randn(3, 3, size, size, generator=torch.Generator().manual_seed(1))
            d = max(
                diff(hookkit.cam(model, ln, x, method, target=t), theirs(gc, method, model, layer, reshape, vit, x, t))
                for t in (None, [0, 3, 4])
            )
            flat = hookkit.cam(model, ln, x, method).reshape(3, -1)
            rows[(name, method)] = d
            flats[(name, method)] = bool((flat.max(1) - flat.min(1) < 1e-6).any())
            print(f"  {name:22s} {method:20s} {d:.1e}{' (a constant map)' if flats[(name, method)] else ''}", flush=True)
    names = list(cs)
    print("\n| method | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for method in METHODS:
        print(f"| {method} | " + " | ".join(f"{rows[(n, method)]:.1e}{'*' if flats[(n, method)] else ''}" for n in names) + " |")
    print("(*: the map of at least one image is constant (all <= 0 before relu), a weaker check)")
    return rows


def extras(gc, cs) -> None:
    from pytorch_grad_cam.utils.model_targets import SemanticSegmentationTarget

    print("\nextras (max abs difference):")
    model = cs["ViT"][0]
    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(7))
    names = ["vit.layers.0.layernorm_before", "vit.layers.1.layernorm_before"]
    for method in ("gradcam", "scorecam", "ablationcam", "eigencam"):
        a = hookkit.cam(model, names, x, method, target=[0, 1, 2, 3])
        g = hookkit.cam(model, "vit.layers.*.layernorm_before", x, method, target=[0, 1, 2, 3])
        b = theirs(gc, method, model, [model.get_submodule(n) for n in names], tokens(1, 8), True, x, [0, 1, 2, 3])
        print(f"  ViT, 2 layers (list), {method}: {diff(a, b):.1e}; glob = list: {diff(a, g):.1e}")
    for name in ("ViT", "ResNet", "Swin (tokens)", "ConvNeXt NHWC norm"):
        model, ln, reshape, vit, size = cs[name]
        x = torch.randn(3, 3, size, size, generator=torch.Generator().manual_seed(2))
        worst = {}
        for method in ("gradcam", "gradcam++", "layercam", "eigengradcam", "scorecam", "ablationcam", "fullgrad"):
            for kw in ({"aug_smooth": True}, {"eigen_smooth": True}):
                a = hookkit.cam(model, ln, x, method, target=[1, 2, 3], **kw)
                b = theirs(gc, method, model, model.get_submodule(ln), reshape, vit, x, [1, 2, 3], **kw)
                key = next(iter(kw))
                worst[key] = max(worst.get(key, (0.0, "")), (diff(a, b), method))
        print(f"  {name}, 7 methods: " + ", ".join(f"{k} {d:.1e} ({m})" for k, (d, m) in worst.items()) + " (worst, its method)")

    class Seg(torch.nn.Module):
        def __init__(self):
            super().__init__()
            nn = torch.nn
            self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, 2, 1), nn.ReLU())
            self.head = nn.Conv2d(16, 4, 1)

        def forward(self, x):
            return {"out": torch.nn.functional.interpolate(self.head(self.body(x)), x.shape[2:], mode="bilinear")}

    class SegOut(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(x)["out"]

    torch.manual_seed(0)
    seg = Seg().eval()
    mask = (torch.rand(32, 32) > 0.5).float()
    x = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    worst = 0.0
    for method in METHODS:
        if method == "fullgrad":
            continue
        a = hookkit.cam(seg, "body.3", x, method, target=lambda out: (out["out"][:, 1] * mask).sum((1, 2)))
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            with getattr(gc, METHODS[method])(model=SegOut(seg), target_layers=[seg.body[3]]) as c:
                c.batch_size = 16
                b = c(input_tensor=x, targets=[SemanticSegmentationTarget(1, mask.numpy())] * 3)
        worst = max(worst, diff(a, b))
    print(f"  segmentation-style callable target (a class's pixels under a mask, dict output), 10 methods: {worst:.1e}")
    model = cs["ViT"][0]
    x = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    d = max(
        diff(
            hookkit.cam(model, "vit.layers.1", x, "scorecam", target=t),
            theirs(gc, "scorecam", model, model.vit.layers[1], tokens(1, 8), True, x, t),
        )
        for t in (None, [0, 3, 4])
    )
    print(f"  ViT scorecam at the block's output (maps not constant, unlike at its layer norm): {d:.1e}")
    model, ln, reshape, vit, _ = cs["ViT"]
    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(7))
    for method in ("scorecam", "ablationcam"):
        a = hookkit.cam(model, ln, x, method, batch_size=1, target=lambda o: o.logits[:, 1])
        b = theirs(gc, method, model, model.get_submodule(ln), reshape, vit, x, [1] * 4)
        print(f"  ViT {method} batch_size=1 (< N = 4), callable target: {diff(a, b):.1e}")
    model, ln = cs["ResNet"][:2]
    x = torch.randn(3, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    order = []
    hooks = [
        m.register_forward_hook(lambda mod, i, o: order.append(mod))
        for m in model.modules()
        if isinstance(m, (torch.nn.Conv2d, torch.nn.BatchNorm2d)) and m.bias is not None
    ]
    model(x)
    for h in hooks:
        h.remove()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        c = gc.FullGrad(model=Logits(model), target_layers=[])
        pos = {id(layer): i for i, layer in enumerate(c.target_layers)}
        c.bias_data = [c.bias_data[pos[id(layer)]] for layer in order]
        b = c(input_tensor=x, targets=None)
    print(f"  ResNet FullGrad, pytorch-grad-cam's biases paired in forward order: {diff(hookkit.cam(model, ln, x, 'fullgrad'), b):.1e}")


def metrics(cs) -> None:
    """cam_metric on the ModelOutput models vs pytorch-grad-cam's ROAD and confidence change (noise 0)."""
    from pytorch_grad_cam.metrics import road
    from pytorch_grad_cam.metrics.cam_mult_image import CamMultImageConfidenceChange
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    init = road.NoisyLinearImputer.__init__
    road.NoisyLinearImputer.__init__ = lambda self, noise=0.01, weighting=road.neighbors_weights: init(self, 0.0, weighting)
    pcts, target = [10, 50, 90], [1, 4, 2]
    print("\ncam_metric vs pytorch-grad-cam's metrics (3 images, percentiles 10 / 50 / 90, noise 0):")
    try:
        for name in ("ViT", "Swin (tokens)", "ResNet"):
            model, ln, _, _, size = cs[name]
            x = 3 * torch.randn(3, 3, size, size, generator=torch.Generator().manual_seed(3))
            maps = hookkit.cam(model, ln, x, target=target)
            theirs_metrics = {
                "road-most-relevant-first": road.ROADMostRelevantFirstAverage(pcts),
                "road-least-relevant-first": road.ROADLeastRelevantFirstAverage(pcts),
                "road-combined": road.ROADCombined(pcts),
                "confidence-drop": CamMultImageConfidenceChange(),
            }
            cells = []
            for metric, their in theirs_metrics.items():
                with torch.no_grad():
                    b = np.asarray(their(x, maps, [ClassifierOutputTarget(t) for t in target], Logits(model))).reshape(-1)
                a = hookkit.cam_metric(model, x, maps, target=torch.tensor(target), metric=metric, percentiles=pcts, noise=0.0)
                cells.append(f"{metric} {diff(a, b):.1e} (|score| <= {np.abs(a).max():.1e})")
            print(f"  {name}: " + "; ".join(cells))
    finally:
        road.NoisyLinearImputer.__init__ = init


def conditioning(gc, cs, rows) -> None:
    """Cases over 1e-4: both sides in float32 and in float64 against hookkit's float64 maps (activations
    kept in float64 for this check). Equal arithmetic shows as float64 agreement; pytorch-grad-cam's
    ScoreCAM keeps its scores float32 (``torch.Tensor(scores)``) even for a float64 model."""
    from hookkit.analyses.cam import template as cam_module

    print("\nover 1e-4, in float64 (max abs difference):")
    for (name, method), d in rows.items():
        if not d > 1e-4 or (name, method) == ("ResNet", "fullgrad"):
            continue
        model, ln, reshape, vit, size = cs[name]
        x = torch.randn(3, 3, size, size, generator=torch.Generator().manual_seed(1))
        a32 = hookkit.cam(model, ln, x, method)
        b32 = theirs(gc, method, model, model.get_submodule(ln), reshape, vit, x, None)
        md = copy.deepcopy(model).double()
        keep = cam_module._Run._mapped
        cam_module._Run._mapped = lambda self, layout, t, name: layout.to_channels_first(self.m, t)
        try:
            a64 = hookkit.cam(md, ln, x.double(), method)
        finally:
            cam_module._Run._mapped = keep
        b64 = theirs(gc, method, md, md.get_submodule(ln), reshape, vit, x.double(), None)
        print(
            f"  {name} {method}: hookkit f32 - theirs f32 {diff(a32, b32):.1e}; f64 - f64 {diff(a64, b64):.1e}; "
            f"hookkit f32 - f64 {diff(a32, a64):.1e}; theirs f32 - f64 {diff(b32, a64):.1e}"
        )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--extras", action="store_true")
    parser.add_argument("--conditioning", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    gc = import_grad_cam()
    cs = cases(build())
    print("hookkit.cam vs pytorch-grad-cam on Hugging Face models (max abs difference, 3 images x 2 targets):")
    rows = table(gc, cs)
    if args.extras:
        extras(gc, cs)
        metrics(cs)
    if args.conditioning:
        conditioning(gc, cs, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
