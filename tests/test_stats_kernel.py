"""The CPU route of the statistics (the C kernel writing records into preallocated rows) against the
framework-ops route and torch.histc; its argument checks; what never reaches it; no host sync."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import hookkit
from hookkit.backends import host_stats
from tolerance import assert_close, sum_ops

needs_kernel = pytest.mark.skipif(host_stats.kernels is None, reason="hookkit.backends._cpu_kernels was not built (no C compiler)")


def edge_case_values(lo: float, hi: float, bins: int, n: int = 300000):
    """Values around [lo, hi] with histc's edge cases, shuffled: x == hi (last bin), x == lo, NaN,
    +-Inf, every bin edge and its float neighbours, one ulp around lo and hi, -0.0."""
    import torch

    g = torch.Generator().manual_seed(bins)
    x = torch.randn(n, generator=g) * (hi - lo) + lo
    edges = torch.linspace(lo, hi, bins + 1)
    special = [
        torch.full((500,), hi),
        torch.full((10,), lo),
        torch.tensor([float("nan"), float("inf"), -float("inf")]).repeat(10),
        edges,
        torch.nextafter(edges, edges + 1),
        torch.nextafter(edges, edges - 1),
        torch.nextafter(torch.full((100,), hi), torch.tensor(hi + 1)),  # just above high
        torch.nextafter(torch.full((100,), lo), torch.tensor(lo - 1)),  # just below low
        torch.full((100,), -0.0),
    ]
    special = torch.cat(special)
    x[: special.numel()] = special
    return x[torch.randperm(n, generator=g)]


def kernel_row(be, t, near_zero=0.05, hist=None):
    """``(record row [6], hist row or None)`` written by the CPU route for ``t``."""
    rows = host_stats.HostRows(hist[0] if hist else 0)
    assert be.activation_sums_into(rows, t, near_zero, 7, 3, hist[1:] if hist else None)
    r, h = rows.take()
    assert r[0, :2].tolist() == [7, 3]
    return r[0], None if h is None else h[0]


def kernel_tensor_row(be, t):
    rows = host_stats.HostRows()
    assert be.tensor_sums_into(rows, t, 1, 2)
    return rows.take()[0][0]


def test_cpu_kernel_is_built_where_a_compiler_is():
    """setup.py builds the kernel as optional: a failed build would only show as a slower install."""
    import shutil
    import sysconfig

    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}) on this machine: the framework's ops are used")
    from hookkit.backends import _cpu_kernels  # noqa: F401


@needs_kernel
def test_kernel_histogram_equals_histc(torch_fw):
    """The kernel's counts are torch.histc's, edge cases included (x == high in the last bin; NaN,
    Inf and values outside dropped), for small and large tensors, 1 to 1000 bins; a recorded
    histogram equals histc of the layer's output."""
    import torch

    from hookkit.backends import backend_for

    be = backend_for(torch.zeros(1))
    cases = [(0.0, 10.0, 40), (-2.0, 3.0, 20), (0.1, 0.3, 7), (0.0, 1.0, 1), (-1e-3, 7e-3, 255), (3.0, 1e4, 1000)]
    for lo, hi, bins in cases:
        for n in (300000, 5000):
            x = edge_case_values(lo, hi, bins, n)
            row, counts = kernel_row(be, x, hist=(bins, lo, hi))
            np.testing.assert_array_equal(counts, torch.histc(x, bins, lo, hi).numpy(), err_msg=f"{lo, hi, bins, n}")
            assert row[5] == (x <= 0.05).sum().item() and row[2] == n
    model = torch.nn.Sequential(torch.nn.Linear(16, 512), torch.nn.ReLU6())
    x = torch.randn(64, 16) * 4
    with hookkit.ActivationStats(model, [torch.nn.ReLU6], hist=True, range=(0, 6), bins=12) as stats:
        out = model(x)
    assert (out == 6).any()
    np.testing.assert_array_equal(stats.layer_stats("1")["hist"][0], torch.histc(out, 12, 0, 6).numpy())


