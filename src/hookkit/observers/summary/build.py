"""``hookkit.summary``: check the arguments, run the observed forward, assemble the table."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from hookkit.backends import Backend
from hookkit.core.entry import public_entry
from hookkit.core.errors import add_note
from hookkit.core.select import ALL, select
from hookkit.core.types import Layer
from hookkit.core.validate import ArgumentTypeError, check_choice, check_int, check_model, fail
from hookkit.observers.summary import dryrun
from hookkit.observers.summary.inputs import build_inputs, is_float
from hookkit.observers.summary.memory import SavedCounter, default_loss, training_estimate
from hookkit.observers.summary.params import dtype_counts, param_bytes, quantized_notes
from hookkit.observers.summary.recording import Recorder, kernel_size, run_forward, shapes_and_bytes, tensors
from hookkit.observers.summary.table import COLUMNS, DEFAULT_COLUMNS, Row, Summary

MODES = ("eval", "train", "same")


@public_entry("summary")
def summary(
    model: Layer,
    input_size: Any = None,
    input_data: Any = None,
    *,
    depth: int = 3,
    columns: Sequence[str] = DEFAULT_COLUMNS,
    dtypes: Any = None,
    mode: str = "eval",
    device: Any = None,
    optimizer: Any = None,
    loss_fn: Callable[[Any], Any] | None = None,
) -> Summary:
    """Run one forward without gradients and return the layer table with totals.

    ``input_size``: a shape, a list of shapes or a dict of keyword shapes; ``dtypes``: one per input
    or one for all (``"long"`` for token ids). ``input_data``: a tensor, a list/tuple of tensors or a
    dict of keyword tensors. Neither: the layer tree with parameter counts, no forward.
    ``depth``: how deep the layer tree is shown (deeper layers are summed into their parent);
    ``columns``: which columns, among "input_size", "output_size", "num_params", "trainable",
    "mult_adds", "saved" (torchinfo's names); ``device``: where the made inputs go (default: the
    model's device).
    ``mode``: "eval" (default), "train" or "same"; the model's modes and buffers are restored
    afterwards. When the forward raises, the rows that ran are printed and the error is re-raised
    with the failing layer named (its ``hookkit_summary`` attribute holds the rows).

    ``mode="train"``: the forward runs with gradients, as in training, and the ``Saved`` column
    (``row.saved_bytes``) gives the bytes autograd keeps for backward during each call (distinct
    storages, parameters not counted; ``saved_bytes`` the total). With ``optimizer=`` too: the
    training-memory estimate (parameters, buffers, inputs, gradients, optimizer state, saved
    activations, largest transient) beside the measured peak of one real step (forward,
    ``loss_fn(output)`` (default: the sum of the first output tensor), backward,
    ``optimizer.step()``); weights, buffers, ``.grad`` and the optimizer's state are put back exactly.

    >>> s = hookkit.summary(gpt2, {"input_ids": (1, 16)}, dtypes="long")   # doctest: +SKIP
    >>> print(s); s.total_params, s.total_mult_adds   # doctest: +SKIP
    >>> s = hookkit.summary(model, (32, 3, 32, 32), mode="train", optimizer=opt)   # doctest: +SKIP
    >>> s.saved_bytes, s.training["estimate"], s.training["measured"]   # doctest: +SKIP
    """
    result, exc = summarize(
        model,
        input_size,
        input_data,
        depth=depth,
        columns=columns,
        dtypes=dtypes,
        mode=mode,
        device=device,
        optimizer=optimizer,
        loss_fn=loss_fn,
    )
    if exc is not None:
        result.print()
        raise exc
    return result


@public_entry("summary")
def summarize(
    model: Layer,
    input_size: Any,
    input_data: Any,
    *,
    depth: int,
    columns: Sequence[str],
    dtypes: Any,
    mode: str,
    device: Any,
    optimizer: Any = None,
    loss_fn: Callable[[Any], Any] | None = None,
) -> tuple[Summary, BaseException | None]:
    """The summary and the forward's exception (None when it ran), without printing or raising it."""
    be = check_model(model)
    columns = _checked(be, depth, columns, mode, optimizer, loss_fn)

    named = list(be.named_layers(model))
    opaque = be.opaque_layers(model)
    notes = [f"layer {n!r} ({be.type_name(dict(named)[n])}) is {r}" if n else f"the model is {r}" for n, r in _top(opaque).items()]
    if input_size is None and input_data is None:
        return _static_summary(model, be, named, opaque, depth, columns, notes + ["no input given: parameters only, no forward"]), None
    if not be.has_forward(model):
        note = f"{be.type_name(model)} is a container without forward(): parameters only, no forward"
        return _static_summary(model, be, named, opaque, depth, columns, notes + [note]), None
    missing = dryrun.dataless(be, model)
    args, kwargs, made_dtypes = build_inputs(model, be, input_size, input_data, dtypes, device)
    dry = dryrun.prepare(be, model, args, kwargs, device, missing)  # weights without data: a fake forward
    if dry is not None:
        args, kwargs, notes = dry.args, dry.kwargs, notes + dry.notes

    hooked = [] if "" in opaque else [(n, m) for n, m in select(model, ALL) if _opaque_root(n, opaque) is None]
    leaf_ids = {id(m) for _, m in named if not be.children(m)}
    saved = _saved_counter(be, model, optimizer, loss_fn, dry) if mode == "train" else None
    rec, counter, exc = run_forward(model, be, hooked, leaf_ids, args, kwargs, mode, [m for _, m in named], saved, call=dryrun.call_of(dry))
    rows = _with_opaque_rows(rec.rows, be, named, opaque)
    result = _assemble(model, be, named, rows, depth, columns, notes)
    if saved is not None:
        _training(be, model, named, result, saved, exc, optimizer, loss_fn, args, kwargs, dry)
    result.total_mult_adds = rec.rows[0].mult_adds if rec.rows and rec.rows[0].finished else counter.total()
    result.mult_adds_method = counter.label
    result.input_bytes = shapes_and_bytes(be, tensors((args, kwargs), be.is_tensor))[1]
    result.dry_run = dry is not None
    if exc is not None:
        _attribute(exc, rec, result, made_dtypes)
    return result, exc


def _checked(be: Any, depth: int, columns: Sequence[str], mode: str, optimizer: Any, loss_fn: Any) -> tuple[str, ...]:
    """The arguments checked; the columns shown (``saved`` added to the default ones in train mode)."""
    check_choice(mode, MODES, arg="mode")
    if optimizer is not None and mode != "train":
        fail("summary", "optimizer", "None unless mode='train' (the training-memory estimate runs a training step)", optimizer)
    if optimizer is not None and not be.family("training").is_optimizer(optimizer):
        fail("summary", "optimizer", f"None or an optimizer of the model's framework ({be.name})", optimizer, kind=ArgumentTypeError)
    if loss_fn is not None and not callable(loss_fn):
        fail("summary", "loss_fn", "None or a callable taking the model's output and returning a scalar loss", loss_fn)
    columns = tuple(columns)
    if mode == "train" and columns == DEFAULT_COLUMNS:
        columns += ("saved",)
    bad = [c for c in columns if c not in COLUMNS]
    if bad:
        fail("summary", "columns", f"column names among {', '.join(COLUMNS)}", bad if len(bad) > 1 else bad[0])
    check_int(depth, arg="depth", low=0)
    return columns


def _saved_counter(be: Any, model: Any, optimizer: Any, loss_fn: Any, dry: Any = None) -> SavedCounter:
    """Train mode: counts the bytes saved for backward (and, with an optimizer, runs the loss's backward);
    a dry run's parameters are its fake ones."""
    params = dry.params if dry is not None else [p for p in be.parameters(model) if _initialized(be, p)]
    return SavedCounter(be, params, (loss_fn or default_loss(be)) if optimizer is not None else None)


def _training(
    be: Any,
    model: Any,
    named: list,
    result: Summary,
    saved: Any,
    exc: Any,
    optimizer: Any,
    loss_fn: Any,
    args: Any,
    kwargs: Any,
    dry: Any = None,
) -> None:
    """Train mode: the bytes saved for backward, and with an optimizer the training-memory estimate."""
    result.saved_bytes = saved.total
    if exc is None and optimizer is not None:
        loss = loss_fn or default_loss(be)
        result.training = training_estimate(be, model, named, result, saved, optimizer, args, kwargs, loss, dry=dry)
    saved.release()


# -- rows that come from the layer tree ---------------------------------------------------------
def _opaque_root(name: str, opaque: dict[str, str]) -> str | None:
    """The outermost opaque layer containing (or being) ``name``."""
    for o in sorted(opaque, key=len):
        if o == "" or name == o or name.startswith(o + "."):
            return o
    return None


def _top(opaque: dict[str, str]) -> dict[str, str]:
    return {n: r for n, r in opaque.items() if _opaque_root(n, opaque) == n}


def _static_rows(be: Backend, named: list, under: str, base_depth: int, opaque: dict[str, str]) -> list[Row]:
    """Rows of ``under`` and its sublayers from the tree (name order), no call recorded."""
    rows = []
    for name, layer in named:
        if under and not (name == under or name.startswith(under + ".")):
            continue
        rel = name[len(under) :].lstrip(".") if under else name
        depth = base_depth + (rel.count(".") + 1 if rel else 0)
        tag = opaque.get(name, "").partition(":")[0]
        rows.append(Row(name=name, type=be.type_name(layer), depth=depth, call=0, kernel_size=kernel_size(layer), static=True, note=tag))
        rows[-1].leaf = not be.children(layer)
    return rows


def _with_opaque_rows(rows: list[Row], be: Backend, named: list, opaque: dict[str, str]) -> list[Row]:
    """Recorded rows plus a static block per opaque layer, after the rows of its nearest recorded parent's first call."""
    rows = list(rows)
    for name in _top(opaque):
        if name == "":
            block = _static_rows(be, named, "", 0, opaque)[1:]  # the root row was recorded from the model's output
            for r in block:
                r.depth = max(r.depth, 1)
            rows += block
            rows[0].note = rows[0].note or opaque[""].partition(":")[0]
            continue
        parent = name.rpartition(".")[0] if "." in name else ""
        while True:
            at = next((i for i, r in enumerate(rows) if r.name == parent and r.call == 0 and not r.static), None)
            if at is not None or parent == "":
                break
            parent = parent.rpartition(".")[0] if "." in parent else ""
        if at is None:
            rows += _static_rows(be, named, name, 1, opaque)
            continue
        end = at + 1
        while end < len(rows) and rows[end].depth > rows[at].depth:
            end += 1
        rows[end:end] = _static_rows(be, named, name, rows[at].depth + 1, opaque)
    return rows


def _static_summary(model: Any, be: Backend, named: list, opaque: dict[str, str], depth: int, columns: tuple, notes: list[str]) -> Summary:
    if columns == DEFAULT_COLUMNS:  # no shapes, no mult-adds without a forward
        columns = ("num_params", "trainable")
    rows = _static_rows(be, named, "", 0, opaque)
    result = _assemble(model, be, named, rows, depth, columns, notes)
    result.forward_ran = False
    result.mult_adds_method = "not counted: no forward ran"
    return result


# -- totals -------------------------------------------------------------------------------------
def _param_info(be: Backend, named: list) -> tuple[dict[int, list[str]], dict[int, Any]]:
    """Owners of every parameter (``layer.param`` names) and the unique parameters."""
    owners: dict[int, list[str]] = {}
    unique: dict[int, Any] = {}
    for lname, layer in named:
        for pname, p in be.named_parameters(layer, recurse=False):
            owners.setdefault(id(p), []).append(f"{lname}.{pname}" if lname else pname)
            unique.setdefault(id(p), p)
    return owners, unique


def _initialized(be: Backend, p: Any) -> bool:
    """False for a lazy layer's parameter before its first forward (it has no shape yet)."""
    try:
        be.numel(p)
    except ValueError:
        return False
    return True


def _layer_params(layer: Any, be: Backend) -> tuple[int, bool | str | None]:
    seen = {id(p): p for p in be.parameters(layer) if _initialized(be, p)}
    if not seen:
        return 0, None
    n = sum(be.numel(p) for p in seen.values())
    flags = {be.requires_grad(p) for p in seen.values()}
    trainable: bool | str = "Partial" if len(flags) > 1 else flags.pop()
    return n, trainable


def _masked(be: Backend, named: list, unique: dict[int, Any]) -> int:
    """Elements zeroed by pruning masks: a ``<p>_mask`` buffer beside a ``<p>_orig`` parameter
    (``torch.nn.utils.prune``'s layout), each parameter once."""
    masked, seen = 0, set()
    for _, layer in named:
        params = dict(be.named_parameters(layer, recurse=False))
        for bname, mask in be.forward_state(layer):
            orig = params.get(bname[: -len("_mask")] + "_orig") if bname.endswith("_mask") else None
            if orig is None or id(orig) in seen or not _initialized(be, orig) or be.shape(mask) != be.shape(orig):
                continue
            seen.add(id(orig))
            masked += int(np.count_nonzero(be.to_numpy(mask) == 0))
    return masked


def _assemble(model: Any, be: Backend, named: list, rows: list[Row], depth: int, columns: tuple, notes: list[str]) -> Summary:
    owners, unique = _param_info(be, named)
    tied_ids = {pid for pid, names in owners.items() if len(names) > 1}
    by_name = dict(named)
    info: dict[str, tuple[int, Any, list[str]]] = {}
    calls: dict[str, int] = {}
    for row in rows:
        calls[row.name] = calls.get(row.name, 0) + 1
    for row in rows:
        if row.name not in info:
            n, trainable = _layer_params(by_name[row.name], be)
            info[row.name] = (n, trainable, _tied(be, row.name, by_name[row.name], owners, tied_ids))
        row.params, row.trainable, row.tied = info[row.name]
        row.calls = calls[row.name]
    params = [p for p in unique.values() if _initialized(be, p)]
    if len(params) < len(unique):
        notes = [*notes, f"{len(unique) - len(params)} parameters of lazy layers are not initialized yet: not counted (give an input)"]
    notes = notes + quantized_notes(be, unique)
    return Summary(
        model_type=be.type_name(model),
        framework=be.name,
        rows=[r for r in rows if r.depth <= depth],
        all_rows=rows,
        total_params=sum(be.numel(p) for p in params),
        trainable_params=sum(be.numel(p) for p in params if be.requires_grad(p)),
        param_bytes=sum(param_bytes(be, p) for p in params),
        input_bytes=0,
        activation_bytes=sum(r.output_bytes for r in rows if r.leaf),
        total_mult_adds=0,
        mult_adds_method="",
        tied=[" = ".join(owners[pid]) for pid in owners if pid in tied_ids],
        columns=columns,
        masked_params=_masked(be, named, unique),
        notes=notes,
        param_dtypes=dtype_counts(be, params),
    )


def _tied(be: Backend, name: str, layer: Any, owners: dict[int, list[str]], tied_ids: set[int]) -> list[str]:
    """``"weight = other.weight"`` for each of the layer's own parameters shared with other layers."""
    tied = []
    for pname, p in be.named_parameters(layer, recurse=False):
        if id(p) in tied_ids:
            me = f"{name}.{pname}" if name else pname
            tied.append(f"{pname} = " + ", ".join(o for o in owners[id(p)] if o != me))
    return tied


# -- failures -----------------------------------------------------------------------------------
def _attribute(exc: BaseException, rec: Recorder, result: Summary, made_dtypes: list[str]) -> None:
    """Name the failing layer: the router's annotation for hook errors, else the innermost open call."""
    failed: Row | None = None
    hook_layer = getattr(exc, "hookkit_layer", None)
    where = "before any layer ran"
    if hook_layer is not None:
        failed = next((r for r, _ in reversed(rec.stack) if r.name == hook_layer), None)
        if failed is None:  # an intervention's pre hook raised before this summary saw the call
            where = f"in a hook on layer {hook_layer!r}, before the layer ran"
    if failed is None and hook_layer is None and rec.stack:
        failed = rec.stack[-1][0]
    if failed is not None:
        failed.failed = True
        name = repr(failed.name) if failed.name else "(root)"  # the model itself: hookkit's (root) convention
        where = f"in layer {name} ({failed.type}, call {failed.call}, input shapes {failed.input_shapes or '--'})"
        exc.hookkit_layer = failed.name  # type: ignore[attr-defined]
        shown = {id(r) for r in result.rows}  # the failing call is shown whatever the depth
        result.rows = [r for r in result.all_rows if id(r) in shown or r is failed]
    result.error = f"{type(exc).__name__} {where}: {exc}"
    note = f"hookkit.summary: the forward failed {where}"
    hint = _embedding_hint(failed, made_dtypes)
    if hint:
        note += "\n" + hint
        result.error += f" ({hint})"
    if note not in getattr(exc, "__notes__", ()):
        add_note(exc, note)
    exc.hookkit_summary = result  # type: ignore[attr-defined]


def _embedding_hint(failed: Row | None, made_dtypes: list[str]) -> str:
    """An embedding that failed on the float inputs the summary made: say to make integer ones."""
    if failed is not None and "Embedding" in failed.type and made_dtypes and all(is_float(d) for d in made_dtypes):
        return f"hint: {failed.type} takes integer ids, and the summary made float inputs: pass dtypes='long' (on the command line: --dtype long)"
    return ""
