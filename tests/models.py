"""Small real models written once for both frameworks, and a uniform tensor API for tests."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np


class Framework:
    """What a test needs from a framework, with one spelling for both."""

    def __init__(self, name: str):
        self.name = name
        self.lib = importlib.import_module(name)
        self.nn = self.lib.nn
        self.F = self.lib.nn.functional
        self.Layer = self.nn.Module if name == "torch" else self.nn.Layer

    # -- tensors ------------------------------------------------------------------------------------
    def seed(self, n: int) -> None:
        self.lib.manual_seed(n) if self.name == "torch" else self.lib.seed(n)
        np.random.seed(n)

    def tensor(self, data: Any, requires_grad: bool = False, dtype: str = "float32") -> Any:
        array = np.asarray(data, dtype=dtype)
        if self.name == "torch":
            return self.lib.tensor(array, requires_grad=requires_grad)
        t = self.lib.to_tensor(array)
        t.stop_gradient = not requires_grad
        return t

    def randn(self, *shape: int, requires_grad: bool = False) -> Any:
        return self.tensor(np.random.randn(*shape), requires_grad=requires_grad)

    def numpy(self, t: Any) -> np.ndarray:
        return t.detach().cpu().numpy() if self.name == "torch" else t.numpy()

    def grad(self, t: Any) -> np.ndarray | None:
        g = t.grad
        return None if g is None else self.numpy(g)

    def requires_grad(self, t: Any) -> bool:
        return t.requires_grad if self.name == "torch" else not t.stop_gradient

    def no_grad(self) -> Any:
        return self.lib.no_grad()

    # -- layers ---------------------------------------------------------------------------------
    def linear(self, i: int, o: int) -> Any:
        return self.nn.Linear(i, o)

    def conv2d(self, i: int, o: int, k: int, **kw: Any) -> Any:
        return self.nn.Conv2d(i, o, k, **kw) if self.name == "torch" else self.nn.Conv2D(i, o, k, **kw)

    def batchnorm2d(self, c: int) -> Any:
        return self.nn.BatchNorm2d(c) if self.name == "torch" else self.nn.BatchNorm2D(c)

    def maxpool2d(self, k: int) -> Any:
        return self.nn.MaxPool2d(k) if self.name == "torch" else self.nn.MaxPool2D(k)

    def dropout2d(self, p: float) -> Any:
        return self.nn.Dropout2d(p) if self.name == "torch" else self.nn.Dropout2D(p)

    def sequential(self, *layers: Any) -> Any:
        return self.nn.Sequential(*layers)

    def relu(self, inplace: bool = False) -> Any:
        return self.nn.ReLU(inplace=inplace) if self.name == "torch" else self.nn.ReLU()

    def flatten(self) -> Any:
        return self.nn.Flatten()

    def params(self, model: Any) -> list:
        return list(model.parameters())

    def adam(self, model: Any, lr: float = 1e-3) -> Any:
        if self.name == "torch":
            return self.lib.optim.Adam(model.parameters(), lr=lr)
        return self.lib.optimizer.Adam(learning_rate=lr, parameters=model.parameters())

    def step(self, opt: Any) -> None:
        opt.step()
        opt.zero_grad() if self.name == "torch" else opt.clear_grad()

    def cross_entropy(self, logits: Any, labels: Any) -> Any:
        return self.F.cross_entropy(logits, labels)

    def labels(self, data: Any) -> Any:
        array = np.asarray(data, dtype="int64")
        return self.lib.tensor(array) if self.name == "torch" else self.lib.to_tensor(array)

    # -- models ---------------------------------------------------------------------------------
    def mlp(self, sizes: tuple[int, ...] = (5, 10, 3)) -> Any:
        layers: list[Any] = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [self.linear(a, b), self.relu()]
        return self.sequential(*layers[:-1])

    def small_cnn(self, in_ch: int = 1, n_classes: int = 10, width: int = 8) -> Any:
        """conv-bn-relu-pool, conv-relu-pool, flatten, linear: for 8x8 (digits) or larger inputs."""
        fw = self

        class SmallCNN(fw.Layer):
            def __init__(self) -> None:
                super().__init__()
                self.conv1 = fw.conv2d(in_ch, width, 3, padding=1)
                self.bn1 = fw.batchnorm2d(width)
                self.relu1 = fw.relu()
                self.pool1 = fw.maxpool2d(2)
                self.conv2 = fw.conv2d(width, 2 * width, 3, padding=1)
                self.relu2 = fw.relu()
                self.pool2 = fw.maxpool2d(2)
                self.flatten = fw.flatten()
                self.fc = fw.linear(2 * width * 2 * 2, n_classes)

            def forward(self, x: Any) -> Any:
                x = self.pool1(self.relu1(self.bn1(self.conv1(x))))
                x = self.pool2(self.relu2(self.conv2(x)))
                return self.fc(self.flatten(x))

        return SmallCNN()

    def shared_block_model(self) -> Any:
        """A model that calls one layer three times in one forward."""
        fw = self

        class Repeat(fw.Layer):
            def __init__(self) -> None:
                super().__init__()
                self.inp = fw.linear(4, 6)
                self.block = fw.linear(6, 6)
                self.out = fw.linear(6, 2)

            def forward(self, x: Any) -> Any:
                x = self.inp(x)
                for _ in range(3):
                    x = self.block(x).tanh() if fw.name == "torch" else fw.lib.tanh(self.block(x))
                return self.out(x)

        return Repeat()


_cache: dict[str, Framework] = {}


def make_framework(name: str) -> Framework:
    if name not in _cache:
        _cache[name] = Framework(name)
    return _cache[name]


def hooks_left(model: Any) -> list[str]:
    """Names of the layers that still carry a hookkit consumer or any native forward hook."""
    from hookkit.backends import backend_for
    from hookkit.core import router

    left = []
    for name, layer in backend_for(model).named_layers(model):
        native = [getattr(layer, a, None) for a in ("_forward_hooks", "_forward_pre_hooks", "_forward_post_hooks")]
        if any(router.attached(layer).values()) or any(native):
            left.append(name)
    return left
