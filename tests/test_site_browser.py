"""The docs site as a reader sees it, in headless Chromium: the index (install, demo, report, the
gallery), the transformers page (its figures) and an API page (parameter tables, figures). Each
page is built by mkdocs, opened from the folder (no server), screenshot, and probed: every image
decodes, no console error, the screenshot is not blank, and the text a newcomer needs is there."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from test_report import _FLAGS, CHROMIUM, needs_chromium

ROOT = Path(__file__).resolve().parents[1]
_PROBE = """<script>window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images);
  var bad = imgs.filter(function (i) { return !(i.complete && i.naturalWidth > 0); }).map(function (i) { return i.src; });
  var tables = document.querySelectorAll("table").length;
  var out = document.createElement("pre"); out.id = "hookkit-probe";
  out.textContent = JSON.stringify({images: imgs.length, bad: bad, tables: tables, text: document.body.innerText.slice(0, 20000)});
  document.body.appendChild(out);
});</script>"""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _open(page: Path) -> tuple[dict, np.ndarray]:
    """The probe's findings and a screenshot (RGB array) of ``page`` opened from the folder."""
    import matplotlib.image as mpimg

    probed = page.with_name(page.stem + ".probed.html")  # beside the page: its relative links still resolve
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", _PROBE + "</body>"), encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        base = [CHROMIUM, *_FLAGS, f"--user-data-dir={os.path.join(tmp, 'profile')}"]
        proc = subprocess.run([*base, "--dump-dom", probed.as_uri()], capture_output=True, text=True, timeout=120)
        shot = os.path.join(tmp, "shot.png")
        subprocess.run(
            [*base, "--hide-scrollbars", "--window-size=1280,1600", f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120
        )
        image = mpimg.imread(shot)
    m = re.search(r'<pre id="hookkit-probe">(.*?)</pre>', proc.stdout, re.S)
    assert m, f"the probe did not run; chromium said: {proc.stderr[-2000:]}"
    import html

    found = json.loads(html.unescape(m.group(1)))
    found["console_errors"] = [ln for ln in proc.stderr.splitlines() if ("CONSOLE" in ln and "error" in ln.lower()) or "Uncaught" in ln]
    return found, image


def _not_blank(image: np.ndarray) -> None:
    assert image.shape[0] >= 1000 and image.shape[1] >= 1200
    gray = image[..., :3].mean(-1)
    assert gray.std() > 0.05, "the screenshot is blank"
    assert (gray < 0.5).mean() > 0.01, "no text or figure drawn"


@pytest.mark.slow
@needs_chromium
def test_index_opens_with_the_first_steps_and_a_readable_gallery(site):
    found, shot = _open(site / "index.html")
    assert not found["bad"] and not found["console_errors"], found
    assert found["images"] >= 4
    text = found["text"]
    steps = [text.index(s) for s in ("pip install torch", "hookkit demo", "hookkit-report/report.html")]
    assert steps == sorted(steps) and steps[-1] < text.rindex("What it shows")  # the heading, after the contents list
    _not_blank(shot)


@pytest.mark.slow
@needs_chromium
def test_transformers_page_shows_its_figures(site):
    found, shot = _open(site / "transformers.html")
    assert not found["bad"] and not found["console_errors"], found
    assert found["images"] >= 3  # logit lens, attention pattern, patching grid
    _not_blank(shot)


@pytest.mark.slow
@needs_chromium
def test_an_api_page_shows_parameter_tables_and_figures(site):
    found, shot = _open(site / "api" / "viz.html")
    assert not found["bad"] and not found["console_errors"], found
    assert found["tables"] >= 5 and found["images"] >= 4
    assert "See the description above." not in found["text"]
    _not_blank(shot)
