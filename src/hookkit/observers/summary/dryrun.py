"""The summary of a model whose weights hold no data (PyTorch's meta device): a dry run.

When parameters or buffers have no data and no loading hook fills them at call time
(``Backend.family("meta").dataless``), the summary's forward runs on fake tensors
(``meta.dry_run``): the model's real forward, its real kernels' shapes, strides and dtypes, every
column (shapes, parameters, mult-adds, the bytes saved for backward), and nothing allocated. With
``optimizer=``, the optimizer takes one step on gradients without data, which creates its state
as the real one would (Adam's two moments per parameter, its ``step`` counters): their bytes are
the estimate's optimizer state; there is no measured peak (nothing real ran)."""

from __future__ import annotations

from typing import Any

from hookkit.backends import Backend
from hookkit.backends.families.meta import DryRun


def meta_ops(be: Backend) -> Any:
    """The backend's ``meta`` family, or None for a framework without one."""
    try:
        return be.family("meta")
    except NotImplementedError:
        return None


def has_data(be: Backend, t: Any) -> bool:
    ops = meta_ops(be)
    return True if ops is None else bool(ops.has_data(t))


def prepare(be: Backend, model: Any, args: tuple, kwargs: dict, device: Any) -> DryRun | None:
    """The fake forward when ``model`` has tensors without data, else None (the real forward runs)."""
    ops = meta_ops(be)
    missing = ops.dataless(model) if ops is not None else []
    if not missing:
        return None
    dry: DryRun = ops.dry_run(model, args, kwargs, device)
    dry.notes.append(
        f"dry run: {len(missing)} parameters and buffers hold no data (meta device, e.g. {missing[0]!r}): the forward ran "
        f"on fake tensors standing for {dry.device} tensors; nothing was allocated, every column is computed from shapes"
    )
    return dry


def optimizer_state_bytes(be: Backend, model: Any, layers: list[Any], optimizer: Any) -> int:
    """Bytes of the state ``optimizer`` creates in its steady state, from one step on gradients
    without data (meta tensors: nothing allocated); its state and the parameters' ``.grad`` are
    put back afterwards."""
    from hookkit.observers.summary.memory import StateSnapshot, distinct_bytes, tensors_under

    ops, meta = be.family("training"), be.family("meta")
    snap = StateSnapshot(be, model, layers, optimizer)
    try:
        for p in snap.params:
            if be.requires_grad(p):
                ops.put_grad(p, meta.empty_like(p))
        optimizer.step()
        skip = {id(p) for p in snap.params}
        param_keys = {k[0] for k in map(ops.storage, snap.params) if k is not None}
        return distinct_bytes(be, tensors_under(be, ops.optimizer_state(optimizer), skip), param_keys)
    finally:
        snap.restore()
