"""PyTorch's ``meta`` family (see ``hookkit.backends.families.meta``): fake tensors
(``torch._subclasses.fake_tensor.FakeTensorMode``) through the real forward.

A plain forward on meta tensors runs every op's meta kernel, but meta is a device of its own: the
kernels chosen (SDPA's flash/math paths, the layouts they save) are not the CPU's or the GPU's, and
a model that reads its token ids or masks (``.item()``, ``.all()``) cannot be run. Here only the
weights and buffers without data become fake tensors standing for a real device; the inputs keep
their values and no mode is entered, so an op on a fake tensor runs fake while an op on the inputs
alone (a mask, positions) runs for real, as in the real model. An op whose output shape depends on
the values of an activation still fails, and the summary names the layer.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from hookkit.backends.families.meta import DryRun, Meta


def _dataless(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and (t.is_meta or isinstance(t, FakeTensor))


def _any_meta(model: Any) -> bool:
    """Whether some parameter or buffer of ``model`` is on the meta device (its modules' own tensors read
    directly: a few microseconds a layer, against the named walk of ``dataless``)."""
    for layer in model.modules():
        for t in (*layer._parameters.values(), *layer._buffers.values()):
            if t is not None and t.is_meta:
                return True
    return False


def _loaded_by_hook(layer: Any) -> bool:
    """accelerate's hooks that put real weights in place before the forward (offloaded layers)."""
    hook = getattr(layer, "_hf_hook", None)
    if hook is None:
        return False
    hooks = getattr(hook, "hooks", None) or [hook]  # a SequentialHook holds several
    return any(getattr(h, "offload", False) or getattr(h, "weights_map", None) is not None for h in hooks)


class TorchMeta(Meta):
    def has_data(self, t: Any) -> bool:
        return not _dataless(t)

    def dataless(self, model: Any) -> list[str]:
        if not _any_meta(model):  # the common case, checked once per call of a verb: no name walk
            return []
        found: list[str] = []
        covered: set[int] = set()
        for name, layer in model.named_modules():
            if id(layer) in covered or _loaded_by_hook(layer):
                covered.update(id(m) for m in layer.modules())
                continue
            prefix = f"{name}." if name else ""
            for tname, t in (*layer.named_parameters(recurse=False), *layer.named_buffers(recurse=False)):
                if t is not None and t.is_meta:
                    found.append(prefix + tname)
        return found

    def dry_run(self, model: Any, args: tuple, kwargs: dict, device: Any) -> DryRun:
        from torch.func import functional_call

        dev = torch.device(device if device is not None else "cpu")
        if dev.type == "meta":
            dev = torch.device("cpu")
        mode = FakeTensorMode(allow_non_fake_inputs=True)

        def fake(t: torch.Tensor, grad: bool = False) -> torch.Tensor:
            if isinstance(t, FakeTensor):
                return t
            if t.is_meta:
                with mode:
                    made = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=dev)
            else:
                made = mode.from_tensor(t.detach())
            return made.requires_grad_(grad) if made.is_floating_point() or made.is_complex() else made

        # each tensor once: named_parameters()/named_buffers() give one name per tied tensor, and
        # functional_call(tie_weights=True) puts it under every name it is tied to
        params = {n: fake(p, p.requires_grad) for n, p in model.named_parameters()}
        buffers = {n: fake(b) for n, b in model.named_buffers()}
        swap = {**params, **buffers}

        def move(obj: Any) -> Any:  # inputs with data stay real: a check on token ids or masks sees their values
            return fake(obj) if isinstance(obj, torch.Tensor) and obj.is_meta else obj

        def call(*a: Any, **kw: Any) -> Any:
            # no mode entered: an op with a fake tensor among its arguments runs in the fake mode (the real
            # ones beside it converted), an op on real tensors only (a mask from the token ids) runs for real,
            # as in the real model: `mask.all()` and friends read the values they would read there
            return functional_call(model, swap, a, kw, tie_weights=True, strict=False)

        originals = dict(model.named_parameters())

        def backward(loss: Any) -> set[int]:
            if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
                return set()
            loss.backward()
            reached = {id(originals[n]) for n, f in params.items() if f.grad is not None}
            for f in params.values():
                f.grad = None
            return reached

        return DryRun(
            args=tuple(move(a) for a in args),
            kwargs={k: move(v) for k, v in kwargs.items()},
            params=list(params.values()),
            call=call,
            device=str(dev),
            backward=backward,
        )

    def empty_like(self, t: Any) -> Any:
        return torch.empty_like(t)

    def empty_init(self) -> Any:
        return torch.device("meta")  # parameters and buffers on the meta device: nothing allocated


OPS = TorchMeta()
