"""Warnings that point at the user's line: the first frame outside hookkit and the frameworks.

A warning raised inside a hook would otherwise name hookkit's own file (or torch's module call
machinery), which tells the user nothing about which of their lines triggered it.

>>> warn_user("exploding gradients ...", GradientWarning)   # doctest: +SKIP
"""

from __future__ import annotations

import sys
import warnings
from types import FrameType

from hookkit.core.registry import framework_roots

_ALWAYS_INTERNAL = frozenset({"hookkit", "contextlib", "functools", "importlib", "threading"})


def _internal_roots() -> frozenset[str]:
    return _ALWAYS_INTERNAL | framework_roots()


def user_stacklevel() -> int:
    """The ``stacklevel`` for ``warnings.warn`` called by this function's caller that names the first
    frame outside hookkit and the registered frameworks (1 when every frame is internal)."""
    roots = _internal_roots()
    frame: FrameType | None = sys._getframe(1)  # the caller of user_stacklevel, i.e. where warnings.warn is called
    level = 1
    while frame is not None:
        module = frame.f_globals.get("__name__", "") or ""
        if module.partition(".")[0] not in roots:
            return level
        frame = frame.f_back
        level += 1
    return 1


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn(message, category)`` attributed to the user's frame."""
    warnings.warn(message, category, stacklevel=user_stacklevel())
