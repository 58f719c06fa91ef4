"""fastai's hook API by fastai's names, with seed 002's examples and numbers, on both frameworks."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit
from hookkit import Hook, Hooks, dummy_eval, has_params, hook_output, hook_outputs, model_sizes, num_features_model, total_params
from tolerance import assert_close


def conv_layer(fw, ni, nf, stride=1):
    return fw.sequential(fw.conv2d(ni, nf, 3, stride=stride, padding=1), fw.batchnorm2d(nf), fw.relu())


def test_hook_stores_result_and_removes(fw):
    tst_model = fw.linear(5, 3)
    x = fw.randn(4, 5)
    hook = Hook(tst_model, lambda m, i, o: o)
    y = tst_model(x)
    np.testing.assert_array_equal(fw.numpy(hook.stored), fw.numpy(y))
    hook.remove()
    hook.remove()
    with Hook(tst_model, lambda m, i, o: o) as h:
        y = tst_model(x)
    np.testing.assert_array_equal(fw.numpy(h.stored), fw.numpy(y))
    assert hookkit.core.router.attached(tst_model)["forward"] == 0


def test_hook_output_detach_and_grad(fw):
    tst_model = fw.linear(5, 10)
    x = fw.randn(4, 5)
    with hook_output(tst_model) as h:
        y = tst_model(x)
    np.testing.assert_array_equal(fw.numpy(y), fw.numpy(h.stored))
    assert not fw.requires_grad(h.stored)
    with hook_output(tst_model, grad=True) as h:
        y = tst_model(x)
        loss = (y * y).mean()
        loss.backward()
    np.testing.assert_allclose(2 * fw.numpy(y) / y.shape[0] / y.shape[1], fw.numpy(h.stored[0]), rtol=1e-5)


def test_hooks_and_hook_outputs(fw):
    layers = [fw.linear(5, 10), fw.relu(), fw.linear(10, 3)]
    tst_model = fw.sequential(*layers)
    x = fw.randn(4, 5)
    hooks = Hooks(tst_model, lambda m, i, o: o)
    y = tst_model(x)
    h0 = fw.numpy(layers[0](x))
    np.testing.assert_allclose(fw.numpy(hooks.stored[0]), h0, rtol=1e-6)
    np.testing.assert_allclose(fw.numpy(hooks.stored[1]), np.maximum(h0, 0), rtol=1e-6)
    np.testing.assert_allclose(fw.numpy(hooks.stored[2]), fw.numpy(y), rtol=1e-6)
    assert len(hooks) == 3 and isinstance(hooks[0], Hook) and len(list(hooks)) == 3
    hooks.remove()
    with hook_outputs(layers) as h:
        y = tst_model(x)
    assert all(not fw.requires_grad(s) for s in h.stored)
    with hook_outputs(layers, grad=True) as h:
        y = tst_model(x)
        loss = (y * y).mean()
        loss.backward()
    g = 2 * fw.numpy(y) / y.shape[0] / y.shape[1]
    np.testing.assert_allclose(g, fw.numpy(h.stored[2][0]), rtol=1e-5)
    w = fw.numpy(layers[2].weight)
    g = g @ (w.T if fw.name == "paddle" else w)
    assert_close(g, fw.numpy(h.stored[1][0]), dtype="float32", n_ops=16)  # a 3-wide and a 10-wide backward product
    g = g * (h0 > 0)
    assert_close(g, fw.numpy(h.stored[0][0]), dtype="float32", n_ops=16)


def test_hooks_removed_when_block_raises(fw):
    layers = [fw.linear(5, 10), fw.relu(), fw.linear(10, 3)]
    with pytest.raises(RuntimeError):
        with hook_outputs(layers):
            raise RuntimeError("training failed")
    assert all(hookkit.core.router.attached(m)["forward"] == 0 for m in layers)


def test_model_sizes_num_features_dummy_eval(fw):
    m = fw.sequential(conv_layer(fw, 3, 16), conv_layer(fw, 16, 32, stride=2), conv_layer(fw, 32, 32))
    assert model_sizes(m) == [(1, 16, 64, 64), (1, 32, 32, 32), (1, 32, 32, 32)]
    assert num_features_model(m) == 32
    assert num_features_model(fw.sequential(fw.conv2d(5, 4, 3), fw.conv2d(4, 3, 3))) == 3
    m.train()
    assert tuple(dummy_eval(m, (8, 8)).shape) == (1, 32, 4, 4)
    assert m.training  # fastai leaves it in eval mode; hookkit restores it


def test_has_params_and_total_params(fw):
    assert has_params(fw.linear(3, 4))
    assert not has_params(fw.relu())
    assert total_params(fw.linear(10, 32)) == (32 * 10 + 32, True)
    assert total_params(fw.conv2d(16, 32, 3)) == (16 * 32 * 3 * 3 + 32, True)
    assert total_params(fw.relu()) == (0, False)


def test_total_params_fastai_torch_cases(torch_fw):
    from torch import nn

    assert total_params(nn.Linear(10, 32, bias=False)) == (32 * 10, True)
    assert total_params(nn.BatchNorm2d(20)) == (20 * 2, True)
    assert total_params(nn.BatchNorm2d(20, affine=False)) == (0, False)
    assert total_params(nn.Conv2d(16, 32, 3, bias=False)) == (16 * 32 * 3 * 3, True)
    assert total_params(nn.LSTM(20, 10, 2)) == (4 * (20 * 10 + 10) + 3 * 4 * (10 * 10 + 10), True)
