"""``extract`` on several ranks (real process groups: gloo on 127.0.0.1, 2 processes, bounded in
time): one folder, rows back in data order, DistributedSampler's padding dropped, resume per rank
after a kill -9, a world-size change refused; torch and Paddle.

Each test runs a scenario of this file in a subprocess (``python tests/test_extract_ranks.py
SCENARIO OUT``) that starts the ranks itself."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 600  # seconds per scenario: start-up and gloo are slow on a loaded 2-core machine
N, DIM, BATCH = 37, 6, 4  # 37 samples on 2 ranks: DistributedSampler pads one; the last batches are short


def data() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(N, DIM)).astype(np.float32)


def torch_model():
    """Rows independent of the batch they are in (elementwise only): bit-exact whatever the split."""
    import torch

    class Elementwise(torch.nn.Module):
        def __init__(self):
            super().__init__()
            g = torch.Generator().manual_seed(0)
            self.w = torch.nn.Parameter(torch.randn(DIM, generator=g))
            self.b = torch.nn.Parameter(torch.randn(DIM, generator=g))

        def forward(self, x):
            return x * self.w + self.b

    return torch.nn.Sequential(Elementwise(), torch.nn.Tanh(), Elementwise()).eval()


def paddle_model():
    import paddle

    class Elementwise(paddle.nn.Layer):
        def __init__(self, seed):
            super().__init__()
            rng = np.random.default_rng(seed)
            self.w = self.create_parameter([DIM], default_initializer=paddle.nn.initializer.Assign(rng.normal(size=DIM).astype("float32")))
            self.b = self.create_parameter([DIM], default_initializer=paddle.nn.initializer.Assign(rng.normal(size=DIM).astype("float32")))

        def forward(self, x):
            return x * self.w + self.b

    model = paddle.nn.Sequential(Elementwise(0), paddle.nn.Tanh(), Elementwise(1))
    model.eval()
    return model


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the ranks --------------------------------------------------------------------------------------
def _torch_rank(rank: int, world: int, port: int, out: str, kill_at: int) -> None:
    import datetime

    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    import hookkit

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=300))
    try:
        ds = TensorDataset(torch.from_numpy(data()))
        sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=3)
        loader = DataLoader(ds, batch_size=BATCH, sampler=sampler)  # the sampler is read from the loader
        model = torch_model()

        def forward(batch, seen=[0]):  # noqa: B006 - a counter across calls
            if rank == 1 and seen[0] == kill_at % 100:
                import json
                import time

                def written(r: int, key: str) -> bool:
                    try:
                        return bool(json.load(open(os.path.join(out, f"index-rank{r:05d}.json"))).get(key))
                    except (OSError, ValueError):
                        return False

                deadline = time.monotonic() + 120  # the writer thread has written a shard (a loaded machine lags)
                while time.monotonic() < deadline and not (written(1, "shards") and (kill_at < 100 or written(0, "complete"))):
                    time.sleep(0.05)
                os.kill(os.getpid(), 9)  # kill -9 mid-run, after some shards were written (kill_at >= 100: and rank 0 finished)
            seen[0] += 1
            return model(batch[0])

        hookkit.extract(model, loader, ["0", "2"], out, forward=forward, shard_size=1, progress=False)
    finally:
        dist.destroy_process_group()


def scenario_torch(out: str, kill_at: str = "-1") -> None:
    import torch.multiprocessing as mp

    mp.spawn(_torch_rank, args=(2, free_port(), out, int(kill_at)), nprocs=2)


def _paddle_rank(out: str) -> None:
    import paddle
    import paddle.distributed as dist
    from paddle.io import DataLoader, DistributedBatchSampler, TensorDataset

    import hookkit

    dist.init_parallel_env()
    ds = TensorDataset([paddle.to_tensor(data())])
    sampler = DistributedBatchSampler(ds, batch_size=BATCH, shuffle=True)
    loader = DataLoader(ds, batch_sampler=sampler)
    model = paddle_model()
    hookkit.extract(model, loader, ["0", "2"], out, forward=lambda batch: model(batch[0]), shard_size=1, progress=False)


def scenario_paddle(out: str) -> None:
    import paddle.distributed as dist

    dist.spawn(_paddle_rank, args=(out,), nprocs=2, backend="gloo")


def run_scenario(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "test_extract_ranks.py"), *args], capture_output=True, text=True, timeout=TIMEOUT, env=env
    )
    if ok:
        assert proc.returncode == 0, f"scenario {args} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc


def one_process(model, forward, out):
    import hookkit

    batches = np.array_split(data(), 5)  # other batches than the ranks': the rows do not depend on them
    return hookkit.extract(model, batches, ["0", "2"], out, forward=forward, progress=False)


# -- the tests ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_two_torch_ranks_equal_one_process_in_data_order(tmp_path):
    import hookkit

    run_scenario("torch", str(tmp_path / "ranks"))
    feats = hookkit.load_features(tmp_path / "ranks")
    names = sorted(os.listdir(tmp_path / "ranks"))
    assert "index.json" in names and "index-rank00000.json" in names and "index-rank00001.json" in names
    assert any(n.startswith("shard-r00001-") for n in names)
    assert (
        feats.count == N and feats.metadata["world"] == 2 and feats.metadata["order"] == "data"
    )  # 38 rows written, the padded one dropped
    import torch

    model = torch_model()
    ref = one_process(model, lambda x: model(torch.from_numpy(np.asarray(x))), tmp_path / "one")
    for key in ("0", "2"):
        assert feats[key].shape == ref[key].shape
        np.testing.assert_array_equal(np.asarray(feats[key]), np.asarray(ref[key]))  # bit-exact, in data order
        np.testing.assert_array_equal(feats[key][[3, 0, 36]], np.asarray(ref[key])[[3, 0, 36]])
    # a finished folder is reported complete and left as it is
    before = {n: os.path.getmtime(tmp_path / "ranks" / n) for n in names}
    run_scenario("torch", str(tmp_path / "ranks"))
    assert {n: os.path.getmtime(tmp_path / "ranks" / n) for n in sorted(os.listdir(tmp_path / "ranks"))} == before


@pytest.mark.slow
def test_a_killed_rank_resumes_and_another_world_size_is_refused(tmp_path):
    import torch

    import hookkit

    killed = run_scenario("torch", str(tmp_path / "run"), "3", ok=False)
    assert killed.returncode != 0
    assert not (tmp_path / "run" / "index.json").exists()
    rank1 = hookkit.observers.features.read_rank_index(str(tmp_path / "run"), 1)
    assert not rank1["complete"] and 0 < len(rank1["shards"]) <= 3  # stopped after some shards
    written = {s["file"]: os.path.getmtime(tmp_path / "run" / s["file"]) for s in rank1["shards"]}
    # one process on the unfinished 2-rank folder: refused, naming the world sizes
    model = torch_model()
    with pytest.raises(hookkit.ExtractError, match="unfinished extraction by 2 ranks; this run has world size 1"):
        one_process(model, lambda x: model(torch.from_numpy(np.asarray(x))), tmp_path / "run")
    run_scenario("torch", str(tmp_path / "run"))  # resume
    assert {f: os.path.getmtime(tmp_path / "run" / f) for f in written} == written  # rank 1's shards kept, not redone
    run_scenario("torch", str(tmp_path / "clean"))
    got, clean = hookkit.load_features(tmp_path / "run"), hookkit.load_features(tmp_path / "clean")
    assert got.count == clean.count == N
    for key in ("0", "2"):
        np.testing.assert_array_equal(np.asarray(got[key]), np.asarray(clean[key]))


@pytest.mark.slow
def test_a_rank_whose_share_was_done_waits_for_the_resuming_one(tmp_path):
    import hookkit

    killed = run_scenario("torch", str(tmp_path / "run"), "103", ok=False)  # rank 1 dies after rank 0 finished its share
    assert killed.returncode != 0 and not (tmp_path / "run" / "index.json").exists()
    assert hookkit.observers.features.read_rank_index(str(tmp_path / "run"), 0)["complete"]
    run_scenario("torch", str(tmp_path / "run"))  # rank 0 has nothing to do: it meets rank 1 at the end
    run_scenario("torch", str(tmp_path / "clean"))
    got, clean = hookkit.load_features(tmp_path / "run"), hookkit.load_features(tmp_path / "clean")
    assert got.count == clean.count == N
    for key in ("0", "2"):
        np.testing.assert_array_equal(np.asarray(got[key]), np.asarray(clean[key]))


@pytest.mark.slow
def test_two_paddle_ranks_equal_one_process_in_data_order(tmp_path):
    pytest.importorskip("paddle")
    import paddle

    import hookkit

    run_scenario("paddle", str(tmp_path / "ranks"))
    feats = hookkit.load_features(tmp_path / "ranks")
    model = paddle_model()
    ref = one_process(model, lambda x: model(paddle.to_tensor(np.asarray(x))), tmp_path / "one")
    assert feats.count == N and feats.metadata["world"] == 2
    for key in ("0", "2"):
        np.testing.assert_array_equal(np.asarray(feats[key]), np.asarray(ref[key]))


def test_a_sampler_gives_each_row_its_sample_index(tmp_path):
    """One process with sampler=: rows are stored as the loader gives them and read back in data order."""
    import torch

    import hookkit

    x = data()
    order = np.random.default_rng(1).permutation(N)
    batches = [order[i : i + BATCH].tolist() for i in range(0, N, BATCH)]
    loader = [torch.from_numpy(x[b]) for b in batches]
    model = torch_model()
    feats = hookkit.extract(model, loader, ["2"], tmp_path / "f", sampler=batches, progress=False)
    ref = model(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_array_equal(np.asarray(feats["2"]), ref)
    with pytest.raises(hookkit.ExtractError, match="batch 0 holds 4 samples but the sampler's batch 0 has 3"):
        hookkit.extract(model, loader, ["2"], tmp_path / "g", sampler=[b[:3] for b in batches], progress=False)


@pytest.mark.slow
def test_cli_nproc_two_equals_one_process(tmp_path):
    """``hookkit extract --nproc 2`` starts the ranks itself; the folder reads as the 1-process one."""
    from sklearn.datasets import load_digits

    import hookkit

    np.save(tmp_path / "digits.npy", load_digits().data[:101].astype(np.float32))
    base = ["-m", "hookkit.apps.cli", "extract", "torch.nn:Linear", "--kw", "in_features=64", "--kw", "out_features=10", "--seed", "3"]
    base += ["--data", str(tmp_path / "digits.npy"), "--layers", "", "--batch-size", "8", "--shard-size", "1KB"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    for nproc, out in (("2", "two"), ("1", "one")):
        proc = subprocess.run(
            [sys.executable, *base, "--nproc", nproc, "--out", str(tmp_path / out)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env=env,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert "101 samples" in proc.stdout
    two, one = hookkit.load_features(tmp_path / "two"), hookkit.load_features(tmp_path / "one")
    assert two.count == one.count == 101 and two.metadata["world"] == 2
    np.testing.assert_allclose(
        np.asarray(two[""]), np.asarray(one[""]), rtol=1e-6, atol=1e-6
    )  # a Linear: rows may differ in the last bit with the batch


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    globals()[f"scenario_{sys.argv[1]}"](*sys.argv[2:])
