"""``hookkit.summary``: a model's layer table from one forward, on PyTorch and Paddle.

>>> s = hookkit.summary(model, (1, 3, 224, 224))   # doctest: +SKIP
>>> print(s); s.total_params, s.total_mult_adds   # doctest: +SKIP

Every layer gets a forward_pre and a forward observer (through the router, removed afterwards,
also when the forward raises). Rows follow the calls: a layer called three times gives three
rows; depth is the nesting of calls. Tied parameters are counted once and flagged.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hookkit.backends import Backend, backend_for
from hookkit.core import router
from hookkit.core.errors import UnsupportedModel
from hookkit.core.select import ALL, select
from hookkit.observers.flops import Counter, counter_for

COLUMNS = ("input_size", "output_size", "num_params", "params_percent", "kernel_size", "trainable", "mult_adds")
DEFAULT_COLUMNS = ("input_size", "output_size", "num_params", "trainable", "mult_adds")
_HEADERS = {
    "input_size": "Input Shape",
    "output_size": "Output Shape",
    "num_params": "Param #",
    "params_percent": "Param %",
    "kernel_size": "Kernel",
    "trainable": "Trainable",
    "mult_adds": "Mult-Adds",
}
_MODES = ("eval", "train", "same")
_DTYPE_ALIASES = {"long": "int64", "int": "int64", "float": "float32", "double": "float64", "half": "float16", "bool": "bool"}


@dataclass
class Row:
    """One call of one layer. ``call`` is its index among the layer's calls in this forward."""

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
    leaf: bool = True
    finished: bool = False
    failed: bool = False


