"""hookkit.cam against pytorch-grad-cam: agreement per method and model, time per batch, Paddle vs torch.

Run in the benchmark environment (pytorch-grad-cam is not a hookkit dependency):

    PYTHONPATH=$PWD/src /work/bench-venv/bin/python benchmarks/bench_cam.py [--quick] [--no-time]

Models (random weights): a ResNet-style CNN (BasicBlocks, in-place ReLU and ``out += identity``), a
VGG-style CNN, a ViT (class token + 8 x 8 patch tokens, 2 blocks, and the same with 12 blocks;
pytorch-grad-cam gets the usual ``reshape_transform``) and a Swin-style model whose layers output channels-last ``[N, h, w, C]``
(pytorch-grad-cam gets a permuting ``reshape_transform``). Their side is adjusted in three documented
ways, each making it compute what it means to: (1) the activation is copied when it is kept, as
``.cpu()`` does on a GPU (on a CPU it is the layer's own storage, which a later in-place op
overwrites); (2) the first principal component's sign follows hookkit's convention (the projection's
largest-magnitude value positive, pytorch-grad-cam's own ``get_2d_projection_with_sign_correction``;
an SVD's sign is arbitrary); (3) AblationCAM's ablation value is computed once from the
layer's output (its layer recomputes ``min(output)`` after ablating each row, so row k gets
``min - k * 1e7``). ViT and Swin use its ``AblationLayerVit``; FullGrad gets no reshape_transform
(it applies it to every bias layer).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.abc
import importlib.machinery
import io
import os
import sys
import time
import types

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import torch
from torch import nn

import hookkit

METHODS = {
    "gradcam": "GradCAM",
    "hirescam": "HiResCAM",
    "gradcam++": "GradCAMPlusPlus",
    "xgradcam": "XGradCAM",
    "gradcam-elementwise": "GradCAMElementWise",
    "layercam": "LayerCAM",
    "eigencam": "EigenCAM",
    "eigengradcam": "EigenGradCAM",
    "scorecam": "ScoreCAM",
    "ablationcam": "AblationCAM",
    "fullgrad": "FullGrad",
}


# -- pytorch-grad-cam, imported without torchvision, adjusted as the module docstring says ----------
def import_grad_cam() -> types.ModuleType:
    class _Stub(types.ModuleType):
        def __getattr__(self, attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            return type(attr, (), {"__init__": lambda self, *a, **k: None})

    class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path=None, target=None):
            if name == "torchvision" or name.startswith("torchvision."):
                return importlib.machinery.ModuleSpec(name, self, is_package=True)
            return None

        def create_module(self, spec):
            mod = _Stub(spec.name)
            mod.__path__ = []
            return mod

        def exec_module(self, module):
            pass

    sys.meta_path.insert(0, _Finder())
    import pytorch_grad_cam as gc
    from pytorch_grad_cam import ablation_layer, activations_and_gradients, base_cam

    def save_activation(self, module, input, output):  # (1) a copy, as on a GPU
        a = output
        if self.detach:
            if self.reshape_transform is not None:
                a = self.reshape_transform(a)
            self.activations.append(a.detach().clone())
        else:
            self.activations.append(a)

    activations_and_gradients.ActivationsAndGradients.save_activation = save_activation

    def projection(batch):  # (2) their arithmetic, hookkit's sign convention
        batch = batch.copy()
        batch[np.isnan(batch)] = 0
        out = []
        for a in batch:
            r = a.reshape(a.shape[0], -1).transpose()
            r = r - r.mean(axis=0)
            _, _, vt = np.linalg.svd(r, full_matrices=True)
            proj = r @ vt[0]
            proj = -proj if abs(proj.min()) > abs(proj.max()) else proj
            out.append(proj.reshape(a.shape[1:]))
        return np.float32(out)

    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("pytorch_grad_cam") and hasattr(mod, "get_2d_projection"):
            mod.get_2d_projection = projection

    def set_next_batch(self, input_batch_index, activations, num_channels_to_ablate):  # (3) min once
        a = activations[input_batch_index].clone().unsqueeze(0)
        self.activations = a.repeat(num_channels_to_ablate, *[1] * (a.dim() - 1))
        self.low = torch.min(self.activations)

    def ablate(self, x, vit=False):
        out = self.activations
        if vit:
            out = out.transpose(1, out.dim() - 1)
        value = 0 if self.low == 0 else self.low - 1e7
        for i in range(out.size(0)):
            out[i, self.indices[i], :] = value
        return out.transpose(out.dim() - 1, 1) if vit else out

    ablation_layer.AblationLayer.set_next_batch = set_next_batch
    ablation_layer.AblationLayerVit.set_next_batch = set_next_batch
    ablation_layer.AblationLayer.__call__ = lambda self, x: ablate(self, x)
    ablation_layer.AblationLayerVit.__call__ = lambda self, x: ablate(self, x, vit=True)
    del base_cam
    return gc


# -- models ------------------------------------------------------------------------------------------
class Block(nn.Module):
    """A ResNet BasicBlock; ``down`` is registered first, in forward order (see ``fullgrad_order``)."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.down = (
            None if stride == 1 and cin == cout else nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        )
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class ResNetish(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True))
        self.layer1, self.layer2, self.layer3 = Block(16, 16), Block(16, 32, 2), Block(32, 64, 2)
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = self.layer3(self.layer2(self.layer1(self.stem(x))))
        return self.fc(x.mean((2, 3)))


