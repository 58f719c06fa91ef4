"""The API reference shows what users call: every name ``hookkit`` exports has a page entry, and
every public method and property of every documented class is rendered (inherited ones included),
checked on the built site against ``dir()``."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import hookkit

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api"


def documented() -> list[str]:
    return [m.group(1) for page in sorted(API.glob("*.md")) for m in re.finditer(r"^::: (\S+)", page.read_text(), re.M)]


def test_every_export_has_a_reference_entry():
    entries = documented()
    short = {e.rsplit(".", 1)[-1] for e in entries}
    constants = {"ALL", "LEAVES", "WITH_PARAMS", "INTERVENTION", "OBSERVER", "__version__"}
    missing = [n for n in hookkit.__all__ if n not in short and n not in constants]
    assert not missing, f"exported but not in docs/api/*.md: {missing}"


def _resolve(path: str) -> object:
    import importlib

    parts = path.split(".")
    for cut in range(len(parts), 0, -1):  # the longest importable module, then attributes
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(path)


@pytest.mark.slow
def test_every_public_method_of_every_documented_class_is_rendered(tmp_path):
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ids = set()
    for page in (site / "api").glob("*.html"):
        ids |= set(re.findall(r'id="(hookkit\.[\w.]+)"', page.read_text(encoding="utf-8")))
    missing = []
    for path in documented():
        obj = _resolve(path)
        if not inspect.isclass(obj) or issubclass(obj, BaseException):
            continue
        anchor = f"hookkit.{path.rsplit('.', 1)[-1]}" if f"hookkit.{path.rsplit('.', 1)[-1]}" in ids else path
        for name in dir(obj):
            owner = next((c for c in inspect.getmro(obj) if name in vars(c)), None)
            # hookkit's own members (a framework's or Mapping's inherited API is documented by them)
            if name.startswith("_") or owner is None or not owner.__module__.startswith("hookkit"):
                continue
            if f"{anchor}.{name}" not in ids:
                missing.append(f"{path}.{name}")
    assert not missing, f"public members not rendered in the API reference: {missing}"


# -- the parameter tables read (what mkdocstrings renders from griffe, with the project's extensions) --
_EXT = ROOT / "docs" / "_ext"
_FILLER = "See the description above."
_PRIVATE = re.compile(r"(^|[\[\s,|.(])_[A-Za-z]\w*")


def _griffe_extensions():
    griffe = pytest.importorskip("griffe")
    sys.path.insert(0, str(_EXT))
    try:
        from griffe_params import ParameterTables
    finally:
        sys.path.remove(str(_EXT))
    return griffe, griffe.load_extensions(f"{_EXT / 'griffe_doctest.py'}:DoctestFences", ParameterTables)


def _row_problem(text: str) -> str:
    d = text.strip()
    if not d or d == _FILLER:
        return "no description"
    if d[-1] not in ".!?":
        return "a cut sentence (no final punctuation)"
    if len(re.findall(r"`+", d)) % 2:
        return "an unclosed code span"
    if d.count("(") != d.count(")") or d.count("[") != d.count("]"):
        return "an unclosed parenthesis"
    return ""


def reference_problems(griffe, obj, where: str, made_by_hookkit: set[str]) -> list[str]:
    """What reads wrong in one rendered object: a parameter without a real description, a cut
    sentence, or a private name in a public signature or attribute type."""
    if isinstance(obj, griffe.Alias):
        try:
            obj = obj.final_target
        except Exception:  # an alias to something outside hookkit
            return []
    out = []
    if isinstance(obj, griffe.Attribute):
        anns = [obj.annotation]
    elif isinstance(obj, griffe.Function):
        anns = [p.annotation for p in obj.parameters if not p.name.startswith("_")] + [obj.returns]
    else:
        anns = []
    out += [f"{where}: private type {a}" for a in anns if a is not None and _PRIVATE.search(str(a))]
    if obj.docstring is None:
        return out
    rows = {}
    for section in obj.docstring.parsed:
        if section.kind.value in ("parameters", "other parameters"):  # other: the keys of **options: Unpack[...]
            for p in section.value:
                rows[p.name.lstrip("*")] = p.description
    out += [f"{where}({n}): {why}: {d[:120]!r}" for n, d in rows.items() if (why := _row_problem(d))]
    fn = obj if isinstance(obj, griffe.Function) else obj.members.get("__init__") if isinstance(obj, griffe.Class) else None
    if isinstance(obj, griffe.Class) and ("dataclass" in obj.labels or obj.name in made_by_hookkit):
        fn = None  # results users receive, not build
    if isinstance(fn, griffe.Function):
        params = [p.name for p in fn.parameters if p.name not in ("self", "cls") and not p.name.startswith("_")]
        out += [f"{where}({n}): no row in the parameters table" for n in params if n not in rows]
    return out


def test_every_parameter_row_reads_and_no_private_type_shows():
    griffe, extensions = _griffe_extensions()
    sys.path.insert(0, str(_EXT))
    try:
        from griffe_params import MADE_BY_HOOKKIT
    finally:
        sys.path.remove(str(_EXT))
    pkg = griffe.load("hookkit", search_paths=[str(ROOT / "src")], extensions=extensions, docstring_parser="google")
    problems = []
    for entry in documented():
        obj = pkg.get_member(entry.split(".", 1)[1])
        problems += reference_problems(griffe, obj, entry, MADE_BY_HOOKKIT)
        target = obj.final_target if isinstance(obj, griffe.Alias) else obj
        if isinstance(target, griffe.Class):
            for name, member in target.all_members.items():
                if not name.startswith("_"):
                    problems += reference_problems(griffe, member, f"{entry}.{name}", MADE_BY_HOOKKIT)
    assert not problems, "the API reference reads wrong:\n" + "\n".join(problems)


def test_the_checks_catch_filler_cut_rows_and_private_types():
    griffe, extensions = _griffe_extensions()
    code = '''
class _Hidden: ...

def f(model, layers, depth, *, grads=False) -> _Hidden:
    """Do it. ``depth``: how deep (see ``other``"""

def g(model, grads: "_Hidden" = None):
    """Fine: ``grads=True`` keeps gradients."""
'''
    with griffe.temporary_visited_module(code, extensions=extensions, docstring_parser="google") as module:
        f_problems = reference_problems(griffe, module["f"], "f", set())
        g_problems = reference_problems(griffe, module["g"], "g", set())
    text = "\n".join(f_problems)
    assert "private type _Hidden" in text
    assert "f(depth): an unclosed code span" in text or "f(depth): an unclosed parenthesis" in text
    assert "f(grads): no row" in text  # never named in the prose, not in the glossary
    assert "model" not in text and "layers" not in text  # the shared parameters: from the glossary
    assert g_problems == ["g: private type _Hidden"]


def test_sentences_stay_whole_around_code_and_parentheses():
    sys.path.insert(0, str(_EXT))
    try:
        from griffe_params import describe
    finally:
        sys.path.remove(str(_EXT))
    doc = (
        'Generation. ``positions=`` records only some positions (ints, ``"last"``; see ``hookkit.steer``) of the\n'
        "output's tensor at ``index``; ``steps=`` only some generation steps (0 = the prompt forward);\n"
        "``token_dim=`` overrides the model's token axis:\n\n"
        ">>> with capture(model) as cap:\n...     model(x)\n\n"
        "``pos``: where it sat (``offset``, ``gen_step``: see ``Event``); ``heads``: which heads."
    )
    assert describe("steps", doc) == "``steps=`` only some generation steps (0 = the prompt forward)."
    assert describe("token_dim", doc) == "``token_dim=`` overrides the model's token axis."
    assert describe("positions", doc).endswith("of the output's tensor at ``index``.")
    assert describe("pos", doc) == "Where it sat (``offset``, ``gen_step``: see ``Event``)."
    assert describe("heads", doc) == "Which heads."
    shared = "``rtol`` / ``atol``: the tolerances. ``grads=True`` keeps the gradient w.r.t. each output."
    assert describe("rtol", shared) == describe("atol", shared) == "The tolerances."
    assert describe("grads", shared) == "``grads=True`` keeps the gradient w.r.t. each output."


def test_typed_keywords_get_one_row_each_with_type_and_default():
    """``attribute(..., **options: Unpack[AttributeKeywords])``: the table has a row per declared keyword."""
    from hookkit.analyses.attribution.job import AttributeKeywords

    griffe, extensions = _griffe_extensions()
    pkg = griffe.load("hookkit", search_paths=[str(ROOT / "src")], extensions=extensions, docstring_parser="google")
    rows = {}
    for section in pkg.get_member("attribute").final_target.docstring.parsed:
        if section.kind.value in ("parameters", "other parameters"):
            rows.update({p.name.lstrip("*"): p for p in section.value})
    assert set(AttributeKeywords.__annotations__) <= set(rows) and "options" in rows
    assert str(rows["n_steps"].annotation) == "int" and rows["n_steps"].description.endswith("Default: `50`.")
