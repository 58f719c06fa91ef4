"""Smoke test of an installed hookkit, run from outside the checkout by .ci/package.

    python smoke.py OUT.json      # checks the basics, writes the statistics rows of a fixed run

The rows let .ci/package compare the C-kernel route with the no-compiler route (framework ops)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

import hookkit
from hookkit.backends import host_stats

here = Path(__file__).resolve()
pkg = Path(hookkit.__file__).resolve()
assert "site-packages" in pkg.parts, f"hookkit imported from {pkg}, not from the installed package"
assert (pkg.parent / "py.typed").is_file(), "py.typed is missing from the installed package"

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(5, 10), torch.nn.ReLU(), torch.nn.Linear(10, 3))
with hookkit.capture(model, ["0", "2"]) as cap:
    model(torch.randn(4, 5))
assert tuple(cap["0"].shape) == (4, 10), cap["0"].shape

s = hookkit.summary(model, (2, 5))
assert s.total_params == sum(p.numel() for p in model.parameters())

g = torch.Generator().manual_seed(1)
with hookkit.ActivationStats(model, hist=True) as acts:
    for _ in range(3):
        model(torch.randn(64, 5, generator=g))
rows = {n: {k: np.asarray(v, dtype=float).tolist() for k, v in acts.layer_stats(n).items()} for n in acts.names}

cli = subprocess.run([str(Path(sys.executable).parent / "hookkit"), "--help"], capture_output=True, text=True, timeout=120)
assert cli.returncode == 0 and "summary" in cli.stdout, cli.stderr
ver = subprocess.run([str(Path(sys.executable).parent / "hookkit"), "--version"], capture_output=True, text=True, timeout=120)
assert ver.stdout.strip() == f"hookkit {hookkit.__version__}", ver.stdout

route = "c-kernel" if host_stats.kernels is not None else "framework-ops"
Path(sys.argv[1]).write_text(json.dumps({"route": route, "version": hookkit.__version__, "rows": rows}))
print(f"smoke ok: hookkit {hookkit.__version__} from {pkg.parent}, statistics route: {route}")
