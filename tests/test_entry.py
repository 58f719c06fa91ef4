"""Errors name the public function the user called through ``core.entry`` (set once at the entry),
not through a ``fn: str`` argument threaded down the helpers: checked on the code (no such parameter
comes back in ``src/hookkit``) and on behaviour (work at forward time names the function it was
given to, also while another public function runs)."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import numpy as np
import pytest

import hookkit
from hookkit.core.entry import entered, entry_name, public_entry, restored
from hookkit.core.validate import InvalidArgument, check_int

SRC = Path(__file__).resolve().parents[1] / "src" / "hookkit"

# Parameters that carry the name of a public function into a helper.
NAME_PARAMS = {"fn", "fn_name", "func_name", "function_name"}

# (file relative to src/hookkit, function) allowed to take one, each with its reason.
ALLOWED = {
    # the sink that formats the message: fail(None, ...) names the entry; a literal names a function
    # raising about itself (fail("summary", ...)) or a method that is no entry (fail("Graph.save", ...))
    ("core/errors.py", "fail"),
}


def _names_a_function(arg: ast.arg, default: ast.expr | None) -> bool:
    """``arg`` is a function-name parameter: one of NAME_PARAMS typed ``str`` or with a string default."""
    if arg.arg not in NAME_PARAMS:
        return False
    typed_str = arg.annotation is not None and "str" in ast.unparse(arg.annotation)
    str_default = isinstance(default, ast.Constant) and isinstance(default.value, str)
    return typed_str or str_default


def name_params(code: str) -> list[tuple[str, int]]:
    """``(function, line)`` of every function in ``code`` taking a function-name parameter."""
    found = []
    for node in ast.walk(ast.parse(code)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        a = node.args
        positional = [*a.posonlyargs, *a.args]
        defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
        pairs = list(zip(positional, defaults)) + list(zip(a.kwonlyargs, a.kw_defaults))
        if any(_names_a_function(arg, d) for arg, d in pairs):
            found.append((node.name, node.lineno))
    return found


def test_no_function_name_parameter_in_hookkit():
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        bad += [f"{rel}:{line} {name}" for name, line in name_params(path.read_text()) if (rel, name) not in ALLOWED]
    assert not bad, "name the public function with @public_entry / entry_name() (core/entry.py), not a parameter: " + ", ".join(bad)


def test_the_check_sees_a_name_parameter():
    code = """
def a(x, fn: str | None = None): ...
def b(x, *, fn="capture"): ...
def c(fn_name: str, x): ...
def d(model, fn): ...                 # a user's callback, not a name: allowed
def e(model, fn: Callable = None): ...
"""
    assert [n for n, _ in name_params(code)] == ["a", "b", "c"]


def test_entry_names_checks_and_the_outermost_entry_wins():
    @public_entry("outer")
    def outer():
        return inner()

    @public_entry("inner")
    def inner():
        check_int("x", arg="k")

    with pytest.raises(ValueError, match=r"^outer\(\): k must be an int; got 'x'$"):
        outer()
    with pytest.raises(ValueError, match=r"^inner\(\): k must be"):
        inner()
    assert entry_name() == "hookkit" and entry_name("x") == "x"  # nothing left set, also after an error


def test_restored_names_the_stored_function_inside_another_entry():
    with entered("cam"):
        with restored("steer"):
            assert entry_name() == "steer"
        assert entry_name() == "cam"
    assert entry_name() == "hookkit"


def test_a_forward_time_error_names_the_function_it_was_given_to(fw):
    """``steer(..., positions=[9])`` on a 4-token forward fails at the forward, outside the entry and
    inside another public function the user called meanwhile: it names steer."""

    class Seq(fw.Layer):
        def __init__(self):
            super().__init__()
            self.fc = fw.nn.Linear(3, 3)

        def forward(self, x):
            return self.fc(x)

    model, x = Seq(), fw.tensor(np.zeros((1, 4, 3)))
    with hookkit.steer(model, "fc", np.ones(3, np.float32), positions=[9], token_dim=1):
        with pytest.raises(InvalidArgument, match=r"^steer: position 9 past the end"):
            model(x)
        with pytest.raises(InvalidArgument, match=r"^steer: position 9 past the end"):
            with entered("cam"):  # another public function running the forward
                model(x)


def test_a_forward_time_warning_names_the_function_that_placed_it(fw):
    """``dropout`` on an integer output leaves it alone with one warning at forward time: it names
    the function the guard was built under, not the entry active at the forward."""
    from hookkit.backends import backend_for
    from hookkit.core.guards import SkippedOutputWarning, output_guard

    be = backend_for(fw.mlp())
    with entered("my_feature"):
        guarded = output_guard(be, lambda t: t)
    t = be.from_numpy(np.arange(3, dtype=np.int64))
    with warnings.catch_warnings(record=True) as caught, entered("cam"):
        warnings.simplefilter("always")
        assert guarded(t, layer=f"fc_{fw.name}") is t  # warned once per function, layer and dtype: one layer per framework
    msgs = [str(w.message) for w in caught if issubclass(w.category, SkippedOutputWarning)]
    assert len(msgs) == 1 and msgs[0].startswith(f"my_feature(): left the int64 output of layer 'fc_{fw.name}' unchanged")
