"""Statistics under data-parallel training: 2 processes on 127.0.0.1 (gloo), each seeing half of
every batch, read the same figures as one process over the whole batch.

Each test runs one scenario of this file in a subprocess (``python tests/test_distributed.py
SCENARIO OUT``) that starts the ranks itself, bounded by a timeout; the ranks write what they read
into OUT (npz, no pickle) and the test compares it with a 1-process run made here.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 240  # seconds per scenario: start-up costs 3-15 s a rank, up to a minute on a loaded machine
STEPS = 3
BATCH = 8


# -- the shared training set-up ---------------------------------------------------------------------
def torch_model():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def torch_batches():
    import torch

    g = torch.Generator().manual_seed(1)
    return [(torch.randn(BATCH, 6, generator=g), torch.randint(0, 3, (BATCH,), generator=g)) for _ in range(STEPS)]


def torch_train(model, batches, rank=0, world=1, opt=None):
    """SGD on the rank's share of each batch (DDP averages the gradients: the same updates as one process)."""
    import torch

    opt = opt or torch.optim.SGD(model.parameters(), lr=0.1)
    share = BATCH // world
    for x, y in batches:
        opt.zero_grad()
        xs, ys = x[rank * share : (rank + 1) * share], y[rank * share : (rank + 1) * share]
        torch.nn.functional.cross_entropy(model(xs), ys).backward()
        opt.step()


def stats_kwargs():
    return {"hist": True, "bins": 12, "range": (-1.5, 1.5), "near_zero": 0.05}


def flat(tables: dict) -> dict[str, np.ndarray]:
    return {f"{name}|{key}": np.asarray(v) for name, t in tables.items() for key, v in t.items()}


def close_group() -> None:
    """Destroy the default process group while the interpreter is whole, after nothing holds it.

    A DDP reducer, FSDP state or a pending gloo work keeps the C++ group alive; a DDP module sits in
    reference cycles, so it outlives its last name until the next collection, or interpreter shutdown.
    A group destroyed there joins gloo's worker threads after Python has finalized; a worker that
    then frees a tensor needs the GIL, the finalizing interpreter ends the thread with pthread_exit,
    whose unwinding through a noexcept frame calls std::terminate: "terminate called without an active
    exception" (the abort seen once in CI, under load, when a worker still ran). So: collect first
    (callers let their models go out of scope before), meet, destroy, collect what the group freed."""
    import gc

    import torch.distributed as dist

    gc.collect()
    dist.barrier()  # no rank destroys the group while another still finishes a collective
    dist.destroy_process_group()
    gc.collect()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_scenario(name: str, out: str) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "test_distributed.py"), name, out],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
    )
    assert proc.returncode == 0, f"scenario {name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"


def assert_tables_equal(got: dict, expected: dict, keys: tuple[str, ...], rtol: float = 1e-5, atol: float = 1e-6) -> None:
    for k, v in expected.items():
        if k.split("|")[1].removeprefix("param_") not in keys:
            continue
        np.testing.assert_allclose(got[k], v, rtol=rtol, atol=atol, err_msg=k)


def test_wrapper_prefix_is_accepted_and_dropped_without_a_process_group():
    """A data-parallel wrapper is looked through by every layer spec (here torch.nn.DataParallel,
    which runs on the CPU in one process): names come without "module.", given with or without it."""
    torch = pytest.importorskip("torch")
    import hookkit

    dp = torch.nn.DataParallel(torch_model())
    assert [n for n, _ in hookkit.select(dp, ["module.0", "2", "module"])] == ["", "0", "2"]
    with pytest.raises(hookkit.LayerNotFound, match="module.9"):
        hookkit.select(dp, "module.9")
    with hookkit.GradientStats(dp, ["module.4"]) as grads, hookkit.capture(dp, "module.4") as cap:
        torch_train(dp, torch_batches()[:1])
    assert grads.names == ["4"] and grads.rank == 0 and len(grads.param_stats("4")["norm"]) == 1
    assert list(cap.keys()) == ["4"]


