"""``Summary.memory_plan``: per-rank training memory of a summarized model under a parallel plan.

The summary (a dry run on a meta model, or a real one) gives the exact parameter count (tied
weights once), the bytes autograd saves for backward per layer call (``mode="train"``) and the
repeated blocks (a ``ModuleList``'s children of one type); the plan applies the sharding's rules:

- parameters ``P`` (``T`` trainable) at ``b_p`` bytes (``param_dtype``; default: the model's);
  gradients ``T x b_g`` (``grad_dtype``, default ``param_dtype``); master weights (``master_weights=True``:
  an fp32 copy, ``T x 4``); optimizer state ``T x k x b_s`` with ``k`` states per parameter
  (``adam``/``adamw`` 2, ``sgd-momentum``/``rmsprop``/``adagrad``/``lion`` 1, ``sgd`` 0) at ``b_s`` = 4
  with master weights, else ``b_p``;
- ``ddp``: everything replicated; ``zero1``: master weights and optimizer state divided by ``N``
  ranks; ``zero2``: gradients too; ``zero3``/``fsdp``: parameters too, plus one unit gathered at a
  time (its parameters, and its gradients before they are reduce-scattered): the largest of the
  repeated blocks and the rest of the model (the root unit: embeddings, head);
- activations: the summary's saved-for-backward bytes (its input is one rank's micro-batch), scaled
  by ``b_p`` over the itemsize the summary ran with; ``checkpointing=True`` or ``"blocks"``: each
  repeated block keeps only its first input (``prod(shape) x b_a``), its other inputs (shared by
  the blocks: masks, rotary tables) once, and one block's saves at a time (the one recomputed in
  the backward), beside what is saved outside the blocks (embeddings, head, loss);
- transient: the summary's largest transient (``optimizer=``: one layer call's input and output
  gradients), scaled like the activations.

DeepSpeed's model-state estimators, for comparison: ZeRO-2 ``4P + 16P/N``, ZeRO-3
``4 x largest layer + 18P/N`` (16-bit parameters and gradients, fp32 master weights and Adam).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hookkit.core.entry import public_entry
from hookkit.core.validate import ArgumentTypeError, check_choice, check_int, fail
from hookkit.observers.summary.inputs import dtype_name

if TYPE_CHECKING:  # annotations only: table.Summary.memory_plan calls this module
    from hookkit.observers.summary.table import Row, Summary

SHARDINGS = ("ddp", "zero1", "zero2", "zero3", "fsdp")
OPTIMIZERS = {"adam": 2, "adamw": 2, "sgd-momentum": 1, "rmsprop": 1, "adagrad": 1, "lion": 1, "sgd": 0}
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "uint8": 1}
PARTS = ("params", "gradients", "master_weights", "optimizer_state", "activations", "transient")


@dataclass
class MemoryPlan:
    """Per-rank bytes of one training step under a plan: ``parts`` (params, gradients,
    master_weights, optimizer_state, activations, transient), ``total``, the ``formulas`` each part
    came from, and the plan's settings.

    >>> plan = summary.memory_plan(ranks=8, sharding="zero3", checkpointing=True)   # doctest: +SKIP
    >>> plan.total / 2**30, plan.to_dict()["parts"]   # doctest: +SKIP
    """

    ranks: int
    sharding: str
    checkpointing: bool | str
    param_dtype: str
    grad_dtype: str
    master_weights: bool
    optimizer: str
    parts: dict[str, int]
    formulas: dict[str, str]
    total: int
    params: int
    trainable_params: int
    blocks: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def _cells(self) -> list[list[str]]:
        return [[name, gib(self.parts[name]), self.formulas[name]] for name in PARTS] + [["total per rank", gib(self.total), ""]]

    def _title(self) -> str:
        ck = {False: "no checkpointing", True: "checkpointing blocks", "blocks": "checkpointing blocks"}[self.checkpointing]
        return (
            f"Memory plan: {self.ranks} rank(s), {self.sharding}, {ck}, params {self.param_dtype}, grads {self.grad_dtype}, "
            f"{'fp32 master weights, ' if self.master_weights else ''}optimizer {self.optimizer}"
        )

    def __str__(self) -> str:
        rows = [["part", "per rank", "formula"], *self._cells()]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = [self._title()] + ["  ".join([r[0].ljust(widths[0]), r[1].rjust(widths[1]), r[2]]).rstrip() for r in rows]
        return "\n".join(lines + [f"Note: {n}" for n in self.notes])

    def __rich__(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        table = Table(title=self._title(), title_justify="left")
        for h, justify in (("part", "left"), ("per rank", "right"), ("formula", "left")):
            table.add_column(h, justify=justify)  # type: ignore[arg-type]
        for i, cells in enumerate(self._cells()):
            table.add_row(*cells, style="bold" if i == len(PARTS) else None)
        return Group(table, Text("\n".join(f"Note: {n}" for n in self.notes)))


def gib(n: int) -> str:
    """Bytes in GiB, or MiB / KiB below one GiB / MiB."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20)):
        if n >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n / 2**10:,.2f} KiB"


