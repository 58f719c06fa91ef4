"""Files from elsewhere are data, never instructions: report folders and saved statistics someone sent
you. Paths stay inside the folder (absolute paths, ``..`` and symlinks out are refused), every string
written into the page is escaped, and anything malformed is refused with an error naming the file
and the field -- never a bare JSONDecodeError, never a file from outside copied into the page.
"""

from __future__ import annotations

import json
import os
import struct
import zlib

import numpy as np
import pytest

import hookkit
from hookkit.core.files import InvalidFile

SCRIPT = "<script>alert('pwned')</script>"


def _png(width: int = 2, height: int = 2) -> bytes:
    """A tiny valid PNG (grey pixels)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def _folder(tmp_path, figures=None, **files):
    """A report folder with one valid figure (so that there is something to report) and ``files``."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "ok.png").write_bytes(_png())
    entries = [{"file": "ok.png", "section": "gradcam", "caption": "fine"}] + list(figures or [])
    (run / "figures.json").write_text(json.dumps(entries))
    for name, content in files.items():
        path = run / name.replace("__", ".")
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    return run


@pytest.fixture
def secret(tmp_path):
    """A file outside the report folder that must never reach the page."""
    path = tmp_path / "secret.png"
    path.write_bytes(_png() + b"SECRET-BYTES")
    return path


# -- paths -------------------------------------------------------------------------------------------
def test_absolute_figure_path_is_refused(tmp_path, secret):
    run = _folder(tmp_path, figures=[{"file": str(secret), "section": "gradcam"}])
    with pytest.raises(InvalidFile, match=r"figures\.json: field '\[1\]\.file' must be relative to the folder; got the absolute path"):
        hookkit.report(run)
    assert not (run / "report.html").exists()


def test_parent_path_is_refused(tmp_path, secret):
    run = _folder(tmp_path, figures=[{"file": "../secret.png", "section": "gradcam"}])
    with pytest.raises(InvalidFile, match=r"'\[1\]\.file' must stay inside the folder; got '\.\./secret\.png'"):
        hookkit.report(run)


def test_symlink_out_of_the_folder_is_refused(tmp_path, secret):
    run = _folder(tmp_path, figures=[{"file": "innocent.png", "section": "gradcam"}])
    os.symlink(secret, run / "innocent.png")
    with pytest.raises(InvalidFile, match=r"'innocent\.png' leads outside the folder .*symbolic link"):
        hookkit.report(run)
    os.symlink(secret.parent, run / "sub")  # a linked directory too
    (run / "figures.json").write_text(json.dumps([{"file": "sub/secret.png", "section": "x"}]))
    with pytest.raises(InvalidFile, match="leads outside the folder"):
        hookkit.report(run)


def test_json_file_linked_from_outside_is_refused(tmp_path):
    run = _folder(tmp_path)
    outside = tmp_path / "their_meta.json"
    outside.write_text(json.dumps({"user": "x"}))
    os.symlink(outside, run / "meta.json")
    with pytest.raises(InvalidFile, match=r"meta\.json.*leads outside the folder"):
        hookkit.report(run)


def test_a_figure_that_is_not_a_png_is_refused(tmp_path):
    run = _folder(tmp_path, figures=[{"file": "notes.txt", "section": "x"}])
    (run / "notes.txt").write_text("<html>")
    with pytest.raises(InvalidFile, match=r"'\[1\]\.file': 'notes\.txt' is not a PNG image"):
        hookkit.report(run)


def test_report_html_planted_as_a_link_is_not_written_through(tmp_path):
    run = _folder(tmp_path)
    victim = tmp_path / "bashrc"
    victim.write_text("original")
    os.symlink(victim, run / "report.html")
    with pytest.raises(InvalidFile, match="is a symbolic link"):
        hookkit.report(run)
    assert victim.read_text() == "original"


