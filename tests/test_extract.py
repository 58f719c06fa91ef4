"""extract / load_features: data-set-scale capture to sharded safetensors, both frameworks."""

from __future__ import annotations

import json
import os
import runpy
import signal
import struct
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import hookkit
from hookkit.observers import features as fmt
from models import hooks_left
from tolerance import assert_close, sum_ops


def _batches(fw, sizes=(5, 5, 3, 6), shape=(1, 8, 8)):
    return [fw.randn(n, *shape) for n in sizes]


def _captured(fw, model, layers, batches):
    with hookkit.capture(model, layers) as cap, fw.no_grad():
        for x in batches:
            model(x)
    return {n: np.concatenate([fw.numpy(r.output) for r in cap.calls(n)]) for n in layers}


def _files(folder):
    return {p.name: p.read_bytes() for p in sorted(Path(folder).iterdir())}


def _no_writer_thread():
    return not any(t.name == "hookkit-extract-writer" for t in threading.enumerate())


def test_extract_then_load_equals_capture_bit_exact(fw, tmp_path):
    model = fw.small_cnn()
    model.eval()
    batches = _batches(fw)
    layers = ["conv1", "relu2", "fc"]
    feats = hookkit.extract(model, batches, layers, tmp_path / "f", shard_size=3000, progress=False)
    ref = _captured(fw, model, layers, batches)
    assert list(feats) == layers and feats.count == 19 and len(feats["fc"]) == 19
    index = json.loads((tmp_path / "f" / "index.json").read_text())
    assert len(index["shards"]) > 1 and index["complete"]  # several shards, batches never split
    assert [c for s in index["shards"] for c in s["batch_sizes"]] == [5, 5, 3, 6]
    for name in layers:
        arr = feats[name]
        assert arr.shape == ref[name].shape and arr.dtype == ref[name].dtype
        assert np.array_equal(np.asarray(arr), ref[name])  # bit-exact: no reduction, no dtype
        assert np.array_equal(arr[3:12], ref[name][3:12])  # across shards
        assert np.array_equal(arr[[18, 0, -1, 7]], ref[name][[18, 0, -1, 7]])
        mask = np.arange(19) % 3 == 0
        assert np.array_equal(arr[mask], ref[name][mask])
        assert np.array_equal(arr[-2], ref[name][-2]) and np.array_equal(arr[4:6, 0], ref[name][4:6, 0])
    assert not feats["fc"][0].flags.writeable  # memory-mapped, read-only
    assert feats.metadata["layers"] == layers and feats.metadata["complete"]
    assert hooks_left(model) == [] and _no_writer_thread()
    reloaded = hookkit.load_features(tmp_path / "f")
    assert np.array_equal(np.asarray(reloaded["conv1"]), ref["conv1"])
    # what we write is standard safetensors
    from safetensors.numpy import load_file

    first = load_file(str(tmp_path / "f" / index["shards"][0]["file"]))
    assert np.array_equal(first["fc"], ref["fc"][: index["shards"][0]["count"]])


def test_extract_reductions_dtype_and_inputs(fw, tmp_path):
    model = fw.small_cnn()
    model.eval()
    batches = _batches(fw, (4, 4))
    reduce = {"conv1": "mean:2,3", "relu2": "max:1", "pool1": "token:-1", "pool2": "slice:0:3", "fc": lambda t: t * 2}
    layers = list(reduce)
    feats = hookkit.extract(model, batches, layers, tmp_path / "f", reduce=reduce, inputs=True, progress=False)
    ref = _captured(fw, model, layers, batches)
    # the framework's mean over 8 x 8 positions against numpy's (another summation order), of terms of
    # both signs: the error scales with the activations' size
    assert_close(
        feats["conv1"][:], ref["conv1"].mean(axis=(2, 3)), dtype="float32", n_ops=sum_ops(64) + 1, scale=float(np.abs(ref["conv1"]).max())
    )
    np.testing.assert_array_equal(feats["relu2"][:], ref["relu2"].max(axis=1))
    np.testing.assert_array_equal(feats["pool1"][:], ref["pool1"][:, -1])
    np.testing.assert_array_equal(feats["pool2"][:], ref["pool2"][:, 0:3])
    np.testing.assert_array_equal(feats["fc"][:], ref["fc"] * 2)
    assert feats["fc:input"].shape == (8, 64)  # the flattened input of fc, same reduction
    meta = feats.metadata["reduce"]
    assert meta["conv1"] == "mean:2,3" and meta["pool1"] == "token:-1" and meta["fc"].startswith("fn:")
    half = hookkit.extract(model, batches, "fc", tmp_path / "h", dtype="float16", progress=False)
    assert half["fc"].dtype == np.float16
    np.testing.assert_allclose(np.asarray(half["fc"]), ref["fc"], rtol=2e-3, atol=2e-3)


