"""The baselines of an attribution, shaped like what is attributed to: the inputs (integrated
gradients' path start, the perturbation methods' replacement values) or a layer's value.

>>> base = baselines_like(backend, 0.5, x)        # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hookkit.core.entry import entry_name
from hookkit.core.validate import check_tensor_like, fail


def baselines_like(be: Any, baselines: Any, x: Any, arg: str = "baselines", what: str = "inputs") -> Any:
    """``baselines`` (None: zeros, a number, a tensor shaped like ``x`` or one sample of it) as a tensor
    shaped like ``x``, on its device and of its dtype; ``what`` names ``x`` in the error."""
    m, shape = be.family("tensor_math"), tuple(be.shape(x))
    if baselines is None:
        return be.zeros_like(x)
    if isinstance(baselines, (int, float, np.integer, np.floating)) and not isinstance(baselines, bool):
        return m.full(shape, float(baselines), x)
    b = check_tensor_like(baselines, be, arg=arg)
    got = tuple(be.shape(b))
    if got == shape[1:]:
        got, b = (1, *got), m.reshape(b, (1, *got))
    if got not in (shape, (1, *shape[1:])):
        fail(
            entry_name(),
            arg,
            f"None, a number, or a tensor shaped like {what} {list(shape)} (or one sample {list(shape[1:])})",
            f"a tensor of shape {list(got)}",
        )
    if be.device_of(b) != be.device_of(x):
        b = be.to(b, be.device_of(x))
    if be.dtype_name(b) != be.dtype_name(x):
        b = be.cast(b, be.dtype_name(x))
    return b if got == shape else m.tile_rows(b, shape[0])