# -- strings ---------------------------------------------------------------------------------------
def test_every_string_from_the_folder_is_escaped(tmp_path):
    summary = {
        "model": SCRIPT,
        "framework": SCRIPT,
        "rows": [
            {"name": SCRIPT, "type": SCRIPT, "depth": 0, "call": 0, "params": 3, "mult_adds": 4, "output_shapes": [[1, 2]], "note": SCRIPT}
        ],
    }
    run = _folder(
        tmp_path,
        figures=[{"file": "ok.png", "section": f'"><img src=x onerror=alert(1)>{SCRIPT}', "caption": SCRIPT}],
        summary__json=summary,
        meta__json={SCRIPT: SCRIPT},
        dropout__json={SCRIPT: {"kind": SCRIPT, "p": 0.5, "fraction": 0.4, "calls": 3}},
    )
    page = hookkit.report(run, title=SCRIPT).read_text()
    assert "<script>" not in page and "onerror=alert(1)>" not in page
    assert "&lt;script&gt;" in page
    assert 'id="--' in page or 'id="-' in page  # the hostile section name became a plain anchor


def test_layer_names_from_saved_statistics_are_escaped(tmp_path):
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.add_module(SCRIPT, torch.nn.Linear(3, 2))

        def forward(self, x):
            return getattr(self, SCRIPT)(x)

    model = Net()
    with hookkit.ActivationStats(model, train_only=False) as stats:
        model(torch.randn(4, 3))
    run = tmp_path / "run"
    stats.save(run)
    page = hookkit.report(run).read_text()
    assert "<script>" not in page and "&lt;script&gt;" in page


# -- malformed files -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, content, fragment",
    [
        ("figures__json", "[{not json", r"figures\.json: not valid JSON \(.* at line 1, column 3\)"),
        ("figures__json", {"file": "ok.png"}, r"figures\.json: the top level must be an array; got an object"),
        (
            "figures__json",
            [{"file": 3, "section": "x"}],
            r"figures\.json: field '\[0\]\.file' must be a file name relative to the folder; got 3",
        ),
        ("figures__json", [{"file": "ok.png"}], r"figures\.json: field '\[0\]\.section' must be a non-empty string; got None"),
        ("summary__json", "\xff\xfe", r"summary\.json: not (UTF-8 text|valid JSON)"),
        (
            "summary__json",
            {"rows": [{"name": "a", "type": "Linear", "depth": 0, "call": 0, "params": SCRIPT}]},
            r"field 'rows\[0\]\.params' must be an int >= 0",
        ),
        ("summary__json", {"rows": "all"}, r"field 'rows' must be an array of layer rows"),
        ("summary__json", {"rows": [{"name": "a", "type": "Linear"}]}, r"field 'rows\[0\]\.depth' must be an int >= 0; got None"),
        ("dropout__json", {"fc": {"p": "half"}}, r"dropout\.json: field 'fc\.p' must be a number; got 'half'"),
        ("meta__json", {"run": {"nested": 1}}, r"meta\.json: field 'run' must be a string, a number or a boolean"),
        ("meta__json", "[" * 100000 + "]" * 100000, r"meta\.json: (JSON nested too deeply|the top level must be an object)"),
    ],
)
def test_malformed_report_files_name_file_and_field(tmp_path, name, content, fragment):
    if name == "figures__json":
        run = _folder(tmp_path)
        (run / "figures.json").write_text(content if isinstance(content, str) else json.dumps(content))
    else:
        run = _folder(tmp_path, **{name: content})
    with pytest.raises(InvalidFile, match=fragment):
        hookkit.report(run)


def test_huge_json_is_refused_before_parsing(tmp_path, monkeypatch):
    from hookkit.core import files

    monkeypatch.setattr(files, "MAX_JSON_BYTES", 1000)
    run = _folder(tmp_path, summary__json={"rows": [], "model": "x" * 2000})
    with pytest.raises(InvalidFile, match=r"summary\.json: 2,0\d\d bytes, more than the 1,000"):
        hookkit.report(run)


# -- saved statistics ------------------------------------------------------------------------------------
@pytest.fixture
def saved(tmp_path):
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    with hookkit.ActivationStats(model, hist=True, bins=8, train_only=False) as stats:
        for _ in range(3):
            model(torch.randn(5, 3))
    stats.save(tmp_path / "stats")
    return tmp_path / "stats"