def test_extract_torch_dataloader_tuples_and_to_tensors(torch_fw, tmp_path):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    model = torch_fw.mlp((4, 6, 3)).eval()
    x, y = torch.randn(23, 4), torch.arange(23)
    loader = DataLoader(TensorDataset(x, y), batch_size=5)
    feats = hookkit.extract(model, loader, ["0", "2"], tmp_path / "f", progress=False)
    assert feats.count == 23
    with torch.no_grad():
        assert_close(feats["2"].to_torch(), model(x), dtype="float32", n_ops=16)  # the 4-6-3 MLP in batches of 5, not 23
    t = feats.to_torch()["0"]
    assert isinstance(t, torch.Tensor) and t.shape == (23, 6)


def test_extract_paddle_dataloader_and_to_paddle(paddle_fw, tmp_path):
    import paddle

    model = paddle_fw.mlp((4, 6, 3))
    model.eval()
    x = np.random.randn(23, 4).astype("float32")
    y = np.arange(23).reshape(23, 1)
    loader = paddle.io.DataLoader(paddle.io.TensorDataset([paddle.to_tensor(x), paddle.to_tensor(y)]), batch_size=5)
    feats = hookkit.extract(model, loader, "2", tmp_path / "f", progress=False)
    out = feats["2"].to_paddle()
    assert isinstance(out, paddle.Tensor) and out.shape == [23, 3]
    assert_close(out, model(paddle.to_tensor(x)), dtype="float32", n_ops=16)  # the 4-6-3 MLP in batches of 5, not 23


def test_extract_numpy_batches_and_forward_callable(fw, tmp_path):
    model = fw.mlp((4, 6, 3))
    model.eval()
    xs = np.array_split(np.random.randn(10, 4).astype("float32"), 3)
    feats = hookkit.extract(model, xs, "0", tmp_path / "np", progress=False)  # numpy -> tensors
    assert feats.count == 10
    seen = []

    def forward(batch):
        seen.append(sorted(batch))
        return model(batch["features"] * 2)

    data = [{"features": fw.tensor(x), "ids": list(range(len(x)))} for x in xs]
    doubled = hookkit.extract(model, data, "0", tmp_path / "fwd", forward=forward, progress=False)
    assert seen == [["features", "ids"]] * 3 and doubled.count == 10
    w = fw.numpy(model[0].weight)
    w = w if fw.name == "paddle" else w.T
    np.testing.assert_allclose(np.asarray(doubled["0"]) - fw.numpy(model[0].bias), np.concatenate(xs) * 2 @ w, rtol=1e-4, atol=1e-5)


def test_extract_gpt2_residual_stream_dict_batches(tmp_path):
    import torch
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    model = GPT2Model(GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100, n_positions=32)).eval()
    data = [{"input_ids": torch.randint(0, 100, (3, 7)), "attention_mask": torch.ones(3, 7, dtype=torch.long)} for _ in range(3)]
    feats = hookkit.extract(model, data, "h.*", tmp_path / "f", reduce="mean:1", dtype="float16", progress=False)
    assert list(feats) == ["h.0", "h.1"] and feats["h.1"].shape == (9, 32) and feats["h.1"].dtype == np.float16
    with hookkit.capture(model, "h.1") as cap, torch.no_grad():
        for batch in data:
            model(**batch)
    ref = torch.cat([r.output.mean(1) for r in cap.calls("h.1")]).half().numpy()
    np.testing.assert_array_equal(np.asarray(feats["h.1"]), ref)


