"""The API reference shows what users call: every name ``hookkit`` exports has a page entry, and
every public method and property of every documented class is rendered (inherited ones included),
checked on the built site against ``dir()``."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import hookkit

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api"


def documented() -> list[str]:
    return [m.group(1) for page in sorted(API.glob("*.md")) for m in re.finditer(r"^::: (\S+)", page.read_text(), re.M)]


def test_every_export_has_a_reference_entry():
    entries = documented()
    short = {e.rsplit(".", 1)[-1] for e in entries}
    constants = {"ALL", "LEAVES", "WITH_PARAMS", "INTERVENTION", "OBSERVER", "__version__"}
    missing = [n for n in hookkit.__all__ if n not in short and n not in constants]
    assert not missing, f"exported but not in docs/api/*.md: {missing}"


def _resolve(path: str) -> object:
    import importlib

    parts = path.split(".")
    for cut in range(len(parts), 0, -1):  # the longest importable module, then attributes
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(path)


@pytest.mark.slow
def test_every_public_method_of_every_documented_class_is_rendered(tmp_path):
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ids = set()
    for page in (site / "api").glob("*.html"):
        ids |= set(re.findall(r'id="(hookkit\.[\w.]+)"', page.read_text(encoding="utf-8")))
    missing = []
    for path in documented():
        obj = _resolve(path)
        if not inspect.isclass(obj) or issubclass(obj, BaseException):
            continue
        anchor = f"hookkit.{path.rsplit('.', 1)[-1]}" if f"hookkit.{path.rsplit('.', 1)[-1]}" in ids else path
        for name in dir(obj):
            owner = next((c for c in inspect.getmro(obj) if name in vars(c)), None)
            # hookkit's own members (a framework's or Mapping's inherited API is documented by them)
            if name.startswith("_") or owner is None or not owner.__module__.startswith("hookkit"):
                continue
            if f"{anchor}.{name}" not in ids:
                missing.append(f"{path}.{name}")
    assert not missing, f"public members not rendered in the API reference: {missing}"
