"""``Diff``: what ``hookkit.diff`` found: one ``Row`` per compared pair, the first divergence, the
calls that found no partner; shown as a table (plain text or rich), a plot, or a report section."""

from __future__ import annotations

import io
import math
import shutil
import sys
from dataclasses import asdict, dataclass
from typing import Any

#: a row is marked as "error grows here" when its relative error is this many times the largest before it in its pass
GROWTH = 4.0
#: ... and when that relative error reaches this share of the row's ``rtol`` (below it, it is rounding)
MEANINGFUL = 0.1


@dataclass
class Row:
    """One compared pair. ``layer`` / ``layer_b``: the layer's name in ``a`` / ``b``; ``call``: the call
    index (in ``a``; ``call_b`` in ``b``); ``phase``: "forward" (the output), "output-grad" (the
    gradient w.r.t. the output; ``part`` = which tensor of the output) or "param-grad" (``part`` = the
    parameter's name, in PyTorch's terms; for a forward row of ``local=True``, "input": the input ``b``
    computed for the layer, before ``a``'s replaced it); the errors (``max_abs``, ``max_rel``, ``rel_err``,
    ``cosine``, ``mismatch`` = share of elements beyond tolerance) under ``rtol`` / ``atol``;
    ``diverged``: any element beyond tolerance; ``grows``: the relative error jumps here;
    ``depth``: the position of the layer's forward call (the plot's x)."""

    phase: str
    layer: str
    layer_b: str
    call: int
    call_b: int
    part: str
    shape: tuple
    dtype: str
    dtype_b: str
    max_abs: float
    max_rel: float
    rel_err: float
    cosine: float
    mismatch: float
    rtol: float
    atol: float
    diverged: bool = False
    grows: bool = False
    depth: int = 0

    @property
    def where(self) -> str:
        """The row's label: the layer (the model itself is "(root)"), the parameter for param-grad rows,
        "(input)" for a local run's input rows."""
        name = self.layer or "(root)"
        if self.phase == "param-grad":
            return f"{name}.{self.part}"
        return f"{name} ({self.part})" if self.phase == "forward" and self.part else name

    def __str__(self) -> str:
        b = (
            f" (b: {self.layer_b or '(root)'}{'' if self.call_b == self.call else f' call {self.call_b}'})"
            if self.layer_b != self.layer
            else ""
        )
        return (
            f"{self.phase} of {self.where}{b}, call {self.call}: max abs {self.max_abs:.3g}, max rel {self.max_rel:.3g}, "
            f"rel err {self.rel_err:.3g}, cosine {self.cosine:.6f}, {100 * self.mismatch:.3g}% beyond rtol={self.rtol:g} atol={self.atol:g}"
        )


@dataclass
class Unpaired:
    """A call compared with nothing: ``side`` "a" or "b", the layer, its call, the phase and why."""

    side: str
    layer: str
    call: int
    phase: str
    reason: str


