"""New figures that stay out of pyplot's global state.

A figure made with ``plt.figure`` is registered with pyplot: a notebook then shows it twice (once
as the value the function returned, once when the cell ends), and a long loop keeps every figure
alive. Figures here are plain ``matplotlib.figure.Figure`` objects: returned, shown once in
Jupyter, saved with ``savefig``, garbage-collected when dropped.

>>> fig, ax = subplots(figsize=(6, 3))   # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any


def new_figure(**kwargs: Any) -> Any:
    """A ``matplotlib.figure.Figure`` (constrained layout unless ``layout=`` says otherwise), not registered with pyplot."""
    from matplotlib.figure import Figure

    kwargs.setdefault("layout", "constrained")
    return Figure(**kwargs)


def subplots(nrows: int = 1, ncols: int = 1, **kwargs: Any) -> tuple[Any, Any]:
    """``plt.subplots`` without pyplot: ``(figure, axes)``; ``subplot_kw``/``gridspec_kw``/``squeeze``/``sharex``/``sharey`` go to the axes."""
    axes_kw = {k: kwargs.pop(k) for k in ("subplot_kw", "gridspec_kw", "squeeze", "sharex", "sharey") if k in kwargs}
    fig = new_figure(**kwargs)
    return fig, fig.subplots(nrows, ncols, **axes_kw)
