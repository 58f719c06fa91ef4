"""The summary's data (``Row``, ``Summary``) and how it is shown: plain text, rich, JSON."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: plan.py imports this module's types the same way
    from hookkit.observers.summary.plan import MemoryPlan

COLUMNS = ("input_size", "output_size", "num_params", "params_percent", "kernel_size", "trainable", "mult_adds", "saved")
DEFAULT_COLUMNS = ("input_size", "output_size", "num_params", "trainable", "mult_adds")
HEADERS = {  # torchinfo's names: what its users read
    "input_size": "Input Shape",
    "output_size": "Output Shape",
    "num_params": "Param #",
    "params_percent": "Param %",
    "kernel_size": "Kernel Shape",
    "trainable": "Trainable",
    "mult_adds": "Mult-Adds",
    "saved": "Saved",
}


@dataclass
class Row:
    """One call of one layer. ``call`` is its index among the layer's calls in this forward.

    ``static`` rows come from the layer tree, not from a call: the parameters-only summary (no
    input) and layers hooks cannot see (scripted ones), whose ``note`` says why."""

    name: str
    type: str
    depth: int
    call: int
    calls: int = 1
    input_shapes: list[list[int]] = field(default_factory=list)
    output_shapes: list[list[int]] = field(default_factory=list)
    params: int = 0
    trainable: bool | str | None = None
    mult_adds: int = 0
    kernel_size: list[int] | None = None
    tied: list[str] = field(default_factory=list)
    output_bytes: int = 0
    input_bytes: int = 0
    #: bytes of the distinct storages autograd saved for backward during this call (its sublayers'
    #: included; each storage on the calls running when it was first saved; parameters not counted)
    saved_bytes: int = 0
    leaf: bool = True
    finished: bool = False
    failed: bool = False
    static: bool = False
    note: str = ""


@dataclass
class Summary:
    """The result of ``hookkit.summary``: rows to ``depth`` and totals (tied parameters counted once).

    >>> s = hookkit.summary(model, (1, 3, 32, 32))   # doctest: +SKIP
    >>> s.total_params, s.total_mult_adds, s.to_dict()["rows"][0]["output_shapes"]   # doctest: +SKIP
    """

    model_type: str
    framework: str
    rows: list[Row]
    all_rows: list[Row]
    total_params: int
    trainable_params: int
    param_bytes: int
    input_bytes: int
    activation_bytes: int
    total_mult_adds: int
    mult_adds_method: str
    tied: list[str]
    columns: tuple[str, ...] = DEFAULT_COLUMNS
    error: str | None = None
    #: parameter elements a pruning mask (``<name>_mask`` beside ``<name>_orig``) sets to zero
    masked_params: int = 0
    #: whether a forward ran (False: the parameters-only summary)
    forward_ran: bool = True
    notes: list[str] = field(default_factory=list)
    #: bytes of the distinct storages autograd saved for backward in the forward (``mode="train"``)
    saved_bytes: int = 0
    #: the training-memory estimate and the measured peak, in bytes (``mode="train", optimizer=...``):
    #: params, buffers, inputs, gradients, optimizer_state, saved, transient, estimate, measured, measured_how
    training: dict[str, Any] | None = None
    #: the forward ran on fake tensors: the model's weights hold no data (meta device; ``dryrun``)
    dry_run: bool = False
    #: parameters per dtype name (``{"bfloat16": 70_553_706_496}``), tied ones once
    param_dtypes: dict[str, int] = field(default_factory=dict)

    def memory_plan(
        self,
        ranks: int = 1,
        sharding: str = "ddp",
        *,
        checkpointing: bool | str = False,
        param_dtype: Any = None,
        grad_dtype: Any = None,
        master_weights: bool = False,
        optimizer: str = "adam",
    ) -> MemoryPlan:
        """Per-rank training memory of this model and input under a parallel plan: parameters,
        gradients, master weights, optimizer state and activations, as data and a table.

        ``ranks``: the data-parallel ranks. ``sharding``: "ddp" (all replicated), "zero1" (optimizer
        state and master weights divided among the ranks), "zero2" (gradients too), "zero3" or "fsdp"
        (parameters too, one unit gathered at a time). ``checkpointing``: False, True or "blocks"
        (activation checkpointing of every repeated block). ``param_dtype``, ``grad_dtype``: the dtypes
        trained in (default: the model's; gradients as parameters). ``master_weights``: an fp32 copy of
        the parameters. ``optimizer``: "adam", "adamw", "sgd-momentum", "rmsprop", "adagrad", "lion" or
        "sgd" (its states per parameter). The formulas: ``hookkit.observers.summary.plan``.

        >>> s = hookkit.summary(meta_llama, {"input_ids": (1, 4096)}, dtypes="long", mode="train")   # doctest: +SKIP
        >>> print(s.memory_plan(ranks=8, sharding="fsdp", checkpointing="blocks", param_dtype="bfloat16"))   # doctest: +SKIP
        """
        from hookkit.observers.summary.plan import memory_plan  # lazy: plan imports this module's types

        return memory_plan(
            self,
            ranks=ranks,
            sharding=sharding,
            checkpointing=checkpointing,
            param_dtype=param_dtype,
            grad_dtype=grad_dtype,
            master_weights=master_weights,
            optimizer=optimizer,
        )

    @property
    def non_trainable_params(self) -> int:
        return self.total_params - self.trainable_params

    @property
    def effective_params(self) -> int:
        """Parameters a pruning mask keeps (``total_params`` when nothing is pruned): torchinfo's count."""
        return self.total_params - self.masked_params

    def to_dict(self) -> dict[str, Any]:
        """Rows and totals as plain data (what ``--json`` prints)."""
        return {
            "model": self.model_type,
            "framework": self.framework,
            "rows": [dataclasses.asdict(r) for r in self.rows],
            "total_params": self.total_params,
            "trainable_params": self.trainable_params,
            "non_trainable_params": self.non_trainable_params,
            "masked_params": self.masked_params,
            "effective_params": self.effective_params,
            "tied_parameters": list(self.tied),
            "param_bytes": self.param_bytes,
            "input_bytes": self.input_bytes,
            "activation_bytes": self.activation_bytes,
            "total_mult_adds": self.total_mult_adds,
            "mult_adds_method": self.mult_adds_method,
            "forward_ran": self.forward_ran,
            "notes": list(self.notes),
            "error": self.error,
            "columns": list(self.columns),
            "saved_bytes": self.saved_bytes,
            "training": None if self.training is None else dict(self.training),
            "dry_run": self.dry_run,
            "param_dtypes": dict(self.param_dtypes),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Summary:
        """The summary a ``to_dict()`` describes (``summary.json``, ``--json``): the same table again.
        ``data``: that dict (read with ``json.load``; checked as data, nothing is executed).

        >>> hookkit.observers.summary.Summary.from_dict(json.load(open("summary.json")))   # doctest: +SKIP
        """
        known = {f.name for f in dataclasses.fields(Row)}
        rows = [Row(**{k: v for k, v in r.items() if k in known}) for r in data.get("rows", [])]
        columns = tuple(c for c in data.get("columns", DEFAULT_COLUMNS) if c in HEADERS) or DEFAULT_COLUMNS
        total = data.get("total_params", 0)
        return cls(
            model_type=data.get("model", ""),
            framework=data.get("framework", ""),
            rows=rows,
            all_rows=rows,
            total_params=total,
            trainable_params=data.get("trainable_params", total),
            param_bytes=data.get("param_bytes", 0),
            input_bytes=data.get("input_bytes", 0),
            activation_bytes=data.get("activation_bytes", 0),
            total_mult_adds=data.get("total_mult_adds", 0),
            mult_adds_method=data.get("mult_adds_method", ""),
            tied=list(data.get("tied_parameters", [])),
            columns=columns,
            error=data.get("error"),
            masked_params=data.get("masked_params", 0),
            forward_ran=data.get("forward_ran", True),
            notes=list(data.get("notes", [])),
            saved_bytes=data.get("saved_bytes", 0),
            training=data.get("training"),
            dry_run=data.get("dry_run", False),
            param_dtypes=dict(data.get("param_dtypes", {})),
        )

    def table(self) -> tuple[list[str], list[list[str]], list[str]]:
        """``(header, rows, footer lines)``: the cells of the text table, for other renderers (the HTML report)."""
        header, body = self._cells()
        return header, body, self._footer()

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    # -- display --------------------------------------------------------------------------------
    def _cells(self) -> tuple[list[str], list[list[str]]]:
        header = ["Layer (type)"] + [HEADERS[c] for c in self.columns]
        body = []
        for r in self.rows:
            label = f"{r.name} ({r.type})" if r.name else r.type
            if r.calls > 1:
                label += f" [call {r.call}]"
            if r.note:
                label += f" [{r.note}]"  # a short tag ("scripted", "to_static"); the footer says more
            body.append(["  " * r.depth + label] + [cell(r, c, self.total_params) for c in self.columns])
        return header, body

    def _footer(self) -> list[str]:
        lines = [
            f"Total params: {self.total_params:,}",
            f"Trainable params: {self.trainable_params:,}",
            f"Non-trainable params: {self.non_trainable_params:,}",
        ]
        if self.tied:
            lines.append("Tied parameters (counted once): " + "; ".join(self.tied))
        if self.masked_params:
            lines.append(
                f"Pruning masks zero {self.masked_params:,} of them: {self.effective_params:,} effective params "
                "(mult-adds count the dense kernels that run)"
            )
        if self.forward_ran:
            lines.append(f"Total mult-adds: {human(self.total_mult_adds)} ({self.total_mult_adds:,})")
        lines.append(f"mult-adds: {self.mult_adds_method}")
        if self.forward_ran:
            lines += [
                f"Input size: {mb(self.input_bytes)}",
                f"Activation memory: {mb(self.activation_bytes)} (sum of output tensor bytes of leaf layer calls)",
            ]
        lines.append(f"Parameter memory: {mb(self.param_bytes)}")
        if "saved" in self.columns or self.saved_bytes:
            lines.append(
                f"Saved for backward: {mb(self.saved_bytes)} (distinct storages autograd keeps from the forward "
                "to the backward, parameters not counted; each on the calls running when first saved)"
            )
        if self.training:
            lines += training_lines(self.training)
        lines += [f"Note: {n}" for n in self.notes]
        if self.error:
            lines.append(f"FORWARD FAILED: {self.error}")
        return lines

    def __str__(self) -> str:
        header, body = self._cells()
        widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

        def fmt(cells: list[str]) -> str:
            first = cells[0].ljust(widths[0])
            return "  ".join([first] + [c.rjust(w) for c, w in zip(cells[1:], widths[1:])]).rstrip()

        rule = "=" * (sum(widths) + 2 * (len(widths) - 1))
        return "\n".join([rule, fmt(header), rule, *(fmt(b) for b in body), rule, *self._footer(), rule])

    def __rich__(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        header, body = self._cells()
        table = Table(title=f"{self.model_type} ({self.framework})", title_justify="left")
        for i, h in enumerate(header):
            table.add_column(h, justify="left" if i == 0 else "right", no_wrap=i == 0)
        for r, cells in zip(self.rows, body):
            table.add_row(*cells, style="bold red" if r.failed else ("dim" if r.static else None))
        return Group(table, Text("\n".join(self._footer())))

    def __repr__(self) -> str:
        return self._render_rich() if sys.stdout.isatty() else str(self)

    def _repr_html_(self) -> str:
        """The table in a notebook: one row per call, no wrapped lines, failed rows in red."""
        from hookkit.viz.html import html_table

        header, body, footer = self.table()
        styles = ["color:#c00;font-weight:bold" if r.failed else ("color:#888" if r.static else None) for r in self.rows]
        body = [[_em_indent(cells[0]), *cells[1:]] for cells in body]  # HTML collapses the text table's spaces
        return html_table(header, body, caption=f"{self.model_type} ({self.framework})", footer=footer, row_styles=styles)

    def _render_rich(self) -> str:
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


def _em_indent(label: str) -> str:
    stripped = label.lstrip(" ")
    return "\u2003" * ((len(label) - len(stripped)) // 2) + stripped


def cell(r: Row, column: str, total_params: int) -> str:
    """One table cell; ``--`` where there is nothing to show (torchinfo's convention)."""
    if column not in _CELLS:
        raise AssertionError(column)
    return _CELLS[column](r, total_params)


def _output_size(r: Row, total_params: int) -> str:
    if r.failed:
        return "FAILED"
    if r.static:
        return "--"
    return shapes(r.output_shapes) if r.finished else "(unfinished)"


def _num_params(r: Row, total_params: int) -> str:
    if r.call > 0:
        return "(recursive)" if r.params else "--"
    text = f"{r.params:,}" if r.params else "--"
    return text + " (tied)" if r.tied else text


#: column -> its cell, from the row and the model's parameter count
_CELLS: dict[str, Callable[[Row, int], str]] = {
    "input_size": lambda r, total: shapes(r.input_shapes),
    "output_size": _output_size,
    "num_params": _num_params,
    "params_percent": lambda r, total: f"{100.0 * r.params / total:.2f}%" if r.params and total and r.call == 0 else "--",
    "kernel_size": lambda r, total: str(r.kernel_size) if r.kernel_size else "--",
    "trainable": lambda r, total: "--" if r.trainable is None else str(r.trainable),
    "mult_adds": lambda r, total: f"{r.mult_adds:,}" if r.mult_adds else "--",
    "saved": lambda r, total: mb(r.saved_bytes) if r.saved_bytes else "--",
}


def training_lines(t: dict[str, Any]) -> list[str]:
    """The footer's training-memory lines: the estimate's parts, the measured peak, why they differ."""
    est, measured = t.get("estimate", 0), t.get("measured", 0)
    diff = f"{100.0 * (est - measured) / measured:+.1f}%" if measured else "n/a"
    if measured is None:  # a dry run: nothing real ran
        peak = f"Measured peak of one training step: {t.get('measured_how', 'not measured')}"
    else:
        peak = f"Measured peak of one training step: {mb(measured)} ({diff} estimate vs measured; {t.get('measured_how', '')})"
    return [
        f"Training memory estimate: {mb(est)} = params {mb(t.get('params', 0))} + buffers {mb(t.get('buffers', 0))} "
        f"+ inputs {mb(t.get('inputs', 0))} + gradients {mb(t.get('gradients', 0))} + optimizer state {mb(t.get('optimizer_state', 0))} "
        f"+ saved activations {mb(t.get('saved', 0))} + largest transient {mb(t.get('transient', 0))}",
        peak,
        "  (largest transient: what one layer call holds at once beyond those, the gradients of its input and output, or "
        "for recurrent layers what the kernel the framework runs for them allocates; the estimate adds every part as "
        "if all were alive at once, while in the step saved activations are freed as the backward reaches them and "
        "the allocator's temporaries come and go)",
    ]


def shapes(shape_list: list[list[int]]) -> str:
    if not shape_list:
        return "--"
    text = str(list(shape_list[0]))
    return text + f" +{len(shape_list) - 1}" if len(shape_list) > 1 else text


def human(n: float) -> str:
    for unit in ("", "K", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.3g}{unit}"
        n /= 1000
    return f"{n:.3g}P"


def mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"