@needs_kernel
def test_kernel_rows_equal_the_framework_route(fw, monkeypatch):
    """One CPU route, the same rows as the framework's ops (the route of every other device): the
    count, the histogram and max |x| bit for bit, the sums to float32 rounding (the kernel sums in
    float64); for float32, half, transposed, expanded (stride 0), NaN/Inf and empty tensors."""
    from hookkit.backends import backend_for

    rng = np.random.default_rng(0)
    base = rng.standard_normal((300, 1000)).astype(np.float32) + 0.5
    special = base.copy()
    special[3, 5], special[7, 1] = np.inf, -np.inf
    tensors = {
        "float32": fw.tensor(base),
        "transposed": fw.tensor(base).T,
        "half": fw.tensor(base.astype(np.float16)),
        "inf": fw.tensor(special),
        "expanded": fw.tensor(base[:1]).expand([300, 1000]),
        "empty": fw.tensor(np.zeros((0, 4), np.float32)),
    }
    be = backend_for(tensors["float32"])
    for name, t in tensors.items():
        row, counts = kernel_row(be, t, hist=(10, -1.0, 2.0))
        grad_row = kernel_tensor_row(be, t)
        monkeypatch.setattr(type(be), "host_routes", False)
        assert not be.activation_sums_into(host_stats.HostRows(), t, 0.05, 0, 0)
        ops = np.asarray(be.to_numpy(be.activation_sums(t, 0.05)), np.float64)
        ops_counts = np.asarray(be.to_numpy(be.histc(t, 10, -1.0, 2.0)), np.float64)
        ops_grad = np.asarray(be.to_numpy(be.param_sums(t)), np.float64)
        monkeypatch.undo()
        n = int(np.prod(t.shape))
        assert row[2] == n == grad_row[2], name
        assert row[5] == ops[2], name  # the count, exactly
        np.testing.assert_array_equal(counts, ops_counts, err_msg=name)
        np.testing.assert_array_equal(grad_row[5], ops_grad[2], err_msg=name)  # max |x| (NaN when empty)
        if n:
            np.testing.assert_allclose(row[3:5], ops[:2], rtol=1e-5, err_msg=name)  # float32 lanes vs float64
            np.testing.assert_allclose(grad_row[3:5], ops_grad[:2], rtol=1e-5, atol=1e-3, err_msg=name)
        else:
            assert np.isnan(row[3]) and row[4] == 0 and grad_row[3:5].tolist() == [0, 0]


@needs_kernel
def test_kernel_is_accurate_on_large_and_offset_tensors(torch_fw):
    """mean/std/near-zero of 4M-value tensors against float64, including outputs whose mean is far
    larger than their spread (the kernel then takes a second, centered pass), a constant output,
    tiny values; gradient rows' sum, norm and max |x| (Inf of either sign, NaN)."""
    import torch

    from hookkit.backends import backend_for

    be = backend_for(torch.zeros(1))
    g = torch.Generator().manual_seed(0)
    for offset, scale in [(0.0, 1.0), (10.0, 1.0), (1000.0, 1.0), (3.0, 0.0), (0.0, 1e-20), (1e4, 0.1)]:
        x = torch.randn(1 << 22, generator=g) * scale + offset
        row, _ = kernel_row(be, x)
        xd = x.double()
        assert row[3] == pytest.approx(xd.mean().item(), rel=1e-9, abs=1e-30)
        np.testing.assert_allclose(np.sqrt(row[4] / (x.numel() - 1)), xd.std().item(), rtol=1e-6, atol=1e-30)
        assert row[5] == (x <= 0.05).sum().item()
        total, norm, max_abs = kernel_tensor_row(be, x)[3:]
        assert norm == pytest.approx(torch.linalg.vector_norm(xd).item(), rel=1e-9)
        assert max_abs == x.abs().max().item() and total == pytest.approx(xd.sum().item(), rel=1e-9, abs=1e-6)
    x = torch.randn(10001, generator=g)
    for special, expected in ((-float("inf"), float("inf")), (float("inf"), float("inf")), (float("nan"), float("nan"))):
        x[5003] = special
        np.testing.assert_equal(kernel_tensor_row(be, x)[5], expected)


