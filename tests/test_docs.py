"""Every ```python block of README.md and docs/*.md runs as written.

Each page is one test: its blocks run in order in one namespace (a page reads like one script), in
a temporary working directory, with matplotlib's Agg backend. A block the page marks with the
HTML comment ``<!-- docs: not run (reason) -->`` on the line before it is skipped; the marker is
for blocks that cannot run here (a GPU, several processes, a long job) and says why.
"""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("**/*.md"))]
NOT_RUN = re.compile(r"<!--\s*docs:\s*not run\b.*-->")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)(.*)$")


def code_blocks(text: str) -> list[tuple[int, str, str, bool]]:
    """(first line number, language, code, marked not run) for each fenced block of a Markdown page."""
    blocks = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        skip = any(NOT_RUN.search(prev) for prev in lines[max(0, i - 2) : i])
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not (lines[i].strip().startswith(fence) and lines[i].strip().strip(fence[0]) == ""):
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i])
            i += 1
        blocks.append((start + 1, lang, "\n".join(body) + "\n", skip))
        i += 1
    return blocks


def test_code_blocks_parser():
    page = "text\n```python\nx = 1\n```\n<!-- docs: not run (needs a GPU) -->\n```python\ny = 2\n```\n```bash\nls\n```\n"
    assert code_blocks(page) == [(3, "python", "x = 1\n", False), (7, "python", "y = 2\n", True), (10, "bash", "ls\n", False)]


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_page_examples_run(page: pathlib.Path, tmp_path, monkeypatch):
    blocks = [
        (line, code) for line, lang, code, skip in code_blocks(page.read_text(encoding="utf-8")) if lang in ("python", "py") and not skip
    ]
    if not blocks:
        pytest.skip(f"{page.relative_to(ROOT)} has no python blocks")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    namespace: dict = {"__name__": f"docs_{page.stem}"}
    rel = page.relative_to(ROOT)
    try:
        for line, code in blocks:
            # The file name in a traceback points at the page and the block's first line.
            exec(compile(code, f"{rel}:{line}", "exec"), namespace)
    finally:
        plt.close("all")
