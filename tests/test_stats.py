"""ActivationStats and GradientStats: fastai's formulas, every/train-only, save/load, removal, no host sync."""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest

import hookkit
from hookkit.core.router import attached

# -- helpers -----------------------------------------------------------------------------------------


def fastai_stats(fw, o, near_zero=0.05, bins=40, lo=0.0, hi=10.0):
    """fastai's ActivationStats.hook body, written out with plain framework ops."""
    if fw.name == "torch":
        return (
            o.mean().item(),
            o.std().item(),
            (o <= near_zero).long().sum().item() / o.numel(),
            o.float().histc(bins, lo, hi).numpy(),
        )
    import paddle

    return (
        float(o.mean()),
        float(o.std()),
        float((o <= near_zero).astype("int64").sum()) / o.size,
        paddle.histogram(o.astype("float32"), bins=bins, min=lo, max=hi).numpy().astype("float32"),
    )


def train_steps(fw, model, n, x, y=None, opt=None):
    for _ in range(n):
        out = model(x)
        loss = fw.cross_entropy(out, y) if y is not None else (out * out).mean()
        loss.backward()
        if opt is not None:
            fw.step(opt)


def param_grads_cleared(fw, model):
    for p in model.parameters():
        if fw.name == "torch":
            p.grad = None
        else:
            p.clear_gradient()


def no_hooks_left(model) -> bool:
    return all(
        sum(attached(m).values()) == 0 for m in (model.modules() if hasattr(model, "modules") else model.sublayers(include_self=True))
    )


# -- activation statistics -----------------------------------------------------------------------------


