"""CAM over a data set: peak memory as the number of images grows, hookkit against pytorch-grad-cam.

Each variant runs in its own process (peak RSS from ``ru_maxrss``; the baseline is the RSS after
importing, building the model and one warm call), Grad-CAM on a ResNet-style CNN (the one of
``bench_cam.py``, layer ``layer3``), batches of 50 random 32 x 32 images made on the fly, the maps
written to disk as they come (nothing kept in memory by the loop itself):

- ``hookkit out=``: ``hookkit.cam(model, "layer3", batches, out=FOLDER)``, one call for the data set
  (sharded safetensors, resumable, read back with ``load_features``; a shard is held in memory until
  full, and written with up to 3 x its size: 16 MB by default, 4 MB in the ``hookkit out= 4MB`` variant);
- ``hookkit per batch``: ``hookkit.cam(model, "layer3", x)`` in a loop, each batch's maps saved with ``np.save``;
- ``grad-cam with``: ``with GradCAM(model, [model.layer3]) as cam:`` around the loop, its documented use;
- ``grad-cam per batch``: a ``GradCAM`` made per batch without ``with`` (pytorch-grad-cam #132, #483).

After the run each child counts the hooks left on the model.

    PYTHONPATH=$PWD/src /work/bench-venv/bin/python benchmarks/bench_cam_stream.py [--samples 1000 10000]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import subprocess
import sys
import tempfile

VARIANTS = ["hookkit out=", "hookkit out= 4MB", "hookkit per batch", "grad-cam with", "grad-cam per batch"]
BATCH = 50


def hooks_left(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks) for m in model.modules())


def child(variant: str, samples: int, folder: str) -> dict:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.path.insert(0, os.path.dirname(__file__))
    import numpy as np
    import torch

    torch.set_num_threads(1)
    import bench_cam
    import hookkit

    gc_mod = bench_cam.import_grad_cam()
    model = bench_cam.models()["ResNet-style"][0]

    def batches():
        g = torch.Generator().manual_seed(0)
        for _ in range(samples // BATCH):
            yield torch.randn(BATCH, 3, 32, 32, generator=g)

    def their_cam():
        return gc_mod.GradCAM(model=model, target_layers=[model.layer3])

    quiet = contextlib.redirect_stderr(io.StringIO())
    warm = torch.randn(BATCH, 3, 32, 32)
    hookkit.cam(model, "layer3", warm)
    with quiet, their_cam() as cam:
        cam(input_tensor=warm, targets=None)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if variant.startswith("hookkit out="):  # a shard is held in memory until full: 16 MB by default
        shard = "4MB" if variant.endswith("4MB") else None
        hookkit.cam(model, "layer3", batches(), out=os.path.join(folder, "cams"), **({"shard_size": shard} if shard else {}))
    elif variant == "hookkit per batch":
        for i, x in enumerate(batches()):
            np.save(os.path.join(folder, f"{i}.npy"), hookkit.cam(model, "layer3", x))
    elif variant == "grad-cam with":
        with quiet, their_cam() as cam:
            for i, x in enumerate(batches()):
                np.save(os.path.join(folder, f"{i}.npy"), cam(input_tensor=x, targets=None))
    else:
        with quiet:
            for i, x in enumerate(batches()):
                cam = their_cam()
                np.save(os.path.join(folder, f"{i}.npy"), cam(input_tensor=x, targets=None))
                del cam
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    written = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs)
    return {"base_mb": base, "peak_mb": peak, "hooks_left": hooks_left(model), "written_mb": written / 2**20}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS)
    parser.add_argument("--child", nargs=2, metavar=("VARIANT", "SAMPLES"))
    args = parser.parse_args()
    if args.child:
        with tempfile.TemporaryDirectory() as folder:
            print(json.dumps(child(args.child[0], int(args.child[1]), folder)))
        return 0
    print("| variant | images | peak RSS MB | peak - baseline MB | hooks left | written MB |")
    print("|---|---|---|---|---|---|")
    for samples in args.samples:
        for variant in args.variants:
            cmd = [sys.executable, __file__, "--child", variant, str(samples)]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode:
                print(f"| {variant} | {samples} | failed: {done.stderr.strip().splitlines()[-1]} |||")
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            print(
                f"| {variant} | {samples:,} | {r['peak_mb']:.0f} | +{r['peak_mb'] - r['base_mb']:.0f} | {r['hooks_left']} | {r['written_mb']:.1f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
