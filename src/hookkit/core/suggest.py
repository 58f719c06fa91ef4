"""Close-match suggestions for error messages: one rule for layer names, recorded names, attributes
and keywords, so that every "did you mean" in hookkit reads alike."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def close_matches(word: str, candidates: Iterable[str], n: int = 5, cutoff: float = 0.5) -> list[str]:
    """Up to ``n`` of ``candidates`` closest to ``word``, best first (difflib's ratio >= ``cutoff``).
    A dotted name with none close (a wrong index, a wrong prefix) gets the candidates that end in
    its last component.

    >>> close_matches("h.7.attn", ["h.0.attn", "h.1.attn", "h.0.mlp"])
    ['h.1.attn', 'h.0.attn']
    """
    names = [c for c in candidates if c]
    close = difflib.get_close_matches(word, names, n=n, cutoff=cutoff)
    if not close:
        tail = word.rsplit(".", 1)[-1].strip("*?")
        close = [c for c in names if tail and c.rsplit(".", 1)[-1] == tail][:n]
    return close