def test_activation_values_equal_fastai_formulas(fw):
    model = fw.small_cnn(in_ch=1, width=4)
    model.train()
    x = fw.randn(6, 1, 8, 8)
    with hookkit.capture(model, hookkit.WITH_PARAMS) as cap, hookkit.ActivationStats(model, hist=True, bins=20, range=(-2, 3)) as stats:
        for _ in range(2):
            model(x)
    assert stats.names == ["conv1", "bn1", "conv2", "fc"]  # fastai's default: layers with parameters
    for name in stats.names:
        s = stats.layer_stats(name)
        assert set(s) == {"mean", "std", "near_zero", "hist", "step", "call", "records"}
        np.testing.assert_array_equal(s["records"], [1, 1])
        assert s["hist"].shape == (2, 20)
        np.testing.assert_array_equal(s["step"], [0, 1])
        for row, rec in enumerate(cap.calls(name)):
            mean, std, nz, hist = fastai_stats(fw, rec.output, bins=20, lo=-2, hi=3)
            np.testing.assert_allclose(s["mean"][row], mean, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(s["std"][row], std, rtol=1e-5)
            assert s["near_zero"][row] == pytest.approx(nz, abs=1e-7)
            np.testing.assert_array_equal(s["hist"][row], hist)
            assert 0 < nz < 1 and hist.sum() > 0  # the comparison is not vacuous
    np.testing.assert_array_equal(stats.steps, [0, 1])


def test_every_call_recorded_and_tuple_outputs_use_first_tensor(fw):
    model = fw.shared_block_model()
    model.train()
    x = fw.randn(3, 4)

    class Pair(fw.Layer):  # a layer returning a tuple: its first tensor is measured
        def __init__(self):
            super().__init__()
            self.lin = fw.linear(4, 5)

        def forward(self, x):
            y = self.lin(x)
            return y, y * 100

    pair = Pair()
    pair.train()
    with hookkit.ActivationStats(model, ["block"]) as stats, hookkit.capture(model, "block") as cap:
        model(x)
    s = stats.layer_stats("block")
    np.testing.assert_array_equal(s["call"], [0, 1, 2])
    np.testing.assert_array_equal(s["step"], [0, 0, 0])
    np.testing.assert_allclose(s["std"], [fastai_stats(fw, r.output)[1] for r in cap.calls("block")], rtol=1e-5)

    with hookkit.ActivationStats(pair, "") as stats, hookkit.capture(pair, "lin") as cap:
        pair(x)
    assert stats.layer_stats("")["mean"][0] == pytest.approx(fastai_stats(fw, cap["lin"])[0], rel=1e-5, abs=1e-6)


def test_every_and_train_only(fw):
    model = fw.mlp((5, 8, 3))
    x = fw.randn(4, 5)
    with hookkit.ActivationStats(model, every=2) as stats, hookkit.ActivationStats(model, every=1, train_only=False) as all_stats:
        model.train()
        for _ in range(5):  # steps 0..4
            model(x)
        model.eval()
        model(x)  # step 5: eval, not recorded by the default
        model.train()
        model(x)  # step 6
    np.testing.assert_array_equal(stats.steps, [0, 2, 4, 6])
    np.testing.assert_array_equal(stats.layer_stats("0")["step"], [0, 2, 4, 6])
    np.testing.assert_array_equal(all_stats.steps, np.arange(7))
    assert len(all_stats.layer_stats("2")["mean"]) == 7


def test_save_load_round_trip_without_pickle(fw, tmp_path):
    model = fw.small_cnn(in_ch=1, width=4)
    model.train()
    x, y = fw.randn(8, 1, 8, 8), fw.labels(np.arange(8) % 10)
    with hookkit.ActivationStats(model, hist=True, near_zero=0.1) as stats, hookkit.GradientStats(model) as gstats:
        train_steps(fw, model, 3, x, y)
    stats.save(tmp_path)
    gstats.save(tmp_path)
    files = sorted(os.listdir(tmp_path))
    assert files == ["activation_stats.json", "activation_stats.safetensors", "gradient_stats.json", "gradient_stats.safetensors"]
    for stem in ("activation_stats", "gradient_stats"):
        raw = (tmp_path / f"{stem}.safetensors").read_bytes()
        (header_len,) = struct.unpack("<Q", raw[:8])  # safetensors: u64 header length, then a JSON header
        header = json.loads(raw[8 : 8 + header_len])
        assert all(v["dtype"] in ("F32", "F64", "I64") for k, v in header.items() if k != "__metadata__")
        assert not raw.startswith(b"\x80")  # not a pickle
        meta = json.loads((tmp_path / f"{stem}.json").read_text())
        assert meta["framework"] == fw.name and meta["names"] == ["conv1", "bn1", "conv2", "fc"]
    loaded = hookkit.ActivationStats.load(tmp_path)
    assert loaded.names == stats.names and loaded.bins == 40 and loaded.hist_range == (0.0, 10.0) and loaded.near_zero == pytest.approx(0.1)
    np.testing.assert_array_equal(loaded.steps, stats.steps)
    for name in stats.names:
        for key, value in stats.layer_stats(name).items():
            np.testing.assert_array_equal(loaded.layer_stats(name)[key], value)
    assert json.loads(json.dumps(loaded.to_dict())) == json.loads(json.dumps(stats.to_dict()))
    both = hookkit.load_stats(tmp_path)
    assert set(both) == {"activation_stats", "gradient_stats"}
    g = both["gradient_stats"]
    for name in gstats.names:
        for key, value in gstats.param_stats(name).items():
            np.testing.assert_array_equal(g.param_stats(name)[key], value)
        np.testing.assert_array_equal(g.layer_stats(name)["norm"], gstats.layer_stats(name)["norm"])
    with pytest.raises(FileNotFoundError, match="activation_stats.json"):
        hookkit.load_stats(tmp_path / "nothing")


def test_hooks_gone_on_exit_error_and_remove(fw):
    model = fw.mlp((5, 8, 3))
    model.train()
    x = fw.randn(2, 5)
    with hookkit.ActivationStats(model, hist=True), hookkit.GradientStats(model):
        assert not no_hooks_left(model)
    assert no_hooks_left(model)
    with pytest.raises(RuntimeError, match="boom"):
        with hookkit.ActivationStats(model), hookkit.GradientStats(model):
            raise RuntimeError("boom")
    assert no_hooks_left(model)
    stats, gstats = hookkit.ActivationStats(model), hookkit.GradientStats(model)
    train_steps(fw, model, 1, x)
    stats.remove()
    gstats.remove()
    stats.remove()  # idempotent
    assert no_hooks_left(model)
    train_steps(fw, model, 1, x)  # nothing more is recorded: the parameter hooks are gone too
    assert len(stats.layer_stats("0")["mean"]) == 1
    assert len(gstats.param_stats("0")["norm"]) == 1 and len(gstats.layer_stats("0")["norm"]) == 1


def test_argument_and_name_errors(fw):
    model = fw.mlp((5, 8, 3))
    with pytest.raises(ValueError, match=r"ActivationStats\(\): every must be an int >= 1; got 0"):
        hookkit.ActivationStats(model, every=0)
    with pytest.raises(ValueError, match=r"ActivationStats\(\): range must be a \(low, high\) pair"):
        hookkit.ActivationStats(model, range=(3, 1))
    with pytest.raises(hookkit.LayerNotFound, match="lin9"):
        hookkit.GradientStats(model, "lin9")
    assert no_hooks_left(model)
    with hookkit.ActivationStats(model) as stats:
        with pytest.raises(KeyError, match="recorded layers"):
            stats.layer_stats("1")


# -- gradient statistics ---------------------------------------------------------------------------------


def test_gradient_stats_equal_manual_computation(fw):
    model = fw.shared_block_model()  # "block" runs three times per forward: three output records per step
    model.train()
    x = fw.randn(5, 4)
    with hookkit.GradientStats(model) as gstats, hookkit.capture(model, hookkit.WITH_PARAMS, grads=True) as cap:
        for step in range(2):
            param_grads_cleared(fw, model)
            train_steps(fw, model, 1, x)
            for name in gstats.names:
                recs = [r for r in cap.calls(name) if r.step == step]
                s = gstats.layer_stats(name)
                rows = np.flatnonzero(s["step"] == step)
                assert len(rows) == len(recs) == (3 if name == "block" else 1)
                for row, rec in zip(rows, recs):
                    g = fw.numpy(rec.grad).astype(np.float64).ravel()
                    assert s["call"][row] == rec.call
                    np.testing.assert_allclose(s["norm"][row], np.linalg.norm(g), rtol=1e-5)
                    np.testing.assert_allclose(s["mean"][row], g.mean(), rtol=1e-4, atol=1e-7)
                    np.testing.assert_allclose(s["std"][row], g.std(ddof=1), rtol=1e-4)
                    np.testing.assert_allclose(s["max_abs"][row], np.abs(g).max(), rtol=1e-6)
                # parameters: one row per backward, the layer's weight and bias taken together
                layer = dict(hookkit.select(model, hookkit.WITH_PARAMS))[name]
                pg = np.concatenate([fw.numpy(p.grad).astype(np.float64).ravel() for p in layer.parameters()])
                p = gstats.param_stats(name)
                i = list(p["step"]).index(step)
                np.testing.assert_allclose(p["norm"][i], np.linalg.norm(pg), rtol=1e-5)
                np.testing.assert_allclose(p["mean"][i], pg.mean(), rtol=1e-4, atol=1e-7)
                np.testing.assert_allclose(p["std"][i], pg.std(ddof=1), rtol=1e-4)
                np.testing.assert_allclose(p["max_abs"][i], np.abs(pg).max(), rtol=1e-6)
    names, steps, norms = gstats.gradient_flow()
    assert names == gstats.names and list(steps) == [0, 1] and norms.shape == (3, 2)
    block = gstats.layer_stats("block")
    np.testing.assert_allclose(norms[1, 0], np.sqrt((block["norm"][block["step"] == 0].astype(np.float64) ** 2).sum()), rtol=1e-6)
    _, _, pnorms = gstats.gradient_flow(params=True)
    np.testing.assert_allclose(pnorms[:, 1], [gstats.param_stats(n)["norm"][1] for n in names], rtol=1e-6)


def test_gradient_stats_every(fw):
    model = fw.mlp((5, 8, 3))
    model.train()
    with hookkit.GradientStats(model, every=3) as gstats:
        train_steps(fw, model, 7, fw.randn(2, 5))
    np.testing.assert_array_equal(gstats.steps, [0, 3, 6])
    np.testing.assert_array_equal(gstats.param_stats("2")["step"], [0, 3, 6])


# -- the no-sync proof (PyTorch) ---------------------------------------------------------------------------


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
    """The accelerator route (forced here on the CPU) never reads a value on the host; the CPU's
    own route reads host memory through numpy, which is no device sync, and no aten read either."""
    import torch

    from hookkit.backends.torch import TorchBackend

    monkeypatch.setattr(TorchBackend, "host_routes", route == "cpu")

    fw = torch_fw
    fw.seed(0)
    model = fw.small_cnn(in_ch=1, width=8)
    x, y = fw.randn(64, 1, 8, 8), fw.labels(np.arange(64) % 10)  # conv1 outputs 32768 values: the CPU histogram route
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def steps():
        train_steps(fw, model, 3, x, y, opt)

    assert _count_syncs(lambda: torch.tensor(2.0).item()) == 1  # the counter works
    bare = _count_syncs(steps)
    with hookkit.ActivationStats(model, hist=True) as stats, hookkit.GradientStats(model) as gstats:
        with_stats = _count_syncs(steps)
    assert with_stats == bare
    assert len(stats.layer_stats("fc")["mean"]) == 3 and len(gstats.param_stats("fc")["norm"]) == 3
    with hookkit.ActivationStats(model, hist=True), hookkit.GradientStats(model), hookkit.watch_nonfinite(model, explode=1e6, vanish=1e-12):
        with_watch = _count_syncs(steps)
    assert with_watch - bare == 3  # watch_nonfinite: exactly one read per training step


def test_hot_path_runs_on_meta_tensors(torch_fw):
    """On the meta device any .item(), float(), .cpu() or .numpy() raises: the hooks never read values."""
    import torch

    model = torch_fw.small_cnn(in_ch=1, width=4).to("meta")
    model.train()
    x = torch.randn(4, 1, 8, 8, device="meta")
    with torch.no_grad():
        model(x)  # eval-free sanity: forward on meta works
    with hookkit.ActivationStats(model, hist=True) as stats, hookkit.GradientStats(model) as gstats:
        for _ in range(2):
            model(x).sum().backward()
    assert len(stats._pending[stats.names.index("conv1")]) == 2 and len(gstats._pending[gstats.names.index("fc")]) == 2
    with pytest.raises((NotImplementedError, RuntimeError)):
        torch.ones(1, device="meta").item()  # what a host read in the hot path would have done


def test_long_runs_keep_bounded_memory_with_exact_merges(fw, monkeypatch):
    """Past LIMIT rows a layer's oldest rows are merged pairwise: memory stays bounded, the last
    LIMIT // 2 records stay one row each, and a merged row holds the exact statistics of all the
    values of the records it covers (as if they had been one tensor), histograms included."""
    from hookkit.observers.stats import live, series

    monkeypatch.setattr(live, "CHUNK", 4)  # device rows stacked every 4 records
    monkeypatch.setattr(series, "LIMIT", 16)
    model = fw.mlp((3, 4, 2))
    model.train()
    outputs = []
    with hookkit.ActivationStats(model, hist=True, bins=8, range=(-2, 2), train_only=False) as stats, hookkit.capture(model, "0") as cap:
        for step in range(100):
            model(fw.randn(2 + step % 3, 3))  # records of different sizes
            outputs.append(fw.numpy(cap["0"]).astype(np.float64).ravel())
            if step % 7 == 0:
                assert len(stats.layer_stats("0")["mean"]) <= 16  # reads in between: O(new rows)
    s = stats.layer_stats("0")
    assert len(s["mean"]) <= 16 and s["records"].sum() == 100 and s["records"].max() > 2
    np.testing.assert_array_equal(s["step"][-8:], np.arange(92, 100))  # the exact last window
    assert (s["records"][-8:] == 1).all() and (np.diff(s["step"]) > 0).all()
    for row, (first, count) in enumerate(zip(s["step"], s["records"])):
        values = np.concatenate(outputs[first : first + count])
        np.testing.assert_allclose(s["mean"][row], values.mean(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(s["std"][row], values.std(ddof=1), rtol=1e-4)
        assert s["near_zero"][row] == pytest.approx((values <= 0.05).mean(), abs=1e-6)
        np.testing.assert_array_equal(s["hist"][row], np.histogram(values, 8, (-2, 2))[0])
    stats.clear()
    assert len(stats.layer_stats("0")["mean"]) == 0


def test_read_arrays_are_not_changed_by_later_records(torch_fw):
    model = torch_fw.mlp((3, 4, 2)).train()
    with hookkit.GradientStats(model) as gstats:
        train_steps(torch_fw, model, 2, torch_fw.randn(2, 3))
        first = gstats.param_stats("0")
        kept = {k: v.copy() for k, v in first.items()}
        train_steps(torch_fw, model, 2, torch_fw.randn(2, 3))
    assert len(gstats.param_stats("0")["norm"]) == 4
    for k, v in kept.items():
        np.testing.assert_array_equal(first[k], v)
    with pytest.raises(ValueError, match="read-only"):
        first["norm"][0] = 1.0


def test_gpt2_tuple_outputs(torch_fw):
    transformers = pytest.importorskip("transformers")
    import torch

    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16)
    model = transformers.GPT2LMHeadModel(config)
    model.train()
    ids = torch.randint(0, 64, (2, 8))
    with (
        hookkit.ActivationStats(model, ["transformer.h.*"]) as stats,
        hookkit.GradientStats(model) as gstats,
        hookkit.capture(model, "transformer.h.1") as cap,
    ):
        model(ids, labels=ids).loss.backward()
    out = cap["transformer.h.1"]
    first = out[0] if isinstance(out, tuple) else out
    assert stats.layer_stats("transformer.h.1")["std"][0] == pytest.approx(first.std().item(), rel=1e-5)
    assert "transformer.wte" in gstats.names and len(gstats.param_stats("transformer.wte")["norm"]) == 1


@pytest.fixture(params=["kernel", "numpy"])
def cpu_route(request, monkeypatch, torch_fw):
    """The CPU statistics' two routes: the C kernel built at install, and numpy without it."""
    from hookkit.backends import host_stats

    if request.param == "kernel":
        if host_stats.kernels is None:
            pytest.skip("hookkit.backends._cpu_kernels was not built (no C compiler at install)")
    else:
        monkeypatch.setattr(host_stats, "kernels", None)
    return request.param


def test_cpu_kernel_is_built_where_a_compiler_is():
    """setup.py builds the kernel as optional: a failed build would only show as a slower install."""
    import shutil
    import sysconfig

    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}) on this machine: the numpy route is used")
    from hookkit.backends import _cpu_kernels  # noqa: F401


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