@dataclass
class Summary:
    """The result of ``hookkit.summary``: rows to ``depth`` and totals (tied parameters counted once)."""

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

    @property
    def non_trainable_params(self) -> int:
        return self.total_params - self.trainable_params

    def to_dict(self) -> dict[str, Any]:
        """Rows and totals as plain data (what ``--json`` prints)."""
        return {
            "model": self.model_type,
            "framework": self.framework,
            "rows": [dataclasses.asdict(r) for r in self.rows],
            "total_params": self.total_params,
            "trainable_params": self.trainable_params,
            "non_trainable_params": self.non_trainable_params,
            "tied_parameters": list(self.tied),
            "param_bytes": self.param_bytes,
            "input_bytes": self.input_bytes,
            "activation_bytes": self.activation_bytes,
            "total_mult_adds": self.total_mult_adds,
            "mult_adds_method": self.mult_adds_method,
            "error": self.error,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    # -- display --------------------------------------------------------------------------------
    def _cells(self) -> tuple[list[str], list[list[str]]]:
        header = ["Layer (type)"] + [_HEADERS[c] for c in self.columns]
        body = []
        for r in self.rows:
            label = f"{r.name} ({r.type})" if r.name else r.type
            if r.calls > 1:
                label += f" [call {r.call}]"
            cells = ["  " * r.depth + label]
            for c in self.columns:
                cells.append(_cell(r, c, self.total_params))
            body.append(cells)
        return header, body

    def _footer(self) -> list[str]:
        lines = [
            f"Total params: {self.total_params:,}",
            f"Trainable params: {self.trainable_params:,}",
            f"Non-trainable params: {self.non_trainable_params:,}",
        ]
        if self.tied:
            lines.append("Tied parameters (counted once): " + "; ".join(self.tied))
        lines += [
            f"Total mult-adds: {_human(self.total_mult_adds)} ({self.total_mult_adds:,})",
            f"mult-adds: {self.mult_adds_method}",
            f"Input size: {_mb(self.input_bytes)}",
            f"Activation memory: {_mb(self.activation_bytes)} (sum of output tensor bytes of leaf layer calls)",
            f"Parameter memory: {_mb(self.param_bytes)}",
        ]
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
        lines = [rule, fmt(header), rule, *(fmt(b) for b in body), rule, *self._footer(), rule]
        return "\n".join(lines)

    def __rich__(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        header, body = self._cells()
        table = Table(title=f"{self.model_type} ({self.framework})", title_justify="left")
        for i, h in enumerate(header):
            table.add_column(h, justify="left" if i == 0 else "right", no_wrap=i == 0)
        for r, cells in zip(self.rows, body):
            table.add_row(*cells, style="bold red" if r.failed else None)
        return Group(table, Text("\n".join(self._footer())))

    def __repr__(self) -> str:
        if sys.stdout.isatty():
            return self._render_rich()
        return str(self)

    def _render_rich(self) -> str:
        import io

        from rich.console import Console

        buf = io.StringIO()
        Console(file=buf, force_terminal=True, width=max(100, _term_width())).print(self)
        return buf.getvalue().rstrip("\n")

    def print(self, file: Any = None) -> None:
        """Print the table: rich when ``file`` (default stdout) is a terminal, plain text otherwise."""
        file = sys.stdout if file is None else file
        if getattr(file, "isatty", lambda: False)():
            from rich.console import Console

            Console(file=file).print(self)
        else:
            print(str(self), file=file)


def _term_width() -> int:
    import shutil

    return shutil.get_terminal_size((120, 40)).columns


def _cell(r: Row, column: str, total_params: int) -> str:
    if column == "input_size":
        return _shapes(r.input_shapes)
    if column == "output_size":
        if r.failed:
            return "FAILED"
        return _shapes(r.output_shapes) if r.finished else "(unfinished)"
    if column == "num_params":
        if r.call > 0:
            return "(same)" if r.params else "--"
        text = f"{r.params:,}" if r.params else "--"
        return text + " (tied)" if r.tied else text
    if column == "params_percent":
        return f"{100.0 * r.params / total_params:.2f}%" if r.params and total_params and r.call == 0 else "--"
    if column == "kernel_size":
        return str(r.kernel_size) if r.kernel_size else "--"
    if column == "trainable":
        return "--" if r.trainable is None else str(r.trainable)
    if column == "mult_adds":
        return f"{r.mult_adds:,}" if r.mult_adds else "--"
    raise AssertionError(column)


def _shapes(shapes: list[list[int]]) -> str:
    if not shapes:
        return "--"
    text = str(list(shapes[0]))
    return text + f" +{len(shapes) - 1}" if len(shapes) > 1 else text


def _human(n: float) -> str:
    for unit in ("", "K", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.3g}{unit}"
        n /= 1000
    return f"{n:.3g}P"


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


# -- inputs ---------------------------------------------------------------------------------------
def _dtype_name(dtype: Any) -> str:
    name = str(dtype).replace("torch.", "").replace("paddle.", "").lower()
    name = _DTYPE_ALIASES.get(name, name)
    valid = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")
    if name not in valid:
        raise ValueError(f"dtypes: unknown dtype {dtype!r}; valid: {', '.join(valid)} (or long, int, float, double, half)")
    return name


def _is_shape(obj: Any) -> bool:
    return isinstance(obj, (tuple, list)) and all(isinstance(s, int) and not isinstance(s, bool) for s in obj)


def _make_tensor(be: Backend, shape: Sequence[int], dtype: str, device: Any, seed: int) -> Any:
    import numpy as np

    if any(s <= 0 for s in shape):
        raise ValueError(f"input_size: every dimension must be positive; got {tuple(shape)}")
    np_dtype = "float32" if dtype == "bfloat16" else dtype
    if np.dtype(np_dtype).kind == "f":
        array = np.random.default_rng(seed).standard_normal(tuple(shape)).astype(np_dtype)
    else:  # index-like inputs (token ids, masks): zeros are valid for every vocabulary
        array = np.zeros(tuple(shape), dtype=np_dtype)
    t = be.from_numpy(array)
    if dtype == "bfloat16":
        t = t.to(__import__("torch").bfloat16) if be.name == "torch" else t.astype("bfloat16")
    return be.to(t, device) if device is not None else t


def _build_inputs(model: Any, be: Backend, input_size: Any, input_data: Any, dtypes: Any, device: Any) -> tuple[tuple, dict]:
    if input_size is None and input_data is None:
        raise ValueError("summary() needs input_size=(1, 3, 224, 224) (or a list / dict of shapes) or input_data=tensor(s)")
    if input_size is not None and input_data is not None:
        raise ValueError("summary(): give input_size or input_data, not both")
    if input_data is not None:
        move = (lambda t: be.to(t, device)) if device is not None else (lambda t: t)
        if be.is_tensor(input_data):
            return (move(input_data),), {}
        if isinstance(input_data, dict):
            return (), {k: move(v) if be.is_tensor(v) else v for k, v in input_data.items()}
        if isinstance(input_data, (list, tuple)):
            return tuple(move(v) if be.is_tensor(v) else v for v in input_data), {}
        raise TypeError(
            f"input_data: expected a tensor, a list/tuple of tensors or a dict of keyword tensors; got {type(input_data).__name__}"
        )

    if _is_shape(input_size):
        keys, shapes = None, [tuple(input_size)]
    elif isinstance(input_size, dict) and all(_is_shape(v) for v in input_size.values()):
        keys, shapes = list(input_size), [tuple(v) for v in input_size.values()]
    elif isinstance(input_size, (list, tuple)) and input_size and all(_is_shape(s) for s in input_size):
        keys, shapes = None, [tuple(s) for s in input_size]
    else:
        raise TypeError(f"input_size: expected a shape like (1, 3, 224, 224), a list of shapes or a dict of shapes; got {input_size!r}")
    if dtypes is None:
        names = ["float32"] * len(shapes)
    else:
        seq = [dtypes] if isinstance(dtypes, str) or not isinstance(dtypes, (list, tuple)) else list(dtypes)
        if len(seq) == 1:
            seq = seq * len(shapes)
        if len(seq) != len(shapes):
            raise ValueError(f"dtypes: got {len(seq)} dtypes for {len(shapes)} inputs; give one for all or one per input")
        names = [_dtype_name(d) for d in seq]
    if device is None:
        params = be.parameters(model)
        device = be.device_of(params[0]) if params else None
    tensors = [_make_tensor(be, s, d, device, i) for i, (s, d) in enumerate(zip(shapes, names))]
    if keys is not None:
        return (), dict(zip(keys, tensors))
    return tuple(tensors), {}


# -- collection -----------------------------------------------------------------------------------
def _tensors(obj: Any, is_tensor: Any, depth: int = 0) -> list[Any]:
    """Tensors inside nested tuples/lists/dicts (Hugging Face outputs are dicts), without rebuilding them."""
    if is_tensor(obj):
        return [obj]
    if depth > 4:
        return []
    if isinstance(obj, (tuple, list)):
        return [t for o in obj for t in _tensors(o, is_tensor, depth + 1)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors(o, is_tensor, depth + 1)]
    return []


def _kernel_size(layer: Any) -> list[int] | None:
    k = getattr(layer, "kernel_size", None) or getattr(layer, "_kernel_size", None)
    if isinstance(k, int) and not isinstance(k, bool):
        return [k]
    if isinstance(k, (tuple, list)) and k and all(isinstance(v, int) for v in k):
        return [int(v) for v in k]
    return None


class _Recorder:
    """The forward_pre / forward observers: one Row per call, a stack of open calls."""

    def __init__(self, be: Backend, counter: Counter, leaf_ids: set[int]):
        self.be, self.counter, self.leaf_ids = be, counter, leaf_ids
        self.rows: list[Row] = []
        self.stack: list[tuple[Row, int]] = []  # (open row, counter total at its pre event)

    def pre(self, ev: router.Event) -> None:
        be = self.be
        shapes = [list(be.shape(t)) for t in _tensors((ev.args, ev.kwargs), be.is_tensor)]
        row = Row(
            name=ev.name,
            type=type(ev.layer).__name__,
            depth=len(self.stack),
            call=ev.call,
            input_shapes=shapes,
            kernel_size=_kernel_size(ev.layer),
            leaf=id(ev.layer) in self.leaf_ids,
        )
        self.rows.append(row)
        self.stack.append((row, self.counter.total()))

    def post(self, ev: router.Event) -> None:
        be = self.be
        self.counter.after_call(ev.layer, ev.args, ev.kwargs, ev.output)
        # find this call's open row; rows above it belong to calls whose exceptions were swallowed
        for i in range(len(self.stack) - 1, -1, -1):
            row, start = self.stack[i]
            if row.name == ev.name and row.call == ev.call:
                del self.stack[i:]
                break
        else:
            return
        outs = _tensors(ev.output, be.is_tensor)
        row.output_shapes = [list(be.shape(t)) for t in outs]
        row.output_bytes = sum(be.numel(t) * be.itemsize(t) for t in outs)
        row.mult_adds = self.counter.total() - start
        row.finished = True


def _param_info(model: Any, be: Backend) -> tuple[dict[int, list[str]], list[Any]]:
    """Owners of every parameter (``layer.param`` names) and the unique parameters."""
    owners: dict[int, list[str]] = {}
    unique: dict[int, Any] = {}
    for lname, layer in be.named_layers(model):
        for pname, p in be.named_parameters(layer, recurse=False):
            owners.setdefault(id(p), []).append(f"{lname}.{pname}" if lname else pname)
            unique.setdefault(id(p), p)
    for p in be.parameters(model):  # parameters outside named layers, if a framework has any
        unique.setdefault(id(p), p)
        owners.setdefault(id(p), ["?"])
    return owners, list(unique.values())


def _layer_params(layer: Any, be: Backend) -> tuple[int, bool | str | None]:
    seen: dict[int, Any] = {}
    for p in be.parameters(layer):
        seen.setdefault(id(p), p)
    if not seen:
        return 0, None
    n = sum(be.numel(p) for p in seen.values())
    flags = {be.requires_grad(p) for p in seen.values()}
    trainable: bool | str = "Partial" if len(flags) > 1 else flags.pop()
    return n, trainable


def summary(
    model: Any,
    input_size: Any = None,
    input_data: Any = None,
    *,
    depth: int = 3,
    columns: Sequence[str] = DEFAULT_COLUMNS,
    dtypes: Any = None,
    mode: str = "eval",
    device: Any = None,
) -> Summary:
    """Run one forward without gradients and return the layer table with totals.

    ``input_size``: a shape, a list of shapes or a dict of keyword shapes; ``dtypes``: one per input
    or one for all (``"long"`` for token ids). ``input_data``: a tensor, a list/tuple of tensors or a
    dict of keyword tensors. ``mode``: "eval" (default), "train" or "same"; the model's own modes
    are restored afterwards. When the forward raises, the rows that ran are printed and the error is
    re-raised with the failing layer named (its ``hookkit_summary`` attribute holds the rows).

    >>> s = hookkit.summary(gpt2, {"input_ids": (1, 16)}, dtypes="long")   # doctest: +SKIP
    >>> print(s); s.total_params, s.total_mult_adds   # doctest: +SKIP
    """
    result, exc = _summarize(model, input_size, input_data, depth=depth, columns=columns, dtypes=dtypes, mode=mode, device=device)
    if exc is not None:
        result.print()
        raise exc
    return result


def _summarize(
    model: Any, input_size: Any, input_data: Any, *, depth: int, columns: Sequence[str], dtypes: Any, mode: str, device: Any
) -> tuple[Summary, BaseException | None]:
    be = backend_for(model)
    if not be.is_layer(model):
        raise UnsupportedModel(f"summary() needs a model (torch.nn.Module or paddle.nn.Layer); got {type(model).__name__}")
    if mode not in _MODES:
        raise ValueError(f"mode: expected one of {', '.join(map(repr, _MODES))}; got {mode!r}")
    columns = tuple(columns)
    bad = [c for c in columns if c not in COLUMNS]
    if bad:
        raise ValueError(f"columns: unknown {', '.join(map(repr, bad))}; valid: {', '.join(COLUMNS)}")
    if not isinstance(depth, int) or depth < 0:
        raise ValueError(f"depth: expected an int >= 0; got {depth!r}")
    args, kwargs = _build_inputs(model, be, input_size, input_data, dtypes, device)

    named = select(model, ALL)
    leaf_ids = {id(m) for _, m in named if not be.children(m)}
    counter = counter_for(be)
    rec = _Recorder(be, counter, leaf_ids)
    modes = [(m, be.is_training(m)) for _, m in named]
    exc: BaseException | None = None
    handles = [router.attach(model, named, "forward_pre", rec.pre, router.OBSERVER)]
    try:
        handles.append(router.attach(model, named, "forward", rec.post, router.OBSERVER))
        if mode != "same":
            be.set_training(model, mode == "train")
        with be.no_grad(), counter:
            model(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - re-raised by summary() after the partial table
        exc = e
    finally:
        for h in handles:
            h.remove()
        be.set_training(model, modes[0][1])  # framework-wide state (Paddle's tracer), then each layer
        for m, training in modes:
            m.training = training

    result = _assemble(model, be, named, rec, counter, depth, columns, args, kwargs)
    if exc is not None:
        _attribute(exc, rec, result)
    return result, exc


def _assemble(
    model: Any, be: Backend, named: list, rec: _Recorder, counter: Counter, depth: int, columns: tuple, args: tuple, kwargs: dict
) -> Summary:
    owners, unique = _param_info(model, be)
    tied_ids = {pid for pid, names in owners.items() if len(names) > 1}
    by_name = dict(named)
    layer_info: dict[str, tuple[int, Any, list[str]]] = {}
    calls: dict[str, int] = {}
    for row in rec.rows:
        calls[row.name] = calls.get(row.name, 0) + 1
    for row in rec.rows:
        if row.name not in layer_info:
            layer = by_name[row.name]
            n, trainable = _layer_params(layer, be)
            tied = []
            for pname, p in be.named_parameters(layer, recurse=False):
                if id(p) in tied_ids:
                    me = f"{row.name}.{pname}" if row.name else pname
                    tied.append(f"{pname} = " + ", ".join(o for o in owners[id(p)] if o != me))
            layer_info[row.name] = (n, trainable, tied)
        row.params, row.trainable, row.tied = layer_info[row.name]
        row.calls = calls[row.name]
    tied_lines = [" = ".join(owners[pid]) for pid in owners if pid in tied_ids]
    inputs = _tensors((args, kwargs), be.is_tensor)
    rows = [r for r in rec.rows if r.depth <= depth]
    root_done = rec.rows and rec.rows[0].finished
    return Summary(
        model_type=type(model).__name__,
        framework=be.name,
        rows=rows,
        all_rows=list(rec.rows),
        total_params=sum(be.numel(p) for p in unique),
        trainable_params=sum(be.numel(p) for p in unique if be.requires_grad(p)),
        param_bytes=sum(be.numel(p) * be.itemsize(p) for p in unique),
        input_bytes=sum(be.numel(t) * be.itemsize(t) for t in inputs),
        activation_bytes=sum(r.output_bytes for r in rec.rows if r.leaf),
        total_mult_adds=rec.rows[0].mult_adds if root_done else counter.total(),
        mult_adds_method=counter.label,
        tied=tied_lines,
        columns=columns,
    )


def _attribute(exc: BaseException, rec: _Recorder, result: Summary) -> None:
    """Name the failing layer: the router's annotation for hook errors, else the innermost open call."""
    failed: Row | None = None
    hook_layer = getattr(exc, "hookkit_layer", None)
    if hook_layer is not None:
        failed = next((r for r, _ in reversed(rec.stack) if r.name == hook_layer), None)
        if failed is None:  # an intervention's pre hook raised before this summary saw the call
            where = f"in a hook on layer {hook_layer!r}, before the layer ran"
    if failed is None and hook_layer is None and rec.stack:
        failed = rec.stack[-1][0]
    if failed is not None:
        failed.failed = True
        name = repr(failed.name) if failed.name else f"(the model itself, {failed.type})"
        where = f"in layer {name} ({failed.type}, call {failed.call}, input shapes {failed.input_shapes or '--'})"
        exc.hookkit_layer = failed.name  # type: ignore[attr-defined]
        shown = {id(r) for r in result.rows}  # the failing call is shown whatever the depth
        result.rows = [r for r in result.all_rows if id(r) in shown or r is failed]
    elif hook_layer is None:
        where = "before any layer ran"
    result.error = f"{type(exc).__name__} {where}: {exc}"
    note = f"hookkit.summary: the forward failed {where}"
    if note not in getattr(exc, "__notes__", ()):
        exc.add_note(note)
    exc.hookkit_summary = result  # type: ignore[attr-defined]


# -- command line ---------------------------------------------------------------------------------
class _CliError(Exception):
    pass


def _parse_value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _load_model(target: str, kw: dict[str, Any]) -> Any:
    import difflib
    import importlib

    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise _CliError(f"TARGET must look like package.module:callable; got {target!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - any import failure is the user's target
        raise _CliError(f"cannot import module {module_name!r}: {type(e).__name__}: {e}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=5, cutoff=0.5)
            hint = f"; closest: {', '.join(close)}" if close else ""
            raise _CliError(f"{module_name!r} has no attribute {attr!r} ({part!r} is missing{hint})")
        obj = getattr(obj, part)
    config_class = getattr(obj, "config_class", None) if isinstance(obj, type) else None
    try:
        if config_class is not None:  # a transformers model class: build it from a config
            model = obj(config_class(**kw))
        elif callable(obj) and not _is_model(obj):
            model = obj(**kw)
        else:
            model = obj
    except Exception as e:  # noqa: BLE001
        raise _CliError(f"calling {target} failed: {type(e).__name__}: {e}") from None
    if not _is_model(model):
        raise _CliError(f"{target} returned {type(model).__name__}, not a model (torch.nn.Module or paddle.nn.Layer)")
    return model


def _is_model(obj: Any) -> bool:
    try:
        return backend_for(obj).is_layer(obj)
    except UnsupportedModel:
        return False


def run_cli(args: Any) -> int:
    """``hookkit summary TARGET --input-size 1,3,224,224 [--dtype long] [--depth N] [--kw k=v] [--json]``."""
    try:
        kw = {}
        for item in args.kw:
            key, eq, value = item.partition("=")
            if not eq or not key:
                raise _CliError(f"--kw expects key=value; got {item!r}")
            kw[key.strip()] = _parse_value(value.strip())
        if not args.input_size:
            raise _CliError("give at least one --input-size, like --input-size 1,3,224,224")
        shapes = []
        for text in args.input_size:
            try:
                shapes.append(tuple(int(s) for s in text.replace("x", ",").split(",") if s.strip()))
            except ValueError:
                raise _CliError(f"--input-size expects integers separated by commas, like 1,3,224,224; got {text!r}") from None
        dtypes = list(args.dtype) or None
        if dtypes is not None and len(dtypes) not in (1, len(shapes)):
            raise _CliError(f"--dtype: got {len(dtypes)} for {len(shapes)} --input-size; give one for all or one per input")
        model = _load_model(args.target, kw)
        try:
            result, exc = _summarize(
                model, shapes, None, depth=args.depth, columns=DEFAULT_COLUMNS, dtypes=dtypes, mode="eval", device=None
            )
        except (ValueError, TypeError) as e:
            raise _CliError(str(e)) from None
    except _CliError as e:
        print(f"hookkit summary: error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(result.to_json())
    else:
        result.print()
    if exc is not None:
        print(f"hookkit summary: error: {result.error}", file=sys.stderr)
        return 2
    return 0
