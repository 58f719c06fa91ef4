"""The GPU rows of ``benchmarks/gpu/run.sh``: the existing benchmarks, run on a device, one results file.

    python benchmarks/gpu/on_device.py --device cuda --out results.md          # the rows, GPU sizes
    python benchmarks/gpu/on_device.py --device cpu --tiny --out dry-run.md    # CI: tiny, on the CPU

Each row is one existing benchmark (``benchmarks/bench_*.py``) in its own process, under a time
limit, its output appended to the results file; a row whose peer is not installed says
"skipped: not installed". In the child (``--child``), before the benchmark runs:

- ``--device cuda``: ``torch.set_default_device("cuda")`` while the benchmark builds its models and
  inputs, lifted around each timed step (the default device is a torch function mode: it would add
  Python work to every op of the bare model and of the hooked one alike); the clocks
  (``_harness``'s, ``time.process_time`` and ``time.perf_counter``) become wall time after a
  ``torch.cuda.synchronize()``, so a step's time includes its kernels;
- ``--tiny``: GPT-2 configurations shrink to width 32 (the CI dry run: it starts, runs,
  writes).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import platform
import runpy
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent

# (title, script and arguments at GPU sizes, the same at tiny sizes, peers the row needs, optional peers -> flag when missing)
ROWS: list[tuple[str, list[str], list[str], list[str], dict[str, str]]] = [
    (
        "ActivationStats(hist) + GradientStats on a GPT-2 training step vs bare (goal <= 1.02x)",
        ["bench_stats.py", "--only", "gpt2", "--rounds", "12", "--reps", "5", "--warmup", "3", "--clock", "wall"],
        ["bench_stats.py", "--only", "gpt2", "--rounds", "1", "--reps", "1", "--warmup", "0"],
        [],
        {},
    ),
    (
        "capture of every block vs bare, and TorchLens on the same forward (goal <= 1.02x)",
        ["bench_capture.py", "--only", "gpt2", "--rounds", "12", "--reps", "5", "--clock", "wall"],
        ["bench_capture.py", "--only", "gpt2", "--rounds", "1", "--reps", "1"],
        [],
        {"torchlens": "--no-torchlens"},
    ),
    (
        "generate() with capture, tokens/s vs bare, and nnsight (goal >= 0.98x)",
        ["bench_generation.py", "--only", "speed", "--rounds", "6", "--reps", "2", "--new", "32", "--clock", "wall"],
        ["bench_generation.py", "--only", "speed", "--rounds", "1", "--reps", "1", "--new", "2"],
        [],
        {"nnsight": "--no-nnsight"},
    ),
    (
        "capture set-up per forward vs nnsight's trace on the same forward",
        ["bench_setup.py", "--rounds", "6", "--reps", "10"],
        ["bench_setup.py", "--rounds", "1", "--reps", "1"],
        [],
        {},
    ),
    (
        "CAM methods vs pytorch-grad-cam, time per batch of 8 (goal: ScoreCAM <= 0.5x)",
        ["bench_cam.py", "--time-only", "gradcam,gradcam++,layercam,scorecam,ablationcam", "--repeats", "5"],
        ["bench_cam.py", "--time-only", "gradcam,scorecam", "--repeats", "1"],
        ["pytorch_grad_cam"],
        {},
    ),
    (
        "run_with_cache of every standard name vs TransformerLens's TransformerBridge (goal <= 0.8x)",
        ["bench_names.py", "--rounds", "5", "--reps", "3"],
        ["bench_names.py", "--rounds", "1", "--reps", "1"],
        ["transformer_lens"],
        {},
    ),
    (
        "attribution vs captum: every method's agreement and time",
        ["bench_attribution.py", "equal", "--rounds", "3"],
        ["bench_attribution.py", "equal", "--rounds", "1"],
        ["captum"],
        {},
    ),
]


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


# -- the child: patch, then run the benchmark as __main__ ----------------------------------------------
def child(device: str, tiny: bool, argv: list[str]) -> None:
    sys.path.insert(0, str(BENCH))
    sys.argv = [str(BENCH / argv[0]), *argv[1:]]
    if tiny:
        import transformers

        base = transformers.GPT2Config.__init__

        def small(self, *args, **kwargs):
            kwargs.update(n_layer=4, n_embd=32, n_head=2)  # 4 blocks: bench_setup hooks four
            base(self, *args, **kwargs)

        transformers.GPT2Config.__init__ = small
    if device != "cpu":
        import torch

        import _harness

        torch.set_default_device(device)

        def synced() -> float:
            torch.cuda.synchronize()
            return time.perf_counter_ns() * 1e-9

        time.process_time = synced  # bench_cam and bench_attribution read it directly
        time.perf_counter = synced
        _harness.CLOCK["fn"] = synced
        _harness.use_clock = lambda name: _harness.CLOCK.__setitem__("fn", synced)
        run = _harness.run_interleaved

        def on_device(variants, *args, **kwargs):
            def lift(setup):
                def wrapped():
                    step, teardown = setup()

                    def bare_step():
                        torch.set_default_device(None)
                        try:
                            return step()
                        finally:
                            torch.set_default_device(device)

                    return bare_step, teardown

                return wrapped

            return run([(name, lift(setup)) for name, setup in variants], *args, **kwargs)

        _harness.run_interleaved = on_device
        if Path(sys.argv[0]).name in ("bench_cam.py", "bench_names.py"):
            patch_generator(torch, device)
    runpy.run_path(sys.argv[0], run_name="__main__")


def patch_generator(torch, device: str) -> None:
    """bench_cam and bench_names seed their inputs with ``torch.Generator()``: a CPU generator cannot draw a CUDA tensor."""
    base = torch.Generator

    class OnDefaultDevice(base):  # a class still: torch's annotations use ``torch.Generator | None``
        def __new__(cls, device_: object = None) -> object:
            return base(device=device_ or device)

    torch.Generator = OnDefaultDevice


# -- the parent: one process per row, one results file -----------------------------------------------
def machine(device: str) -> str:
    line = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    try:
        from importlib.metadata import version

        line += f", torch {version('torch')}"
        if device == "cuda":
            import torch

            line += f", {torch.cuda.get_device_name()} (CUDA {torch.version.cuda})"
    except Exception as exc:  # noqa: BLE001 - the header still gets written
        line += f" ({type(exc).__name__}: {exc})"
    return f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {line}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--tiny", action="store_true", help="tiny sizes (the CPU dry run)")
    p.add_argument("--out", required=True, help="the results file (markdown), appended to")
    p.add_argument("--timeout", type=float, default=75, help="seconds per row")
    p.add_argument("--only", default="", help="comma list of row numbers (1-based)")
    p.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child is not None:
        child(args.device, args.tiny, args.child)
        return 0
    only = {int(k) for k in args.only.split(",") if k}
    failed = 0
    with open(args.out, "a") as out:
        out.write(f"\n## The GPU rows ({'tiny sizes, ' if args.tiny else ''}device {args.device})\n\n{machine(args.device)}\n")
        for k, (title, full, tiny, needs, optional) in enumerate(ROWS, 1):
            if only and k not in only:
                continue
            out.write(f"\n### {k}. {title}\n\n")
            missing = [m for m in needs if not installed(m)]
            if missing:
                out.write(f"skipped: not installed ({', '.join(missing)})\n")
                out.flush()
                continue
            argv = list(tiny if args.tiny else full)
            argv += [flag for module, flag in optional.items() if not installed(module)]
            command = [
                sys.executable,
                __file__,
                "--device",
                args.device,
                *(["--tiny"] if args.tiny else []),
                "--out",
                args.out,
                "--child",
                *argv,
            ]
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BENCH.parent / "src"), str(BENCH), os.environ.get("PYTHONPATH", "")])}
            t0 = time.perf_counter()
            try:
                proc = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, env=env, cwd=BENCH)
                code, text = proc.returncode, proc.stdout + (proc.stderr[-3000:] if proc.returncode else "")
            except subprocess.TimeoutExpired as exc:
                code, text = "timeout", (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            took = time.perf_counter() - t0
            shown = " ".join(["python", *argv])
            status = "ok" if code == 0 else f"FAILED ({code})"
            out.write(f"`{shown}` on {args.device}: {status}, {took:.0f} s\n\n{text.strip()}\n")
            out.flush()
            print(f"row {k}: {status} in {took:.0f} s", flush=True)
            failed += code != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