def test_cpu_histogram_equals_histc(cpu_route):
    """CPU outputs take a faster route than histc's scalar loop: the same counts, edge cases included
    (x == high in the last bin; NaN, Inf and values outside dropped), small tensors and large."""
    import torch

    from hookkit.backends import backend_for

    be = backend_for(torch.zeros(1))
    cases = [
        (0.0, 10.0, 40),
        (-2.0, 3.0, 20),
        (0.0, 6.0, 12),
        (0.1, 0.3, 7),
        (0.0, 1.0, 1),
        (-5.0, 5.0, 126),
        (-1e-3, 7e-3, 255),
        (3.0, 1e4, 1000),
    ]
    for lo, hi, bins in cases:
        for n in (300000, 5000):  # more than one 128k chunk of the numpy route; below its 16k threshold
            x = edge_case_values(lo, hi, bins, n)
            row, counts = be.activation_sums_hist(x, 0.05, bins, lo, hi)
            np.testing.assert_array_equal(counts.numpy(), torch.histc(x, bins, lo, hi).numpy(), err_msg=f"{cpu_route} {lo, hi, bins, n}")
            assert counts.dtype == torch.float32 and row[2].item() == (x <= 0.05).sum().item()
    model = torch.nn.Sequential(torch.nn.Linear(16, 512), torch.nn.ReLU6())
    x = torch.randn(64, 16) * 4
    with hookkit.ActivationStats(model, [torch.nn.ReLU6], hist=True, range=(0, 6), bins=12) as stats:
        out = model(x)
    assert out.numel() >= 16384 and (out == 6).any()
    np.testing.assert_array_equal(stats.layer_stats("1")["hist"][0], torch.histc(out, 12, 0, 6).numpy())


