"""WeightStats: weights and update-to-weight ratios per parameter at each optimizer step."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit
from tolerance import assert_close, sum_ops


def _sgd(fw, model, lr=0.1):
    if fw.name == "torch":
        return fw.lib.optim.SGD(model.parameters(), lr=lr)
    return fw.lib.optimizer.SGD(learning_rate=lr, parameters=model.parameters())


def _train_step(fw, model, opt, x):
    model(x).sum().backward()
    fw.step(opt)


@pytest.mark.parametrize("host_routes", [True, False])  # the C kernel on the CPU; the framework's ops elsewhere
def test_update_ratio_is_the_hand_value_after_sgd_steps(fw, monkeypatch, host_routes):
    model = fw.mlp((4, 6, 3))
    monkeypatch.setattr(type(hookkit.backends.backend_for(model)), "host_routes", host_routes)
    opt = _sgd(fw, model)
    stats = hookkit.WeightStats(model, optimizer=opt, hist=True, bins=16, range=(-2, 2))
    assert stats._cpu == host_routes
    assert stats.names == ["0.weight", "0.bias", "2.weight", "2.bias"]
    snaps = []
    for _ in range(3):
        snaps.append({n: fw.numpy(p).astype(np.float64).copy() for n, p in zip(stats.names, fw.params(model))})
        _train_step(fw, model, opt, fw.randn(5, 4))
    snaps.append({n: fw.numpy(p).astype(np.float64).copy() for n, p in zip(stats.names, fw.params(model))})
    for name in stats.names:
        s = stats.param_stats(name)
        np.testing.assert_array_equal(s["step"], [0, 1, 2])
        assert np.isnan(s["update_ratio"][0])  # the first step: no previous weights
        for k in (1, 2):
            prev, now = snaps[k][name], snaps[k + 1][name]
            hand = np.linalg.norm(now - prev) / np.linalg.norm(prev)
            np.testing.assert_allclose(s["update_ratio"][k], hand, rtol=1e-5)
        now = snaps[3][name]
        assert_close(s["mean"][2], now.mean(), dtype="float32", n_ops=sum_ops(now.size), scale=np.abs(now).max())
        np.testing.assert_allclose(s["std"][2], now.std(ddof=1), rtol=1e-5)
        np.testing.assert_allclose(s["norm"][2], np.linalg.norm(now), rtol=1e-5)
        np.testing.assert_allclose(s["max_abs"][2], np.abs(now).max(), rtol=1e-6)
        np.testing.assert_array_equal(s["hist"][2], np.histogram(now, 16, (-2, 2))[0])
    stats.remove()
    _train_step(fw, model, opt, fw.randn(5, 4))
    assert len(stats.param_stats("0.weight")["step"]) == 3  # removed: no more records
    assert "step" not in vars(opt) and "minimize" not in vars(opt)  # Paddle's wrapper is gone


def test_no_host_read_per_step_on_the_meta_device(torch_fw):
    """The device route reads nothing on the host while training: on PyTorch's meta device (no
    values at all) any ``.item()``, ``.cpu()`` or ``float()`` would fail."""
    model = torch_fw.mlp((4, 8, 2)).to("meta")
    opt = _sgd(torch_fw, model)
    stats = hookkit.WeightStats(model, optimizer=opt, hist=True, range=(-1, 1))
    assert not stats._cpu
    for _ in range(3):
        model(torch_fw.lib.randn(5, 4, device="meta")).sum().backward()
        torch_fw.step(opt)
    assert len(stats._pending) == 3 * 4  # three steps of four parameters, still on the device
    stats.remove()


def test_every(fw):
    model = fw.linear(3, 2)
    opt = _sgd(fw, model)
    stats = hookkit.WeightStats(model, optimizer=opt, every=2, hist=True, bins=8, range=(-4, 4))
    snaps = []
    for _ in range(5):
        snaps.append(fw.numpy(fw.params(model)[0]).astype(np.float64).copy())
        _train_step(fw, model, opt, fw.randn(4, 3))
    s = stats.param_stats("weight")
    np.testing.assert_array_equal(s["step"], [0, 2, 4])
    assert np.isnan(s["update_ratio"][0])
    hand = np.linalg.norm(fw.numpy(fw.params(model)[0]) - snaps[4]) / np.linalg.norm(snaps[4])  # one step's update
    np.testing.assert_allclose(s["update_ratio"][2], hand, rtol=1e-5)
    assert s["hist"].shape == (3, 8) and s["hist"].sum(axis=1).tolist() == [6, 6, 6]
    stats.remove()


def test_zero_previous_norm_gives_nan(fw):
    model = fw.linear(3, 2)
    with fw.no_grad():
        for p in fw.params(model):
            p.set_value(np.zeros(p.shape, "float32")) if fw.name == "paddle" else p.zero_()
    opt = _sgd(fw, model, lr=0.0)  # the weights stay zero
    with hookkit.WeightStats(model, optimizer=opt) as stats:
        for _ in range(2):
            _train_step(fw, model, opt, fw.randn(4, 3))
    s = stats.param_stats("weight")
    assert np.isnan(s["update_ratio"]).all() and s["norm"].tolist() == [0.0, 0.0]


def test_without_optimizer_records_training_forwards(fw):
    model = fw.mlp((4, 5, 2))
    opt = _sgd(fw, model)
    stats = hookkit.WeightStats(model, "0")
    assert stats.names == ["0.weight", "0.bias"]
    before = fw.numpy(fw.params(model)[0]).astype(np.float64).copy()
    _train_step(fw, model, opt, fw.randn(3, 4))
    model.eval()
    model(fw.randn(3, 4))  # eval forwards are not recorded
    model.train()
    model(fw.randn(3, 4))
    s = stats.param_stats("0.weight")
    np.testing.assert_array_equal(s["step"], [0, 2])
    now = fw.numpy(fw.params(model)[0]).astype(np.float64)
    assert np.isnan(s["update_ratio"][0])
    # the copy was taken at step 0: the ratio at step 2 spans the update in between
    np.testing.assert_allclose(s["norm"][1], np.linalg.norm(now), rtol=1e-5)
    assert before.shape == now.shape
    stats.remove()
    assert not any(hookkit.core.router.attached(model).values())


def test_save_load_report(fw, tmp_path):
    model = fw.mlp((4, 6, 3))
    opt = _sgd(fw, model)
    with hookkit.WeightStats(model, optimizer=opt, hist=True) as stats:
        for _ in range(3):
            _train_step(fw, model, opt, fw.randn(5, 4))
    stats.save(tmp_path)
    loaded = hookkit.WeightStats.load(tmp_path)
    again = hookkit.load_stats(tmp_path)["weight_stats"]
    for name in stats.names:
        for key, value in stats.param_stats(name).items():
            np.testing.assert_array_equal(loaded.param_stats(name)[key], value)
            np.testing.assert_array_equal(again.param_stats(name)[key], value)
    assert loaded.hist_ranges == stats.hist_ranges
    names, steps, ratios = loaded.update_ratios()
    assert names == stats.names and steps.tolist() == [0, 1, 2] and ratios.shape == (4, 3)
    page = hookkit.report(tmp_path).read_text()
    assert "Update-to-weight ratio" in page


def test_errors_leave_nothing_attached(fw):
    model = fw.mlp()
    other = _sgd(fw, fw.mlp())
    with pytest.raises(ValueError, match="optimizer"):
        hookkit.WeightStats(model, optimizer=other)
    with pytest.raises(ValueError, match="bins"):
        hookkit.WeightStats(model, bins=0)
    with pytest.raises(ValueError, match="layers"):
        hookkit.WeightStats(model, layers="1")  # ReLU: no parameters
    with hookkit.WeightStats(model) as stats, pytest.raises(KeyError, match="0.weight"):
        stats.param_stats("0.weight_")
    assert not any(hookkit.core.router.attached(model).values())


# -- the training-loop callbacks: weight statistics and histograms, read back from the files ------------
from test_integrations import BATCH, N, RecordingWriter, hf_trainer, lightning, paddle_fit  # noqa: E402, F401  (fixtures: real fits)

STEPS_PER_EPOCH = N // BATCH


def _trimmed(counts):
    filled = np.flatnonzero(counts)
    return counts[filled[0] : filled[-1] + 1]


def test_lightning_logs_weight_histograms_to_tensorboard(lightning, tmp_path):  # noqa: F811
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    from hookkit.integrations.lightning import HookkitCallback

    writer = SummaryWriter(str(tmp_path))
    cb = HookkitCallback(activation_stats=False, gradient_stats=False, weight_stats=True, hist=True, layers="net.2", writer=writer)
    lightning(cb, epochs=2)
    writer.close()
    w = cb.weight_stats
    assert w.names == ["net.2.weight", "net.2.bias"]  # scoped by layers=
    s = w.param_stats("net.2.weight")
    np.testing.assert_array_equal(s["step"], np.arange(2 * STEPS_PER_EPOCH))  # one record per optimizer step
    assert np.isnan(s["update_ratio"][0]) and np.isfinite(s["update_ratio"][1:]).all()
    acc = EventAccumulator(str(tmp_path), size_guidance={"histograms": 0, "scalars": 0})
    acc.Reload()
    tags = acc.Tags()
    assert not [t for t in tags["histograms"] if "net.0" in t]
    events = acc.Histograms("weight_hist/net.2.weight")
    assert [e.step for e in events] == [STEPS_PER_EPOCH, 2 * STEPS_PER_EPOCH]
    lo, hi = w.hist_ranges["net.2.weight"]
    for event, last in zip(events, [STEPS_PER_EPOCH - 1, 2 * STEPS_PER_EPOCH - 1]):
        counts = s["hist"][last]  # the weights after the epoch's last step
        np.testing.assert_allclose(event.histogram_value.bucket, _trimmed(counts))
        assert event.histogram_value.num == 16 * 3 and lo <= event.histogram_value.min < event.histogram_value.max <= hi
    ratios = [e.value for e in acc.Scalars("weight/net.2.weight/update_ratio")]
    np.testing.assert_allclose(ratios[1], s["update_ratio"][STEPS_PER_EPOCH:].mean(), rtol=1e-5)
    norms = [e.value for e in acc.Scalars("weight/net.2.weight/norm")]
    np.testing.assert_allclose(norms[0], s["norm"][:STEPS_PER_EPOCH].mean(), rtol=1e-5)


def test_huggingface_trainer_records_at_the_optimizer_steps(hf_trainer):  # noqa: F811
    from hookkit.integrations.huggingface import HookkitTrainerCallback

    writer = RecordingWriter()
    cb = HookkitTrainerCallback(
        activation_stats=False, gradient_stats=False, weight_stats=True, layers="transformer.h.0.mlp.c_fc", writer=writer
    )
    trainer, model = hf_trainer(cb)
    trainer.train()
    s = cb.weight_stats.param_stats("transformer.h.0.mlp.c_fc.weight")
    np.testing.assert_array_equal(s["step"], [0, 1, 2])  # the Trainer's (accelerate-wrapped) optimizer's steps
    np.testing.assert_allclose(s["norm"][-1], float(model.transformer.h[0].mlp.c_fc.weight.detach().norm()), rtol=1e-5)
    logged = [(v, step) for t, v, step in writer.scalars if t == "weight/transformer.h.0.mlp.c_fc.weight/update_ratio"]
    assert [step for _, step in logged] == [2, 3] and logged[0][0] == pytest.approx(float(s["update_ratio"][1]), rel=1e-5)
    assert not any(hookkit.core.router.attached(model).values())


def test_paddle_hapi_logs_weight_histograms_to_visualdl(paddle_fit, tmp_path):  # noqa: F811
    visualdl = pytest.importorskip("visualdl")
    import glob

    from hookkit.integrations.paddle_hapi import HookkitPaddleCallback

    log_writer = visualdl.LogWriter(logdir=str(tmp_path))
    cb = HookkitPaddleCallback(activation_stats=False, gradient_stats=False, weight_stats=True, hist=True, writer=log_writer)
    net = paddle_fit(cb, epochs=2)
    log_writer.close()
    w = cb.weight_stats
    assert w.names == ["body.0.weight", "body.0.bias", "body.2.weight", "body.2.bias"]
    s = w.param_stats("body.0.weight")
    np.testing.assert_array_equal(s["step"], np.arange(2 * STEPS_PER_EPOCH))  # hapi's minimize, wrapped, once per batch
    np.testing.assert_allclose(s["norm"][-1], np.linalg.norm(net.body[0].weight.numpy()), rtol=1e-5)
    (path,) = glob.glob(str(tmp_path / "vdlrecords.*"))
    reader = visualdl.LogReader(file_path=path)
    assert "weight/body.0.weight/update_ratio" in reader.get_tags()["scalar"]
    records = reader.get_data("histogram", "weight_hist/body.0.weight")
    assert [r.id for r in records] == [STEPS_PER_EPOCH, 2 * STEPS_PER_EPOCH]
    np.testing.assert_allclose(list(records[-1].histogram.hist), _trimmed(s["hist"][-1]))


# -- 2 ranks (gloo on 127.0.0.1): DDP replicas and FSDP2 shards read the one-process figures -------------
def _weight_rank(rank: int, world: int, port: int, out: str) -> None:
    import os

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from test_distributed import close_group, flat, torch_batches, torch_model, torch_train

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)

    def run() -> None:  # its models go when it returns, before the process group does
        ddp = torch.nn.parallel.DistributedDataParallel(torch_model())
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        w = hookkit.WeightStats(ddp, optimizer=opt, hist=True, bins=12)  # ranges agreed across ranks
        torch_train(ddp, torch_batches(), rank, world, opt)
        np.savez(os.path.join(out, f"ddp{rank}.npz"), **flat(w.to_numpy()))
        model = torch_model()
        mesh = init_device_mesh("cpu", (world,))
        for layer in (model[0], model[2], model[4]):
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        w = hookkit.WeightStats(model, optimizer=opt, hist=True, bins=12)
        torch_train(model, torch_batches(), rank, world, opt)
        np.savez(os.path.join(out, f"fsdp{rank}.npz"), **flat(w.to_numpy()))

    try:
        run()
    finally:
        close_group()  # the models went with run(): nothing holds the group into interpreter shutdown


# Two ranks against one process: 3 SGD steps of the 6-16-16-3 MLP whose gradients average 8 samples
# in one process and 4 + 4 over the ranks (a forward and a backward, about 64 roundings a step), then a
# statistic over up to 256 weights. A mean or std of weights of both signs errs at the weights' size.
RANK_OPS = 3 * 64 + sum_ops(256)


def assert_same_figures(got: dict, expected: dict, where: str) -> None:
    assert got.keys() == expected.keys()
    for k, v in expected.items():
        name, key = k.rsplit("|", 1)
        scale = float(np.abs(expected[f"{name}|max_abs"]).max()) if key in ("mean", "std") else None
        assert_close(got[k], v, dtype="float32", n_ops=RANK_OPS, scale=scale, err_msg=f"{where}: {k}")


@pytest.mark.slow
def test_two_rank_ddp_and_fsdp2_read_the_one_process_figures(tmp_path):
    pytest.importorskip("torch.distributed.fsdp")
    import os
    import subprocess
    import sys

    from test_distributed import TIMEOUT, flat, torch_batches, torch_model, torch_train

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, __file__, str(tmp_path)], capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    import torch

    model = torch_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with hookkit.WeightStats(model, optimizer=opt, hist=True, bins=12) as w:
        torch_train(model, torch_batches(), opt=opt)
    expected = flat(w.to_numpy())
    for kind in ("ddp", "fsdp"):
        for rank in (0, 1):
            assert_same_figures(dict(np.load(tmp_path / f"{kind}{rank}.npz")), expected, f"{kind} rank {rank}")


def _paddle_weight_rank(out: str) -> None:
    import os

    import paddle
    import paddle.distributed as dist

    from test_distributed import flat, paddle_model, paddle_train

    dist.init_parallel_env()
    dp = paddle.DataParallel(paddle_model())
    w = hookkit.WeightStats(dp, hist=True, bins=12)  # no optimizer: the weights before each training forward
    paddle_train(dp, dist.get_rank(), dist.get_world_size())
    np.savez(os.path.join(out, f"paddle{dist.get_rank()}.npz"), **flat(w.to_numpy()))


@pytest.mark.slow
def test_two_rank_paddle_data_parallel_reads_the_one_process_figures(tmp_path):
    pytest.importorskip("paddle")
    import os
    import subprocess
    import sys

    from test_distributed import TIMEOUT, flat, paddle_model, paddle_train

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, __file__, str(tmp_path), "paddle"], capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    model = paddle_model()
    with hookkit.WeightStats(model, hist=True, bins=12) as w:
        paddle_train(model)
    expected = flat(w.to_numpy())
    for rank in (0, 1):
        assert_same_figures(dict(np.load(tmp_path / f"paddle{rank}.npz")), expected, f"rank {rank}")


if __name__ == "__main__":
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if sys.argv[2:] == ["paddle"]:
        import paddle.distributed as dist

        dist.spawn(_paddle_weight_rank, args=(sys.argv[1],), nprocs=2, backend="gloo")
    else:
        import torch.multiprocessing as mp

        from test_distributed import free_port

        mp.spawn(_weight_rank, args=(2, free_port(), sys.argv[1]), nprocs=2)
