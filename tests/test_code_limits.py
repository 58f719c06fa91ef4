"""Code limits held in CI: no function above cyclomatic complexity 20 or longer than 80 lines
(radon), and no dead code (vulture, with a short allow-list of names used from outside).

``CHECKED``: the parts of ``src/hookkit`` held to the limits so far (the sites, the core, the
interventions, capture and the hooks, the transformer analyses); the rest joins as it is split up.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "hookkit"
CHECKED = ["core", "sites", "interventions", "observers/capture.py", "observers/hooks.py", "analyses/transformer"]
MAX_COMPLEXITY = 20
MAX_LINES = 80

# name -> why vulture cannot see it used
USED_FROM_OUTSIDE = {
    "register_stack": "public extension point: a model family of transformer stacks (hookkit.core.architectures)",
    "__getattr__": "a module's attribute hook (deprecated names), called by Python",
}


def _files() -> list[pathlib.Path]:
    out: list[pathlib.Path] = []
    for part in CHECKED:
        p = SRC / part
        out += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    return out


def test_no_function_is_too_complex_or_too_long():
    radon = pytest.importorskip("radon.complexity", reason="radon is in the test extra (pip install -e '.[test]')")
    from radon.visitors import Function

    over = []
    for path in _files():
        for b in radon.cc_visit(path.read_text()):  # functions and methods (a class's methods come listed too)
            if not isinstance(b, Function):
                continue
            lines = b.endline - b.lineno + 1
            if b.complexity > MAX_COMPLEXITY or lines > MAX_LINES:
                name = f"{b.classname}.{b.name}" if b.classname else b.name
                over.append(f"{path.relative_to(ROOT)}:{b.lineno} {name}: complexity {b.complexity}, {lines} lines")
    assert not over, f"functions above complexity {MAX_COMPLEXITY} or {MAX_LINES} lines:\n" + "\n".join(over)


def test_no_dead_code():
    pytest.importorskip("vulture", reason="vulture is in the test extra (pip install -e '.[test]')")
    # the whole package, the tests and the benchmarks are what uses a name; only CHECKED is reported
    out = subprocess.run(
        [sys.executable, "-m", "vulture", str(SRC), str(ROOT / "tests"), str(ROOT / "benchmarks"), "--min-confidence", "60"],
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout.splitlines()
    prefixes = [str((SRC / part).relative_to(ROOT)) for part in CHECKED]
    dead = [
        line
        for line in out
        if any(pathlib.Path(line.split(":")[0]).resolve().relative_to(ROOT).as_posix().startswith(p) for p in prefixes)
        and not any(f"'{name}'" in line for name in USED_FROM_OUTSIDE)
    ]
    assert not dead, "unused code (remove it, or list the name in USED_FROM_OUTSIDE with why):\n" + "\n".join(dead)
