"""The HTML report: rendered from saved statistics or live objects, self-contained, valid in a real browser."""

from __future__ import annotations

import base64
import html as html_lib
import io
import json
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

import hookkit
from hookkit.apps.cli import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
    "--virtual-time-budget=5000",
]
_PROBE = """<script>window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images);
  var bad = imgs.filter(function (i) { return !(i.complete && i.naturalWidth > 0); }).length;
  var out = document.createElement("pre"); out.id = "hookkit-probe";
  out.textContent = JSON.stringify({images: imgs.length, bad: bad});
  document.body.appendChild(out);
});</script>"""


def browser_check(html_path) -> dict:
    """Open a copy of the report (plus a probe script) in headless Chromium; returns
    ``{"images": n, "bad": undecoded, "console_errors": [...]}``."""
    with tempfile.TemporaryDirectory() as tmp:
        page = os.path.join(tmp, "page.html")
        text = open(html_path, encoding="utf-8").read()
        with open(page, "w", encoding="utf-8") as f:
            f.write(text.replace("</body>", _PROBE + "</body>"))
        cmd = [CHROMIUM, *_FLAGS, f"--user-data-dir={os.path.join(tmp, 'profile')}", "--dump-dom", f"file://{page}"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    m = re.search(r'<pre id="hookkit-probe">(.*?)</pre>', proc.stdout)
    assert m, f"the probe did not run; chromium said: {proc.stderr[-2000:]}"
    result = json.loads(m.group(1).replace("&quot;", '"'))
    # console messages and page errors are logged as "CONSOLE(line)] ..." / "Uncaught ..." with --enable-logging
    result["console_errors"] = [
        line
        for line in proc.stderr.splitlines()
        if ("CONSOLE" in line and ("error" in line.lower() or "Uncaught" in line)) or "Uncaught" in line
    ]
    return result


needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; .ci/run installs it)")


def decoded_images(html: str) -> list[np.ndarray]:
    """Every <img> of the page: each must be an embedded PNG that decodes."""
    import matplotlib.image as mpimg

    srcs = re.findall(r'<img[^>]* src="([^"]*)"', html)
    out = []
    for src in srcs:
        assert src.startswith("data:image/png;base64,"), f"not an embedded PNG: {src[:60]}"
        out.append(mpimg.imread(io.BytesIO(base64.b64decode(src.split(",", 1)[1])), format="png"))
    return out


def section_ids(html: str) -> list[str]:
    return re.findall(r'<section id="([a-z-]+)">', html)


def assert_self_contained(html: str) -> None:
    assert not re.search(r'(src|href)\s*=\s*"(https?:|//)', html), "the report references the network"
    assert "<link" not in html and "@import" not in html


def _train(fw, model, steps: int = 3) -> None:
    opt = fw.adam(model)
    for _ in range(steps):
        loss = fw.cross_entropy(model(fw.randn(8, 1, 8, 8)), fw.labels(np.arange(8) % 10))
        loss.backward()
        fw.step(opt)


def _saved_run(fw, folder, layers=None):
    model = fw.small_cnn()
    model.train()
    acts = hookkit.ActivationStats(model, layers, hist=True)
    grads = hookkit.GradientStats(model, layers)
    _train(fw, model)
    acts.remove(), grads.remove()
    acts.save(folder), grads.save(folder)
    return model, acts, grads


@pytest.mark.slow
def test_report_from_a_folder_of_saved_statistics(fw, tmp_path):
    model, acts, grads = _saved_run(fw, tmp_path)
    path = hookkit.report(tmp_path)
    assert path == tmp_path / "report.html"
    html = path.read_text(encoding="utf-8")
    # only the sections the data supports: no summary, feature maps, Grad-CAM or dropout
    assert section_ids(html) == ["activations", "color-dim", "gradient-flow"]
    layers = list(acts.names)
    assert layers == ["conv1", "bn1", "conv2", "fc"]
    images = decoded_images(html)
    # three overlays (every layer in one figure per statistic), per layer: its panels (on demand) and
    # colorful dimension; gradient flow: lines, heatmap, parameters
    assert len(images) == 3 + 2 * len(layers) + 3
    assert all(im.ndim == 3 and im.shape[0] > 50 and im.shape[1] > 50 for im in images)
    assert html.count('<figure class="wide">') == 3 and html.count("<details>") == 1
    for name in layers:
        assert f"<figcaption>{name}</figcaption>" in html  # no summary in the folder: no class to name
    assert_self_contained(html)


@pytest.mark.slow
def test_report_from_objects_with_a_summary(fw, tmp_path):
    model, acts, grads = _saved_run(fw, tmp_path / "stats", layers=["conv2", "fc"])
    summary = hookkit.summary(model, input_size=(1, 1, 8, 8))
    out = tmp_path / "deep" / "r.html"
    path = hookkit.report(
        [acts, grads],
        out,
        summary=summary,
        title="my run",
        meta={"lr": 0.001},
        dropout={"relu1": {"kind": "dropout", "p": 0.5, "fraction": 0.49, "calls": 3}},
    )
    html = path.read_text(encoding="utf-8")
    assert path == out
    assert section_ids(html) == ["summary", "activations", "color-dim", "gradient-flow", "dropout"]
    assert "<title>my run</title>" in html and "lr: <b>0.001</b>" in html
    assert html_table(html, "summary") == text_table(str(summary))
    assert f"{summary.total_params:,}" in html and "0.490" in html