def blocks_of(rows: list[Row]) -> list[Row]:
    """The repeated blocks: the first-call rows named ``<prefix>.<i>`` of one type, the prefix with the most."""
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        m = re.fullmatch(r"(.*)\.(\d+)", r.name)
        if m and not r.static:
            groups.setdefault((m.group(1), r.type), []).append(r)
    best = max(groups.values(), key=lambda g: (len(g), sum(r.params for r in g if r.call == 0)), default=[])
    return best if len(best) >= 2 else []


def _itemsize(name: str, arg: str) -> int:
    size = ITEMSIZE.get(name)
    if size is None or "int" in name:
        fail("memory_plan", arg, f"a floating dtype among {', '.join(k for k in ITEMSIZE if 'int' not in k)}", name)
    return size


@public_entry("memory_plan")
def memory_plan(
    s: Summary,
    *,
    ranks: int = 1,
    sharding: str = "ddp",
    checkpointing: bool | str = False,
    param_dtype: Any = None,
    grad_dtype: Any = None,
    master_weights: bool = False,
    optimizer: str = "adam",
) -> MemoryPlan:
    """The plan of ``Summary.memory_plan`` (see the module's docstring for the formulas)."""
    _check(s, ranks, sharding, checkpointing, master_weights, optimizer)
    run_dtype = _run_dtype(s)
    run_size = ITEMSIZE[run_dtype]
    pd = dtype_name(param_dtype) if param_dtype is not None else run_dtype
    gd = dtype_name(grad_dtype) if grad_dtype is not None else pd
    bp, bg = _itemsize(pd, "param_dtype"), _itemsize(gd, "grad_dtype")
    blocks = blocks_of(s.all_rows)
    first = [r for r in blocks if r.call == 0]
    P = s.total_params
    unit = max([r.params for r in first] + [P - sum(r.params for r in first)]) if first else P
    parts, formulas = _model_states(
        P, s.trainable_params, ranks, sharding, (bp, bg, 4 if master_weights else bp), OPTIMIZERS[optimizer], master_weights, unit
    )
    notes: list[str] = []
    acts, formulas["activations"] = _activations(s, blocks, first, checkpointing, run_size, notes)
    scale = bp / run_size
    parts["activations"] = round(acts * scale)
    if scale != 1:
        formulas["activations"] += f" x {bp}/{run_size}"
    transient = (s.training or {}).get("transient")
    if transient is None:  # the summary's rule (memory.largest_transient) without the recurrent kernels' own
        transient = max((r.input_bytes + r.output_bytes for r in s.all_rows if r.leaf and r.finished), default=0)
    parts["transient"] = round(transient * scale)
    formulas["transient"] = "the largest leaf call's input + output gradients"
    if len(first) >= 2:
        notes.append(f"blocks: {len(first)} x {first[0].type} ({first[0].name.rpartition('.')[0]}.*), {first[0].params:,} params each")
    notes.append("activations are those of the summary's input, one rank's micro-batch; the allocator's fragmentation is not counted")
    return MemoryPlan(
        ranks=ranks,
        sharding=sharding,
        checkpointing=checkpointing,
        param_dtype=pd,
        grad_dtype=gd,
        master_weights=master_weights,
        optimizer=optimizer,
        parts=parts,
        formulas=formulas,
        total=sum(parts.values()),
        params=P,
        trainable_params=s.trainable_params,
        blocks=[r.name for r in first],
        notes=notes,
    )


