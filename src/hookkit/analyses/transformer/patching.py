"""``patching_sweep``: activation patching over a grid of (layer, position[, head]) cells, as
TransformerLens's ``patching.py`` does it, on an unmodified model.

For each cell, the metric of the corrupted run with that one activation (a layer's output at one
token position, or one head's slice of an attention layer's ``z`` at one position) taken from the
clean run. The clean run is captured once; the cells are batched: each forward runs several copies
of the corrupted batch, copy ``j`` patched at cell ``j`` (one ``where`` per forward).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from hookkit.analyses.inputs import call_model, check_inputs, first_input, tile_inputs
from hookkit.analyses.passes import analysis_pass
from hookkit.analyses.transformer.lens import check_positions
from hookkit.core.architectures import token_dim
from hookkit.core.entry import entry_name, public_entry
from hookkit.core.failures import explains_failures
from hookkit.core.handles import HandleGroup
from hookkit.core.router import INTERVENTION, OBSERVER, Event
from hookkit.core.select import LayerSpec
from hookkit.core.tree import first_tensor, map_tensors
from hookkit.core.types import Layer
from hookkit.core.validate import check_bool, check_callable, check_int, check_model, check_runnable, fail
from hookkit.sites import WHOLE, Heads, Site, attach_sites, resolve

Metric = Callable[[Any], Any]


def sites(model: Layer, layers: LayerSpec, heads: bool) -> list[Site]:
    """Where each selected layer is read and patched: its output's first tensor, or with ``heads``
    the input of its output projection (``z``: ``[B, T, H * d_head]``, patched whole: the cells
    are masks over it)."""
    return resolve(model, layers, heads=True) if heads else resolve(model, layers)


def n_heads(site: Site) -> int:
    """The heads of a head site (1 for an output site)."""
    return site.part.target.layout.n_heads if isinstance(site.part, Heads) else 1


@dataclasses.dataclass
class Setup:
    """What both patching analyses check before running: rows, positions, the token axis."""

    rows: int
    positions: list[int]
    axis: int
    n_tokens: int


def check_pair(be: Any, model: Layer, clean: Any, corrupted: Any, metric: Any, positions: Any) -> Setup:
    fn = entry_name()
    check_inputs(be, clean, "clean")
    check_inputs(be, corrupted, "corrupted")
    check_callable(metric, arg="metric", signature="metric(output) -> one value per batch row")
    a, b = be.shape(first_input(be, clean)), be.shape(first_input(be, corrupted))
    if tuple(a) != tuple(b):
        fail(fn, "corrupted", f"inputs shaped like clean's {list(a)}", corrupted)
    axis = token_dim(model, default=1)
    if len(a) <= axis:
        fail(fn, "clean", f"token sequences with a token axis {axis}", clean)
    n = int(a[axis])
    return Setup(int(a[0]), check_positions(positions, n), axis, n)


def metric_rows(be: Any, metric: Metric, output: Any, rows: int, note: str = "") -> Any:
    """``metric(output)`` checked to hold one value per batch row: ``[rows]``."""
    fn = entry_name()
    value = metric(output)
    shape = tuple(be.shape(value)) if be.is_tensor(value) else None
    if shape != (rows,):
        fail(fn, "metric", f"a callable returning one value per batch row from metric(output), shape [{rows}]{note}", value)
    return value


def capture_clean(model: Layer, be: Any, found: list[Site], clean: Any) -> dict[str, Any]:
    """Each site's clean activation (detached), from one forward."""
    stored: dict[str, Any] = {}
    group = HandleGroup()

    def keep(site: Site) -> Any:
        def on_event(ev: Event) -> None:
            stored.setdefault(site.name, be.detach(site.tensor(be, ev)))

        return on_event

    try:
        attach_sites(model, found, keep, OBSERVER, group=group)
        with analysis_pass(model, be, grad=False), be.no_grad():
            call_model(model, clean)
    finally:
        group.remove()
    return stored


