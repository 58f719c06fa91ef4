"""The import layers hold: the contracts of pyproject.toml (``lint-imports``), and ``import hookkit``
loads no app (``hookkit.report`` loads on first use and is the function)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}


def test_the_import_contracts_are_kept():
    exe = shutil.which("lint-imports") or str(pathlib.Path(sys.executable).with_name("lint-imports"))
    if not pathlib.Path(exe).exists():
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    out = subprocess.run(
        [exe, "--no-cache", "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def test_import_hookkit_loads_no_app_and_report_resolves_on_use():
    code = (
        "import sys, hookkit\n"
        "assert not [m for m in sys.modules if m.startswith(('hookkit.apps', 'hookkit.integrations', 'hookkit.viz'))]\n"
        "from hookkit.apps.report import report\n"
        "assert hookkit.report is report and callable(hookkit.summary)\n"
        "from hookkit import *\n"
        "assert report is hookkit.report\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
