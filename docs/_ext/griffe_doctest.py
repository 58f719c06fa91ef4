"""Griffe extension for the API reference: hookkit's docstrings show calls as bare ``>>>`` lines.

Markdown would read ``>>> x`` as a nested quote and ``a["rows"][0]`` as a link; this wraps each run
of doctest lines (a ``>>>`` line and the lines after it up to a blank line) in a ```` ```pycon ````
fence, and drops ``# doctest:`` flags, before the docstring is rendered.
"""

from __future__ import annotations

import re

import griffe

_FLAGS = re.compile(r"\s*#\s*doctest:.*$")


def fence_doctests(text: str) -> str:
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(">>>") and not (out and out[-1].lstrip().startswith("```")):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}```pycon")
            while i < len(lines) and lines[i].strip():
                out.append(_FLAGS.sub("", lines[i]))
                i += 1
            out.append(f"{indent}```")
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, **kwargs: object) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
