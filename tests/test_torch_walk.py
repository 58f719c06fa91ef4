"""The torch backend's ``children`` / ``parameters(recurse=False)`` read a module's own dicts (the
graph's set-up walks every layer): they must give exactly what ``Module.children`` and
``Module.parameters(recurse=False)`` give, shared entries once and ``None`` entries left out, and
defer to a class that overrides them."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from hookkit.backends.torch.backend import TorchBackend  # noqa: E402


def _model() -> torch.nn.Module:
    shared = torch.nn.Linear(3, 3)
    m = torch.nn.Sequential(shared, torch.nn.ReLU(), shared, torch.nn.Sequential(torch.nn.LayerNorm(3), shared))
    m.add_module("nothing", None)
    m.register_parameter("absent", None)
    m.scale = torch.nn.Parameter(torch.ones(3))
    m.again = m.scale  # the same parameter under a second name: listed once
    return m


def test_children_and_own_parameters_match_torch():
    be = TorchBackend()
    m = _model()
    for layer in m.modules():
        assert be.children(layer) == list(layer.children())
        assert [id(p) for p in be.parameters(layer, recurse=False)] == [id(p) for p in layer.parameters(recurse=False)]
    assert len(be.children(m)) == 3  # Linear, ReLU, Sequential: the shared Linear once, None left out
    assert [id(p) for p in be.parameters(m, recurse=False)] == [id(m.scale)]
    assert len(be.parameters(m)) == 5  # recursive: scale, the Linear's two, the LayerNorm's two


def test_an_override_is_called():
    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(2, 2)
            self.w = torch.nn.Parameter(torch.ones(2))  # an own parameter the override hides

        def children(self):
            return iter(())

        def named_parameters(self, *args, **kwargs):
            return iter(())

    be = TorchBackend()
    h = Hidden()
    assert list(h._modules) == ["fc"] and list(h._parameters) == ["w"]
    assert be.children(h) == [] and be.parameters(h, recurse=False) == []