class _Failing:
    """Batches, raising after ``fail_at`` of them (an interrupted run)."""

    def __init__(self, batches, fail_at=None, exc=RuntimeError):
        self.batches, self.fail_at, self.exc = batches, fail_at, exc

    def __iter__(self):
        for i, b in enumerate(self.batches):
            if i == self.fail_at:
                raise self.exc("the data loader broke")
            yield b


def test_resume_after_exception_gives_the_same_files(fw, tmp_path):
    model = fw.small_cnn()
    model.eval()
    batches = _batches(fw, (4,) * 9)
    kw = dict(reduce={"conv1": "mean:2,3"}, shard_size=700, progress=False)
    hookkit.extract(model, batches, ["conv1", "fc"], tmp_path / "whole", **kw)
    for exc in (RuntimeError, KeyboardInterrupt):
        out = tmp_path / exc.__name__
        with pytest.raises(exc, match="broke"):
            hookkit.extract(model, _Failing(batches, 6, exc), ["conv1", "fc"], out, **kw)
        assert hooks_left(model) == [] and _no_writer_thread()
        index = json.loads((out / "index.json").read_text())
        assert not index["complete"] and 0 < index["count"] < 36
        with pytest.warns(UserWarning, match="incomplete"):
            part = hookkit.load_features(out)
        assert part.count == index["count"]
        forwarded = []

        def forward(x, forwarded=forwarded):
            forwarded.append(1)
            return model(x)

        resumed = hookkit.extract(model, batches, ["conv1", "fc"], out, forward=forward, **kw)
        assert len(forwarded) == 9 - index["batches"]  # only the batches not on disk were run
        assert resumed.count == 36 and _files(out) == _files(tmp_path / "whole")


def test_resume_cleans_a_killed_runs_leftovers(fw, tmp_path):
    """kill -9 between writing a shard and listing it, with a truncated temporary shard behind."""
    model = fw.mlp((4, 8, 3))
    model.eval()
    batches = [fw.randn(5, 4) for _ in range(6)]
    kw = dict(shard_size=100, progress=False)
    hookkit.extract(model, batches, ["0", "2"], tmp_path / "whole", **kw)
    out = tmp_path / "killed"
    with pytest.raises(RuntimeError):
        hookkit.extract(model, _Failing(batches, 2), ["0", "2"], out, **kw)
    listed = json.loads((out / "index.json").read_text())["shards"]
    whole = _files(tmp_path / "whole")
    nxt = fmt.shard_name(len(listed))
    (out / nxt).write_bytes(whole[nxt])  # written and renamed, index not yet updated
    (out / f".{fmt.shard_name(len(listed) + 1)}.tmp").write_bytes(whole[nxt][:50])  # truncated
    (out / ".index.json.tmp").write_text('{"form')
    hookkit.extract(model, batches, ["0", "2"], out, **kw)
    assert _files(out) == whole


_KILL_SCRIPT = textwrap.dedent(
    """
    import sys, time, torch, hookkit
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).eval()
    g = torch.Generator().manual_seed(1)
    batches = [torch.randn(5, 4, generator=g) for _ in range(40)]
    slow = sys.argv[2] == "slow"
    def data():
        for b in batches:
            if slow:
                time.sleep(0.05)
            yield b
    hookkit.extract(model, data(), ["0", "2"], sys.argv[1], shard_size=200, progress=False)
    """
)


@pytest.mark.slow
def test_resume_after_kill_9_subprocess(tmp_path, monkeypatch):
    script = tmp_path / "run.py"
    script.write_text(_KILL_SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, str(script), str(out), "slow"], env=env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if json.loads((out / "index.json").read_text())["count"] >= 20:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    index = json.loads((out / "index.json").read_text())
    assert not index["complete"] and index["count"] < 200
    for folder in (out, tmp_path / "whole"):  # resume the killed run; an uninterrupted one (in this process)
        monkeypatch.setattr(sys, "argv", ["run.py", str(folder), "fast"])
        runpy.run_path(str(script))
    assert _files(out) == _files(tmp_path / "whole")
    assert hookkit.load_features(out).count == 200