@needs_kernel
def test_kernel_splits_large_tensors_across_threads(torch_fw):
    """With several intra-op threads a large tensor is split across POSIX threads: the same counts
    and max |x| exactly, the same sums to float64 rounding, NaN in any part shows."""
    x = edge_case_values(-2.0, 3.0, 20, 3 << 20).numpy()
    out = {}
    for threads in (1, 3):
        rows = host_stats.HostRows(20)
        host_stats.write_activation(rows, x, 0.05, 0, 0, (-2.0, 3.0), threads)
        host_stats.write_tensor(rows, x, 0, 1, threads)
        finite = host_stats.HostRows()
        host_stats.write_tensor(finite, np.nan_to_num(x, posinf=0, neginf=0), 0, 0, threads)
        out[threads] = rows.take(), finite.take()[0]
    (r1, h1), f1 = out[1]
    (r3, h3), f3 = out[3]
    np.testing.assert_array_equal(h1, h3)
    assert r1[0, 5] == r3[0, 5] and np.isnan(r3[1, 5]) and f1[0, 5] == f3[0, 5]
    # float64 sums split three ways: n roundings of terms at most sum |x| (any order), not bit-equal
    finite_x = np.nan_to_num(x, posinf=0, neginf=0).astype(np.float64)
    assert_close(f1[0, 3:5], f3[0, 3:5], dtype="float64", n_ops=x.size, scale=float(np.abs(finite_x).sum() + (finite_x**2).sum()))


@needs_kernel
def test_kernel_checks_every_buffer(torch_fw):
    """Wrong dtype, shape, layout or writability of any buffer, a row index outside the buffer, a
    bad histogram range or factor: a ValueError naming the function and argument, nothing written."""
    k = host_stats.kernels
    x = np.arange(10, dtype=np.float32)
    rows = np.full((4, 6), 7.0)
    hist = np.full((4, 3), 7.0)
    readonly = rows.copy()
    readonly.flags.writeable = False
    bad_calls = [
        ("activation: x must be a float32", lambda: k.activation(x.astype(np.float64), 0.0, rows, 0, 0, 0)),
        ("activation: x must be a float32", lambda: k.activation(x.astype(np.int32), 0.0, rows, 0, 0, 0)),
        ("activation: x must be a C-contiguous", lambda: k.activation(x[::2], 0.0, rows, 0, 0, 0)),
        ("activation: rows must be a float64 matrix with 6", lambda: k.activation(x, 0.0, np.zeros((4, 5)), 0, 0, 0)),
        ("activation: rows must be a float64 matrix", lambda: k.activation(x, 0.0, np.zeros((4, 6), np.float32), 0, 0, 0)),
        ("activation: rows must be a float64 matrix", lambda: k.activation(x, 0.0, np.zeros(24), 0, 0, 0)),
        ("activation: rows must be a writable", lambda: k.activation(x, 0.0, readonly, 0, 0, 0)),
        ("activation: rows must be a writable C-contiguous", lambda: k.activation(x, 0.0, np.zeros((6, 4)).T, 0, 0, 0)),
        ("activation: k must index a row", lambda: k.activation(x, 0.0, rows, 4, 0, 0)),
        ("activation: k must index a row", lambda: k.activation(x, 0.0, rows, -1, 0, 0)),
        ("activation: factor must be >= 1", lambda: k.activation(x, 0.0, rows, 0, 0, 0, 0)),
        ("activation: hist must have as many rows", lambda: k.activation(x, 0.0, rows, 0, 0, 0, 1, 1, np.zeros((3, 3)), 0.0, 1.0)),
        (
            "activation: hist must be a float64 matrix",
            lambda: k.activation(x, 0.0, rows, 0, 0, 0, 1, 1, np.zeros((4, 3), np.int64), 0.0, 1.0),
        ),
        ("activation: lo < hi", lambda: k.activation(x, 0.0, rows, 0, 0, 0, 1, 1, hist, 1.0, 1.0)),
        ("activation: lo < hi", lambda: k.activation(x, 0.0, rows, 0, 0, 0, 1, 1, hist, float("nan"), 1.0)),
        ("tensor: x must be a float32", lambda: k.tensor(np.zeros(3, np.float16), rows, 0, 0, 0)),
        ("tensor: rows must be a float64 matrix with 6", lambda: k.tensor(x, np.zeros((4, 3)), 0, 0, 0)),
        ("tensor: k must index a row", lambda: k.tensor(x, rows, 9, 0, 0)),
    ]
    for message, call in bad_calls:
        with pytest.raises(ValueError, match=message):
            call()
    assert (rows == 7).all() and (hist == 7).all()
    k.activation(x, 4.0, rows, 1, 5, 6, 2, 1, hist, 0.0, 10.0)  # factor 2: x counted twice
    assert rows[1].tolist() == [5, 6, 20, 4.5, 2 * 82.5, 10]
    assert hist[1].tolist() == [2 * 4, 2 * 3, 2 * 3] and (rows[[0, 2, 3]] == 7).all()
    k.tensor(-x, rows, 2, 0, 1)
    assert rows[2].tolist() == [0, 1, 10, -45, np.sqrt(285), 9]