@explains_failures("patching_sweep")
@public_entry()
def patching_sweep(
    model: Layer,
    clean: Any,
    corrupted: Any,
    layers: LayerSpec,
    metric: Metric,
    positions: Any = "all",
    heads: bool = False,
    per_row: bool = False,
    *,
    batch_size: int = 256,
) -> np.ndarray:
    """Activation patching over (layer, position) cells (or (layer, head, position) with ``heads=True``).

    ``metric(output)`` gets the model's whole output and returns one value per batch row. The result
    (numpy) is ``[n_layers, n_positions]`` (``[n_layers, H, n_positions]`` with heads), the mean over
    rows of the metric with that cell's activation taken from the clean run; ``per_row=True`` keeps
    the rows first: ``[N, n_layers, ...]``. Only a layer's first call in a forward is patched.

    Each forward runs one corrupted row up to the patched layer, then up to ``batch_size`` patched
    copies of it (the clean run is captured once); a model that cannot broadcast one row there runs
    whole copies of the batch instead. So ``metric`` must work on any number of rows, each on its own.

    >>> grid = hookkit.patching_sweep(model, clean_ids, corrupt_ids, "transformer.h.*",   # doctest: +SKIP
    ...     lambda out: out.logits[:, -1, good] - out.logits[:, -1, bad])
    """
    be = check_model(model)
    check_runnable(be, model)
    check_bool(heads, arg="heads")
    check_bool(per_row, arg="per_row")
    batch_size = check_int(batch_size, arg="batch_size", low=1)
    setup = check_pair(be, model, clean, corrupted, metric, positions)
    found = sites(model, layers, heads)
    stored = capture_clean(model, be, found, clean)
    n, pos = setup.rows, setup.positions
    prefix = [True]  # reuse the unpatched prefix until the model shows it cannot broadcast one row
    results = []
    for site in found:
        h_count = n_heads(site)
        cells = [(h, p) for h in range(h_count) for p in pos]
        out = np.empty((len(cells), n), dtype=np.float64)
        if not (prefix[0] and _sweep_rows(model, be, site, stored[site.name], cells, corrupted, metric, setup, batch_size, out)):
            prefix[0] = False
            copies_max = max(1, batch_size // n)
            for start in range(0, len(cells), copies_max):
                chunk = cells[start : start + copies_max]
                out[start : start + len(chunk)] = _patched_run(model, be, site, stored[site.name], chunk, corrupted, metric, setup)
        results.append(out.reshape(h_count, len(pos), n) if isinstance(site.part, Heads) else out.reshape(len(pos), n))
    grid = np.stack(results)  # [L, (H,) P, N]
    grid = np.moveaxis(grid, -1, 0)
    return grid if per_row else grid.mean(0)


class _NoPrefix(Exception):
    """The model could not run the one-row prefix broadcast into several patched copies."""


def _row(be: Any, inputs: Any, i: int) -> Any:
    return map_tensors(inputs, lambda t: t[i : i + 1] if len(be.shape(t)) else t, be.is_tensor)


def _sweep_rows(
    model: Any,
    be: Any,
    site: Site,
    clean_act: Any,
    cells: list,
    corrupted: Any,
    metric: Metric,
    setup: Setup,
    batch_size: int,
    out: np.ndarray,
) -> bool:
    """The sweep of one site row by row, each forward running the corrupted row once up to the
    site and ``batch_size`` patched copies after it (the layers before the site compute the same
    thing for every copy: broadcasting one row is exact). False when the model cannot broadcast."""
    one = dataclasses.replace(setup, rows=1)
    try:
        for i in range(setup.rows):
            row_in, act = _row(be, corrupted, i), clean_act[i : i + 1]
            for start in range(0, len(cells), batch_size):
                chunk = cells[start : start + batch_size]
                out[start : start + len(chunk), i] = _patched_run(model, be, site, act, chunk, row_in, metric, one, expand=True)[:, 0]
    except _NoPrefix:
        return False
    return True


def _patched_run(
    model: Any,
    be: Any,
    site: Site,
    clean_act: Any,
    chunk: list[tuple[int, int]],
    corrupted: Any,
    metric: Metric,
    setup: Setup,
    expand: bool = False,
) -> np.ndarray:
    """One forward of ``len(chunk)`` copies of the corrupted batch, copy ``j`` patched at ``chunk[j]``
    (``expand``: the batch runs once up to the site, whose activation is repeated there)."""
    m = be.family("tensor_math")
    c, n, axis = len(chunk), setup.rows, getattr(site.module, "token_axis", None) or setup.axis  # a pattern: its query positions
    shape = tuple(be.shape(clean_act))
    if len(shape) <= axis or shape[0] != n:
        fail("patching_sweep", "layers", f"layers whose activation is [{n}, ..., tokens on axis {axis}, ...] (at {site.name!r})", clean_act)
    head = site.part.target if isinstance(site.part, Heads) else None
    if head:  # one head's slice of z at one position
        mask = np.zeros((c * n, *shape[1:]), dtype=bool)
    else:  # the whole activation at one position
        mask = np.zeros((c * n, *[s if i == axis else 1 for i, s in enumerate(shape[1:], 1)]), dtype=bool)
    d = head.layout.d_head if head else 0
    for j, (h, p) in enumerate(chunk):
        index: list[Any] = [slice(j * n, (j + 1) * n)] + [slice(None)] * (len(shape) - 1)
        index[axis] = p
        if head:
            index[-1] = slice(h * d, (h + 1) * d)
        mask[tuple(index)] = True
    where = be.from_numpy(mask, like=clean_act)
    source = m.tile_rows(clean_act, c)

    def patch(t: Any, pos: int, ev: Event) -> Any:
        if expand:
            if tuple(be.shape(t)) != shape:
                raise _NoPrefix
            t = m.tile_rows(t, c)
        if tuple(be.shape(t)) != tuple(be.shape(source)):
            valid = f"layers whose activation keeps its shape {list(be.shape(source))} in the patched run (at {site.name!r})"
            fail("patching_sweep", "layers", valid, t)
        return be.where(where, source, t)

    hit = []
    whole = dataclasses.replace(site, part=WHOLE)  # the cells are masks over the whole tensor

    def consume(ev: Event) -> Any:
        if ev.call != 0:
            return None
        hit.append(True)
        return whole.write(be, ev, patch)

    handle = attach_sites(model, [whole], lambda _: consume, INTERVENTION)
    try:
        with analysis_pass(model, be, grad=False), be.no_grad():
            if expand:
                try:
                    output = call_model(model, corrupted)
                except _NoPrefix:
                    raise
                except Exception as exc:  # noqa: BLE001 - a model that needs every row repeated
                    raise _NoPrefix from exc
                rows = first_tensor(output, be.is_tensor)
                if rows is None or not be.shape(rows) or be.shape(rows)[0] != c * n:
                    raise _NoPrefix
            else:
                output = call_model(model, tile_inputs(be, corrupted, c))
            if not hit:
                raise RuntimeError(f"patching_sweep(): layer {site.at!r} did not run in the patched forward")
            note = f" (this forward ran {c} patched copies of the {n}-row batch: {c * n} rows)" if c > 1 else ""
            values = metric_rows(be, metric, output, c * n, note)
    finally:
        handle.remove()
    return be.to_numpy(values).astype(np.float64).reshape(c, n)