def html_table(page: str, css_class: str) -> list[list[str]]:
    """The header and body cells of ``<table class="css_class">``, as the browser shows their text."""
    m = re.search(rf'<table class="{css_class}">(.*?)</table>', page, re.S)
    assert m, f"no <table class={css_class!r}> in the page"
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", m.group(1), re.S)
    return [[html_lib.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", r, re.S)] for r in rows]


def text_table(text: str) -> list[list[str]]:
    """The header and rows of ``print(summary)``: the lines between the first and third rule, cut at runs of 2+ spaces."""
    lines = text.splitlines()
    rules = [i for i, line in enumerate(lines) if set(line) == {"="}]
    return [re.split(r"\s{2,}", line.strip()) for line in lines[rules[0] + 1 : rules[2]] if set(line) != {"="}]


def test_the_html_summary_table_is_the_text_table(fw, tmp_path):
    """Same columns (Input Shape, Trainable), the same `--` and the same root row as print(summary),
    read back from summary.json; a layer called three times gives three rows; a frozen layer says False."""
    from hookkit.observers.summary import Summary

    model = fw.shared_block_model()
    for p in fw.params(model.out):  # frozen: Trainable False, the root Partial
        if fw.name == "torch":
            p.requires_grad_(False)
        else:
            p.stop_gradient = True
    summary = hookkit.summary(
        model, (2, 4), columns=("input_size", "output_size", "num_params", "params_percent", "trainable", "mult_adds")
    )
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps(summary.to_dict()), encoding="utf-8")
    html = hookkit.report(folder).read_text(encoding="utf-8")
    text = text_table(str(summary))
    assert html_table(html, "summary") == text
    assert str(Summary.from_dict(json.loads((folder / "summary.json").read_text()))) == str(summary)
    header, root, *rows = text
    assert header == ["Layer (type)", "Input Shape", "Output Shape", "Param #", "Param %", "Trainable", "Mult-Adds"]
    assert root[0] == "Repeat" and root[5] == "Partial"  # the model's class, not "(model) (Repeat)"
    assert [r[0] for r in rows if r[0].startswith("block")] == [
        "block (Linear) [call 0]",
        "block (Linear) [call 1]",
        "block (Linear) [call 2]",
    ]
    assert [r[3] for r in rows if r[0].startswith("block")][1:] == ["(recursive)", "(recursive)"]
    assert next(r for r in rows if r[0].startswith("out"))[5] == "False"
    lines = str(summary).splitlines()
    rules = [i for i, line in enumerate(lines) if set(line) == {"="}]
    footer = lines[rules[2] + 1 : rules[3]]  # totals, mult-adds method, memory
    assert len(footer) >= 5 and [html_lib.unescape(li) for li in re.findall(r"<li>(.*?)</li>", html)] == footer


def test_cli_report_and_its_errors(tmp_path, capsys):
    fw_ = pytest.importorskip("torch")  # noqa: F841
    from models import make_framework

    _saved_run(make_framework("torch"), tmp_path / "run", layers="fc")
    assert main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "x.html")]) == 0
    assert "report written to" in capsys.readouterr().out
    assert section_ids((tmp_path / "x.html").read_text()) == ["activations", "color-dim", "gradient-flow"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["report", str(empty)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nothing to report" in err and "Traceback" not in err
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "is not a folder" in capsys.readouterr().err


@pytest.mark.slow
@needs_chromium
def test_the_browser_catches_broken_pages(tmp_path):
    """The browser check itself can fail: a broken image and a script error are caught."""
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><html><body><img src="data:image/png;base64,AAAA"><script>notAFunction();</script></body></html>')
    result = browser_check(page)
    assert result["images"] == 1 and result["bad"] == 1
    assert any("notAFunction" in line for line in result["console_errors"])


def test_report_names_layer_classes_and_shows_user_scalars(fw, tmp_path):
    model, acts, grads = _saved_run(fw, tmp_path)
    summary = hookkit.summary(model, input_size=(1, 1, 8, 8))
    (tmp_path / "summary.json").write_text(json.dumps(summary.to_dict()))
    (tmp_path / "scalars.json").write_text(json.dumps({"loss": [2.3, 1.9, 1.2], "lr": {"step": [0, 10], "value": [0.1, 0.01]}}))
    html = hookkit.report(tmp_path, scalars={"accuracy": [0.5, 0.7, 0.9]}).read_text(encoding="utf-8")
    assert section_ids(html) == ["summary", "scalars", "activations", "color-dim", "gradient-flow"]
    assert "<figcaption>loss, lr, accuracy</figcaption>" in html  # the folder's curves and the argument's, in one figure
    conv = "Conv2D" if fw.name == "paddle" else "Conv2d"
    assert f"<figcaption>conv1 ({conv})</figcaption>" in html
    assert re.search(rf"<figcaption>conv1 \({conv}\): values [-0-9.]+ to [-0-9.]+ shown", html)


@pytest.mark.parametrize(
    "scalars, complaint",
    [
        ({"loss": "1,2,3"}, "field 'loss' must be an array of numbers"),
        ({"loss": [1, "x"]}, "field 'loss.value' must be numbers only"),
        ({"loss": {"step": [0], "value": [1, 2]}}, "field 'loss.step' must be an array of 2 numbers"),
        ({"": [1]}, "field '(name)' must be a non-empty string"),
    ],
)
def test_scalars_from_elsewhere_are_checked(tmp_path, scalars, complaint):
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(3, 3))
    with hookkit.ActivationStats(model, train_only=False) as acts:
        model(torch.randn(2, 3))
    acts.save(tmp_path)
    (tmp_path / "scalars.json").write_text(json.dumps(scalars))
    with pytest.raises(hookkit.HookkitError, match=re.escape(complaint)):
        hookkit.report(tmp_path)
    with pytest.raises(hookkit.HookkitError, match=re.escape(complaint.replace("field", "field", 1))):
        hookkit.report(acts, tmp_path / "r.html", scalars=scalars)
