"""hookkit.gradcam / gradcam_plus_plus against pytorch-grad-cam's GradCAM / GradCAMPlusPlus.

Run in the comparison environment (pytorch-grad-cam is not a hookkit dependency):

    python3 -m venv /work/cmp-venv
    /work/cmp-venv/bin/pip install /opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl
    /work/cmp-venv/bin/pip install grad-cam -c /tmp/torch-constraint.txt
    /work/cmp-venv/bin/pip install -e /work/main
    /work/cmp-venv/bin/python benchmarks/compare_gradcam.py [--png cmp.png]

Prints the max absolute difference per case; exits 1 if any exceeds 1e-5 (1e-4 for the layers
followed by in-place ops, compared with pytorch-grad-cam's result where its activation is a copy).
"""

from __future__ import annotations

import argparse
import sys
import types

import numpy as np
import torch
from torch import nn


def _import_grad_cam():
    try:
        import pytorch_grad_cam  # noqa: F401
    except Exception:
        # torchvision may not import against this CPU torch: stub the few names grad-cam imports
        # at module level (only its image helpers use them; GradCAM itself does not).
        import importlib.abc
        import importlib.machinery

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

        for name in [n for n in sys.modules if n.startswith(("torchvision", "pytorch_grad_cam"))]:
            del sys.modules[name]
        sys.meta_path.insert(0, _Finder())
    from pytorch_grad_cam import GradCAM, GradCAMPlusPlus
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    return GradCAM, GradCAMPlusPlus, ClassifierOutputTarget


class Net(nn.Module):
    def __init__(self, stride: int = 1, n_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1, stride=stride),
            nn.ReLU(),
            nn.Conv2d(32, 32, 3, padding=1),
            nn.ReLU(),
        )
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, n_classes))

    def forward(self, x):
        return self.head(self.features(x))


