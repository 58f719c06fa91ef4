"""WeightStats (with histograms) on a GPT-2-style training step, against wandb.watch(log="all", log_freq=1).

The workload: GPT-2 4x128 (random weights), batch 4 x 64 tokens, one AdamW step per call
(``_models.gpt2_training_step``). Variants, interleaved (``_harness.run_interleaved``, CPU time):

- bare: the step plus ``run.log({"step": i})`` (every variant logs this, so wandb commits);
- hookkit: ``hookkit.WeightStats(model, optimizer=opt, hist=True)``: every parameter's mean, std,
  norm, max |w|, 64-bin histogram and update ratio at every optimizer step (reads not timed: one
  read at the end of each round, timed apart below);
- hookkit + grads: the same plus ``hookkit.GradientStats(model)`` (wandb's log="all" also logs gradients);
- wandb: ``wandb.watch(model, log="all", log_freq=1)`` in an offline run: histograms of every
  parameter and every gradient at every step.

Host syncs: ``Tensor.item``, ``.cpu``, ``.tolist``, ``__float__``, ``__bool__`` and ``__int__`` are
counted during recorded steps (patched), minus those of the bare step, on the CPU route (C kernel)
and on the framework-ops route a GPU takes (``host_routes`` off).

    PYTHONPATH=$PWD/src /work/bench-venv/bin/python benchmarks/bench_weights.py [--rounds 6 --reps 10]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import block_torchvision, keep_freed_memory, machine, ratio, run_interleaved, set_threads, spread, table  # noqa: E402

set_threads(1)
block_torchvision()
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

import torch  # noqa: E402

import hookkit  # noqa: E402

# what forces a device-to-host sync on a GPU (``.numpy()`` of a CPU tensor is a view: the CPU route's
# kernel reads parameters that way; it is counted apart)
SYNCS = ("item", "cpu", "tolist", "__float__", "__bool__", "__int__")


class SyncCounter:
    """Counts calls of the Tensor methods that read values to the host while active."""

    def __init__(self) -> None:
        self.count = 0
        self._saved: dict[str, object] = {}

    def __enter__(self) -> SyncCounter:
        for name in SYNCS:
            original = getattr(torch.Tensor, name)
            self._saved[name] = original

            def counted(t, *a, _original=original, **k):
                self.count += 1
                return _original(t, *a, **k)

            setattr(torch.Tensor, name, counted)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, original in self._saved.items():
            setattr(torch.Tensor, name, original)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    keep_freed_memory()
    import wandb

    from _models import gpt2_training_step

    model, step = gpt2_training_step()
    opt = next(
        iter(
            step.__closure__[i].cell_contents
            for i in range(len(step.__closure__))
            if isinstance(step.__closure__[i].cell_contents, torch.optim.Optimizer)
        )
    )
    run = wandb.init(project="hookkit-bench", dir=tempfile.mkdtemp(), mode="offline")
    counter = [0]
    read_ms: list[float] = []

    def logged() -> None:
        step()
        counter[0] += 1
        run.log({"step": counter[0]})

    def bare():
        return logged, lambda: None

    def with_weights():
        w = hookkit.WeightStats(model, optimizer=opt, hist=True)

        def teardown() -> None:
            t0 = time.process_time()
            w.to_numpy()
            read_ms.append((time.process_time() - t0) * 1e3)
            w.remove()

        return logged, teardown

    def with_weights_grads():
        w = hookkit.WeightStats(model, optimizer=opt, hist=True)
        g = hookkit.GradientStats(model)

        def teardown() -> None:
            w.to_numpy(), g.to_numpy()
            w.remove(), g.remove()

        return logged, teardown

    def with_wandb():
        run.watch(model, log="all", log_freq=1)
        return logged, lambda: run.unwatch(model)

    variants = [("bare", bare), ("hookkit", with_weights), ("hookkit + grads", with_weights_grads), ("wandb.watch", with_wandb)]
    results = run_interleaved(variants, rounds=args.rounds, reps=args.reps)

    # host syncs per recorded step
    def syncs(setup) -> float:
        fn, teardown = setup()
        fn()
        with SyncCounter() as c:
            for _ in range(5):
                fn()
        teardown()
        return c.count / 5

    base_syncs = syncs(bare)
    sync_rows = {name: syncs(setup) - base_syncs for name, setup in variants[1:]}
    from hookkit.backends import backend_for

    be_type = type(backend_for(model))
    be_type.host_routes = False  # the route of device tensors
    device_route = {name: syncs(setup) - base_syncs for name, setup in variants[1:3]}
    be_type.host_routes = True
    run.finish()

    bare_ms = results["bare"].median_ms
    rows = [["bare", f"{bare_ms:.1f}", "1.000", "", "0", ""]]
    overheads = {}
    for name in ("hookkit", "hookkit + grads", "wandb.watch"):
        r = ratio(results, name, "bare")
        overheads[name] = r - 1
        route = f" ({device_route[name]:.0f} on the device route)" if name in device_route else ""
        rows.append(
            [name, f"{results[name].median_ms:.1f}", f"{r:.3f}", spread(results, name, "bare"), f"{sync_rows[name]:.0f}{route}", ""]
        )
    for row, name in zip(rows[1:], ("hookkit", "hookkit + grads", "wandb.watch")):
        row[5] = f"{overheads[name] / overheads['wandb.watch']:.2f}x" if overheads["wandb.watch"] > 0 else "n/a"
    print(machine())
    print(table(rows, ["variant", "step ms (CPU)", "ratio to bare", "IQR", "host syncs / step", "overhead vs wandb's"]))
    if read_ms:
        print(f"WeightStats read (to_numpy) after {args.reps + 2} steps: median {sorted(read_ms)[len(read_ms) // 2]:.1f} ms CPU")


if __name__ == "__main__":
    main()