def test_cross_rank_merge_is_exact_for_uneven_ranks():
    """The merge behind every distributed read (reduce.gather_blocks), with a stand-in for the
    collective: rows of the same (step, call) merge into the statistics of all values together,
    rows that only some ranks recorded are kept, and ranks may hold different numbers of rows."""
    from hookkit.observers.stats.reduce import gather_blocks
    from hookkit.observers.stats.series import ACTIVATION, Block

    rng = np.random.default_rng(0)
    values = {(r, s): rng.standard_normal(5 + 3 * r + s) * (1 + s) + r for r in (0, 1) for s in range(3)}
    del values[(1, 2)]  # rank 1 did not record step 2

    def block(rank):
        keys = sorted(s for r, s in values if r == rank)
        state = np.array([[len(v), v.mean(), ((v - v.mean()) ** 2).sum(), (v <= 0.05).sum()] for v in (values[rank, s] for s in keys)])
        hist = np.array([np.histogram(values[rank, s], 4, (-2, 2))[0] for s in keys], dtype=np.float64)
        z = np.zeros(len(keys), np.int64)
        return Block(np.array(keys), z, z + 1, state, hist)

    class Collective:
        """Stands in for the process group: keeps what this rank sends, returns every rank's rows."""

        def __init__(self, others: list):
            self.others, self.sent = others, []

        def all_gather_rows(self, rows):
            self.sent.append(rows)
            return [rows, *self.others]

    rank1 = Collective([])
    gather_blocks(rank1, [ACTIVATION], [block(1)], 4)  # what rank 1 packs and sends
    step, call, records, state, hist = gather_blocks(Collective(rank1.sent), [ACTIVATION], [block(0)], 4)[0]
    assert list(step) == [0, 1, 2] and list(records) == [1, 1, 1]
    for i, s in enumerate(step):
        v = np.concatenate([values[r, s] for r in (0, 1) if (r, s) in values])
        np.testing.assert_allclose(state[i], [len(v), v.mean(), ((v - v.mean()) ** 2).sum(), (v <= 0.05).sum()], rtol=1e-12)
        np.testing.assert_array_equal(hist[i], np.histogram(v, 4, (-2, 2))[0])


# -- scenario: torch DDP ---------------------------------------------------------------------------
def _ddp_part(rank: int, world: int, out: str, model, early) -> None:
    import warnings

    import torch

    import hookkit

    os.makedirs(out, exist_ok=True)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    # names shown without DDP's "module." prefix, accepted with or without it
    acts = hookkit.ActivationStats(ddp, ["module.0", "2", "module.3", "4"], **stats_kwargs())
    grads = hookkit.GradientStats(ddp)
    local = hookkit.ActivationStats(ddp, ["0"], sync=False, **stats_kwargs())
    torch_train(ddp, torch_batches(), rank, world)
    np.savez(os.path.join(out, f"acts{rank}.npz"), **flat(acts.to_numpy()))
    np.savez(os.path.join(out, f"grads{rank}.npz"), **flat(grads.to_numpy()))
    np.savez(os.path.join(out, f"local{rank}.npz"), **flat(local.to_numpy()))
    import hookkit.viz

    hookkit.viz.plot_layer_stats(acts, "2")  # plots read the reduced figures too
    acts.save(out)
    grads.save(out)
    acts.save(out, per_rank=True)
    returned = hookkit.report([acts, grads], os.path.join(out, f"report{rank}.html"))  # rank 0 writes
    info = {"names": acts.names, "grad_names": grads.names, "rank": acts.rank, "report": str(returned)}
    # a NaN on rank 1 only: the error names the layer and the rank
    with hookkit.watch_nonfinite(ddp, grads=False):
        x = torch.randn(2, 6)
        if rank == 1:
            x[0, 0] = float("nan")
        try:
            with torch.no_grad():
                ddp(x)
        except hookkit.NonFiniteError as exc:
            info["error"], info["error_rank"] = str(exc), exc.rank
    with open(os.path.join(out, f"info{rank}.json"), "w") as f:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            early.to_numpy()  # created before the process group: local parameter rows, said once
            early.to_numpy()
        info["early_warnings"] = [str(w.message) for w in caught]
        json.dump(info, f)
    acts.remove()
    grads.remove()