def test_cpu_statistics_are_accurate_on_large_and_offset_tensors(cpu_route):
    """mean/std/near-zero of 4M-value CPU tensors against float64, including outputs whose mean is
    far larger than their spread (the one-pass variance would cancel), a constant output, and
    non-contiguous and half-precision outputs."""
    import torch

    from hookkit.backends.torch import stats as torch_stats

    g = torch.Generator().manual_seed(0)
    for offset, scale in [(0.0, 1.0), (1.0, 1.0), (10.0, 1.0), (1000.0, 1.0), (3.0, 0.0), (0.0, 1e-20), (1e4, 0.1)]:
        x = (torch.randn(1 << 22, generator=g) * scale + offset).reshape(64, -1)
        for t in (x, x.t(), x.to(torch.bfloat16)):
            mean, m2, count = torch_stats.activation_sums_host(t, 0.05)[0].tolist()
            xd = t.double()
            assert mean == pytest.approx(xd.mean().item(), rel=1e-6, abs=1e-9)
            np.testing.assert_allclose(np.sqrt(m2 / (x.numel() - 1)), xd.std().item(), rtol=1e-5, atol=1e-30)
            assert count == (t.float() <= 0.05).sum().item()  # fastai compares o.float()
        device = torch_stats.activation_sums_device(x, 0.05).tolist()
        mean, m2, count = torch_stats.activation_sums_host(x, 0.05)[0].tolist()
        np.testing.assert_allclose(device, [mean, m2, count], rtol=1e-4, atol=1e-30)
        for sums in (torch_stats.tensor_sums_host, torch_stats.tensor_sums_device):
            total, norm, max_abs = sums(x).tolist()
            assert norm == pytest.approx(torch.linalg.vector_norm(x.double()).item(), rel=1e-6)
            assert max_abs == x.abs().max().item()
            assert total == pytest.approx(x.double().sum().item(), rel=1e-5, abs=1e-3)
    x = torch.randn(10001, generator=g)  # max |x|: Inf from either sign, NaN shows
    for special, expected in ((-float("inf"), float("inf")), (float("inf"), float("inf")), (float("nan"), float("nan"))):
        x[5003] = special
        for sums in (torch_stats.tensor_sums_host, torch_stats.tensor_sums_device):
            np.testing.assert_equal(sums(x)[2].item(), expected)
    empty = torch_stats.activation_sums_host(torch.zeros(0), 0.05, (4, 0.0, 1.0))
    assert np.isnan(empty[0][0].item()) and empty[1].tolist() == [0, 0, 0, 0]


