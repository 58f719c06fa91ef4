"""The direct logit attribution figure: layers (rows) x heads, then each block's MLP, coloured by the
contribution to the logit (diverging, centred on 0); the embeddings and biases in the title
(matplotlib, imported inside the function)."""

from __future__ import annotations

from typing import Any

import numpy as np

from hookkit.viz.figures import new_figure


def plot_logit_attribution(dla: Any, row: int | None = None, ax: Any = None) -> Any:
    """Draw ``dla`` (a ``LogitAttribution``) for batch row ``row`` (None: the batch mean); returns the Figure.

    >>> fig = hookkit.logit_attribution(gpt2, ids, tokens=answer).plot()   # doctest: +SKIP
    """
    v = dla.to_numpy()
    if row is not None and not -v.shape[1] <= row < v.shape[1]:
        raise IndexError(f"plot: row {row} is out of range (the batch has {v.shape[1]} rows)")
    v = v.mean(1) if row is None else v[:, row]
    at = {label: k for k, label in enumerate(dla.labels)}
    # a post-norm family (Gemma 2) has no per-head rows: each block's normed attention output instead
    heads = [[f"L{i}H{h}" for h in range(dla.n_heads)] if dla.n_heads else [f"{i}_attn_out"] for i in range(dla.n_layers)]
    grid = np.array([[v[at[h]] for h in heads[i]] + [v[at[f"{i}_mlp_out"]]] for i in range(dla.n_layers)])
    fig = ax.figure if ax is not None else new_figure(figsize=(1.5 + 0.5 * grid.shape[1], 1.0 + 0.4 * grid.shape[0]))
    ax = ax if ax is not None else fig.add_subplot(1, 1, 1)
    lim = float(np.abs(grid).max()) or 1.0
    im = ax.imshow(grid, aspect="auto", cmap="RdBu", vmin=-lim, vmax=lim)
    ax.set_xticks(range(grid.shape[1]), ([f"H{h}" for h in range(dla.n_heads)] if dla.n_heads else ["attn"]) + ["MLP"], fontsize=7)
    ax.set_yticks(range(dla.n_layers), [f"L{i}" for i in range(dla.n_layers)], fontsize=7)
    rest = ", ".join(
        f"{label} {v[k]:+.3g}"
        for k, label in enumerate(dla.labels)
        if not label.startswith("L") and not label.endswith(("mlp_out", "attn_out", "attn_bias"))
    )
    ax.set_title(f"direct logit attribution ({'mean over the batch' if row is None else f'row {row}'})", fontsize=8)
    ax.set_xlabel(rest, fontsize=7, wrap=True)
    fig.colorbar(im, ax=ax)
    return fig