def _torch_rank(rank: int, world: int, port: int, out: str) -> None:
    import torch.distributed as dist

    import hookkit

    def run() -> None:  # the models go out of scope with it, before close_group
        model = torch_model()
        early = hookkit.GradientStats(model, ["4"])  # before the process group exists
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
        _ddp_part(rank, world, os.path.join(out, "ddp"), model, early)
        _fsdp_part(rank, world, os.path.join(out, "fsdp"))

    try:
        run()
    finally:
        if dist.is_initialized():
            close_group()


def scenario_torch(out: str) -> None:
    import torch.multiprocessing as mp

    mp.spawn(_torch_rank, args=(2, free_port(), out), nprocs=2)


@pytest.mark.slow
def test_ddp_and_fsdp2_two_ranks_read_the_one_process_figures(tmp_path):
    """2 ranks x half batch (gloo), one process group for both set-ups (start-up costs seconds)."""
    pytest.importorskip("torch.distributed.fsdp")
    run_scenario("torch", str(tmp_path))
    check_ddp(tmp_path / "ddp")
    check_fsdp(tmp_path / "fsdp")


def check_ddp(tmp_path) -> None:
    """DDP: ActivationStats (with histograms) and GradientStats read on either rank equal one
    process over the whole batch; parameter rows are the synchronized gradient's; files are written
    once, by rank 0 (per-rank files on request); a NaN names its rank."""
    import hookkit

    model = torch_model()
    with hookkit.ActivationStats(model, ["0", "2", "3", "4"], **stats_kwargs()) as acts, hookkit.GradientStats(model) as grads:
        torch_train(model, torch_batches())
    expected_acts, expected_grads = flat(acts.to_numpy()), flat(grads.to_numpy())
    for rank in (0, 1):
        got = dict(np.load(tmp_path / f"acts{rank}.npz"))
        assert set(got) == set(expected_acts)
        assert_tables_equal(got, expected_acts, ("mean", "std", "near_zero", "step", "call", "records"))
        for name in acts.names:  # histograms: the same counts
            np.testing.assert_array_equal(got[f"{name}|hist"], expected_acts[f"{name}|hist"])
            assert expected_acts[f"{name}|hist"].sum() > 0
        got = dict(np.load(tmp_path / f"grads{rank}.npz"))
        assert_tables_equal(got, expected_grads, ("mean", "std", "norm", "max_abs", "step", "call"), rtol=1e-4)
    # each rank's own records (sync=False) are those of its half batch; together, the whole batch
    own = [dict(np.load(tmp_path / f"local{r}.npz"))["0|hist"] for r in (0, 1)]
    np.testing.assert_array_equal(own[0] + own[1], expected_acts["0|hist"])
    assert (own[0] != expected_acts["0|hist"]).any()
    g0, g1 = dict(np.load(tmp_path / "grads0.npz")), dict(np.load(tmp_path / "grads1.npz"))
    for key in g0:
        if key.split("|")[1].startswith("param_"):
            np.testing.assert_array_equal(g0[key], g1[key])  # identical on every rank
    info = [json.loads((tmp_path / f"info{r}.json").read_text()) for r in (0, 1)]
    assert info[0]["names"] == ["0", "2", "3", "4"] and info[0]["grad_names"] == ["0", "2", "4"]
    assert "error" not in info[0] and info[1]["error_rank"] == 1
    assert "layer '0'" in info[1]["error"] and "rank 1 of 2" in info[1]["error"]
    assert len(info[0]["early_warnings"]) == 1 and "before the process group" in info[0]["early_warnings"][0]
    assert sorted(os.listdir(tmp_path / "rank1")) == ["activation_stats.json", "activation_stats.safetensors"]
    assert (tmp_path / "report0.html").stat().st_size > 1000 and not (tmp_path / "report1.html").exists()
    assert info[1]["report"].endswith("report1.html")
    loaded = hookkit.load_stats(tmp_path)  # rank 0's files: the reduced figures
    np.testing.assert_allclose(loaded["activation_stats"].layer_stats("2")["std"], acts.layer_stats("2")["std"], rtol=1e-5)
    np.testing.assert_allclose(loaded["gradient_stats"].param_stats("4")["norm"], grads.param_stats("4")["norm"], rtol=1e-4)
    per_rank = hookkit.ActivationStats.load(tmp_path / "rank1")
    np.testing.assert_array_equal(per_rank.layer_stats("0")["hist"], dict(np.load(tmp_path / "local1.npz"))["0|hist"])


