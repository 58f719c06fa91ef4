"""What a user installing hookkit relies on: one version everywhere, py.typed shipped, deprecations
that warn once with the replacement, and the typed-usage file (checked by mypy in CI) running."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import tomllib

import hookkit
from hookkit.core.deprecation import HookkitDeprecationWarning, deprecated_alias, renamed_argument, warn_deprecated

ROOT = Path(__file__).resolve().parents[1]


def test_version_has_one_source():
    from hookkit._version import __version__

    assert hookkit.__version__ == __version__
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "hookkit._version.__version__"}
    out = subprocess.run([sys.executable, "-m", "hookkit.apps.cli", "--version"], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == f"hookkit {__version__}"


def test_py_typed_is_shipped():
    assert (Path(hookkit.__file__).parent / "py.typed").is_file()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in pyproject["tool"]["setuptools"]["package-data"]["hookkit"]


def test_deprecated_alias_warns_once_and_names_the_replacement():
    def new_fn(x: int) -> int:
        return x + 1

    old = deprecated_alias(new_fn, "hookkit.old_fn_for_test", since="0.2", replacement="hookkit.new_fn")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert old(1) == 2 and old(2) == 3
    assert len(seen) == 1 and issubclass(seen[0].category, HookkitDeprecationWarning)
    assert "hookkit.old_fn_for_test is deprecated since hookkit 0.2; use hookkit.new_fn" in str(seen[0].message)
    assert seen[0].filename == __file__  # points at the caller's line


def test_renamed_argument_maps_the_old_keyword():
    @renamed_argument("layer", "layers", since="0.2", removed_in="0.4")
    def fn(model: object, layers: object = None) -> object:
        return layers

    with pytest.warns(
        HookkitDeprecationWarning,
        match=r"fn\(layer=\.\.\.\) is deprecated since hookkit 0.2 and will be removed in 0.4; use fn\(layers=\.\.\.\)",
    ):
        assert fn(None, layer="a") == "a"
    assert fn(None, layers="b") == "b"
    with pytest.raises(TypeError, match=r"fn\(\): layer must be left out when layers= is given \(layer= is its former name\); got 'a'"):
        fn(None, layer="a", layers="b")


def test_warn_deprecated_is_a_future_warning_shown_by_default():
    assert issubclass(HookkitDeprecationWarning, FutureWarning)
    with pytest.warns(FutureWarning):
        warn_deprecated("hookkit.test_only_name", "hookkit.other", since="0.2")


def test_typed_usage_file_runs():
    spec = importlib.util.spec_from_file_location("typed_usage", ROOT / "tests" / "typing" / "usage.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.run()
