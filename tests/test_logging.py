"""What the callbacks write, read back from the files: TensorBoard event files, VisualDL records and
an offline Weights & Biases run hold the scalars and the histograms of the recorded statistics."""

from __future__ import annotations

import glob
import struct
import time

import numpy as np
import pytest

import hookkit
from test_integrations import BATCH, N, lightning, paddle_fit  # noqa: F401  (fixtures: a real Lightning / Paddle fit)

STEPS_PER_EPOCH = N // BATCH


def _windows(steps: np.ndarray, epochs: int) -> list[np.ndarray]:
    """The rows recorded in each epoch (one log point per epoch)."""
    return [np.flatnonzero((steps >= e * STEPS_PER_EPOCH) & (steps < (e + 1) * STEPS_PER_EPOCH)) for e in range(epochs)]


def _trimmed(counts: np.ndarray) -> np.ndarray:
    filled = np.flatnonzero(counts)
    return counts[filled[0] : filled[-1] + 1]


def test_tensorboard_event_files_hold_activation_and_gradient_histograms(lightning, tmp_path):  # noqa: F811
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    from hookkit.integrations.lightning import HookkitCallback

    writer = SummaryWriter(str(tmp_path))
    cb = HookkitCallback(hist=True, writer=writer)
    lightning(cb, epochs=2)
    writer.close()
    acc = EventAccumulator(str(tmp_path), size_guidance={"histograms": 0, "scalars": 0})
    acc.Reload()
    tags = acc.Tags()
    for layer in ("net.0", "net.2"):
        assert f"act_hist/{layer}" in tags["histograms"] and f"act/{layer}/mean" in tags["scalars"]
        assert {f"grad_hist/{layer}/norm", f"param_grad_hist/{layer}/norm"} <= set(tags["histograms"])
        acts = cb.activation_stats.layer_stats(layer)
        events = acc.Histograms(f"act_hist/{layer}")
        assert [e.step for e in events] == [STEPS_PER_EPOCH, 2 * STEPS_PER_EPOCH]  # one per epoch, at the global step
        lo, hi = cb.activation_stats.hist_range
        edges = np.linspace(lo, hi, cb.activation_stats.bins + 1)
        for event, rows in zip(events, _windows(acts["step"], 2)):
            h = event.histogram_value
            counts = acts["hist"][rows].sum(axis=0)  # the recorded bins of that epoch: no second pass over the outputs
            np.testing.assert_allclose(h.bucket, _trimmed(counts))
            assert h.num == counts.sum() and edges[0] <= h.min < h.max <= edges[-1]
            assert np.isin(np.round(h.bucket_limit, 5), np.round(edges, 5)).all()  # bucket limits are the recorded bins' edges
        grads = cb.gradient_stats.layer_stats(layer)
        for event, rows in zip(acc.Histograms(f"grad_hist/{layer}/norm"), _windows(grads["step"], 2)):
            h = event.histogram_value
            norms = grads["norm"][rows].astype(np.float64)
            assert h.num == len(rows) == STEPS_PER_EPOCH  # the per-step norms of the epoch
            assert h.min == pytest.approx(norms.min()) and h.max == pytest.approx(norms.max())
            assert h.sum == pytest.approx(norms.sum()) and h.sum_squares == pytest.approx((norms**2).sum())


def test_without_hist_only_gradient_histograms_and_a_plain_scalar_writer_gets_scalars(lightning, tmp_path):  # noqa: F811
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    from hookkit.integrations.lightning import HookkitCallback

    writer = SummaryWriter(str(tmp_path))
    lightning(HookkitCallback(writer=writer), epochs=1)
    writer.close()
    acc = EventAccumulator(str(tmp_path), size_guidance={"histograms": 0})
    acc.Reload()
    assert not [t for t in acc.Tags()["histograms"] if t.startswith("act_hist/")]
    assert "grad_hist/net.0/norm" in acc.Tags()["histograms"]

    class ScalarsOnly:  # the old protocol: add_scalar only
        def __init__(self) -> None:
            self.tags: list[str] = []

        def add_scalar(self, tag, value, step):
            self.tags.append(tag)

    plain = ScalarsOnly()
    lightning(HookkitCallback(hist=True, writer=plain), epochs=1)
    assert "act/net.0/mean" in plain.tags and not [t for t in plain.tags if "hist" in t]


