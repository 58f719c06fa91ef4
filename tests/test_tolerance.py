"""The tolerance helper: the bound follows the dtype and the size of the computation, and a
difference beyond it fails."""

from __future__ import annotations

import numpy as np
import pytest

from tolerance import assert_close, eps, sum_ops, tolerance


def test_eps_of_every_spelling_of_a_dtype():
    torch = pytest.importorskip("torch")
    assert eps("float32") == eps(np.float32) == eps(torch.float32) == float(np.finfo(np.float32).eps)
    assert eps(torch.bfloat16) == 2.0**-7 and eps("float16") == float(np.finfo(np.float16).eps)
    assert tolerance("float64", 10) == 4 * 10 * float(np.finfo(np.float64).eps)
    with pytest.raises(ValueError, match="n_ops=0"):
        tolerance("float32", 0)


def test_sum_ops_grows_with_the_halvings_and_never_passes_n():
    assert sum_ops(1) == 1 and sum_ops(20) == 20 and sum_ops(4096) == 44 and sum_ops(1 << 22) == 54


def test_a_float32_sum_in_another_order_passes_and_a_real_difference_fails():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 4096)).astype(np.float32)
    forward, backward = x.sum(1), x[:, ::-1].cumsum(1)[:, -1]  # pairwise against sequential: not bit-equal
    assert not np.array_equal(forward, backward)
    assert_close(forward, backward, dtype="float32", n_ops=x.shape[1], scale=float(np.abs(x).sum(1).max()))
    with pytest.raises(AssertionError):
        assert_close(forward, backward + 1.0, dtype="float32", n_ops=x.shape[1], scale=1.0)
    # near zero by cancellation: the scale of the terms, not of the result, bounds the error
    assert_close(np.float32(1e-9), np.float32(0.0), dtype="float32", n_ops=4, scale=1.0)
    with pytest.raises(AssertionError):
        assert_close(np.float32(1e-9), np.float32(0.0), dtype="float32", n_ops=4)


def test_tensors_of_both_frameworks_compare(fw):
    a = fw.tensor(np.linspace(-1, 1, 12, dtype=np.float32))
    assert_close(a, np.linspace(-1, 1, 12), n_ops=2)  # float32 against a float64 reference: float32's eps
    with pytest.raises(AssertionError):
        assert_close(a, np.linspace(-1, 1, 12) + 1e-4, n_ops=2)
