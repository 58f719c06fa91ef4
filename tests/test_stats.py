"""ActivationStats and GradientStats: fastai's formulas, every/train-only, save/load, removal, no host sync."""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest

import hookkit
from hookkit.core.router import attached
from tolerance import assert_close, sum_ops

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
            # two float32 means over the layer's output in other orders; values of both signs: their size
            out = fw.numpy(rec.output)
            assert_close(s["mean"][row], mean, dtype="float32", n_ops=sum_ops(out.size) + 1, scale=float(np.abs(out).max()))
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
                    assert_close(s["mean"][row], g.mean(), dtype="float32", n_ops=sum_ops(g.size), scale=np.abs(g).max())
                    np.testing.assert_allclose(s["std"][row], g.std(ddof=1), rtol=1e-4)
                    np.testing.assert_allclose(s["max_abs"][row], np.abs(g).max(), rtol=1e-6)
                # parameters: one row per backward, the layer's weight and bias taken together
                layer = dict(hookkit.select(model, hookkit.WITH_PARAMS))[name]
                pg = np.concatenate([fw.numpy(p.grad).astype(np.float64).ravel() for p in layer.parameters()])
                p = gstats.param_stats(name)
                i = list(p["step"]).index(step)
                np.testing.assert_allclose(p["norm"][i], np.linalg.norm(pg), rtol=1e-5)
                assert_close(p["mean"][i], pg.mean(), dtype="float32", n_ops=sum_ops(pg.size), scale=np.abs(pg).max())
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
    assert len(stats._layers["conv1"].pending) == 2 and len(gstats._layers["fc"].output.pending) == 2
    with pytest.raises((NotImplementedError, RuntimeError)):
        torch.ones(1, device="meta").item()  # what a host read in the hot path would have done


def test_rows_waiting_for_the_cross_rank_merge_keep_their_histograms(fw):
    """A layer with histograms that records nothing between two reads drains an empty block that
    still has its [0, bins] histograms: what waits for the cross-rank merge keeps its counts."""
    from hookkit.observers.stats.series import ACTIVATION
    from hookkit.observers.stats.slots import Pending, Slot

    layer = fw.linear(3, 4)
    slot = Slot(ACTIVATION, 5, Pending(hookkit.backends.backend_for(layer), 5))
    assert slot.pending.drain().hist.shape == (0, 5)  # nothing recorded: still [0, bins]
    be = hookkit.backends.backend_for(layer)
    row, hist = be.activation_sums_hist(fw.randn(2, 4), 0.05, 5, -2, 2)  # the framework-ops route's record
    slot.pending.add(row, 0, 0, 8, hist)
    slot.waiting = slot.pending.drain()
    slot.waiting = slot.waiting.concat(slot.pending.drain())  # a read with no new records
    sent = slot.take_waiting()
    assert sent.hist is not None and sent.hist.shape == (1, 5) and slot.waiting is None
    assert slot.take_waiting().hist.shape == (0, 5)


