"""Files from elsewhere (a report folder, saved statistics, a features index), read as data: one
JSON reader with a size cap and errors that name the file."""

from __future__ import annotations

import json
import os
from typing import Any

from hookkit.core.errors import HookkitError


class InvalidFile(HookkitError, ValueError):
    """A file hookkit was asked to read (saved statistics, a report folder) is not what it should
    be: outside its folder, not valid JSON, a field of the wrong type or shape. Names file and field."""


MAX_JSON_BYTES = 64 << 20  # a summary of a 10k-layer model is ~5 MB


def read_json_file(path: Any, what: str) -> Any:
    """Parse a JSON file from elsewhere as data: refused with ``InvalidFile`` naming ``path`` when it
    is larger than ``MAX_JSON_BYTES``, not UTF-8, not JSON or nested too deeply. ``what`` says what
    the file is for ("a report", "a statistics file"). NaN and Infinity (json.dump's) are read.

    >>> read_json_file("run1/summary.json", "a report")   # doctest: +SKIP
    """
    size = os.path.getsize(path)
    if size > MAX_JSON_BYTES:
        raise InvalidFile(f"{path}: {size:,} bytes, more than the {MAX_JSON_BYTES:,} {what} reads from one JSON file")
    try:
        with open(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise InvalidFile(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise InvalidFile(f"{path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    except RecursionError:
        raise InvalidFile(f"{path}: JSON nested too deeply") from None