def test_expanded_gradients_are_read_without_a_full_copy(torch_fw):
    """A stride-0 gradient (``model(x).sum().backward()``) reaches the kernel as its distinct values
    times a factor: the same row as the materialized tensor, and GradientStats records it."""
    import torch

    ones = torch.ones(1, 1).expand(64, 4096)
    values, factor = host_stats.compact(ones.numpy())
    assert values.size == 1 and factor == 64 * 4096
    partly = torch.randn(1, 4096).expand(64, 4096)
    values, factor = host_stats.compact(partly.numpy())
    assert values.shape == (1, 4096) and factor == 64
    if host_stats.kernels is not None:
        from hookkit.backends import backend_for

        be = backend_for(partly)
        # 64 x one row's float64 sums against the sum of 64 copies: other orders, the same to float64 rounding
        terms = float(np.abs(partly.double().numpy()).sum() + (partly.double().numpy() ** 2).sum())
        assert_close(
            kernel_tensor_row(be, partly), kernel_tensor_row(be, partly.contiguous()), dtype="float64", n_ops=partly.numel(), scale=terms
        )
        assert_close(kernel_row(be, partly)[0], kernel_row(be, partly.contiguous())[0], dtype="float64", n_ops=partly.numel(), scale=terms)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Linear(8, 3))
    with hookkit.GradientStats(model) as gstats:
        model(torch.randn(4, 5)).sum().backward()
    s = gstats.layer_stats("1")
    np.testing.assert_allclose([s["norm"][0], s["mean"][0], s["max_abs"][0]], [np.sqrt(12), 1, 1], rtol=1e-6)


def test_functorch_tensors_never_reach_the_host_route(torch_fw):
    """Under torch.func (grad, vmap) the tensors a hook sees have no storage: the CPU route declines
    them (the framework's ops take them), and a hooked model runs under torch.func without error."""
    import torch

    from hookkit.backends import backend_for

    be = backend_for(torch.zeros(1))
    seen = []

    def f(x):
        seen.append(be.host_values(x))
        rows = host_stats.HostRows()
        assert not be.activation_sums_into(rows, x, 0.05, 0, 0) and not be.tensor_sums_into(rows, x, 0, 0)
        return (x * x).sum()

    torch.func.grad(f)(torch.randn(5))
    torch.func.vmap(f)(torch.randn(3, 5))
    assert seen == [None, None]
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    params = dict(model.named_parameters())
    with hookkit.ActivationStats(model, hist=True) as stats, hookkit.GradientStats(model), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # hookkit says once that observers skip transformed calls
        grads = torch.func.grad(lambda p, x: torch.func.functional_call(model, p, (x,)).sum())(params, torch.randn(4, 5))
        torch.func.vmap(model)(torch.randn(2, 4, 5))
        model(torch.randn(4, 5)).sum().backward()  # eager calls are still recorded
    assert set(grads) == set(params) and len(stats.layer_stats("0")["mean"]) >= 1


