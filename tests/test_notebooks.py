"""The tutorial notebooks run from top to bottom (nbclient, a real Jupyter kernel), run where a reader
runs them (their own folder), print nothing to stderr (no warnings), write nothing into the checkout,
and show each figure they ask for exactly once (hookkit's figures live outside pyplot)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

# What the test environment itself prints when `transformers` is imported beside torchao (a test
# dependency of other features; its CPU wheel lacks the CUDA kernels it tries to load): not the
# notebook's doing, and nothing a reader without torchao sees. Everything else on stderr fails.
_ENVIRONMENT = [
    re.compile(r"^Failed to load .*/torchao/.*\.so"),
    re.compile(r"torch/utils/_pytree\.py:\d+\] <enum '\w+'> is an Enum subclass .*register_constant\(\)"),
]

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "docs" / "notebooks").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_and_shows_each_figure_once(path, tmp_path, monkeypatch):
    nb = nbformat.read(path, as_version=4)
    root = Path(__file__).resolve().parents[1]
    before = _files(root, path.parent)
    monkeypatch.chdir(path.parent)  # where a reader runs it: the notebook writes nothing there
    env_path = os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"), os.environ.get("PYTHONPATH", "")])
    monkeypatch.setenv("PYTHONPATH", env_path)  # the kernel imports this checkout's hookkit
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    noise = [
        line
        for o in outputs
        if o.output_type == "stream" and o.get("name") == "stderr"
        for line in o.get("text", "").splitlines()
        if line.strip() and not any(p.search(line) for p in _ENVIRONMENT)
    ]
    assert not noise, f"the notebook printed to stderr (warnings, progress): {noise}"
    after = _files(root, path.parent)
    assert after == before, f"the notebook wrote into the checkout: {sorted(after - before)}"
    pngs = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) == nb.metadata["hookkit"]["figures"], f"{len(pngs)} figures shown"
    htmls = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert htmls and all("<table" in h for h in htmls)  # reprs render as tables


def _files(root: Path, folder: Path) -> set[str]:
    """The files of the notebook's folder (where it runs) and of the checkout's top level (what a
    notebook that writes relative paths or ``..`` would add to)."""
    out = {str(p.relative_to(root)) for p in folder.rglob("*") if "__pycache__" not in p.parts and ".ipynb_checkpoints" not in p.parts}
    # hidden folders at the top are the tools' caches (.hypothesis, .mypy_cache...) that other tests of a
    # parallel run may create meanwhile: what a notebook would write is a visible file or folder
    return out | {p.name for p in root.iterdir() if not p.name.startswith(".")}
