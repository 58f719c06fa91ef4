"""The framework seam is real: a third "framework", written here in numpy, gets hookkit's core
features from one Backend subclass and one ``register_backend`` call, with no change to hookkit.

The framework has what a deep-learning library's layer API has (sublayers, parameters, forward
pre/post hooks with removable handles, a training flag) and no autograd: its backend implements the
required tier (``base.Core``) and nothing else, as base.py allows.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import hookkit
from hookkit.backends import Backend, backend_for, register_backend, registered_backends, unregister_backend
from hookkit.backends.base import Core
from hookkit.core import router


# -- a tiny numpy "framework" ---------------------------------------------------------------------
class _Handle:
    def __init__(self, hooks: dict, key: int):
        self._hooks, self._key = hooks, key

    def remove(self) -> None:
        self._hooks.pop(self._key, None)


class Layer:
    """A layer: sublayers and parameters are attributes (in assignment order), hooks run on call."""

    _ids = itertools.count()

    def __init__(self) -> None:
        object.__setattr__(self, "_layers", {})
        object.__setattr__(self, "_params", {})
        object.__setattr__(self, "_pre", {})
        object.__setattr__(self, "_post", {})
        object.__setattr__(self, "training", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, Layer):
            self._layers[name] = value
        elif isinstance(value, np.ndarray):
            self._params[name] = value
        object.__setattr__(self, name, value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        for hook in list(self._pre.values()):
            new = hook(self, args, kwargs)
            if new is not None:
                args, kwargs = new
        out = self.forward(*args, **kwargs)
        for hook in list(self._post.values()):
            new = hook(self, args, kwargs, out)
            if new is not None:
                out = new
        return out

    def add_hook(self, which: dict, fn: Callable) -> _Handle:
        key = next(self._ids)
        which[key] = fn
        return _Handle(which, key)

    def named_layers(self, prefix: str = "") -> Iterator[tuple[str, Layer]]:
        yield prefix, self
        for name, child in self._layers.items():
            yield from child.named_layers(f"{prefix}.{name}" if prefix else name)

    def train(self, mode: bool = True) -> Layer:
        for _, layer in self.named_layers():
            object.__setattr__(layer, "training", mode)
        return self


class Linear(Layer):
    def __init__(self, n_in: int, n_out: int, rng: np.random.Generator) -> None:
        super().__init__()
        self.weight = rng.standard_normal((n_out, n_in)).astype(np.float32) / np.sqrt(n_in)
        self.bias = np.zeros(n_out, np.float32)

    def forward(self, x: np.ndarray) -> np.ndarray:
        return x @ self.weight.T + self.bias


class ReLU(Layer):
    def forward(self, x: np.ndarray) -> np.ndarray:
        return np.maximum(x, 0)


class MLP(Layer):
    def __init__(self, rng: np.random.Generator) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = Linear(4, 8, rng), ReLU(), Linear(8, 3, rng)

    def forward(self, x: np.ndarray) -> np.ndarray:
        return self.fc2(self.act(self.fc1(x)))


# -- its backend: the required part of the interface only -----------------------------------------
class NumpyBackend(Backend):
    def is_layer(self, obj: Any) -> bool:
        return isinstance(obj, Layer)

    def is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, np.ndarray)

    def named_layers(self, model: Any) -> Iterator[tuple[str, Any]]:
        return model.named_layers()

    def layer_class(self) -> type:
        return Layer

    def children(self, layer: Any) -> list[Any]:
        return list(layer._layers.values())

    def named_parameters(self, layer: Any, recurse: bool = True) -> list[tuple[str, Any]]:
        if not recurse:
            return list(layer._params.items())
        return [(f"{n}.{p}" if n else p, v) for n, m in layer.named_layers() for p, v in m._params.items()]

    def parameters(self, layer: Any, recurse: bool = True) -> list[Any]:
        return [p for _, p in self.named_parameters(layer, recurse)]

    def hook_forward_pre(self, layer: Any, fn: Callable) -> Any:
        return layer.add_hook(layer._pre, fn)

    def hook_forward(self, layer: Any, fn: Callable) -> Any:
        return layer.add_hook(layer._post, fn)

    def requires_grad(self, t: Any) -> bool:
        return False  # no autograd in this framework

    def grad_enabled(self) -> bool:
        return False

    def no_grad(self) -> Any:
        return contextlib.nullcontext()

    def detach(self, t: Any) -> Any:
        return t

    def clone(self, t: Any) -> Any:
        return t.copy()

    def to(self, t: Any, device: Any) -> Any:
        return t

    def device_of(self, t: Any) -> str:
        return "cpu"

    def to_numpy(self, t: Any) -> Any:
        return np.asarray(t)

    def from_numpy(self, array: Any, like: Any = None) -> Any:
        return np.asarray(array)

    def stack(self, ts: Any) -> Any:
        return np.stack(ts)

    def histc(self, t: Any, bins: int, lo: float, hi: float) -> Any:
        return np.histogram(t, bins=bins, range=(lo, hi))[0].astype(np.float32)

    def activation_sums(self, t: Any, near_zero: float) -> Any:
        x = t.astype(np.float64).ravel()
        mean = x.mean()
        return np.array([mean, ((x - mean) ** 2).sum(), np.count_nonzero(x <= near_zero)])


def test_the_required_tier_is_small_documented_and_all_the_numpy_backend_implements():
    required = {n: v for n, v in vars(Core).items() if callable(v) and not n.startswith("_")}
    assert len(required) <= 40
    assert all((v.__doc__ or "").strip() for v in required.values()), [n for n, v in required.items() if not (v.__doc__ or "").strip()]
    stubs = {n for n, v in required.items() if getattr(v, "stub", False)}
    assert {"is_layer", "named_layers", "hook_forward", "to_numpy", "activation_sums"} <= stubs
    assert {n for n in stubs if getattr(NumpyBackend, n) is getattr(Backend, n)} == set()  # every stub implemented
    for name in Backend.__dict__:  # Backend itself adds only the op-family lookup and its name
        assert name in {"family", "name"} or name.startswith("_"), name


def test_every_method_of_the_interface_is_documented():
    methods = {n: getattr(Backend, n) for n in dir(Backend) if not n.startswith("_") and callable(getattr(Backend, n))}
    assert [n for n, m in methods.items() if not (m.__doc__ or "").strip()] == []


def test_a_missing_optional_method_names_its_tier_and_features(numpy_framework):
    backend = backend_for(numpy_framework)
    with pytest.raises(NotImplementedError, match=r"numpy-mlp backend does not implement grads_of\(\) \(tier Gradients.*GradientStats"):
        backend.grads_of(np.ones(2), [np.ones(2)])
    with pytest.raises(NotImplementedError, match=r"dropout\(\) \(tier Interventions.*dropout family"):
        backend.dropout(np.ones(2), 0.5)
    with pytest.raises(NotImplementedError, match="no 'demo_kit' op family"):
        backend.family("demo_kit")


@pytest.fixture
def numpy_framework():
    register_backend("numpy-mlp", module=__name__, backend=NumpyBackend)
    try:
        yield MLP(np.random.default_rng(0))
    finally:
        unregister_backend("numpy-mlp")


def test_the_backend_is_found_through_its_registration(numpy_framework):
    model = numpy_framework
    assert "numpy-mlp" in registered_backends()
    assert backend_for(model).name == "numpy-mlp" and isinstance(backend_for(model), NumpyBackend)
    assert [n for n, _ in hookkit.select(model, hookkit.LEAVES)] == ["fc1", "act", "fc2"]
    with pytest.raises(hookkit.LayerNotFound, match="fc1"):
        hookkit.select(model, "fc9")


def test_unregistered_it_is_unsupported_again(numpy_framework):
    model = numpy_framework
    unregister_backend("numpy-mlp")
    with pytest.raises(hookkit.UnsupportedModel, match="MLP"):
        hookkit.capture(model, "fc1")


def test_capture_records_every_call(numpy_framework):
    model = numpy_framework
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    with hookkit.capture(model, ["fc1", "act"]) as cap:
        model(x)
        model(2 * x)
    np.testing.assert_allclose(cap["fc1"], 2 * x @ model.fc1.weight.T + model.fc1.bias, rtol=1e-6)
    np.testing.assert_array_equal(cap["act"], np.maximum(cap["fc1"], 0))
    assert [(r.step, r.call) for r in cap.calls("fc1")] == [(0, 0), (1, 0)]
    for _, layer in model.named_layers():  # nothing left attached
        assert not layer._pre and not layer._post


def test_on_forward_observes_and_replaces(numpy_framework):
    model = numpy_framework
    x = np.ones((2, 4), np.float32)
    plain = model(x)
    seen = []
    with hookkit.on_forward(model, "act", lambda layer, inputs, out: seen.append(out.shape)):
        with hookkit.on_forward(model, "act", lambda layer, inputs, out: np.zeros_like(out), priority=hookkit.INTERVENTION):
            zeroed = model(x)
    assert seen == [(2, 8)]
    np.testing.assert_allclose(zeroed, np.broadcast_to(model.fc2.bias, zeroed.shape))
    np.testing.assert_array_equal(model(x), plain)
    assert router.attached(model.act) == {e: 0 for e in router.EVENTS}


def test_activation_stats_over_the_backends_reductions(numpy_framework):
    model = numpy_framework
    rng = np.random.default_rng(2)
    batches = [rng.standard_normal((16, 4)).astype(np.float32) for _ in range(3)]
    with hookkit.ActivationStats(model, hist=True) as stats:  # default: the layers with parameters
        for x in batches:
            model(x)
    assert list(stats.names) == ["fc1", "fc2"]
    fc1 = stats.layer_stats("fc1")
    outs = [x @ model.fc1.weight.T + model.fc1.bias for x in batches]
    np.testing.assert_allclose(fc1["mean"], [o.mean() for o in outs], rtol=1e-5)
    np.testing.assert_allclose(fc1["std"], [o.std(ddof=1) for o in outs], rtol=1e-5)
    lo, hi = stats.hist_range
    expected = [np.histogram(o, bins=stats.bins, range=(lo, hi))[0] for o in outs]
    np.testing.assert_array_equal(fc1["hist"], expected)
    model.train(False)
    model(batches[0])  # statistics are taken in training only
    assert len(stats.layer_stats("fc1")["mean"]) == 3


def test_a_backend_registered_by_import_path_loads_on_first_use(numpy_framework):
    register_backend("numpy-mlp", module=__name__, backend=f"{__name__}:NumpyBackend")  # replaces the class registration
    backend = backend_for(numpy_framework)
    assert type(backend).__name__ == "NumpyBackend" and backend.name == "numpy-mlp"
    assert hookkit.backends.backend_named("numpy-mlp") is backend
    assert hookkit.backends.framework_of(numpy_framework) == "numpy-mlp"
    assert hookkit.backends.framework_of(np.ones(2)) == ""  # numpy itself is no registered framework


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"name": "", "module": "m", "backend": NumpyBackend}, "name must be a non-empty string"),
        ({"name": "x", "module": None, "backend": NumpyBackend}, "module must be a non-empty string"),
        ({"name": "x", "module": "m", "backend": "my_pkg.backend.Cls"}, "'package.module:Class'"),
        ({"name": "x", "module": "m", "backend": dict}, "Backend subclass"),
    ],
)
def test_register_backend_refuses_bad_arguments(kwargs, words):
    before = registered_backends()
    with pytest.raises(TypeError, match=words):
        register_backend(**kwargs)
    assert registered_backends() == before


def test_backend_named_lists_the_registered_ones():
    with pytest.raises(ValueError, match=r"backend_named\(\): name must be one of 'torch', 'paddle'; got 'jax'"):
        hookkit.backends.backend_named("jax")
