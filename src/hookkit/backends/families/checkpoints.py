"""``checkpoints``: reading a model's weights from a file, for the command line (``hookkit extract
--weights FILE``). Loads are strict: every key of the model and no other, each of the model's shape."""

from __future__ import annotations

from typing import Any

from hookkit.core.files import InvalidFile


class Checkpoints:
    """The interface; each framework's ``checkpoints`` module subclasses it as ``OPS``."""

    suffixes: tuple[str, ...] = (".safetensors",)  # the files ``load`` reads

    def load(self, model: Any, path: str) -> None:
        """Load the weights in ``path`` into ``model`` in place, strictly; an ``InvalidFile`` (a
        ``ValueError``) names the missing, unexpected or misshaped keys."""
        raise NotImplementedError(f"checkpoints.load is not implemented for this framework ({path})")


def check_keys(model_shapes: dict[str, tuple[int, ...]], file_shapes: dict[str, tuple[int, ...]], path: str) -> None:
    """Refuse a file whose keys or shapes are not the model's, naming the first few differences."""
    missing = [k for k in model_shapes if k not in file_shapes]
    unexpected = [k for k in file_shapes if k not in model_shapes]
    shapes = [
        f"{k} {list(file_shapes[k])} (the model has {list(s)})"
        for k, s in model_shapes.items()
        if k in file_shapes and tuple(file_shapes[k]) != tuple(s)
    ]
    problems = []
    for what, keys in (("missing", missing), ("unexpected", unexpected), ("of another shape", shapes)):
        if keys:
            more = f" and {len(keys) - 4} more" if len(keys) > 4 else ""
            problems.append(f"{len(keys)} {what}: {', '.join(keys[:4])}{more}")
    if problems:
        raise InvalidFile(f"{path}: its weights do not fit the model ({'; '.join(problems)})")
