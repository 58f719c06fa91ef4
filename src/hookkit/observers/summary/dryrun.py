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
from hookkit.core.validate import fail


def meta_ops(be: Backend) -> Any:
    """The backend's ``meta`` family, or None for a framework without one."""
    try:
        return be.family("meta")
    except NotImplementedError:
        return None


def has_data(be: Backend, t: Any) -> bool:
    ops = meta_ops(be)
    return True if ops is None else bool(ops.has_data(t))


def dataless(be: Backend, model: Any) -> list[str]:
    """Names of ``model``'s tensors without data that nothing fills at call time; refused where the
    framework cannot run a forward without data (Paddle's ``LazyGuard`` layers)."""
    ops = meta_ops(be)
    missing: list[str] = ops.dataless(model) if ops is not None else []
    if missing and not ops.dry_runs:
        fail("summary", "model", f"a model whose parameters hold values ({missing[0]!r} has none): {ops.why_not}", be.type_name(model))
    return missing


def prepare(be: Backend, model: Any, args: tuple, kwargs: dict, device: Any, missing: list[str]) -> DryRun | None:
    """The fake forward when ``model`` has tensors without data (``missing``), else None (the real forward runs)."""
    if not missing:
        return None
    dry: DryRun = be.family("meta").dry_run(model, args, kwargs, device)
    dry.notes.append(
        f"dry run: {len(missing)} parameters and buffers hold no data (meta device, e.g. {missing[0]!r}): the forward ran "
        f"on fake tensors standing for {dry.device} tensors; nothing was allocated, every column is computed from shapes"
    )
    return dry


def call_of(dry: DryRun | None) -> Any:
    """What runs the summary's forward: the dry run's fake forward, or None (the model itself)."""
    return dry.call if dry is not None else None