class Diff:
    """The result of ``hookkit.diff``.

    >>> d = hookkit.diff(a, b, x, backward=True)   # doctest: +SKIP
    >>> d.first                     # None, or the first diverging Row: .layer, .layer_b, .call, .phase, errors
    >>> d.rows                      # every compared pair: forward in execution order, then backward in the order it ran
    >>> d.unpaired                  # calls with no partner, and why
    >>> print(d); d.plot()
    """

    def __init__(self, rows: list[Row], unpaired: list[Unpaired], pairing: str, frameworks: tuple[str, str], local: bool = False):
        self.rows = rows
        self.local = local  # each leaf of b ran on a's inputs and a's output gradient
        self.unpaired = unpaired
        self.pairing = pairing  # "name", "map" or "structure"
        self.frameworks = frameworks
        _mark_growth(rows)

    @property
    def first(self) -> Row | None:
        """The first diverging row (forward rows come before backward ones), or None."""
        return next((r for r in self.rows if r.diverged), None)

    def first_in(self, phase: str) -> Row | None:
        """The first diverging row of one pass: "forward", "output-grad" or "param-grad"; "backward": either gradient."""
        phases = ("output-grad", "param-grad") if phase == "backward" else (phase,)
        return next((r for r in self.rows if r.diverged and r.phase in phases), None)

    def __bool__(self) -> bool:
        """True when the runs diverge somewhere."""
        return self.first is not None

    # -- the table --------------------------------------------------------------------------------
    def table(self) -> tuple[list[str], list[list[str]], list[str]]:
        """(header, one list of cells per row, footer lines), as printed."""
        header = ["#", "pass", "layer", "call", "shape", "dtype", "max abs", "max rel", "rel err", "cosine", "beyond tol", ""]
        first = self.first
        body = []
        for i, r in enumerate(self.rows):
            name = r.where if r.layer_b == r.layer else f"{r.where} ~ {r.layer_b or '(root)'}"
            dtype = r.dtype if r.dtype == r.dtype_b else f"{r.dtype}/{r.dtype_b}"
            mark = "<< first divergence" if r is first else ("^ grows" if r.grows else ("x" if r.diverged else ""))
            body.append(
                [
                    str(i),
                    r.phase,
                    name,
                    str(r.call),
                    "x".join(str(s) for s in r.shape) or "()",
                    dtype,
                    f"{r.max_abs:.3g}",
                    f"{r.max_rel:.3g}",
                    f"{r.rel_err:.3g}",
                    f"{r.cosine:.6f}",
                    f"{100 * r.mismatch:.3g}%",
                    mark,
                ]
            )
        return header, body, self._footer()

    def _footer(self) -> list[str]:
        fa, fb = self.frameworks
        how = "; local: each leaf of b ran on a's inputs and a's output gradient" if self.local else ""
        lines = [f"a: {fa}, b: {fb}; {len(self.rows)} pairs compared (paired by {self.pairing}{how})"]
        first = self.first
        lines.append(f"First divergence: {first}" if first else "No divergence: every pair within tolerance")
        back = self.first_in("backward")
        if first is not None and first.phase == "forward" and back is not None and not self.local:
            lines.append(
                f"The backward pass diverges too (first: {back.phase} of {back.where}): gradients read the forward "
                f"activations, which differ from {first.where} on; the forward divergence is the one to explain first"
            )
        if self.unpaired:
            shown = ", ".join(f"{u.side}:{u.layer or '(root)'}#{u.call}" for u in self.unpaired[:6])
            more = f" and {len(self.unpaired) - 6} more" if len(self.unpaired) > 6 else ""
            lines.append(f"Unpaired calls ({len(self.unpaired)}): {shown}{more}")
        return lines

    def __str__(self) -> str:
        header, body, footer = self.table()
        widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

        def fmt(cells: list[str]) -> str:
            return "  ".join(c.ljust(w) if i in (1, 2, 5, 11) else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

        rule = "=" * (sum(widths) + 2 * (len(widths) - 1))
        return "\n".join([rule, fmt(header), rule, *(fmt(b) for b in body), rule, *footer])

    def __rich__(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        header, body, footer = self.table()
        fa, fb = self.frameworks
        table = Table(title=f"diff: a ({fa}) vs b ({fb})", title_justify="left")
        for i, h in enumerate(header):
            table.add_column(h, justify="left" if i in (1, 2, 5, 11) else "right", no_wrap=i == 2)
        first = self.first
        for r, cells in zip(self.rows, body):
            style = "bold red" if r is first else ("yellow" if r.grows else ("red" if r.diverged else None))
            table.add_row(*cells, style=style)
        return Group(table, Text("\n".join(footer)))

    def _repr_html_(self) -> str:
        from hookkit.viz.display import diff_html  # lazy: HTML for notebooks, loaded when displayed

        return diff_html(self)

    def __repr__(self) -> str:
        if not sys.stdout.isatty():
            return str(self)
        from rich.console import Console

        buf = io.StringIO()
        Console(file=buf, force_terminal=True, width=max(100, shutil.get_terminal_size((120, 40)).columns)).print(self)
        return buf.getvalue().rstrip("\n")

    def print(self, file: Any = None) -> None:
        """Print the table: rich when ``file`` (default stdout) is a terminal, plain text otherwise."""
        file = sys.stdout if file is None else file
        if getattr(file, "isatty", lambda: False)():
            from rich.console import Console

            Console(file=file).print(self)
        else:
            print(str(self), file=file)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready): rows, unpaired calls, pairing, frameworks, the first divergence's index."""
        first = self.first
        return {
            "frameworks": list(self.frameworks),
            "pairing": self.pairing,
            "local": self.local,
            "first": None if first is None else self.rows.index(first),
            "rows": [{**asdict(r), "shape": list(r.shape)} for r in self.rows],
            "unpaired": [asdict(u) for u in self.unpaired],
        }

    # -- the plot ---------------------------------------------------------------------------------
    def plot(self, *, ax: Any = None, figsize: tuple[float, float] = (10, 3.5)) -> Any:
        """Relative error (``||a - b|| / ||a||``, log scale; exact agreement on the grey line below the
        smallest error) by depth (the forward position of each layer's call), forward and backward on
        one axis, the first divergence marked. Returns the
        matplotlib Figure; pyplot is not used (nothing is left open).

        >>> fig = d.plot(); fig.savefig("diff.png")   # doctest: +SKIP
        """
        if ax is None:
            from matplotlib.figure import Figure

            fig = Figure(figsize=figsize, layout="constrained")
            ax = fig.add_subplot()
        else:
            fig = ax.figure
        nonzero = [r.rel_err for r in self.rows if 0 < r.rel_err < math.inf]
        floor = min(nonzero) / 10 if nonzero else 1e-12  # exact agreement is drawn one decade below the smallest error
        styles = {
            "forward": ("C0", "o", "forward output"),
            "output-grad": ("C1", "s", "output gradient"),
            "param-grad": ("C2", "^", "parameter gradient"),
        }
        for phase, (color, marker, label) in styles.items():
            rows = [r for r in self.rows if r.phase == phase]
            if not rows:
                continue
            xs = [r.depth for r in rows]
            ys = [max(r.rel_err, floor) if math.isfinite(r.rel_err) else 1e6 for r in rows]
            if phase == "param-grad":
                ax.scatter(xs, ys, color=color, marker=marker, s=14, label=label)
            else:
                order = sorted(range(len(xs)), key=lambda i: xs[i])
                ax.plot([xs[i] for i in order], [ys[i] for i in order], color=color, marker=marker, ms=3, lw=1, label=label)
        first = self.first
        if first is not None:
            ax.axvline(first.depth, color="red", lw=1, ls="--", label=f"first divergence: {first.where} ({first.phase})")
        ax.set_yscale("log")
        ax.set_xlabel("depth (forward position of the layer's call)")
        ax.set_ylabel("relative error ||a-b||/||a||")
        ax.axhline(floor, color="0.7", lw=0.5)
        ax.annotate("exactly equal", (0, floor), xycoords=("axes fraction", "data"), fontsize=7, color="0.5", va="bottom")
        fa, fb = self.frameworks
        ax.set_title(f"diff: a ({fa}) vs b ({fb})")
        if self.rows:
            ax.legend(fontsize=8)
        return fig


def _mark_growth(rows: list[Row]) -> None:
    """Mark, per pass, the rows whose relative error exceeds GROWTH x the largest before them."""
    worst: dict[str, float] = {}
    for r in rows:
        key = "backward" if r.phase != "forward" else "forward"
        before = worst.get(key, 0.0)
        err = r.rel_err if math.isfinite(r.rel_err) else math.inf
        # a jump is shown only where the error means something against the dtypes' tolerance:
        # 6e-8 after 1e-9 in float32 is rounding, not growth
        r.grows = err > 0 and err > GROWTH * before and err > 1e-9 and err >= MEANINGFUL * r.rtol
        worst[key] = max(before, err)
