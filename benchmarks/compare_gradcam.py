"""hookkit.gradcam / gradcam_plus_plus against pytorch-grad-cam's GradCAM / GradCAMPlusPlus.

Run in the comparison environment (pytorch-grad-cam is not a hookkit dependency):

    python3 -m venv /work/cmp-venv
    /work/cmp-venv/bin/pip install /opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl
    /work/cmp-venv/bin/pip install grad-cam -c /tmp/torch-constraint.txt
    /work/cmp-venv/bin/pip install -e /work/main
    /work/cmp-venv/bin/python benchmarks/compare_gradcam.py [--png cmp.png]

Prints the max absolute difference per case; exits 1 if any exceeds 1e-5.
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
    print(f"worst max abs difference: {worst:.2e} ({'OK' if worst <= 1e-5 else 'FAIL'}: tolerance 1e-5)")
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
