"""``hookkit demo`` end to end on both frameworks (short setting), and its command-line errors."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys

import numpy as np
import pytest

import hookkit
from hookkit.apps.cli import main
from hookkit.apps.demo import CAM_GRID_METHODS, CAM_GRID_SAMPLES, DROPOUT, FEATURE_MAP_SAMPLES, HIST_BINS, HIST_RANGE, run_demo
from hookkit.core import router
from test_report import assert_self_contained, browser_check, decoded_images, needs_chromium, section_ids

SECTIONS = ["summary", "scalars", "activations", "color-dim", "gradient-flow", "feature-maps", "gradcam", "dropout"]


@pytest.fixture(scope="module", params=["torch", "paddle"])
def demo(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"demo-{request.param}") / "report-dir"
    result = run_demo(request.param, epochs=1, out=out, seed=1, limit=400, quiet=True)
    return request.param, result


@pytest.mark.slow
def test_the_report_has_every_section_and_image(demo):
    framework, result = demo
    html = result["report"].read_text(encoding="utf-8")
    assert result["report"] == result["out"] / "report.html"
    assert section_ids(html) == SECTIONS
    layers = ["conv1", "conv2", "conv3", "fc1", "fc2"]  # ActivationStats' default: the layers with parameters
    images = decoded_images(html)
    # training curves; three overlays and per-layer panels; colorful dimension; gradient flow (3);
    # feature maps; Grad-CAM, Grad-CAM++, the method grid
    assert len(images) == 1 + 3 + 2 * len(layers) + 3 + FEATURE_MAP_SAMPLES + 3
    assert "<figcaption>training loss, held-out accuracy</figcaption>" in html
    assert all(im.shape[0] > 50 and im.shape[1] > 50 for im in images)
    # feature maps: one held-out digit per row, each of a different class, its label in the caption
    labels = [int(m) for m in re.findall(r"<figcaption>held-out digit #\d+: label (\d), predicted \d</figcaption>", html)]
    assert len(labels) == FEATURE_MAP_SAMPLES == len(set(labels))
    assert "One held-out digit per row" in html and "handwritten" not in html.split("<main>")[1].split("Grad-CAM")[0]
    assert f"hookkit.cam: {len(CAM_GRID_METHODS)} methods side by side at conv3" in html
    assert "Grad-CAM at conv3, target: the predicted class" in html and f"framework: <b>{framework}</b>" in html
    assert "<td" in html and ">DigitsCNN</td>" in html and "conv3 (Conv2" in html and "(model)" not in html
    assert_self_contained(html)


@pytest.mark.slow
def test_the_demo_figures_are_legible(demo):
    """Grad-CAM: tiles of at least 100 px; the colorful dimension: pre-activations recorded over a
    range symmetric around 0, each panel's axis chosen from the data."""
    _, result = demo
    from hookkit.viz.stats_plots import data_extent

    gradcam_png = (result["out"] / "figures" / "gradcam.png").read_bytes()
    import matplotlib.image as mpimg

    height, width = mpimg.imread(io.BytesIO(gradcam_png), format="png").shape[:2]
    assert width / 6 >= 100 and height / 2 >= 100  # 6 columns, 2 rows of tiles
    grid = mpimg.imread(io.BytesIO((result["out"] / "figures" / "cam_methods.png").read_bytes()), format="png")
    assert grid.shape[1] / (len(CAM_GRID_METHODS) + 1) >= 80 and grid.shape[0] / CAM_GRID_SAMPLES >= 80  # input + methods
    acts = hookkit.load_stats(result["out"])["activation_stats"]
    assert acts.hist_range == HIST_RANGE and HIST_RANGE[0] == -HIST_RANGE[1]
    for name in acts.names:
        lo, hi = data_extent(acts, name)
        assert lo == -hi and hi < HIST_RANGE[1]  # the signed outputs, not the whole recorded range


@pytest.mark.slow
def test_the_statistics_are_saved_as_data_and_load_back(demo):
    framework, result = demo
    out = result["out"]
    for name in ("activation_stats.safetensors", "activation_stats.json", "gradient_stats.safetensors", "gradient_stats.json"):
        assert (out / name).is_file()
    loaded = hookkit.load_stats(out)
    acts, grads = loaded["activation_stats"], loaded["gradient_stats"]
    assert list(acts.names) == ["conv1", "conv2", "conv3", "fc1", "fc2"]
    # one record per training step (statistics are taken in training mode only)
    conv1 = acts.layer_stats("conv1")
    assert len(conv1["mean"]) == result["steps"] and conv1["hist"].shape == (result["steps"], HIST_BINS)
    assert np.all(np.isfinite(conv1["std"])) and np.all((conv1["near_zero"] >= 0) & (conv1["near_zero"] <= 1))
    assert len(grads.layer_stats("fc2")["norm"]) == result["steps"] and np.all(grads.layer_stats("fc2")["norm"] > 0)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["total_params"] == 22954 and summary["framework"] == framework
    # the saved folder renders the same report again (`hookkit report DIR` calls hookkit.report(DIR))
    assert main(["report", str(out), "--out", str(out / "cli.html")]) == 0
    assert section_ids((out / "cli.html").read_text()) == SECTIONS


@pytest.mark.slow
def test_dropout_hooks_dropped_what_they_should_and_left_nothing(demo):
    framework, result = demo
    for layer, kind, p in DROPOUT:
        d = result["dropout"][layer]
        assert d["kind"] == kind and d["calls"] == result["steps"]
        assert d["fraction"] == pytest.approx(p, abs=0.04)  # thousands of values per step: close to p
        assert d["eval_fraction"] == 0  # mode-aware: nothing dropped in eval
    saved = json.loads((result["out"] / "dropout.json").read_text())
    assert saved == json.loads(json.dumps(result["dropout"]))
    model = result["model"]
    be = hookkit.backends.backend_for(model)
    for _, layer in be.named_layers(model):
        assert router.attached(layer) == {e: 0 for e in router.EVENTS}
    assert 0.0 <= result["accuracy"] <= 1.0


@pytest.mark.slow
@needs_chromium
def test_the_report_opens_in_a_browser(demo):
    framework, result = demo
    check = browser_check(result["report"])
    assert check["images"] == len(decoded_images(result["report"].read_text()))
    assert check["bad"] == 0, f"{check['bad']} images did not decode"
    assert check["console_errors"] == []


# -- command-line errors ------------------------------------------------------------------------------
def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_unknown_framework(capsys, tmp_path):
    assert main(["demo", "--framework", "jax", "--out", str(tmp_path / "o")]) == 2
    err = _one_line_error(capsys)
    assert "unknown --framework 'jax'" in err and "valid: torch, paddle" in err
    assert not (tmp_path / "o").exists()  # nothing written for a bad command


def test_unwritable_out(capsys, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert main(["demo", "--out", str(blocker / "sub")]) == 2
    err = _one_line_error(capsys)
    assert "--out" in err and "a-file" in err and "not writable" in err


def test_framework_not_installed(capsys, tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "paddle" else real(name, *a))
    assert main(["demo", "--framework", "paddle", "--out", str(tmp_path)]) == 2
    assert "paddle is not installed (pip install paddlepaddle)" in _one_line_error(capsys)


def test_bad_epochs(capsys, tmp_path):
    assert main(["demo", "--epochs", "0", "--out", str(tmp_path)]) == 2
    assert "--epochs must be at least 1" in _one_line_error(capsys)


def test_the_real_command_exits_2_without_a_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "hookkit.apps.cli", "demo", "--framework", "mxnet", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "hookkit demo: error: unknown --framework 'mxnet'; valid: torch, paddle"
