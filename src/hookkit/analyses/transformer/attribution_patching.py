"""``attribution_patching``: the linear estimate of activation patching (Nanda's attribution
patching) from two forwards and one backward:

    (a_clean - a_corrupted) . d metric / d a_corrupted

per (layer, position) or (layer, head, position), on the same sites and with the same result
shapes as ``patching_sweep``. Gradients are taken with ``backend.grads_of``: the parameters'
``.grad`` stay as they were.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hookkit.analyses.inputs import call_model
from hookkit.analyses.passes import analysis_pass
from hookkit.analyses.transformer.patching import Metric, capture_clean, check_pair, metric_rows, sites
from hookkit.core.entry import public_entry
from hookkit.core.failures import explains_failures
from hookkit.core.handles import HandleGroup
from hookkit.core.router import OBSERVER, Event
from hookkit.core.select import LayerSpec
from hookkit.core.types import Layer
from hookkit.core.validate import check_bool, check_model, check_runnable
from hookkit.sites import Heads, Site, attach_sites


@explains_failures("attribution_patching")
@public_entry()
def attribution_patching(
    model: Layer,
    clean: Any,
    corrupted: Any,
    layers: LayerSpec,
    metric: Metric,
    positions: Any = "all",
    heads: bool = False,
    per_row: bool = False,
) -> np.ndarray:
    """The attribution-patching estimate of ``patching_sweep``'s grid (numpy; same shapes and
    arguments): ``sum_d (a_clean - a_corrupted) * d metric / d a_corrupted`` at each cell.

    >>> est = hookkit.attribution_patching(model, clean_ids, corrupt_ids, "transformer.h.*", metric)   # doctest: +SKIP
    """
    be = check_model(model)
    check_runnable(be, model)
    check_bool(heads, arg="heads")
    check_bool(per_row, arg="per_row")
    setup = check_pair(be, model, clean, corrupted, metric, positions)
    found = sites(model, layers, heads)
    stored = capture_clean(model, be, found, clean)
    live: dict[str, Any] = {}
    group = HandleGroup()

    def keep(site: Site) -> Any:
        def on_event(ev: Event) -> None:
            live.setdefault(site.name, site.tensor(be, ev))

        return on_event

    m = be.family("tensor_math")
    try:
        attach_sites(model, found, keep, OBSERVER, group=group)
        with analysis_pass(model, be, grad=True):
            output = call_model(model, corrupted)
            group.remove()
            missing = [s.name for s in found if s.name not in live]
            if missing:
                raise RuntimeError(f"attribution_patching(): no activation was seen for {', '.join(missing)}")
            not_tracked = [s.name for s in found if not be.requires_grad(live[s.name])]
            if not_tracked:
                raise RuntimeError(
                    f"attribution_patching(): the activations of {', '.join(not_tracked)} take no gradient (frozen inputs before them?)"
                )
            score = metric_rows(be, metric, output, setup.rows)
            grads = be.grads_of(m.sum(score, [0]), [live[s.name] for s in found])
    finally:
        group.remove()
    rows = []
    for s, g in zip(found, grads):
        delta = stored[s.name] - be.detach(live[s.name])
        prod = delta * be.detach(g)  # [N, T, D] (or [N, T, H * d_head])
        shape = tuple(be.shape(prod))
        if isinstance(s.part, Heads):
            lay = s.part.target.layout
            per = m.sum(m.reshape(prod, [*shape[:-1], lay.n_heads, lay.d_head]), [-1])  # [N, T, H]
            per = m.permute(per, [0, 2, 1])  # [N, H, T]
            per = m.index_select(per, 2, setup.positions)
        else:
            axis = getattr(s.module, "token_axis", None) or setup.axis  # a pattern: its query positions
            dims = [i for i in range(1, len(shape)) if i != axis]
            per = m.sum(prod, dims) if dims else prod  # [N, T]
            per = m.index_select(per, 1, setup.positions)
        rows.append(be.to_numpy(per).astype(np.float64))
    grid = np.stack(rows, 1)  # [N, L, (H,) P]
    return grid if per_row else grid.mean(0)