def _edit_json(path, **changes):
    meta = json.loads(path.read_text())
    meta.update(changes)
    path.write_text(json.dumps(meta))


def test_saved_statistics_round_trip(saved):
    loaded = hookkit.ActivationStats.load(saved)
    assert loaded.names == ["0", "2"] and loaded.layer_stats("0")["hist"].shape == (3, 8)


def test_corrupt_statistics_json_names_the_file(saved):
    (saved / "activation_stats.json").write_text('{"names": ["0", ')
    with pytest.raises(InvalidFile, match=r"activation_stats\.json: not valid JSON \(Expecting value at line 1, column 17\)"):
        hookkit.ActivationStats.load(saved)
    with pytest.raises(InvalidFile, match=r"activation_stats\.json: not valid JSON"):
        hookkit.load_stats(saved)


@pytest.mark.parametrize(
    "changes, fragment",
    [
        ({"names": "0"}, r"field 'names' must be a list of layer names"),
        ({"names": ["0", "0"]}, r"field 'names' must be a list of distinct layer names"),
        ({"range": [0, float("inf")]}, r"field 'range' must be a \[low, high\] pair of finite numbers"),
        ({"bins": 0}, r"field 'bins' must be an int >= 1; got 0"),
        ({"near_zero": "small"}, r"field 'near_zero' must be a finite number; got 'small'"),
        ({"every": -1}, r"field 'every' must be an int >= 1; got -1"),
        ({"type": "GradientStats"}, r"field 'type' must be 'ActivationStats'; got 'GradientStats'"),
        ({"hist": "yes"}, r"field 'hist' must be true or false"),
    ],
)
def test_statistics_json_schema(saved, changes, fragment):
    _edit_json(saved / "activation_stats.json", **changes)
    with pytest.raises(InvalidFile, match=r"activation_stats\.json: " + fragment):
        hookkit.ActivationStats.load(saved)


def _rewrite_arrays(saved, edit):
    from safetensors.numpy import load_file, save_file

    path = saved / "activation_stats.safetensors"
    arrays = load_file(path)
    edit(arrays)
    save_file(arrays, path)


@pytest.mark.parametrize(
    "edit, fragment",
    [
        (
            lambda a: a.__setitem__("0/hist", np.zeros((3, 5), np.float32)),
            r"array '0/hist' must have shape \[records, 8\] \(bins\); got \[3, 5\]",
        ),
        (lambda a: a.__setitem__("0/mean", np.zeros(7, np.float32)), r"array '0/mean' has 7 records; the other arrays of layer '0' have 3"),
        (lambda a: a.__setitem__("0/step", np.zeros(3, np.float32)), r"array '0/step' must hold integers; got dtype float32"),
        (
            lambda a: a.__setitem__("1/std", np.zeros((3, 2), np.float32)),
            r"array '2/std' must be 1-d \(one value per record\); got shape \[3, 2\]",
        ),
        (
            lambda a: a.__setitem__("9/mean", np.zeros(3, np.float32)),
            r"unexpected array '9/mean' \(expected '<layer index>/<key>' for 2 layers\)",
        ),
    ],
)
def test_statistics_arrays_are_checked(saved, edit, fragment):
    _rewrite_arrays(saved, edit)
    with pytest.raises(InvalidFile, match=r"activation_stats\.safetensors: " + fragment):
        hookkit.ActivationStats.load(saved)


def test_garbage_safetensors_names_the_file(saved):
    (saved / "activation_stats.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(InvalidFile, match=r"activation_stats\.safetensors: not a readable safetensors file"):
        hookkit.ActivationStats.load(saved)


def test_statistics_linked_from_outside_the_report_folder_are_refused(tmp_path, saved):
    run = _folder(tmp_path)
    for name in ("activation_stats.json", "activation_stats.safetensors"):
        os.symlink(saved / name, run / name)
    with pytest.raises(InvalidFile, match=r"activation_stats\.json.*leads outside the folder"):
        hookkit.report(run)
