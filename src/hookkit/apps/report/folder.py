"""Reading a report folder someone else may have written: its files are data, never instructions.

Every file read is confined to the folder (paths resolved, symlinks included; absolute paths and
``..`` refused), JSON is parsed with a size limit and checked against the schema the report needs,
and anything else is refused with an error naming the file and the field (``InvalidFile``). The
strings read here are escaped where the page is written (render.py).
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

from hookkit.core.files import MAX_JSON_BYTES, InvalidFile, read_json_file
from hookkit.core.validate import shown

__all__ = ["MAX_JSON_BYTES", "MAX_PNG_BYTES", "confined", "load_folder", "read_json"]

MAX_PNG_BYTES = 32 << 20
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def confined(folder: pathlib.Path, relative: Any, where: str) -> pathlib.Path:
    """``folder / relative`` when it names a path inside ``folder`` once resolved (symlinks too)."""
    if not isinstance(relative, str) or not relative:
        raise InvalidFile(f"{where} must be a file name relative to the folder; got {shown(relative)}")
    rel = pathlib.PurePath(relative)
    if rel.is_absolute() or relative.startswith(("/", "\\")) or (len(relative) > 1 and relative[1] == ":"):
        raise InvalidFile(f"{where} must be relative to the folder; got the absolute path {relative!r}")
    if ".." in rel.parts or ".." in pathlib.PureWindowsPath(relative).parts:
        raise InvalidFile(f"{where} must stay inside the folder; got {relative!r} (with '..')")
    root = folder.resolve()
    path = (folder / rel).resolve()
    if path != root and root not in path.parents:
        raise InvalidFile(f"{where}: {relative!r} leads outside the folder (to {str(path)!r}, through a symbolic link)")
    return path


def read_json(folder: pathlib.Path, name: str, expect: type | tuple[type, ...] = dict) -> Any:
    """The parsed ``folder/name`` (None when absent), refused when it is outside the folder, too
    large, not JSON, or not of type ``expect``."""
    p = folder / name
    if not p.exists() and not p.is_symlink():
        return None
    where = str(p)
    path = confined(folder, name, where)
    if not path.is_file():
        raise InvalidFile(f"{where}: not a regular file")
    data = read_json_file(path, "a report")
    if not isinstance(data, expect):
        kinds = expect if isinstance(expect, tuple) else (expect,)
        names: dict[type, str] = {dict: "an object", list: "an array"}
        want = " or ".join(names.get(k, k.__name__) for k in kinds)
        raise InvalidFile(f"{where}: the top level must be {want}; got {_json_kind(data)}")
    return data


def _json_kind(v: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(v), "a number")


# -- field checks: the error names the file and the field -------------------------------------------
def _field(where: str, field: str, value: Any, ok: bool, valid: str) -> Any:
    if not ok:
        raise InvalidFile(f"{where}: field {field!r} must be {valid}; got {shown(value)}")
    return value


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


_INT = (_is_int, "an int")
_BOOL = (lambda v: isinstance(v, bool), "true or false")
_STR = (lambda v: isinstance(v, str), "a string")
_SHAPES = (
    lambda v: isinstance(v, list) and all(isinstance(s, list) and all(_is_int(d) or isinstance(d, str) for d in s) for s in v),
    "an array of shapes (arrays of ints)",
)
_STRS = (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "an array of strings")
# Summary.to_dict()'s fields, as Summary.from_dict reads them back
_SUMMARY_FIELDS = {
    "model": _STR,
    "framework": _STR,
    "total_params": _INT,
    "trainable_params": _INT,
    "non_trainable_params": _INT,
    "masked_params": _INT,
    "effective_params": _INT,
    "param_bytes": _INT,
    "input_bytes": _INT,
    "activation_bytes": _INT,
    "total_mult_adds": _INT,
    "mult_adds_method": _STR,
    "forward_ran": _BOOL,
    "tied_parameters": _STRS,
    "notes": _STRS,
    "columns": _STRS,
    "error": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "saved_bytes": _INT,
    "training": (
        lambda v: (
            v is None or (isinstance(v, dict) and all(isinstance(k, str) and (_is_num(x) or isinstance(x, str)) for k, x in v.items()))
        ),
        "null or an object of numbers and strings (the training-memory estimate)",
    ),
}
_ROW_FIELDS = {
    "name": _STR,
    "type": _STR,
    "depth": (lambda v: _is_int(v) and v >= 0, "an int >= 0"),
    "call": (lambda v: _is_int(v) and v >= 0, "an int >= 0"),
    "calls": (lambda v: _is_int(v) and v >= 0, "an int >= 0"),
    "input_shapes": _SHAPES,
    "output_shapes": _SHAPES,
    "params": (lambda v: _is_int(v) and v >= 0, "an int >= 0"),
    "trainable": (lambda v: v is None or isinstance(v, (bool, str)), "true, false, a string or null"),
    "mult_adds": (lambda v: _is_int(v) and v >= 0, "an int >= 0"),
    "kernel_size": (lambda v: v is None or (isinstance(v, list) and all(_is_int(d) for d in v)), "an array of ints or null"),
    "tied": _STRS,
    "output_bytes": _INT,
    "input_bytes": _INT,
    "saved_bytes": _INT,
    "leaf": _BOOL,
    "finished": _BOOL,
    "failed": _BOOL,
    "static": _BOOL,
    "note": _STR,
}
_ROW_REQUIRED = ("name", "type", "depth", "call")


def check_summary(data: dict, where: str) -> dict:
    """``summary.json``: ``Summary.to_dict()``; every field the page reads, typed."""
    for key, (ok, valid) in _SUMMARY_FIELDS.items():
        if key in data:
            _field(where, key, data[key], ok(data[key]), valid)
    rows = data.get("rows", [])
    _field(where, "rows", rows, isinstance(rows, list), "an array of layer rows")
    for i, r in enumerate(rows):
        f = f"rows[{i}]"
        _field(where, f, r, isinstance(r, dict), "an object")
        for key in _ROW_REQUIRED:
            _field(where, f"{f}.{key}", r.get(key), key in r, _ROW_FIELDS[key][1])
        for key, value in r.items():
            if key in _ROW_FIELDS:
                ok, valid = _ROW_FIELDS[key]
                _field(where, f"{f}.{key}", value, ok(value), valid)
    return data


def check_dropout(data: dict, where: str) -> dict:
    """``dropout.json``: ``{layer: {"kind", "p", "fraction", "calls", "eval_fraction"}}``."""
    for name, d in data.items():
        _field(where, name, d, isinstance(d, dict), "an object")
        for key in ("p", "fraction"):
            if key in d:
                _field(where, f"{name}.{key}", d[key], _is_num(d[key]), "a number")
        for key in ("kind", "calls", "eval_fraction"):
            if key in d:
                _field(where, f"{name}.{key}", d[key], _is_scalar(d[key]), "a string or a number")
    return data


def check_meta(data: dict, where: str) -> dict:
    """``meta.json``: a flat object of strings and numbers (shown escaped in the page's header)."""
    for key, value in data.items():
        _field(where, key, value, _is_scalar(value), "a string, a number or a boolean")
    return data


MAX_SCALAR_POINTS = 1_000_000


def check_scalars(data: dict, where: str) -> dict[str, dict[str, list[float]]]:
    """``scalars.json`` (or ``report(scalars=...)``): ``{name: [values]}`` or ``{name: {"step": [...],
    "value": [...]}}``, numbers only; returned as ``{name: {"step", "value"}}``."""
    out = {}
    for name, value in data.items():
        steps: Any  # JSON values, checked field by field below
        values: Any
        _field(where, "(name)", name, isinstance(name, str) and bool(name), "a non-empty string")
        if isinstance(value, dict):
            steps, values = value.get("step"), value.get("value")
            _field(where, f"{name}.value", values, isinstance(values, list), "an array of numbers")
            _field(
                where, f"{name}.step", steps, isinstance(steps, list) and len(steps) == len(values), f"an array of {len(values)} numbers"
            )
        else:
            _field(where, name, value, isinstance(value, list), 'an array of numbers or {"step": [...], "value": [...]}')
            steps, values = list(range(len(value))), value
        _field(where, name, len(values), len(values) <= MAX_SCALAR_POINTS, f"at most {MAX_SCALAR_POINTS:,} points")
        for key, seq in (("step", steps), ("value", values)):
            _field(where, f"{name}.{key}", seq, all(_is_num(v) for v in seq), "numbers only")
        out[name] = {"step": [float(v) for v in steps], "value": [float(v) for v in values]}
    return out


def load_figures(folder: pathlib.Path, data: list, where: str) -> list[dict[str, Any]]:
    """``figures.json``: ``[{"file": "x.png", "section": "gradcam", "caption": "..."}]`` (optionally
    ``"section_title"`` and ``"section_intro"``); each file a PNG inside the folder."""
    out = []
    for i, f in enumerate(data):
        field = f"[{i}]"
        _field(where, field, f, isinstance(f, dict), 'an object {"file", "section", "caption"}')
        _field(where, field + ".section", f.get("section"), isinstance(f.get("section"), str) and f.get("section"), "a non-empty string")
        _field(where, field + ".caption", f.get("caption", ""), isinstance(f.get("caption", ""), str), "a string")
        path = confined(folder, f.get("file"), f"{where}: field '{field}.file'")
        if not path.is_file():
            raise InvalidFile(f"{where}: field '{field}.file': {f['file']!r} is not a file in the folder")
        if path.stat().st_size > MAX_PNG_BYTES:
            raise InvalidFile(f"{where}: field '{field}.file': {f['file']!r} is larger than {MAX_PNG_BYTES:,} bytes")
        png = path.read_bytes()
        if not png.startswith(_PNG_MAGIC):
            raise InvalidFile(f"{where}: field '{field}.file': {f['file']!r} is not a PNG image")
        item = {"section": f["section"], "caption": f.get("caption", ""), "file": f["file"], "png": png}
        for key in ("section_title", "section_intro"):  # the section's heading and explanation, from whoever wrote the figures
            if key in f:
                item[key] = _field(where, f"{field}.{key}", f[key], isinstance(f[key], str), "a string")
        out.append(item)
    return out


def load_folder(folder: pathlib.Path) -> dict[str, Any]:
    """What ``report(folder)`` shows: statistics, summary, dropout table, meta and figures, checked."""
    from hookkit.core.errors import HookkitError
    from hookkit.observers.stats import load_stats

    if not folder.is_dir():
        raise HookkitError(f"report(): {str(folder)!r} is not a folder of saved statistics")
    for name in [f"{kind}.{ext}" for kind in ("activation_stats", "gradient_stats", "weight_stats") for ext in ("json", "safetensors")]:
        if (folder / name).exists() or (folder / name).is_symlink():
            confined(folder, name, str(folder / name))  # statistics linked from outside the folder are refused too
    try:
        stats = load_stats(folder)
    except FileNotFoundError:
        stats = {}
    summary = read_json(folder, "summary.json")
    dropout = read_json(folder, "dropout.json")
    meta = read_json(folder, "meta.json")
    figures = read_json(folder, "figures.json", list)
    scalars = read_json(folder, "scalars.json")
    return {
        "activations": stats.get("activation_stats"),
        "gradients": stats.get("gradient_stats"),
        "weights": stats.get("weight_stats"),
        "summary": None if summary is None else check_summary(summary, str(folder / "summary.json")),
        "dropout": None if dropout is None else check_dropout(dropout, str(folder / "dropout.json")),
        "meta": None if meta is None else check_meta(meta, str(folder / "meta.json")),
        "figures": [] if figures is None else load_figures(folder, figures, str(folder / "figures.json")),
        "scalars": None if scalars is None else check_scalars(scalars, str(folder / "scalars.json")),
    }


def safe_output(path: pathlib.Path) -> pathlib.Path:
    """Refuse to write the page through a symbolic link planted in the folder (it could point at any
    file the user can write)."""
    if os.path.islink(path):
        raise InvalidFile(f"report(): {str(path)!r} is a symbolic link (to {os.readlink(path)!r}); refusing to write through it")
    return path