def _count_syncs(fn):
    """Run fn() counting the operators that read a device value on the host."""
    from torch.utils._python_dispatch import TorchDispatchMode

    counted = {"aten::_local_scalar_dense", "aten::item", "aten::is_nonzero", "aten::equal"}

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func._schema.name in counted:
                Count.n += 1
            return func(*args, **(kwargs or {}))

    with Count():
        fn()
    return Count.n


@pytest.mark.parametrize("route", ["accelerator", "cpu"])
def test_no_host_sync_in_the_hot_path(torch_fw, route, monkeypatch):
    """The framework-ops route (the accelerator's, forced here on the CPU) never reads a value on the
    host; the CPU route reads host memory through numpy, which is no device sync and no aten read."""
    import torch

    from hookkit.backends.torch import TorchBackend

    monkeypatch.setattr(TorchBackend, "host_routes", route == "cpu")
    fw = torch_fw
    fw.seed(0)
    model = fw.small_cnn(in_ch=1, width=8)
    x, y = fw.randn(64, 1, 8, 8), fw.labels(np.arange(64) % 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def steps():
        for _ in range(3):
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()

    assert _count_syncs(lambda: torch.tensor(2.0).item()) == 1  # the counter works
    bare = _count_syncs(steps)
    with hookkit.ActivationStats(model, hist=True) as stats, hookkit.GradientStats(model) as gstats:
        with_stats = _count_syncs(steps)
    assert with_stats == bare
    assert len(stats.layer_stats("fc")["mean"]) == 3 and len(gstats.param_stats("fc")["norm"]) == 3
    with hookkit.ActivationStats(model, hist=True), hookkit.GradientStats(model), hookkit.watch_nonfinite(model, explode=1e6, vanish=1e-12):
        with_watch = _count_syncs(steps)
    assert with_watch - bare == 3  # watch_nonfinite: exactly one read per training step


def test_routes_record_the_same_statistics(fw, monkeypatch):
    """A training loop records the same statistics on the CPU route and the framework-ops route,
    histograms exactly; the CPU route makes no framework tensor per call (Paddle: no to_tensor)."""
    if host_stats.kernels is None:
        pytest.skip("hookkit.backends._cpu_kernels was not built (no C compiler)")
    from hookkit.backends import backend_for

    def recorded(host_routes: bool) -> dict:
        fw.seed(0)
        model = fw.small_cnn(in_ch=1, width=4)
        be = backend_for(model)
        monkeypatch.setattr(type(be), "host_routes", host_routes)
        data = fw.tensor(np.random.default_rng(1).standard_normal((6, 1, 8, 8)).astype(np.float32))
        with hookkit.ActivationStats(model, hist=True, bins=10, range=(-1, 1)) as acts, hookkit.GradientStats(model) as grads:
            if fw.name == "paddle" and host_routes:
                import paddle

                monkeypatch.setattr(paddle, "to_tensor", lambda *a, **k: pytest.fail("paddle.to_tensor in the CPU route"))
            for _ in range(2):
                out = model(data)
                (out * out).mean().backward()
            monkeypatch.undo()
        return {**acts.to_numpy(), **{f"grad {k}": v for k, v in grads.to_numpy().items()}}

    kernel, ops = recorded(True), recorded(False)
    assert kernel.keys() == ops.keys()
    for name in kernel:
        for key in kernel[name]:
            if key in ("hist", "step", "call", "records", "param_step", "param_records"):
                np.testing.assert_array_equal(kernel[name][key], ops[name][key], err_msg=f"{name} {key}")
            else:
                # float64 sums against float32 ops (a two-pass variance): two blocked sums of a 6x4x8x8 batch,
                # errors relative to the values' size (a batch norm's mean is 0 up to rounding of O(1) terms)
                row = ops[name]
                terms = float(np.max(np.abs(row["mean"]) + row["std"])) if {"mean", "std"} <= row.keys() else None
                assert_close(
                    kernel[name][key],
                    ops[name][key],
                    dtype="float32",
                    n_ops=2 * sum_ops(6 * 4 * 8 * 8),
                    scale=terms,
                    err_msg=f"{name} {key}",
                )