class InplaceNet(nn.Module):
    """A conv followed by ``ReLU(inplace=True)`` and a ResNet BasicBlock whose ``bn2`` output is then
    changed in place by ``out += identity``: the layers whose Grad-CAM used to raise KeyError."""

    def __init__(self, n_classes: int = 10):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.relu = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, n_classes))

    def forward(self, x):
        identity = self.relu(self.conv(x))
        out = self.relu(self.bn1(self.conv1(identity)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.head(self.relu(out))


def _cloning(cam):
    """pytorch-grad-cam keeping ``output.cpu().detach()``: on a GPU ``.cpu()`` copies, so the
    activation is the layer's output; on a CPU it is the same storage, which the in-place op after
    the layer then overwrites. Cloning gives its GPU result on this CPU machine."""
    act = cam.activations_and_grads

    def save_activation(module, input, output):
        act.activations.append(output.detach().clone())

    for h in act.handles[::2]:
        h.remove()
    act.handles = [h for i, h in enumerate(act.handles) if i % 2]  # keep the gradient hooks; place cloning activation hooks
    for layer in cam.target_layers:
        act.handles.append(layer.register_forward_hook(save_activation))
    return cam


def inplace_cases(hookkit, GradCAM, GradCAMPlusPlus, ClassifierOutputTarget) -> float:
    """Layers followed by in-place ops: hookkit vs pytorch-grad-cam with a copied activation (its
    GPU result), and for information vs its CPU result (activation overwritten by the in-place op)."""
    worst = 0.0
    torch.manual_seed(0)
    model = InplaceNet()
    for m in model.modules():  # random BatchNorm statistics, so that bn2's output is not ~conv2's
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
    model.eval()
    x = torch.randn(4, 3, 20, 20)
    for name in ("conv", "bn2"):
        layer = model.get_submodule(name)
        for ours, theirs_cls, label in ((hookkit.gradcam, GradCAM, "GradCAM"), (hookkit.gradcam_plus_plus, GradCAMPlusPlus, "GradCAM++")):
            targets = [ClassifierOutputTarget(t) for t in (3, 1, 4, 1)]
            mine = ours(model, name, x, target=[3, 1, 4, 1])
            with theirs_cls(model=model, target_layers=[layer]) as cam:
                cpu = cam(input_tensor=x, targets=targets)
            with _cloning(theirs_cls(model=model, target_layers=[layer])) as cam:
                copied = cam(input_tensor=x, targets=targets)
            diff = float(np.abs(mine - copied).max())
            worst = max(worst, diff)
            print(
                f"{label:10s} layer {name!r} (in-place op after it): max abs diff {diff:.2e} vs pytorch-grad-cam with the "
                f"activation copied (its GPU result); {float(np.abs(mine - cpu).max()):.2e} vs its CPU result (activation overwritten)"
            )
    return worst


def main() -> int:
    import hookkit

    parser = argparse.ArgumentParser()
    parser.add_argument("--png", default=None, help="write a side-by-side figure of one case")
    args = parser.parse_args()
    GradCAM, GradCAMPlusPlus, ClassifierOutputTarget = _import_grad_cam()

    worst = 0.0
    shown = None
    # (input size, stride of the second conv): integer and non-integer upsampling factors
    for size, stride in [(32, 1), (28, 1), (30, 2), (23, 2), (17, 1)]:
        torch.manual_seed(size)
        model = Net(stride).eval()
        x = torch.randn(4, 3, size, size)
        layer = model.features[7]  # the last conv
        for target in (None, [3, 1, 4, 1]):
            for ours, theirs_cls, label in (
                (hookkit.gradcam, GradCAM, "GradCAM"),
                (hookkit.gradcam_plus_plus, GradCAMPlusPlus, "GradCAM++"),
            ):
                targets = None if target is None else [ClassifierOutputTarget(t) for t in target]
                with theirs_cls(model=model, target_layers=[layer]) as cam:
                    theirs = cam(input_tensor=x, targets=targets)
                mine = ours(model, "features.7", x, target=target)
                diff = float(np.abs(mine - theirs).max())
                worst = max(worst, diff)
                print(
                    f"{label:10s} input {size}x{size}, layer {tuple(model.features[:8](x).shape[-2:])}, target {target}: max abs diff {diff:.2e}"
                )
                if shown is None:
                    shown = (x, mine, theirs, label, size)
    inplace = inplace_cases(hookkit, GradCAM, GradCAMPlusPlus, ClassifierOutputTarget)
    print(f"worst max abs difference: {worst:.2e} ({'OK' if worst <= 1e-5 else 'FAIL'}: tolerance 1e-5)")
    print(f"in-place layers, worst: {inplace:.2e} ({'OK' if inplace <= 1e-4 else 'FAIL'}: tolerance 1e-4)")
    worst = max(worst, inplace / 10)  # the in-place cases are held to 1e-4
    if args.png and shown is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        x, mine, theirs, label, size = shown
        fig, axes = plt.subplots(3, 4, figsize=(9, 7))
        for i in range(4):
            axes[0, i].imshow(mine[i], cmap="jet", vmin=0, vmax=1)
            axes[1, i].imshow(theirs[i], cmap="jet", vmin=0, vmax=1)
            im = axes[2, i].imshow(np.abs(mine[i] - theirs[i]), cmap="magma")
            fig.colorbar(im, ax=axes[2, i], shrink=0.7)
        for ax, name in zip(axes[:, 0], ("hookkit.gradcam", "pytorch-grad-cam", "|difference|")):
            ax.set_ylabel(name)
        for ax in axes.flat:
            ax.set_xticks([])
            ax.set_yticks([])
        fig.suptitle(f"{label}, {size}x{size} inputs, predicted class: max abs diff {np.abs(mine - theirs).max():.1e}")
        fig.savefig(args.png, dpi=90, bbox_inches="tight")
        print(f"figure: {args.png}")
    return 0 if worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