def test_tied_parameter_is_hooked_once_and_reported_for_each_layer(torch_fw):
    """GPT-2 ties lm_head.weight to transformer.wte.weight: one hook computes its statistics, and
    both layers report them."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=16)).train()
    tied = model.lm_head.weight
    assert tied is model.transformer.wte.weight
    ids = torch.randint(0, 100, (2, 8))
    with hookkit.GradientStats(model, ["transformer.wte", "lm_head"]) as gstats:
        assert len(tied._backward_hooks) == 1
        model(input_ids=ids, labels=ids).loss.backward()
    assert not tied._backward_hooks
    g = tied.grad.double()
    for name in ("transformer.wte", "lm_head"):
        p = gstats.param_stats(name)
        assert list(p["step"]) == [0]
        np.testing.assert_allclose(p["norm"][0], torch.linalg.vector_norm(g).item(), rtol=1e-6)
        np.testing.assert_allclose(p["max_abs"][0], g.abs().max().item(), rtol=1e-6)


def test_cpu_kernel_splits_large_tensors_across_threads(torch_fw, monkeypatch):
    """With several intra-op threads a large tensor is split across them: the same counts and sums,
    NaN in any part shows in max |x|; a forked child (a DataLoader worker) gets a pool of its own."""
    import torch

    from hookkit.backends import host_stats
    from hookkit.backends.torch import stats as torch_stats

    if host_stats.kernels is None:
        pytest.skip("hookkit.backends._cpu_kernels was not built (no C compiler at install)")
    monkeypatch.setattr(host_stats, "_VALUES_PER_THREAD", 1 << 16)
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        x = edge_case_values(-2.0, 3.0, 20, 1 << 20)
        counts = np.zeros(20, np.int64)
        total, ssq, count, max_abs = host_stats.moments(x.numpy(), 0.05, counts, -2.0, 3.0, True, threads=3)
        np.testing.assert_array_equal(counts, torch.histc(x, 20, -2.0, 3.0).numpy())
        assert np.isnan(max_abs)  # the edge cases hold NaN
        finite = x[torch.isfinite(x)]
        total, ssq, count, max_abs = host_stats.moments(finite.numpy(), 0.05, max_abs=True, threads=3)
        assert total == pytest.approx(finite.double().sum().item(), rel=1e-9)
        assert ssq == pytest.approx(finite.double().square().sum().item(), rel=1e-9)
        assert count == (finite <= 0.05).sum().item() and max_abs == finite.abs().max().item()
        pool = host_stats._Threads.get(3)
        assert host_stats._Threads.get(2) is pool
        monkeypatch.setattr(host_stats.os, "getpid", lambda: -1)  # what a forked child sees: another pid
        assert host_stats._Threads.get(2) is not pool
        monkeypatch.undo()
        small = host_stats._Threads.get(2)
        assert host_stats._Threads.get(4) is not small  # outgrown: replaced, and the old one shut down
        with pytest.raises(RuntimeError):
            small.submit(int)
        assert torch_stats.tensor_sums_host(-torch.ones(1 << 22)).tolist() == [-(1 << 22), 2048.0, 1.0]  # 4 threads' worth
    finally:
        torch.set_num_threads(threads)


def test_paddle_cpu_statistics_take_the_kernel_with_the_same_results(paddle_fw, monkeypatch):
    """Paddle CPU tensors reach the kernel through dlpack (no copy): histogram counts equal
    paddle.histogram's, rows equal Paddle's own ops (the route with host_routes off), for float32,
    float16 and strided inputs; a training loop records the same statistics on both routes."""
    import paddle

    from hookkit.backends import backend_for, host_stats

    if host_stats.kernels is None:
        pytest.skip("hookkit.backends._cpu_kernels was not built (no C compiler at install)")
    be = backend_for(paddle.zeros([1]))
    x = paddle.to_tensor(edge_case_values(-2.0, 3.0, 20, 300000).numpy())
    finite = paddle.to_tensor(np.random.default_rng(0).standard_normal((300, 1000)).astype(np.float32) + 0.5)
    for t in (finite, finite.T, finite.astype("float16")):
        kernel_rows = be.activation_sums(t, 0.05).numpy(), be.param_sums(t).numpy()
        monkeypatch.setattr(type(be), "host_routes", False)
        np.testing.assert_allclose(kernel_rows[0], be.activation_sums(t, 0.05).numpy(), rtol=1e-5)
        np.testing.assert_allclose(kernel_rows[1], be.param_sums(t).numpy(), rtol=1e-5)
        monkeypatch.undo()
    row, counts = be.activation_sums_hist(x, 0.05, 20, -2.0, 3.0)
    np.testing.assert_array_equal(counts.numpy(), paddle.histogram(x, bins=20, min=-2.0, max=3.0).numpy())
    assert row.numpy()[2] == (x <= 0.05).astype("int64").sum().item() and np.isnan(be.param_sums(x).numpy()[2])

    def recorded(host_routes: bool) -> dict:
        monkeypatch.setattr(type(be), "host_routes", host_routes)
        paddle.seed(0)
        model = paddle_fw.small_cnn(in_ch=1, width=4)
        data = paddle.to_tensor(np.random.default_rng(1).standard_normal((6, 1, 8, 8)).astype(np.float32))
        with hookkit.ActivationStats(model, hist=True, bins=10, range=(-1, 1)) as acts, hookkit.GradientStats(model) as grads:
            for _ in range(2):
                (model(data) ** 2).mean().backward()
        return {**acts.to_numpy(), **{f"grad {k}": v for k, v in grads.to_numpy().items()}}

    kernel, ops = recorded(True), recorded(False)
    for name in kernel:
        for key in kernel[name]:
            np.testing.assert_allclose(kernel[name][key], ops[name][key], rtol=1e-4, atol=1e-7, err_msg=f"{name} {key}")


def test_cpu_kernel_rejects_bad_arguments_clearly(torch_fw):
    """The kernel's own checks (host_stats guards them; a direct caller gets a ValueError, and the
    counts it was given are left as they were)."""
    from hookkit.backends import host_stats

    if host_stats.kernels is None:
        pytest.skip("hookkit.backends._cpu_kernels was not built (no C compiler at install)")
    x = np.arange(10, dtype=np.float32)
    counts = np.full(4, 7, np.int64)
    for bad in [(np.zeros(0, np.int64), 0.0, 1.0), (counts, 1.0, 1.0), (counts, 2.0, 1.0), (np.zeros(3, np.int8), 0.0, 1.0)]:
        with pytest.raises(ValueError, match="int64 bins and lo < hi"):
            host_stats.kernels.moments(x, 0.0, *bad)
    assert counts.tolist() == [7, 7, 7, 7]
    with pytest.raises(ValueError, match="float32 buffer"):
        host_stats.kernels.moments(np.zeros(3, np.int8), 0.0)
    for strided in ((x[::2], 0.0), (x, 0.0, np.zeros(8, np.int64)[::2], 0.0, 1.0)):
        with pytest.raises(ValueError, match="contiguous"):
            host_stats.kernels.moments(*strided)
    assert not host_stats.applies(10, (0, 0.0, 1.0)) and not host_stats.applies(10, (4, 1.0, 1.0)) and not host_stats.applies(0)
    assert host_stats.kernels.moments(x, 4.0, counts, 0.0, 10.0, True) == (45.0, 285.0, 5, 9.0)
    assert counts.tolist() == [7 + 3, 7 + 2, 7 + 3, 7 + 2]  # added to what was there


def test_statistics_keep_no_model_alive(fw):
    """Statistics kept after training (to save or plot) hold no layer, parameter or model: the
    model is freed once the user drops it, attached or not, and what was recorded stays readable."""
    import gc
    import weakref

    model = fw.mlp((5, 8, 3))
    model.train()
    acts, grads = hookkit.ActivationStats(model, hist=True), hookkit.GradientStats(model)
    train_steps(fw, model, 2, fw.randn(4, 5))
    ref = weakref.ref(model)
    del model
    gc.collect()
    assert ref() is None
    assert len(acts.layer_stats("0")["mean"]) == 2 and len(grads.param_stats("2")["norm"]) == 2


def test_failed_construction_leaves_no_hooks(torch_fw):
    """A layer that cannot be hooked (a scripted one) fails the construction with a clear error,
    after other layers were attached: everything placed is removed again."""
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.jit.script(torch.nn.Linear(4, 2)))
    for make in (hookkit.ActivationStats, hookkit.GradientStats):
        with pytest.raises(hookkit.HookkitError, match="'2'.*ScriptModule"):
            make(model, ["0", "2"])
        assert no_hooks_left(model)


def test_expanded_output_gradients_are_measured(fw):
    """``model(x).sum().backward()`` gives the last layer a stride-0 (expanded) output gradient:
    measured like any other (norm of ones = sqrt(numel))."""
    model = fw.mlp((5, 8, 3))
    model.train()
    with hookkit.GradientStats(model) as gstats:
        model(fw.randn(4, 5)).sum().backward()
    s = gstats.layer_stats("2")
    np.testing.assert_allclose([s["norm"][0], s["mean"][0], s["max_abs"][0], s["std"][0]], [np.sqrt(12), 1, 1, 0], atol=1e-6)