def test_changed_arguments_are_refused(fw, tmp_path):
    model = fw.mlp((4, 8, 3))
    model.eval()
    batches = [fw.randn(5, 4) for _ in range(3)]
    out = tmp_path / "f"
    with pytest.raises(RuntimeError):
        hookkit.extract(model, _Failing(batches, 2), ["0", "2"], out, shard_size=50, progress=False)
    for kw, field in [
        (dict(layers=["0"]), "layers"),
        (dict(reduce="max:1"), "reduce"),
        (dict(dtype="float16"), "dtype"),
        (dict(inputs=True), "inputs"),
        (dict(model=fw.mlp((4, 9, 3))), "parameters"),
        (dict(model=fw.small_cnn(), layers=["conv1", "fc"]), "model"),
    ]:
        args = dict(model=model, layers=["0", "2"], progress=False) | kw
        m, layers = args.pop("model"), args.pop("layers")
        with pytest.raises(hookkit.ExtractError, match=f"other arguments.*{field}"):
            hookkit.extract(m, batches, layers, out, **args)
        assert hooks_left(m) == []
    # shuffled / changed data: the sample counts of the batches already written differ
    with pytest.raises(hookkit.ExtractError, match="batch 0 holds 4 samples but held 5"):
        hookkit.extract(model, [fw.randn(4, 4)] + batches, ["0", "2"], out, shard_size=50, progress=False)
    done = hookkit.extract(model, batches, ["0", "2"], out, shard_size=50, progress=False)
    again = hookkit.extract(model, _Failing(batches, 0), ["0", "2"], out, shard_size=50, progress=False)
    assert done.count == again.count == 15  # complete: returned without touching the data


def test_bad_input_errors_before_any_forward(fw, tmp_path):
    model = fw.mlp((4, 8, 3))
    model.eval()
    batches = [fw.randn(5, 4) for _ in range(2)]
    calls = []

    def forward(b):
        calls.append(1)
        return model(b)

    with pytest.raises(hookkit.LayerNotFound, match="'9'"):
        hookkit.extract(model, batches, ["0", "9"], tmp_path / "a", forward=forward)
    assert not (tmp_path / "a").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(hookkit.ExtractError, match="out=.*is a file"):
        hookkit.extract(model, batches, "0", tmp_path / "file", forward=forward)
    with pytest.raises(hookkit.ExtractError, match="out=.*cannot create"):
        hookkit.extract(model, batches, "0", tmp_path / "file" / "sub", forward=forward)
    with pytest.raises(hookkit.ExtractError, match="how many samples batch 1 holds"):
        hookkit.extract(model, [batches[0], ["a", "b"]], "0", tmp_path / "b", forward=forward)
    assert len(calls) == 1  # batch 0 ran, batch 1 was refused before its forward
    with pytest.raises(hookkit.ExtractError, match="how many samples batch 0"):
        hookkit.extract(model, [fw.tensor(3.0)], "0", tmp_path / "c", forward=forward)
    bad = [
        (dict(data=batches[0]), "data=.*single"),
        (dict(data=5), "not iterable"),
        (dict(data=[]), "no batches"),
        (dict(reduce="median:1"), "cannot read 'median:1'"),
        (dict(reduce={"7": "mean:1"}), "matches none"),
        (dict(reduce="mean:0"), "dim 0 is the samples"),
        (dict(dtype="float8"), "storable dtypes"),
        (dict(shard_size="lots"), "shard_size"),
        (dict(shard_size=0), "shard_size"),
        (dict(forward=3), "forward"),
        (dict(progress="yes"), "progress"),
    ]
    for i, (kw, match) in enumerate(bad):
        args = dict(data=batches, forward=forward, layers="0") | kw
        with pytest.raises(hookkit.ExtractError, match=match):
            hookkit.extract(model, args.pop("data"), args.pop("layers"), tmp_path / f"bad{i}", **args)
        assert hooks_left(model) == [] and _no_writer_thread()


