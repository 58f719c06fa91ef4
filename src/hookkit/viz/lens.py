"""The logit lens figure: points (rows) x token positions (columns), coloured by the top token's
probability and labelled with that token (matplotlib, imported inside the function)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hookkit.core.validate import ArgumentTypeError, fail
from hookkit.viz.figures import new_figure


def _token_text(tokens: Any) -> Callable[[int], str]:
    if tokens is None:
        return str
    if callable(tokens):
        return lambda i: str(tokens(i))
    if isinstance(tokens, Sequence):
        return lambda i: str(tokens[i]) if 0 <= i < len(tokens) else str(i)
    fail("LensResult.plot", "tokens", "None, a list of strings indexed by token id, or a callable", tokens, kind=ArgumentTypeError)


def plot_lens(lens: Any, row: int = 0, tokens: Any = None, ax: Any = None) -> Any:
    """Draw ``lens`` (a ``LensResult``) for batch row ``row``; returns the Figure.

    >>> fig = hookkit.logit_lens(model, ids).plot(tokens=tokenizer.convert_ids_to_tokens)   # doctest: +SKIP
    """
    ids, probs = lens.top(1)
    if not 0 <= row < ids.shape[1]:
        raise IndexError(f"plot: row {row} is out of range (the batch has {ids.shape[1]} rows)")
    text = _token_text(tokens)
    p, t = probs[:, row, :, 0], ids[:, row, :, 0]
    fig = ax.figure if ax is not None else new_figure(figsize=(1.0 + 0.9 * p.shape[1], 0.9 + 0.4 * p.shape[0]))
    ax = ax if ax is not None else fig.add_subplot(1, 1, 1)
    im = ax.imshow(p, aspect="auto", cmap="Blues", vmin=0.0, vmax=1.0)
    for i in range(p.shape[0]):
        for j in range(p.shape[1]):
            ax.text(j, i, text(int(t[i, j]))[:8], ha="center", va="center", fontsize=7, color="white" if p[i, j] > 0.5 else "black")
    ax.set_yticks(range(len(lens.names)), lens.names, fontsize=7)
    ax.set_xticks(range(len(lens.positions)), [str(q) for q in lens.positions], fontsize=7)
    ax.set_xlabel("position")
    ax.set_title("logit lens: top token and its probability")
    fig.colorbar(im, ax=ax, fraction=0.03)
    return fig
