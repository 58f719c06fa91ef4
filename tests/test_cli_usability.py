"""The command line where a newcomer meets it: the working directory importable (as ``python -m``),
an example in every command's --help, ``diff`` pointing at ``--port`` when two separately built
models differ from their first layer, and "grows" marks only where the error means something."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hookkit
from hookkit.apps.cli import EXAMPLES, build_parser, main

SRC = str(Path(__file__).resolve().parents[1] / "src")
MODELS = """
import torch

def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))

def other():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
"""


def _hookkit(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    # -P: the working directory is NOT put on sys.path by Python (as for the installed console
    # script): only the CLI's own entry can make it importable
    code = "import sys; from hookkit.apps.cli import main; sys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, "-P", "-c", code, *args], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.slow  # a fresh interpreter importing torch: seconds
def test_a_module_in_the_working_directory_imports(tmp_path):
    (tmp_path / "my_models_i46.py").write_text(MODELS)
    proc = _hookkit(tmp_path, "summary", "my_models_i46:mlp", "--input-size", "2,8")
    assert proc.returncode == 0, proc.stderr
    assert "Linear" in proc.stdout and "Total params: 212" in proc.stdout  # 8*16+16 + 16*4+4


def test_diff_of_separately_built_models_hints_port(tmp_path, monkeypatch, capsys):
    (tmp_path / "my_models_i46.py").write_text(MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["diff", "my_models_i46:mlp", "my_models_i46:other", "--input-size", "2,8"]) == 1
    assert "pass --port to copy a's weights into b first" in capsys.readouterr().err
    assert main(["diff", "my_models_i46:mlp", "my_models_i46:other", "--input-size", "2,8", "--port"]) == 0
    assert "--port" not in capsys.readouterr().err


def test_every_command_help_shows_an_example():
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert set(commands) == set(EXAMPLES)
    for name, sub in commands.items():
        text = sub.format_help()
        assert "example:" in text and f"hookkit {name} " in text, name
    assert "examples:" in parser.format_help()


def test_growth_is_marked_only_against_the_tolerance(torch_fw):
    import torch

    a = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    b = copy.deepcopy(a)
    x = torch.randn(3, 8)
    with torch.no_grad():  # rounding-sized changes: 1 ulp-scale on the last layer's bias
        b[2].bias.add_(torch.full((4,), 1e-7))
    d = hookkit.diff(a, b, x)
    assert d.first is None
    assert not any(r.grows for r in d.rows) and "^ grows" not in str(d)
    with torch.no_grad():  # an error well beyond the tolerance from layer 2 on: marked there
        b[2].bias.add_(torch.full((4,), 0.5))
    d = hookkit.diff(a, b, x)
    grows = [r.layer for r in d.rows if r.grows]
    assert grows and grows[0] == "2"
    assert np.all([r.rel_err >= 0.1 * r.rtol for r in d.rows if r.grows])