def test_shape_errors_name_the_layer_and_batch(fw, tmp_path):
    fwk = fw

    class Seq(fwk.Layer):
        """An embedding-like layer: output [B, T, 4] with T varying across batches."""

        def __init__(self):
            super().__init__()
            self.proj = fwk.linear(2, 4)
            self.total = fwk.linear(4, 1)

        def forward(self, x):
            h = self.proj(x)
            return self.total(h.sum(1))

    model = Seq()
    data = [fw.randn(3, 5, 2), fw.randn(3, 5, 2), fw.randn(3, 6, 2)]
    with pytest.raises(hookkit.ExtractError, match=r"'proj' gave rows of shape \[6, 4\] float32 in batch 2, but \[5, 4\] float32 before"):
        hookkit.extract(model, data, "proj", tmp_path / "a", progress=False)
    ok = hookkit.extract(model, data, "proj", tmp_path / "b", reduce="mean:1", progress=False)  # reduced: fine
    assert ok["proj"].shape == (9, 4)
    with pytest.raises(hookkit.ExtractError, match=r"'total' gave shape \[5, 1\] for batch 0 of 3 samples"):
        hookkit.extract(model, data, "total", tmp_path / "c", forward=lambda x: model.total(model.proj(x).sum(0)))

    twice = fw.shared_block_model()
    with pytest.raises(hookkit.ExtractError, match="'block' ran more than once in the forward of batch 0"):
        hookkit.extract(twice, [fw.randn(2, 4)], "block", tmp_path / "d", progress=False)
    assert hooks_left(twice) == [] and hooks_left(model) == []


def test_writer_errors_surface_and_the_thread_ends(fw, tmp_path, monkeypatch):
    model = fw.mlp((4, 8, 3))
    batches = [fw.randn(5, 4) for _ in range(8)]
    real = fmt.write_shard
    written = []

    def failing(path, chunks, metadata=None):
        if written:
            raise OSError(28, "No space left on device")
        written.append(path)
        return real(path, chunks, metadata)

    monkeypatch.setattr(fmt, "write_shard", failing)
    with pytest.raises(OSError, match="No space left") as info:
        hookkit.extract(model, batches, "0", tmp_path / "f", shard_size=100, progress=False)
    assert any("writing a shard" in n for n in info.value.__notes__)
    assert _no_writer_thread() and hooks_left(model) == []
    assert json.loads((tmp_path / "f" / "index.json").read_text())["count"] == 5  # the shard that made it


def test_progress_bar_on_request(fw, tmp_path, capsys):
    model = fw.mlp((4, 8, 3))
    hookkit.extract(model, [fw.randn(5, 4)] * 3, "0", tmp_path / "f", progress=True)
    err = capsys.readouterr().err
    assert "samples" in err and "written" in err
    hookkit.extract(model, [fw.randn(5, 4)] * 3, "0", tmp_path / "g")  # not a terminal: quiet
    assert capsys.readouterr().err == ""


# -- hostile folders --------------------------------------------------------------------------------
@pytest.fixture
def saved(tmp_path):
    feats = {"fc": np.arange(12, dtype=np.float32).reshape(4, 3)}
    out = tmp_path / "f"
    out.mkdir()
    fmt.write_shard(str(out / "shard-00000.safetensors"), {"fc": [feats["fc"]]})
    index = {
        "format": fmt.FORMAT,
        "version": 1,
        "metadata": {},
        "layers": {"fc": {"shape": [3], "dtype": "float32"}},
        "shards": [{"file": "shard-00000.safetensors", "count": 4, "batch_sizes": [4]}],
        "count": 4,
        "batches": 1,
        "complete": True,
    }
    fmt.write_json(str(out / "index.json"), index)
    return out, index


def _rewrite_header(path, header, length=None):
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data[8 + n :])


def test_load_features_reads_a_valid_folder(saved):
    out, _ = saved
    feats = hookkit.load_features(out)
    assert np.array_equal(np.asarray(feats["fc"]), np.arange(12, dtype=np.float32).reshape(4, 3))
    with pytest.raises(KeyError, match="stored: fc"):
        feats["conv"]


@pytest.mark.parametrize(
    "shard_file",
    ["../shard-00000.safetensors", "/etc/passwd", "sub/shard-00000.safetensors", "shard-00000.safetensors/..", "index.json"],
)
def test_load_features_refuses_paths_outside_the_folder(saved, shard_file):
    out, index = saved
    index["shards"][0]["file"] = shard_file
    fmt.write_json(str(out / "index.json"), index)
    with pytest.raises(hookkit.FeaturesError, match="plain names"):
        hookkit.load_features(out)


