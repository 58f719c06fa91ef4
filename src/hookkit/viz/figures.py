"""New figures that stay out of pyplot's global state.

A figure made with ``plt.figure`` is registered with pyplot: a notebook then shows it twice (once
as the value the function returned, once when the cell ends), and a long loop keeps every figure
alive. Figures here are plain ``matplotlib.figure.Figure`` objects: returned, shown once in
Jupyter, saved with ``savefig``, garbage-collected when dropped.

>>> fig, ax = subplots(figsize=(6, 3))   # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

_FIGURE_CLASS: Any = None


def _figure_class() -> Any:
    """``matplotlib.figure.Figure`` plus a PNG repr, made once (matplotlib is imported lazily)."""
    global _FIGURE_CLASS
    if _FIGURE_CLASS is None:
        from matplotlib.figure import Figure

        class HookkitFigure(Figure):
            """A Figure that shows itself in Jupyter even where pyplot was never imported (IPython's
            matplotlib display hook is installed only by pyplot)."""

            def _repr_png_(self) -> bytes:
                import io

                buf = io.BytesIO()
                self.savefig(buf, format="png", bbox_inches="tight")
                return buf.getvalue()

        HookkitFigure.__module__, HookkitFigure.__qualname__ = __name__, "HookkitFigure"
        _FIGURE_CLASS = HookkitFigure
    return _FIGURE_CLASS


def __getattr__(name: str) -> Any:  # ``hookkit.viz.figures.HookkitFigure``: pickled figures load again
    if name == "HookkitFigure":
        return _figure_class()
    raise AttributeError(name)


def new_figure(**kwargs: Any) -> Any:
    """A ``matplotlib.figure.Figure`` (constrained layout unless ``layout=`` says otherwise), not
    registered with pyplot, that shows itself once in Jupyter."""
    kwargs.setdefault("layout", "constrained")
    return _figure_class()(**kwargs)


def subplots(nrows: int = 1, ncols: int = 1, **kwargs: Any) -> tuple[Any, Any]:
    """``plt.subplots`` without pyplot: ``(figure, axes)``; ``subplot_kw``/``gridspec_kw``/``squeeze``/``sharex``/``sharey`` go to the axes."""
    axes_kw = {k: kwargs.pop(k) for k in ("subplot_kw", "gridspec_kw", "squeeze", "sharex", "sharey") if k in kwargs}
    fig = new_figure(**kwargs)
    return fig, fig.subplots(nrows, ncols, **axes_kw)
