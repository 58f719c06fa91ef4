"""The tutorial notebooks run from top to bottom (nbclient, a real Jupyter kernel), and each figure
they ask for is shown exactly once (hookkit's figures live outside pyplot)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "docs" / "notebooks").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_and_shows_each_figure_once(path, tmp_path, monkeypatch):
    nb = nbformat.read(path, as_version=4)
    monkeypatch.chdir(tmp_path)  # files the notebook writes stay in the test's folder
    env_path = os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"), os.environ.get("PYTHONPATH", "")])
    monkeypatch.setenv("PYTHONPATH", env_path)  # the kernel imports this checkout's hookkit
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    pngs = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) == nb.metadata["hookkit"]["figures"], f"{len(pngs)} figures shown"
    htmls = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert htmls and all("<table" in h for h in htmls)  # reprs render as tables