def test_load_features_refuses_hostile_shards(saved, tmp_path):
    out, index = saved
    shard = out / "shard-00000.safetensors"
    good = shard.read_bytes()
    entry = {"dtype": "F32", "shape": [4, 3], "data_offsets": [0, 48]}
    cases = [
        ({"fc": dict(entry, data_offsets=[0, 10**9])}, None, "outside the data region"),
        ({"fc": dict(entry, data_offsets=[40, 88])}, None, "outside the data region"),
        ({"fc": dict(entry, data_offsets=[0, 40])}, None, "needs 48"),
        ({"fc": dict(entry, shape=[4, -3])}, None, "non-negative"),
        ({"fc": dict(entry, dtype="OBJ")}, None, "not readable"),
        ({"fc": dict(entry, shape=[2, 3], data_offsets=[0, 24])}, None, r"holds 'fc' as float32 \[2, 3\]"),
        ({"fc": entry}, 2**62, "header length"),
    ]
    for header, length, match in cases:
        _rewrite_header(shard, header, length)
        with pytest.raises(hookkit.FeaturesError, match=match):
            hookkit.load_features(out)
        shard.write_bytes(good)
    shard.write_bytes(b"\x05\x00")
    with pytest.raises(hookkit.FeaturesError, match="too short"):
        hookkit.load_features(out)
    shard.write_bytes(good)
    outside = tmp_path / "secret.safetensors"
    outside.write_bytes(good)
    shard.unlink()
    shard.symlink_to(outside)
    with pytest.raises(hookkit.FeaturesError, match="outside the folder"):
        hookkit.load_features(out)


def test_load_features_refuses_bad_indexes(saved, tmp_path):
    out, index = saved
    for change, match in [
        (dict(count=5), "counts 5 samples but its shards hold 4"),
        (dict(format="pickle"), "not a hookkit.features index"),
        (dict(version=99), "version 99"),
        (dict(layers={"fc": {"shape": [3], "dtype": "object"}}), "needs a dtype"),
        (dict(shards=[dict(index["shards"][0], batch_sizes=[3])]), "batch_sizes must be a list of integers summing to its count 4"),
    ]:
        fmt.write_json(str(out / "index.json"), index | change)
        with pytest.raises(hookkit.FeaturesError, match=match):
            hookkit.load_features(out)
    (out / "index.json").write_text("{not json")
    with pytest.raises(hookkit.FeaturesError, match="not valid JSON"):
        hookkit.load_features(out)
    with pytest.raises(hookkit.FeaturesError, match="no index.json"):
        hookkit.load_features(tmp_path)


# -- command line -----------------------------------------------------------------------------------
def test_cli_extract_digits(tmp_path, capsys):
    from sklearn.datasets import load_digits

    from hookkit.apps.cli import main

    x = load_digits().data[:100]
    np.save(tmp_path / "digits.npy", x)  # float64: --data-dtype float32 for the model
    args = ["extract", "torch.nn:Linear", "--kw", "in_features=64", "--kw", "out_features=10", "--data", str(tmp_path / "digits.npy")]
    args += ["--data-dtype", "float32", "--layers", "", "--batch-size", "32", "--out", str(tmp_path / "f"), "--dtype", "float16"]
    assert main(args) == 0
    assert "100 samples" in capsys.readouterr().out
    feats = hookkit.load_features(tmp_path / "f")
    assert feats[""].shape == (100, 10) and feats[""].dtype == np.float16
    assert json.loads((tmp_path / "f" / "index.json").read_text())["shards"][0]["batch_sizes"] == [32, 32, 32, 4]
    # same arguments: nothing to do; other arguments in the same folder: refused
    assert main(args) == 0
    assert main([*args, "--reduce", "max:1"]) == 2
    assert "other arguments" in capsys.readouterr().err
    for extra, match in [
        (["--layers", "fc"], "no layer matches 'fc'"),
        (["--reduce", "median"], "cannot read 'median'"),
        (["--batch-size", "0"], "--batch-size"),
    ]:
        assert main([*args[:-4], *extra, "--out", str(tmp_path / "g")]) == 2
        assert match in capsys.readouterr().err
    bad = [*args]
    bad[bad.index("--data") + 1] = str(tmp_path / "missing.npy")
    assert main(bad) == 2 and "no such file" in capsys.readouterr().err
