"""Griffe extension for the API reference: a parameters table for every function and class.

hookkit's docstrings describe arguments in prose ("``layer``: a name, glob or layer object ...").
For an object whose docstring has no ``Args:`` section, this adds one, built from the signature
(every parameter, with its annotation and default, which the renderer shows as table columns) and,
for its description, the prose sentence that names it (```name``:`` or ```name=...```), so readers
get the table torch's and captum's references give, without a second copy of each description.
"""

from __future__ import annotations

import re

import griffe

_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Params)\s*:\s*$", re.MULTILINE)
_SKIP = {"self", "cls"}


def _prose(text: str) -> str:
    """The docstring without fenced code, on one line."""
    text = re.sub(r"```.*?```", " ", text, flags=re.DOTALL)
    return " ".join(line.strip() for line in text.splitlines() if not line.lstrip().startswith(">>>"))


def describe(name: str, text: str) -> str:
    """The sentence naming ``name`` as ```name``:`` (up to the next such name or the sentence's end),
    else the first sentence mentioning ```name=...```; '' when the prose never names it."""
    flat = _prose(text)
    m = re.search(rf"``{re.escape(name)}``\s*:\s*(.+?)(?=\s``[\w.]+``\s*:|(?<=[.;])\s|$)", flat)
    if m:
        return m.group(1).strip().rstrip(";")
    m = re.search(rf"([^.]*``{re.escape(name)}=[^`]*``[^.]*\.)", flat)
    return m.group(1).strip() if m else ""


def args_section(params: griffe.Parameters, text: str) -> str:
    lines = ["Args:"]
    for p in params:
        if p.name in _SKIP:
            continue
        star = "*" if p.kind is griffe.ParameterKind.var_positional else "**" if p.kind is griffe.ParameterKind.var_keyword else ""
        desc = describe(p.name, text) or "See the description above."
        lines.append(f"    {star}{p.name}: {desc.replace(chr(10), ' ')}")
    return "\n".join(lines) if len(lines) > 1 else ""


class ParameterTables(griffe.Extension):
    def on_function_instance(self, *, func: griffe.Function, **kwargs: object) -> None:
        self._add(func, func.parameters)

    def on_class_members(self, *, cls: griffe.Class, **kwargs: object) -> None:
        init = cls.members.get("__init__")
        if isinstance(init, griffe.Function) and not (init.docstring and init.docstring.value.strip()):
            self._add(cls, init.parameters)

    def _add(self, obj: griffe.Object, params: griffe.Parameters) -> None:
        doc = obj.docstring
        if doc is None or _SECTION.search(doc.value):
            return
        section = args_section(params, doc.value)
        if section:
            doc.value = doc.value.rstrip() + "\n\n" + section