def test_long_runs_keep_bounded_memory_with_exact_merges(fw, monkeypatch):
    """Past LIMIT rows a layer's oldest rows are merged pairwise: memory stays bounded, the last
    LIMIT // 2 records stay one row each, and a merged row holds the exact statistics of all the
    values of the records it covers (as if they had been one tensor), histograms included."""
    from hookkit.observers.stats import series, slots

    monkeypatch.setattr(slots, "CHUNK", 4)  # device rows stacked every 4 records
    monkeypatch.setattr(series, "LIMIT", 16)
    model = fw.mlp((3, 4, 2))
    model.train()
    outputs, grads = [], []
    with (
        hookkit.ActivationStats(model, hist=True, bins=8, range=(-2, 2), train_only=False) as stats,
        hookkit.GradientStats(model, "2") as gstats,
        hookkit.capture(model, "0") as cap,
    ):
        for step in range(100):
            param_grads_cleared(fw, model)
            (model(fw.randn(2 + step % 3, 3)) ** 2).mean().backward()  # records of different sizes
            outputs.append(fw.numpy(cap["0"]).astype(np.float64).ravel())
            grads.append(np.concatenate([fw.numpy(p.grad).astype(np.float64).ravel() for p in model[2].parameters()]))
            if step % 7 == 0:
                assert len(stats.layer_stats("0")["mean"]) <= 16  # reads in between: O(new rows)
    s = stats.layer_stats("0")
    assert len(s["mean"]) <= 16 and s["records"].sum() == 100 and s["records"].max() > 2
    np.testing.assert_array_equal(s["step"][-8:], np.arange(92, 100))  # the exact last window
    assert (s["records"][-8:] == 1).all() and (np.diff(s["step"]) > 0).all()
    for row, (first, count) in enumerate(zip(s["step"], s["records"])):
        values = np.concatenate(outputs[first : first + count])
        # float32 sums per record, then the pairwise merges (at most 8 levels), against float64
        assert_close(s["mean"][row], values.mean(), dtype="float32", n_ops=sum_ops(values.size) + 8, scale=float(np.abs(values).max()))
        np.testing.assert_allclose(s["std"][row], values.std(ddof=1), rtol=1e-4)
        assert s["near_zero"][row] == pytest.approx((values <= 0.05).mean(), abs=1e-6)
        np.testing.assert_array_equal(s["hist"][row], np.histogram(values, 8, (-2, 2))[0])
    p = gstats.param_stats("2")  # gradient rows merge the same way: norms add in squares, maxima
    assert len(p["norm"]) <= 16 and p["records"].sum() == 100 and (p["records"][-8:] == 1).all()
    for row, (first, count) in enumerate(zip(p["step"], p["records"])):
        values = np.concatenate(grads[first : first + count])
        np.testing.assert_allclose(p["norm"][row], np.linalg.norm(values), rtol=1e-5)
        np.testing.assert_allclose(p["max_abs"][row], np.abs(values).max(), rtol=1e-6)
        assert_close(p["mean"][row], values.mean(), dtype="float32", n_ops=sum_ops(values.size), scale=np.abs(values).max())
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


@pytest.mark.parametrize("host_routes", [True, False])
def test_tied_parameter_is_hooked_once_and_reported_for_each_layer(torch_fw, monkeypatch, host_routes):
    """GPT-2 ties lm_head.weight to transformer.wte.weight: one hook, one reduction of its gradient
    per backward (on either route), and both layers report it."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from hookkit.backends import backend_for

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=16)).train()
    tied = model.lm_head.weight
    assert tied is model.transformer.wte.weight
    ids = torch.randint(0, 100, (2, 8))
    be = backend_for(model)
    reduced = []
    for method in ("tensor_sums_into", "param_sums"):
        original = getattr(be, method)

        def counting(*args, original=original):
            result = original(*args)
            if result is not False:  # tensor_sums_into says False when the other route serves
                reduced.extend(a for a in args if isinstance(a, torch.Tensor) and a.shape == tied.shape)
            return result

        monkeypatch.setattr(be, method, counting)
    monkeypatch.setattr(be, "host_routes", host_routes)
    with hookkit.GradientStats(model, ["transformer.wte", "lm_head"]) as gstats:
        assert len(tied._backward_hooks) == 1
        model(input_ids=ids, labels=ids).loss.backward()
    assert not tied._backward_hooks
    assert len(reduced) == 1  # reduced once, reported for both layers
    g = tied.grad.double()
    for name in ("transformer.wte", "lm_head"):
        p = gstats.param_stats(name)
        assert list(p["step"]) == [0]
        np.testing.assert_allclose(p["norm"][0], torch.linalg.vector_norm(g).item(), rtol=1e-6)
        np.testing.assert_allclose(p["max_abs"][0], g.abs().max().item(), rtol=1e-6)


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