# -- scenario: FSDP2 (fully_shard) -------------------------------------------------------------------
def _fsdp_part(rank: int, world: int, out: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import hookkit

    os.makedirs(out, exist_ok=True)
    mesh = init_device_mesh("cpu", (world,))
    model = torch_model()
    for layer in (model[0], model[2], model[4]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    acts = hookkit.ActivationStats(model, ["0", "2", "3", "4"], **stats_kwargs())
    grads = hookkit.GradientStats(model)
    torch_train(model, torch_batches(), rank, world)
    np.savez(os.path.join(out, f"acts{rank}.npz"), **flat(acts.to_numpy()))
    np.savez(os.path.join(out, f"grads{rank}.npz"), **flat(grads.to_numpy()))
    shards = {
        n: [int(p.to_local().numel()) for p in layer.parameters(recurse=False)] for n, layer in hookkit.select(model, hookkit.WITH_PARAMS)
    }
    with open(os.path.join(out, f"info{rank}.json"), "w") as f:
        json.dump({"grad_names": grads.names, "shards": shards}, f)


def check_fsdp(tmp_path) -> None:
    """FSDP2 (fully_shard, CPU mesh): GradientStats names the original parameters' layers; each rank
    holds half of every parameter's gradient, and the merged rows equal one process's."""
    import hookkit

    model = torch_model()
    with hookkit.ActivationStats(model, ["0", "2", "3", "4"], **stats_kwargs()) as acts, hookkit.GradientStats(model) as grads:
        torch_train(model, torch_batches())
    expected_acts, expected_grads = flat(acts.to_numpy()), flat(grads.to_numpy())
    for rank in (0, 1):
        got = dict(np.load(tmp_path / f"acts{rank}.npz"))
        assert_tables_equal(got, expected_acts, ("mean", "std", "near_zero", "hist", "step", "call"))
        got = dict(np.load(tmp_path / f"grads{rank}.npz"))
        assert_tables_equal(got, expected_grads, ("mean", "std", "norm", "max_abs", "step", "call"), rtol=1e-4)
        info = json.loads((tmp_path / f"info{rank}.json").read_text())
        assert info["grad_names"] == ["0", "2", "4"]
        assert info["shards"]["0"] == [8 * 6, 8]  # half of the weight [16, 6] and of the bias [16]


# -- scenario: Paddle DataParallel --------------------------------------------------------------------
def paddle_model():
    import paddle

    paddle.seed(0)
    return paddle.nn.Sequential(
        paddle.nn.Linear(6, 16), paddle.nn.ReLU(), paddle.nn.Linear(16, 16), paddle.nn.Tanh(), paddle.nn.Linear(16, 3)
    )


def paddle_train(model, rank=0, world=1):
    import paddle

    opt = paddle.optimizer.SGD(learning_rate=0.1, parameters=model.parameters())
    share = BATCH // world
    for x, y in torch_free_batches():
        xs, ys = x[rank * share : (rank + 1) * share], y[rank * share : (rank + 1) * share]
        loss = paddle.nn.functional.cross_entropy(model(paddle.to_tensor(xs)), paddle.to_tensor(ys))
        loss.backward()
        opt.step()
        opt.clear_grad()


def torch_free_batches():
    g = np.random.default_rng(1)
    return [(g.standard_normal((BATCH, 6)).astype(np.float32), g.integers(0, 3, BATCH)) for _ in range(STEPS)]


def _paddle_rank(out: str) -> None:
    import paddle
    import paddle.distributed as dist

    import hookkit

    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    dp = paddle.DataParallel(paddle_model())
    acts = hookkit.ActivationStats(dp, ["_layers.0", "2", "3", "4"], **stats_kwargs())
    grads = hookkit.GradientStats(dp)
    paddle_train(dp, rank, world)
    np.savez(os.path.join(out, f"acts{rank}.npz"), **flat(acts.to_numpy()))
    np.savez(os.path.join(out, f"grads{rank}.npz"), **flat(grads.to_numpy()))
    with open(os.path.join(out, f"info{rank}.json"), "w") as f:
        json.dump({"names": acts.names, "grad_names": grads.names}, f)


def scenario_paddle(out: str) -> None:
    import paddle.distributed as dist

    dist.spawn(_paddle_rank, args=(out,), nprocs=2, backend="gloo")


@pytest.mark.slow
def test_paddle_data_parallel_two_ranks_read_the_one_process_figures(tmp_path):
    """paddle.DataParallel, 2 CPU ranks (gloo, paddle.distributed.spawn): the same equality as DDP."""
    pytest.importorskip("paddle")
    import hookkit

    run_scenario("paddle", str(tmp_path))
    model = paddle_model()
    with hookkit.ActivationStats(model, ["0", "2", "3", "4"], **stats_kwargs()) as acts, hookkit.GradientStats(model) as grads:
        paddle_train(model)
    expected_acts, expected_grads = flat(acts.to_numpy()), flat(grads.to_numpy())
    for rank in (0, 1):
        got = dict(np.load(tmp_path / f"acts{rank}.npz"))
        assert_tables_equal(got, expected_acts, ("mean", "std", "near_zero", "hist", "step", "call"))
        got = dict(np.load(tmp_path / f"grads{rank}.npz"))
        assert_tables_equal(got, expected_grads, ("mean", "std", "norm", "max_abs", "step", "call"), rtol=1e-4)
        info = json.loads((tmp_path / f"info{rank}.json").read_text())
        assert info["names"] == ["0", "2", "3", "4"] and info["grad_names"] == ["0", "2", "4"]


# -- scenarios: Lightning strategy="ddp",  # rank 1 runs this script again (Lightning's subprocess launcher) Hugging Face Trainer under torchrun ----------------------
class RankWriter:
    """A scalar writer (``add_scalar``) that appends to ``scalars<rank>.jsonl``."""

    def __init__(self, out: str):
        self.out = out

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        import torch.distributed as dist

        with open(os.path.join(self.out, f"scalars{dist.get_rank()}.jsonl"), "a") as f:
            f.write(json.dumps([tag, value, step]) + "\n")


def dump_callback_results(cb, out: str, rank: int) -> None:
    np.savez(os.path.join(out, f"acts{rank}.npz"), **flat(cb.activation_stats.to_numpy()))
    np.savez(os.path.join(out, f"grads{rank}.npz"), **flat(cb.gradient_stats.to_numpy()))
    cb.activation_stats.save(out)


def scenario_lightning(out: str) -> None:
    import pytorch_lightning as pl
    import torch

    from hookkit.integrations.lightning import HookkitCallback

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch_model()

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Dump(pl.Callback):  # after HookkitCallback: read on every rank, as a user would
        def on_fit_end(self, trainer, pl_module):
            dump_callback_results(cb, out, trainer.global_rank)

    cb = HookkitCallback(hist=True, writer=RankWriter(out))
    x, y = torch_batches()[0]
    # one step per epoch over the BATCH samples, shared by the two ranks however they are split
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=BATCH // 2)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",  # rank 1 runs this script again (Lightning's subprocess launcher)
        max_epochs=STEPS,
        callbacks=[cb, Dump()],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Module(), loader)


def scenario_hf(out: str) -> None:
    """Run by torchrun (2 processes): one Trainer step per epoch, over the whole 8-sample set."""
    import torch
    from transformers import Trainer, TrainingArguments

    from hookkit.integrations.huggingface import HookkitTrainerCallback

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch_model()

        def forward(self, x, labels):
            logits = self.net(x)
            return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}

    x, y = torch_batches()[0]
    data = [{"x": x[i], "labels": y[i]} for i in range(BATCH)]
    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    args = TrainingArguments(
        output_dir=os.path.join(out, "hf"),
        use_cpu=True,
        per_device_train_batch_size=BATCH // 2,
        num_train_epochs=STEPS,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
    )
    cb = HookkitTrainerCallback(hist=True, writer=RankWriter(out))
    Trainer(model=model, args=args, train_dataset=data, callbacks=[cb], optimizers=(opt, sched)).train()
    dump_callback_results(cb, out, args.process_index)


