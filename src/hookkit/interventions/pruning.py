"""Weight pruning through forward pre-hooks, keeping the model's ``state_dict`` keys unchanged.

``torch.nn.utils.prune`` reparametrizes ``weight`` as ``weight_orig * weight_mask``: the keys of the
``state_dict`` change, so it no longer loads into a plain model. hookkit keeps the mask outside the
model, in the ``Pruning`` handle, and keeps the parameter itself pruned:

- at pruning time the pruned entries are set to zero in place;
- a tensor hook on the parameter multiplies its gradient by the mask, so pruned entries get a zero
  gradient (what ``weight_orig`` gets under ``torch.nn.utils.prune``); a frozen parameter
  (``requires_grad=False``, ``stop_gradient=True``: a LoRA base layer) gets no gradient, so no hook;
- a forward pre-hook re-applies the mask in place before each forward, so that what an optimizer
  may still move (momentum from before pruning, weight decay schemes) is zeroed again before use.
  The in-place write goes around autograd (``.data`` / ``set_value``) and changes no value that a
  pending graph saved, so gradient accumulation over several forwards stays right.

``prune`` is all or nothing: the hooks are placed first and the weights changed last, and a call
that fails leaves every weight and hook as it was. A parameter shared by several selected layers
(tied weights) is pruned, and restored, once.

So the effective weight is always the masked one, the ``state_dict`` holds it under the same keys,
and ``make_permanent()`` only has to remove the hooks. ``remove()`` instead gives the pruned entries
back their values from pruning time (the other entries keep what training made of them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hookkit.backends import Backend, backend_for
from hookkit.core.entry import public_entry
from hookkit.core.errors import HookkitError
from hookkit.core.handles import HandleGroup
from hookkit.core.router import INTERVENTION, Event, attach, attach_params
from hookkit.core.select import LayerSpec, select, shown_name
from hookkit.core.types import Layer
from hookkit.core.validate import ArgumentTypeError, check_choice, check_int, check_model, check_number, check_probability, check_str, fail
from hookkit.sites import cast_like

METHODS = ("l1_unstructured", "ln_structured")


def _count(amount: float | int, total: int, what: str) -> int:
    _check_amount(amount)
    if isinstance(amount, int):
        if not 0 <= amount <= total:
            fail("prune", "amount", f"a count in [0, {total}] ({what} has {total} entries to prune from)", amount)
        return amount
    return int(round(amount * total))  # as torch.nn.utils.prune does


def _check_amount(amount: Any) -> None:
    valid = "a fraction in [0, 1] (a float) or a count >= 0 (an int)"
    if isinstance(amount, bool) or not isinstance(amount, (int, float)):
        fail("prune", "amount", valid, amount, kind=ArgumentTypeError)
    if isinstance(amount, int):
        if amount < 0:
            fail("prune", "amount", valid, amount)
    else:
        check_probability(amount, arg="amount")


def _mask(w: np.ndarray, amount: float | int, method: str, n: float, dim: int, where: str) -> np.ndarray:
    mask = np.ones(w.shape, dtype=np.float32)
    if method == "l1_unstructured":
        k = _count(amount, w.size, where)
        order = np.argsort(np.abs(w), axis=None, kind="stable")[:k]
        mask.reshape(-1)[order] = 0.0
        return mask
    if not -w.ndim <= dim < w.ndim:
        fail("prune", "dim", f"a dim of {where} (shape {list(w.shape)}): in [{-w.ndim}, {w.ndim - 1}]", dim)
    rows = np.moveaxis(np.abs(w), dim, 0).reshape(w.shape[dim], -1)
    norms = np.linalg.norm(rows, ord=n, axis=1) if rows.shape[1] else np.zeros(len(rows))
    k = _count(amount, len(norms), f"dim {dim} of {where}")
    drop = np.argsort(norms, kind="stable")[:k]
    index: list[slice | np.ndarray] = [slice(None)] * w.ndim
    index[dim] = drop
    mask[tuple(index)] = 0.0
    return mask


def _mask_in_place(be: Backend, p: Any, mask: Any) -> None:
    with be.no_grad():
        be.assign(p, _in_compute_dtype(be, lambda w, m: w * m, p, mask))


def _in_compute_dtype(be: Backend, op: Any, p: Any, *others: Any) -> Any:
    """``op(p, *others)`` in a dtype the framework computes in on ``p``'s device (half precision
    on Paddle's CPU has no multiply), cast back to ``p``'s dtype."""
    work = be.compute_dtype(p)
    if work is None:
        return op(p, *others)
    return be.cast(op(be.cast(p, work), *(be.cast(o, work) for o in others)), be.dtype_name(p))


class Pruning(HandleGroup):
    """What ``prune`` returns: ``masks`` (state_dict key -> 0/1 tensor), ``sparsity()``,
    ``make_permanent()``, ``remove()``; a context manager (``remove()`` on exit)."""

    def __init__(self, backend: Backend):
        super().__init__()
        self._be = backend
        self.masks: dict[str, Any] = {}
        self._params: dict[str, Any] = {}
        self._original: dict[str, Any] = {}
        self._permanent = False

    def sparsity(self, name: str | None = None) -> float:
        """Fraction of pruned entries, over all pruned parameters or for one state_dict key.

        >>> p.sparsity(), p.sparsity("fc.weight")   # doctest: +SKIP
        """
        if name is not None and name not in self.masks:
            raise KeyError(f"{name!r} is not pruned here; pruned: {', '.join(self.masks)}")
        masks = [self.masks[name]] if name is not None else list(self.masks.values())
        total = sum(self._be.numel(m) for m in masks)
        zeros = sum(int((self._be.to_numpy(m) == 0).sum()) for m in masks)
        return zeros / total if total else 0.0

    def make_permanent(self) -> Pruning:
        """Keep the pruned weights (zeros) and remove the hooks: the model is a plain model again.

        >>> p.make_permanent()   # doctest: +SKIP
        """
        if self.removed:
            raise HookkitError("prune: make_permanent() after remove(): the hooks are gone and the weights were restored")
        self._permanent = True
        self.remove()
        return self

    def _remove_all(self) -> None:
        be = self._be
        for key, p in self._params.items():
            mask = self.masks[key]
            if self._permanent:
                _mask_in_place(be, p, mask)
            else:  # give pruned entries back their values from pruning time
                with be.no_grad():
                    be.assign(p, _in_compute_dtype(be, lambda w, m, o: w * m + o * (1 - m), p, mask, self._original[key]))
        self._original.clear()
        super()._remove_all()

    def __repr__(self) -> str:
        state = "permanent" if self._permanent else ("removed" if self.removed else "active")
        return f"<hookkit.Pruning {len(self.masks)} parameters, sparsity {self.sparsity():.3f}, {state}>"


@public_entry()
def prune(
    model: Layer,
    layers: LayerSpec,
    amount: float | int = 0.3,
    method: str = "l1_unstructured",
    *,
    n: float = 2,
    dim: int = 0,
    param: str = "weight",
) -> Pruning:
    """Magnitude-prune parameter ``param`` of each selected layer that has one.

    ``method="l1_unstructured"``: zero the ``amount`` smallest entries in ``|w|`` (a fraction, or a
    count if an int). ``method="ln_structured"``: zero whole slices along ``dim`` with the smallest
    L``n`` norm (``dim=0``: output channels of a conv on both frameworks and of a torch Linear; a
    paddle Linear's weight is ``[in, out]``, so its output channels are ``dim=1``).

    >>> p = hookkit.prune(model, ["conv1", "fc"], amount=0.3)   # doctest: +SKIP
    >>> p.sparsity(); p.make_permanent()
    """
    check_model(model)
    check_choice(method, METHODS, arg="method")
    _check_amount(amount)
    check_number(n, arg="n", low=0, low_open=True, finite=False)
    check_int(dim, arg="dim")
    check_str(param, arg="param")
    be = backend_for(model)
    named = select(model, layers)
    targets = []
    for name, layer in named:
        p = dict(be.named_parameters(layer, recurse=False)).get(param)
        if p is not None:
            targets.append((name, layer, p))
    if not targets:
        selected = ", ".join(shown_name(n) for n, _ in named[:8])
        fail("prune", "param", f"the name of a parameter one of the selected layers ({selected}) has as its own", param)
    pruning = Pruning(be)
    # compute every mask first: a bad amount or dim leaves nothing changed
    masks = {}
    for name, _layer, p in targets:
        key = f"{name}.{param}" if name else param
        masks[key] = _mask(be.to_numpy(p), amount, method, n, dim, f"{key}")
    owner: dict[int, str] = {}  # a parameter shared by several layers (tied weights): pruned and restored once
    try:
        for name, layer, p in targets:
            key = f"{name}.{param}" if name else param
            first = owner.setdefault(id(p), key)
            mask = pruning.masks[first] if first != key else cast_like(be, be.from_numpy(masks[key], like=p), p)
            pruning.masks[key] = mask
            if first == key and be.requires_grad(p):  # a frozen weight gets no gradient: no gradient hook

                def zero_pruned(ev: Event, mask: Any = mask) -> Any:
                    return ev.grad * mask

                pruning.add(attach_params(model, [(name, layer, param, p)], zero_pruned, INTERVENTION))

            def remask(ev: Event, p: Any = p, mask: Any = mask) -> None:
                if ev.call == 0:  # once per forward of the model
                    _mask_in_place(be, p, mask)

            pruning.add(attach(model, [(name, layer)], "forward_pre", remask, INTERVENTION))
        # every hook is in place: only now are weights changed
        for name, _layer, p in targets:
            key = f"{name}.{param}" if name else param
            if owner[id(p)] != key:
                continue
            pruning._original[key] = be.clone(be.detach(p))
            pruning._params[key] = p
            _mask_in_place(be, p, pruning.masks[key])
    except BaseException:
        pruning.remove()  # hooks removed, weights pruned so far given back their values: as before the call
        raise
    return pruning
