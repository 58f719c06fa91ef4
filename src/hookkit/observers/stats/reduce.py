"""Cross-rank reduction of statistics rows, once per read (torchmetrics' rule: never per step).

Every rank packs the rows it recorded since its last read into one float64 matrix
``[slot, step, call, records, state..., hist...]`` (a slot is one layer's rows of one kind); one
``all_gather`` (the backend's, on the process group of the model's framework) brings every rank's
matrix; rows with the same (slot, step, call) are merged exactly (``Kind.merge``: the statistics
of all ranks' values together). Ranks therefore read identical figures.

A read is a collective: every rank must read, at the same points of its program (as every rank
must call ``compute()`` in torchmetrics). A rank takes part when it recorded something since its
last read; in data-parallel training every rank records the same steps.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hookkit.observers.stats.series import Block, Kind, merge_keys

__all__ = ["Block", "gather_blocks", "merge_block"]


def merge_block(kind: Kind, block: Block) -> Block:
    """Rows with equal (step, call) merged into one, sorted by (step, call)."""
    plan = merge_keys(block.step, block.call)
    if plan is None:
        return block
    order, starts = plan
    merged = kind.merge(block.state[order], starts)
    hist = None if block.hist is None else np.add.reduceat(block.hist[order], starts, axis=0)
    records = np.maximum.reduceat(block.records[order], starts)
    return Block(block.step[order][starts], block.call[order][starts], records, merged, hist)


def gather_blocks(backend: Any, kinds: list[Kind], blocks: list[Block], bins: int) -> list[Block]:
    """Every rank's ``blocks`` (one per slot, same slots on every rank) merged slot by slot. A collective."""
    width = 4 + max(k.width for k in kinds) + bins
    parts = []
    for slot, block in enumerate(blocks):
        m = np.zeros((len(block.step), width))
        m[:, 0], m[:, 1], m[:, 2], m[:, 3] = slot, block.step, block.call, block.records
        m[:, 4 : 4 + block.state.shape[1]] = block.state
        if block.hist is not None and bins:
            m[:, width - bins :] = block.hist
        parts.append(m)
    mine = np.concatenate(parts) if parts else np.zeros((0, width))
    everyone = np.concatenate(backend.all_gather_rows(mine))
    out = []
    for slot, kind in enumerate(kinds):
        rows = everyone[everyone[:, 0] == slot]
        hist = rows[:, width - bins :] if bins and blocks[slot].hist is not None else None
        block = Block(
            rows[:, 1].astype(np.int64),
            rows[:, 2].astype(np.int64),
            rows[:, 3].astype(np.int64),
            rows[:, 4 : 4 + kind.width],
            hist,
        )
        out.append(merge_block(kind, block))
    return out