def scenario_hf_torchrun(out: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
         "--master_port", str(free_port()), os.path.join(HERE, "test_distributed.py"), "hf", out],
        check=True,
        timeout=TIMEOUT,
    )  # fmt: skip


def check_callback_run(tmp_path, expected_acts: dict, expected_grads: dict, prefix: str) -> None:
    for rank in (0, 1):
        got = dict(np.load(tmp_path / f"acts{rank}.npz"))
        assert_tables_equal(got, expected_acts, ("mean", "std", "near_zero", "hist", "step"))
        got = dict(np.load(tmp_path / f"grads{rank}.npz"))
        assert_tables_equal(got, expected_grads, ("mean", "std", "norm", "max_abs", "step"), rtol=1e-4)
    assert sorted(p.name for p in tmp_path.glob("activation_stats.*")) == ["activation_stats.json", "activation_stats.safetensors"]
    assert not (tmp_path / "scalars1.jsonl").exists()  # rank 0 writes the scalars
    logged = [json.loads(line) for line in (tmp_path / "scalars0.jsonl").read_text().splitlines()]
    means = [v for tag, v, _ in logged if tag == f"act/{prefix}0/mean"]
    np.testing.assert_allclose(np.mean(means), expected_acts[f"{prefix}0|mean"].mean(), rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("scenario", "library"),
    [("lightning", "pytorch_lightning"), ("hf_torchrun", "transformers")],
    ids=["lightning-ddp", "hf-trainer-torchrun"],
)
def test_callbacks_on_two_processes_read_all_ranks(tmp_path, scenario, library):
    """Lightning strategy="ddp" (rank 1 runs this script again, Lightning's subprocess launcher) and
    transformers.Trainer under torchrun, 2 CPU processes each: the callback's statistics equal one
    process's over the whole batches, on every rank; rank 0 alone writes files and scalars."""
    pytest.importorskip(library)
    import hookkit

    run_scenario(scenario, str(tmp_path))
    model = torch_model()
    x, y = torch_batches()[0]
    with hookkit.ActivationStats(model, hist=True) as acts, hookkit.GradientStats(model) as grads:
        torch_train(model, [(x, y)] * STEPS)
    prefixed = {f"net.{k}": v for k, v in acts.to_numpy().items()}, {f"net.{k}": v for k, v in grads.to_numpy().items()}
    check_callback_run(tmp_path, flat(prefixed[0]), flat(prefixed[1]), "net.")


# -- command line: python tests/test_distributed.py SCENARIO OUT ----------------------------------------
if __name__ == "__main__":
    sys.path.insert(0, HERE)
    os.environ.setdefault("MPLBACKEND", "Agg")
    globals()[f"scenario_{sys.argv[1]}"](sys.argv[2])