def test_visualdl_log_writer_gets_scalars_and_histograms_from_paddle_fit(paddle_fit, tmp_path):  # noqa: F811
    visualdl = pytest.importorskip("visualdl")
    from hookkit.integrations.paddle_hapi import HookkitPaddleCallback
    from hookkit.integrations.writers import VisualDLWriter

    log_writer = visualdl.LogWriter(logdir=str(tmp_path))
    cb = HookkitPaddleCallback(hist=True, writer=log_writer)  # adapted: VisualDLWriter
    assert isinstance(cb.monitor.writer, VisualDLWriter)
    paddle_fit(cb, epochs=2)
    log_writer.close()
    (path,) = glob.glob(str(tmp_path / "vdlrecords.*"))
    reader = visualdl.LogReader(file_path=path)
    assert "act/body.0/mean" in reader.get_tags()["scalar"]
    assert {"act_hist/body.0", "act_hist/body.2", "grad_hist/body.0/norm"} <= set(reader.get_tags()["histogram"])
    acts = cb.activation_stats.layer_stats("body.0")
    records = reader.get_data("histogram", "act_hist/body.0")
    assert [r.id for r in records] == [STEPS_PER_EPOCH, 2 * STEPS_PER_EPOCH]  # one per epoch, at the step count
    lo, hi = cb.activation_stats.hist_range
    edges = np.linspace(lo, hi, cb.activation_stats.bins + 1)
    for record, rows in zip(records, _windows(acts["step"], 2)):
        counts = _trimmed(acts["hist"][rows].sum(axis=0))
        np.testing.assert_allclose(list(record.histogram.hist), counts)
        assert len(record.histogram.bin_edges) == len(counts) + 1
        assert np.isin(np.round(record.histogram.bin_edges, 5), np.round(edges, 5)).all()


def _wandb_history(run_dir: str) -> list[dict[str, str]]:
    """The history rows of an offline run, read from its ``run-*.wandb`` file: LevelDB-log framed
    protobuf ``Record``s (7-byte header, 32 KiB blocks, 7-byte chunk headers: crc, length, type)."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = glob.glob(f"{run_dir}/run-*.wandb")
    raw = open(path, "rb").read()
    assert raw[:4] == b":W&B"
    pos, block, chunks, rows = 7, 32768, b"", []
    while pos + 7 <= len(raw):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", raw[pos : pos + 7])
        chunks += raw[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: a whole record
            record = pb.Record()
            record.ParseFromString(chunks)
            chunks = b""
            if record.WhichOneof("record_type") == "history":
                rows.append({item.key or "/".join(item.nested_key): item.value_json for item in record.history.item})
    return rows


@pytest.mark.slow
def test_wandb_offline_run_holds_the_scalars_and_histograms(torch_fw, tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    import json

    import torch

    from hookkit.integrations._common import Monitor
    from hookkit.integrations.writers import WandbWriter

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = wandb.init(project="hookkit-test", dir=str(tmp_path), mode="offline")
    try:
        monitor = Monitor(hist=True, writer=run)  # a run is adapted: WandbWriter
        assert isinstance(monitor.writer, WandbWriter)
        model = torch_fw.mlp((5, 16, 3))
        monitor.attach(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        logged = []
        for step in range(6):
            torch.nn.functional.cross_entropy(model(torch.randn(8, 5)), torch.randint(0, 3, (8,))).backward()
            opt.step(), opt.zero_grad()
            if step % 3 == 2:
                logged.append(monitor.log(step))
        monitor.remove()
        run_dir = run.dir.rsplit("/files", 1)[0]
    finally:
        run.finish()
    assert [len(v) > 0 for v in logged] == [True, True]
    rows = _wandb_history(run_dir)
    for _ in range(40):  # wandb-core writes the run file in its own process: on a loaded machine, after finish() returns
        if len(rows) >= 2:
            break
        time.sleep(0.25)
        rows = _wandb_history(run_dir)
    assert [int(r["_step"]) for r in rows] == [2, 5], f"history of the offline run in {run_dir}: {rows}"
    for row, scalars in zip(rows, logged):
        assert float(row["act/0/mean"]) == pytest.approx(scalars["act/0/mean"], rel=1e-6)
        assert float(row["grad/2/norm"]) == pytest.approx(scalars["grad/2/norm"], rel=1e-6)
        assert json.loads(row["act_hist/0/_type"]) == "histogram"
        values, bins = json.loads(row["act_hist/0/values"]), json.loads(row["act_hist/0/bins"])
        assert len(bins) == len(values) + 1 and sum(values) > 0
    acts = monitor.activation_stats.layer_stats("0")
    assert sum(json.loads(rows[0]["act_hist/0/values"])) == acts["hist"][:3].sum()  # the first 3 steps' bins


def test_writer_errors_name_what_is_accepted():
    from hookkit.integrations._common import Monitor
    from hookkit.integrations.writers import WandbWriter

    with pytest.raises(
        TypeError,
        match=r"Monitor\(\): writer must be a TensorBoard SummaryWriter .* a VisualDL LogWriter or a wandb run; got <object object",
    ):
        Monitor(writer=object())
    wandb = pytest.importorskip("wandb")
    if wandb.run is None:
        with pytest.raises(RuntimeError, match=r"WandbWriter\(\): no wandb run: call wandb.init"):
            WandbWriter()
    assert hookkit  # the package imports without the writers' libraries