def vgg() -> nn.Module:
    r = lambda: nn.ReLU(inplace=True)  # noqa: E731
    features = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), r(), nn.Conv2d(16, 16, 3, padding=1), r(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), r(), nn.Conv2d(32, 32, 3, padding=1), r(), nn.MaxPool2d(2),
    )  # fmt: skip
    return nn.Sequential(features, nn.Flatten(), nn.Linear(32 * 8 * 8, 64), nn.ReLU(), nn.Linear(64, 10))


class ViTBlock(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, d: int = 32, patch: int = 4, size: int = 32, depth: int = 2, classes: int = 10):
        super().__init__()
        self.embed = nn.Conv2d(3, d, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.5)
        self.pos = nn.Parameter(torch.randn(1, 1 + (size // patch) ** 2, d) * 0.5)
        self.blocks = nn.Sequential(*[ViTBlock(d, 4) for _ in range(depth)])
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        t = self.embed(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls.expand(len(t), -1, -1), t], 1) + self.pos
        return self.head(self.norm(self.blocks(t))[:, 0])


class SwinBlock(nn.Module):
    """Channels-last all the way: a depthwise conv mixes positions, an MLP mixes channels."""

    def __init__(self, d: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.mix = nn.Conv2d(d, d, 3, padding=1, groups=d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x):  # [N, h, w, C]
        x = x + self.mix(self.norm1(x).permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        return x + self.mlp(self.norm2(x))


class Swinish(nn.Module):
    def __init__(self, d: int = 32, classes: int = 10):
        super().__init__()
        self.embed = nn.Conv2d(3, d, 4, 4)
        self.stage1 = SwinBlock(d)
        self.merge = nn.Linear(4 * d, 2 * d)
        self.stage2 = SwinBlock(2 * d)
        self.norm = nn.LayerNorm(2 * d)
        self.head = nn.Linear(2 * d, classes)

    def forward(self, x):
        x = self.stage1(self.embed(x).permute(0, 2, 3, 1))  # [N, 8, 8, d]
        n, h, w, c = x.shape
        x = x.reshape(n, h // 2, 2, w // 2, 2, c).permute(0, 1, 3, 2, 4, 5).reshape(n, h // 2, w // 2, 4 * c)
        x = self.norm(self.stage2(self.merge(x)))  # [N, 4, 4, 2d]
        return self.head(x.mean((1, 2)))


def vit_reshape(t):
    return t[:, 1:, :].reshape(t.size(0), 8, 8, t.size(2)).permute(0, 3, 1, 2)


def nhwc_reshape(t):
    return t.permute(0, 3, 1, 2)


def randomize_bn(model: nn.Module) -> nn.Module:
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    return model.eval()


def models():
    torch.manual_seed(0)
    return {
        # name: (model, our layer, their layer, their reshape_transform, ViT-style ablation)
        "ResNet-style": (m := randomize_bn(ResNetish()), "layer3", m.layer3, None, False),
        "VGG-style": (v := vgg().eval(), "0.7", v[0][7], None, False),
        "ViT (tokens)": (t := ViT().eval(), "blocks.1.norm1", t.blocks[1].norm1, vit_reshape, True),
        "Swin-style (NHWC)": (s := Swinish().eval(), "stage2.norm2", s.stage2.norm2, nhwc_reshape, True),
        # the depth of ViT-B or DeiT-Tiny (12 blocks), the layer in the last block as pytorch-grad-cam's tutorial
        "ViT-12 (tokens)": (t12 := ViT(depth=12).eval(), "blocks.11.norm1", t12.blocks[11].norm1, vit_reshape, True),
    }


# -- runs --------------------------------------------------------------------------------------------
def theirs(gc, method: str, model, layer, reshape, vit: bool, x, target):
    cls = getattr(gc, METHODS[method])
    kw = {}
    if method == "ablationcam":
        from pytorch_grad_cam.ablation_layer import AblationLayer, AblationLayerVit

        kw["ablation_layer"] = AblationLayerVit() if vit else AblationLayer()
    targets = None if target is None else [gc.utils.model_targets.ClassifierOutputTarget(int(t)) for t in target]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        with cls(model=model, target_layers=[layer], reshape_transform=None if method == "fullgrad" else reshape, **kw) as cam:
            if method == "scorecam":
                cam.batch_size = 16
            return cam(input_tensor=x, targets=targets)


def ours(method: str, model, layer: str, x, target):
    return hookkit.cam(model, layer, x, method, target=None if target is None else list(target))


def agreement(gc, quick: bool) -> float:
    worst = 0.0
    rows = []
    ms = models()
    for mname, (model, ln, layer, reshape, vit) in ms.items():
        for method in METHODS:
            diffs = []
            for seed in (1, 2) if not quick else (1,):
                x = torch.randn(8 if not quick else 4, 3, 32, 32, generator=torch.Generator().manual_seed(seed))
                for target in (None, np.arange(len(x)) % 10):
                    a = ours(method, model, ln, x, target)
                    b = theirs(gc, method, model, layer, reshape, vit, x, target)
                    diffs.append(float(np.abs(a - b).max()))
            rows.append((mname, method, max(diffs)))
            worst = max(worst, max(diffs))
            print(f"  {mname:18s} {method:20s} max abs diff {max(diffs):.1e}", flush=True)
    print("\n| method | " + " | ".join(ms) + " |")
    print("|---|" + "---|" * len(ms))
    for method in METHODS:
        cells = [f"{d:.1e}" for (mn, me, d) in rows if me == method]
        print(f"| {method} | " + " | ".join(cells) + " |")
    return worst


def timing(gc, repeats: int, methods: list[str]) -> None:
    ms = models()
    print("\n| method | " + " | ".join(ms) + " |")
    print("|---|" + "---|" * len(ms))
    table: dict[str, list[str]] = {m: [] for m in methods}
    for model, ln, layer, reshape, vit in ms.values():
        x = torch.randn(8, 3, 32, 32, generator=torch.Generator().manual_seed(5))
        for method in methods:
            t_ours, t_theirs = [], []
            for _ in range(repeats):  # interleaved
                t0 = time.process_time()
                ours(method, model, ln, x, None)
                t_ours.append(time.process_time() - t0)
                t0 = time.process_time()
                theirs(gc, method, model, layer, reshape, vit, x, None)
                t_theirs.append(time.process_time() - t0)
            r = float(np.median(t_ours) / np.median(t_theirs))
            table[method].append(f"{r:.2f}x ({np.median(t_ours) * 1e3:.0f} / {np.median(t_theirs) * 1e3:.0f} ms)")
    for method in methods:
        print(f"| {method} | " + " | ".join(table[method]) + " |")


def metrics(gc) -> float:
    """cam_metric against pytorch-grad-cam's ROAD classes and CamMultImageConfidenceChange on the
    VGG-style model (imputation noise 0 on both sides: their noise comes from torch's global generator)."""
    from pytorch_grad_cam.metrics import road
    from pytorch_grad_cam.metrics.cam_mult_image import CamMultImageConfidenceChange
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    init = road.NoisyLinearImputer.__init__
    road.NoisyLinearImputer.__init__ = lambda self, noise=0.01, weighting=road.neighbors_weights: init(self, 0.0, weighting)
    model, layer = models()["VGG-style"][:2]
    x = 5 * torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(3))  # logits that move
    target = [1, 4, 2, 8]
    maps = hookkit.cam(model, layer, x, target=target)
    targets = [ClassifierOutputTarget(t) for t in target]
    pcts = [10, 30, 50, 70, 90]
    cases = {
        "road-most-relevant-first": road.ROADMostRelevantFirstAverage(pcts),
        "road-least-relevant-first": road.ROADLeastRelevantFirstAverage(pcts),
        "road-combined": road.ROADCombined(pcts),
        "confidence-drop": CamMultImageConfidenceChange(),
    }
    worst = 0.0
    print("\ncam_metric vs pytorch-grad-cam's metrics (VGG-style, 4 images, percentiles 10..90 step 20, noise 0):")
    for metric, theirs_metric in cases.items():
        with torch.no_grad():
            b = theirs_metric(x, maps, targets, model)
        a = hookkit.cam_metric(model, x, maps, target=target, metric=metric, percentiles=pcts, noise=0.0)
        d = float(np.abs(a - np.asarray(b).reshape(-1)).max())
        worst = max(worst, d)
        print(f"  {metric:26s} max abs diff {d:.1e} (largest score {np.abs(a).max():.2f})")
    road.NoisyLinearImputer.__init__ = init
    return worst


def fullgrad_order(gc) -> None:
    """For information: the ResNet-style model with torchvision's registration order (``downsample`` after
    ``bn2``, called first): pytorch-grad-cam pairs the biases (module order) with gradients (forward order)
    by position, so its FullGrad mixes up two batch norms; hookkit pairs each bias with its own layer."""

    class TorchvisionOrder(Block):
        def __init__(self, cin: int, cout: int, stride: int = 1):
            super().__init__(cin, cout, stride)
            if self._modules.get("down") is not None:
                self.down = self._modules.pop("down")  # registered last

    torch.manual_seed(0)
    model = ResNetish()
    model.layer2, model.layer3 = TorchvisionOrder(16, 32, 2), TorchvisionOrder(32, 64, 2)
    randomize_bn(model)
    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    d = np.abs(
        ours("fullgrad", model, "layer3", x, [1, 2, 3, 4]) - theirs(gc, "fullgrad", model, model.layer3, None, False, x, [1, 2, 3, 4])
    )
    print(f"\nFullGrad, ResNet-style with torchvision's registration order: max abs diff {d.max():.1e} (pytorch-grad-cam mispairs biases)")


# -- Paddle vs torch: the same small models on both, weights copied ---------------------------------
def twin_models():
    """A VGG-style CNN, a ViT-style token model and a channels-last model written once for both
    frameworks; returns [(name, layer, torch model, paddle model)] with the torch weights copied."""
    import paddle

    def build(fw):
        nn = torch.nn if fw == "torch" else paddle.nn
        conv = nn.Conv2d if fw == "torch" else nn.Conv2D
        pool = nn.MaxPool2d if fw == "torch" else nn.MaxPool2D
        perm = (lambda t, p: t.permute(*p)) if fw == "torch" else (lambda t, p: t.transpose(list(p)))
        cat = (lambda ts: torch.cat(ts, 1)) if fw == "torch" else (lambda ts: paddle.concat(ts, 1))
        Layer = nn.Module if fw == "torch" else nn.Layer

        class VGG(Layer):
            def __init__(self):
                super().__init__()
                self.features = nn.Sequential(conv(3, 8, 3, padding=1), nn.ReLU(), conv(8, 16, 3, padding=1), nn.ReLU(), pool(2),
                                              conv(16, 16, 3, padding=1), nn.ReLU(), pool(2))  # fmt: skip
                self.fc = nn.Linear(16 * 8 * 8, 10)

            def forward(self, x):
                return self.fc(self.features(x).flatten(1))

        class Tokens(Layer):
            def __init__(self):
                super().__init__()
                self.embed = conv(3, 16, 4, stride=4)
                self.cls = nn.Linear(1, 16)  # the class token: cls.weight[:, 0] (a parameter both frameworks copy alike)
                self.norm1 = nn.LayerNorm(16)
                self.q, self.k, self.v = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16)
                self.norm2 = nn.LayerNorm(16)
                self.head = nn.Linear(16, 10)

            def forward(self, x):
                t = perm(self.embed(x).flatten(2), (0, 2, 1))  # [N, 64, 16]
                one = x[:, :1, :1, 0] * 0 + 1  # [N, 1, 1] of ones
                t = cat([self.cls(one), t])  # [N, 65, 16]
                h = self.norm1(t)
                att = (self.q(h) @ perm(self.k(h), (0, 2, 1))) / 4.0
                att = torch.softmax(att, -1) if fw == "torch" else paddle.nn.functional.softmax(att, -1)
                t = t + att @ self.v(h)
                return self.head(self.norm2(t)[:, 0])

        class NHWC(Layer):
            def __init__(self):
                super().__init__()
                self.embed = conv(3, 16, 4, stride=4)
                self.norm = nn.LayerNorm(16)
                self.mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))
                self.head = nn.Linear(16, 10)

            def forward(self, x):
                h = perm(self.embed(x), (0, 2, 3, 1))  # [N, 8, 8, 16]
                h = h + self.mlp(self.norm(h))
                return self.head(h.mean(1).mean(1))

        return {"VGG-style": (VGG(), "features.5"), "ViT-style (tokens)": (Tokens(), "norm1"), "channels-last": (NHWC(), "norm")}

    torch.manual_seed(3)
    th, pd = build("torch"), build("paddle")
    out = []
    for name in th:
        tm, layer = th[name]
        pm, _ = pd[name]
        state = {}
        for k, v in tm.state_dict().items():
            a = v.detach().numpy()
            is_linear = isinstance(tm.get_submodule(k.rsplit(".", 1)[0]), nn.Linear)
            state[k] = a.T if is_linear and k.endswith("weight") else a
        pm.set_state_dict(state)
        tm.eval()
        pm.eval()
        out.append((name, layer, tm, pm))
    return out


def paddle_vs_torch() -> float:
    import paddle

    print("\nPaddle vs torch, the same weights (max abs difference over 2 inputs x 2 targets):")
    rows, worst = [], 0.0
    for name, layer, tm, pm in twin_models():
        cells = []
        for method in METHODS:
            d = 0.0
            for seed in (1, 2):
                x = np.random.default_rng(seed).standard_normal((4, 3, 32, 32)).astype(np.float32)
                for target in (None, [1, 3, 5, 7]):
                    a = hookkit.cam(tm, layer, torch.tensor(x), method, target=target)
                    b = hookkit.cam(pm, layer, paddle.to_tensor(x), method, target=target)
                    d = max(d, float(np.abs(a - b).max()))
            cells.append(d)
            worst = max(worst, d)
        rows.append((name, cells))
    print("\n| method | " + " | ".join(n for n, _ in rows) + " |")
    print("|---|" + "---|" * len(rows))
    for i, method in enumerate(METHODS):
        print(f"| {method} | " + " | ".join(f"{cells[i]:.1e}" for _, cells in rows) + " |")
    print(f"worst: {worst:.1e}")
    return worst


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-time", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--time-only", metavar="METHODS", help="only the timing table, for these methods (comma-separated)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    gc = import_grad_cam()
    if args.time_only:
        timing(gc, args.repeats, args.time_only.split(","))
        return 0
    print("agreement with pytorch-grad-cam (max abs difference over inputs and targets):")
    worst = agreement(gc, args.quick)
    print(f"\nworst: {worst:.1e} ({'OK' if worst <= 1e-4 else 'FAIL'}: tolerance 1e-4)")
    fullgrad_order(gc)
    metrics(gc)
    paddle_vs_torch()
    if not args.no_time:
        print("\ntime per batch of 8 (CPU time, median of interleaved runs): hookkit / pytorch-grad-cam")
        timing(gc, args.repeats, list(METHODS))
    return 0 if worst <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
