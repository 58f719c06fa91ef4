"""Regenerate the screenshot gallery of docs/index.md and README.md (docs/images/*.png):

    python docs/_ext/gallery.py        # runs `hookkit demo`, screenshots its report in headless Chromium

Needs Debian's chromium and Pillow (a matplotlib dependency). The images are committed: the docs
build never runs this."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "images"
WIDTH = 1400


def screenshot(page: Path, png: Path, height: int) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("gallery: chromium is not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                f"--window-size={WIDTH},{height}",
                f"--screenshot={png}",
                f"file://{page}",
            ],
            check=True,
            capture_output=True,
            timeout=180,
        )


def crop(png: Path, top: int, bottom: int, out: Path, width: int = 900) -> None:
    """A part of a page screenshot, scaled to ``width`` pixels (small files for the docs)."""
    img = Image.open(png).convert("RGB").crop((0, top, WIDTH, bottom))
    img = img.resize((width, round(img.height * width / WIDTH)), Image.LANCZOS)
    img.save(out, optimize=True)


def anchor_offsets(page: Path) -> dict[str, int]:
    """The y offset of each report section, measured in the browser."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    probe = page.with_name("probe.html")
    script = (
        "<script>window.addEventListener('load',function(){var o={};document.querySelectorAll('section').forEach("
        "function(s){o[s.id]=Math.round(s.getBoundingClientRect().top+window.scrollY)});var p=document.createElement('pre');"
        "p.id='offsets';p.textContent=JSON.stringify(o);document.body.appendChild(p)});</script>"
    )
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", script + "</body>"), encoding="utf-8")
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                f"--user-data-dir={profile}",
                f"--window-size={WIDTH},1200",
                "--virtual-time-budget=5000",
                "--dump-dom",
                f"file://{probe}",
            ],
            check=True,
            capture_output=True,
            text=True,
            timeout=180,
        ).stdout
    import json
    import re

    return json.loads(re.search(r'<pre id="offsets">(.*?)</pre>', dom).group(1).replace("&quot;", '"'))


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "report"
        subprocess.run([sys.executable, "-m", "hookkit.apps.cli", "demo", "--out", str(folder)], check=True, timeout=1800)
        page = folder / "report.html"
        offsets = anchor_offsets(page)
        full = Path(tmp) / "full.png"
        height = max(offsets.values()) + 2400
        screenshot(page, full, height)
        ordered = sorted(offsets.items(), key=lambda kv: kv[1])
        ends = {sid: (ordered[i + 1][1] if i + 1 < len(ordered) else height) for i, (sid, _) in enumerate(ordered)}
        crop(full, 0, min(900, height), OUT / "report-top.png")
        for sid, name in (("activations", "report-activations"), ("gradcam", "report-cam"), ("scalars", "report-curves")):
            if sid in offsets:
                crop(full, offsets[sid] - 10, min(ends[sid], offsets[sid] + 1300), OUT / f"{name}.png")
    print("gallery written to", OUT)


if __name__ == "__main__":
    main()