def _check(s: Summary, ranks: Any, sharding: Any, checkpointing: Any, master_weights: Any, optimizer: Any) -> None:
    check_int(ranks, arg="ranks", low=1)
    check_choice(sharding, SHARDINGS, arg="sharding")
    check_choice(optimizer, tuple(OPTIMIZERS), arg="optimizer")
    if checkpointing not in (False, True, "blocks"):
        fail("memory_plan", "checkpointing", "False, True or 'blocks' (activation checkpointing of every repeated block)", checkpointing)
    if not isinstance(master_weights, bool):
        fail("memory_plan", "master_weights", "True or False", master_weights, kind=ArgumentTypeError)
    if not s.total_params:
        fail("memory_plan", "summary", "a summary of a model with parameters", s.model_type)


def _run_dtype(s: Summary) -> str:
    """The dtype the summary ran with: the model's most common floating dtype (a quantized parameter
    reports the dtype it computes in), else the one of its bytes per parameter."""
    floats = {k: n for k, n in s.param_dtypes.items() if k in ITEMSIZE and "int" not in k}
    if floats:
        return max(floats, key=floats.__getitem__)
    size = max(1, round(s.param_bytes / s.total_params))
    return next((k for k, v in ITEMSIZE.items() if v == size and "int" not in k), "float32")


def _model_states(
    P: int, T: int, n: int, sharding: str, sizes: tuple[int, int, int], k: int, master_weights: bool, unit: int
) -> tuple[dict[str, int], dict[str, str]]:
    """Parameters, gradients, master weights and optimizer state per rank, and their formulas;
    ``sizes``: bytes per parameter, gradient and optimizer state value."""
    bp, bg, bs = sizes
    shard_params = sharding in ("zero3", "fsdp")
    shard_grads = sharding in ("zero2", "zero3", "fsdp")
    shard_states = sharding != "ddp"
    per = f" / {n}" if shard_states else ""
    parts, formulas = {}, {}
    if shard_params:
        parts["params"] = math.ceil(P * bp / n) + unit * bp
        formulas["params"] = f"P x {bp} / {n} + one gathered unit ({unit:,} params) x {bp}"
    else:
        parts["params"] = P * bp
        formulas["params"] = f"P x {bp} (P = {P:,})"
    if shard_grads:
        parts["gradients"] = math.ceil(T * bg / n) + (unit * bg if shard_params else 0)
        formulas["gradients"] = f"T x {bg} / {n}" + (f" + one unit's gradients x {bg}" if shard_params else "")
    else:
        parts["gradients"] = T * bg
        formulas["gradients"] = f"T x {bg} (T = {T:,})"
    parts["master_weights"] = (math.ceil(T * 4 / n) if shard_states else T * 4) if master_weights else 0
    formulas["master_weights"] = f"T x 4{per}" if master_weights else "none"
    parts["optimizer_state"] = math.ceil(T * k * bs / n) if shard_states else T * k * bs
    formulas["optimizer_state"] = f"T x {k} states x {bs}{per}"
    return parts, formulas


def _activations(s: Summary, blocks: list[Row], first: list[Row], checkpointing: Any, run_size: int, notes: list[str]) -> tuple[int, str]:
    """Bytes saved for backward (at the summary's itemsize) under the checkpointing, and the formula."""
    saved = s.saved_bytes
    if not saved and not s.dry_run and s.training is None:
        notes.append("activations 0: the summary ran without mode='train' (no saved-for-backward bytes); summarize with mode='train'")
    if not checkpointing:
        return saved, "the summary's saved-for-backward bytes"
    if not blocks:
        notes.append("checkpointing: no repeated blocks found in the summary (named <list>.<i>, one type): no checkpointing applied")
        return saved, "the summary's saved-for-backward bytes"
    inside = sum(r.saved_bytes for r in blocks)
    kept = sum(_first_input_bytes(r, run_size) for r in blocks)
    shared = max(0, first[0].input_bytes - _first_input_bytes(first[0], run_size)) if first else 0
    biggest = max(r.saved_bytes for r in blocks)
    formula = f"saved outside {len(blocks)} blocks + each block's first input + one block's saves (recomputed)"
    return saved - inside + kept + shared + biggest, formula


def _first_input_bytes(r: Row, itemsize: int) -> int:
    """Bytes of a block call's first input tensor (the hidden states it would keep under checkpointing)."""
    return math.prod(r.input_shapes[0]) * itemsize if r.input_shapes else 0
