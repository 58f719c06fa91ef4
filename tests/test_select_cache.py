"""``select`` keeps what a spec resolved to while the model's tree is unchanged (sweeps open thousands
of contexts): every change to the tree must show in the next selection, on both frameworks."""

from __future__ import annotations

import gc
import weakref

import numpy as np

import hookkit
from hookkit.core.select import select


def _blocks_model(fw, n: int = 3):
    class Blocks(fw.Layer):
        def __init__(self) -> None:
            super().__init__()
            blocks = [fw.linear(4, 4) for _ in range(n)]
            self.blocks = fw.nn.ModuleList(blocks) if fw.name == "torch" else fw.nn.LayerList(blocks)
            self.head = fw.linear(4, 2)

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return self.head(x)

    return Blocks()


def _same(selection, expected) -> bool:
    return selection.names == [n for n, _ in expected] and all(a is b for a, b in zip(selection.layers, [m for _, m in expected]))


def test_a_replaced_layer_is_selected_not_the_one_kept(fw):
    model = _blocks_model(fw)
    first = select(model, "blocks.*")
    assert first.names == ["blocks.0", "blocks.1", "blocks.2"]
    new = fw.linear(4, 4)
    model.blocks[1] = new
    again = select(model, "blocks.*")
    assert again.layers[1] is new and again.names == first.names
    model.head = fw.linear(4, 2)
    assert select(model, "head").layers[0] is model.head


def test_appended_inserted_and_deleted_layers_show(fw):
    model = _blocks_model(fw)
    select(model, "blocks.*")
    model.blocks.append(fw.linear(4, 4))
    extra = fw.linear(4, 4)  # made before the selection below: only the insert changes the tree after it
    assert select(model, "blocks.*").names == [f"blocks.{i}" for i in range(4)]
    model.blocks.insert(0, extra)  # edits the children in place, without a registration
    after = select(model, "blocks.*")
    assert after.names == [f"blocks.{i}" for i in range(5)] and after.layers[0] is extra
    last = fw.linear(4, 4)
    select(model, "blocks.*")
    model.blocks.insert(len(model.blocks), last)  # at the end: no path changes, one more sibling
    assert select(model, "blocks.*").layers[-1] is last
    del model.blocks[0]
    assert _same(select(model, "blocks.*"), [(f"blocks.{i}", b) for i, b in enumerate(model.blocks)])
    delattr(model, "head")
    assert "head" not in select(model, hookkit.LEAVES).names


def test_a_leaf_given_a_child_is_no_longer_a_leaf(fw):
    model = _blocks_model(fw)
    assert "blocks.0" in select(model, hookkit.LEAVES).names
    inner = fw.linear(4, 4)
    if fw.name == "torch":
        model.blocks[0].inner = inner
    else:
        model.blocks[0].add_sublayer("inner", inner)
    leaves = select(model, hookkit.LEAVES).names
    assert "blocks.0" not in leaves and "blocks.0.inner" in leaves


def test_the_returned_list_is_the_callers_own(fw):
    model = _blocks_model(fw)
    sel = select(model, "blocks.*")
    sel.clear()
    assert len(select(model, "blocks.*")) == 3


def test_a_predicate_is_asked_every_time(fw):
    model = _blocks_model(fw)
    wanted = {"head"}
    pick = lambda name, layer: name in wanted  # noqa: E731
    assert select(model, pick).names == ["head"]
    wanted.add("blocks.2")
    assert select(model, pick).names == ["blocks.2", "head"]


def test_selections_kept_do_not_keep_the_model_alive(fw):
    model = _blocks_model(fw)
    for spec in ("blocks.*", hookkit.LEAVES, ["head", "blocks.0"], hookkit.ALL):
        select(model, spec)
    ref = weakref.ref(model)
    del model
    gc.collect()
    assert ref() is None


def test_a_capture_after_a_swap_records_the_new_layer(fw):
    model = _blocks_model(fw)
    x = fw.randn(2, 4)
    with hookkit.capture(model, "blocks.*"):
        model(x)
    swapped = fw.linear(4, 4)
    model.blocks[2] = swapped
    with hookkit.capture(model, "blocks.*") as cap:
        model(x)
    np.testing.assert_allclose(fw.numpy(cap["blocks.2"]), fw.numpy(swapped(cap["blocks.1"])), rtol=1e-6)
    assert not hookkit.core.router.attached(swapped)["forward"]


def test_models_that_go_leave_no_state_behind(fw):
    from hookkit.core import clock, router
    from hookkit.core import select as select_module

    gc.collect()
    before = (len(router._registry), len(clock._clocks), len(select_module._kept))
    refs = []
    for _ in range(3):
        model = _blocks_model(fw)
        refs += [weakref.ref(layer) for _, layer in hookkit.select(model, hookkit.ALL)]
        with hookkit.capture(model, "blocks.*"):
            model(fw.randn(2, 4))
        with hookkit.capture(model, "blocks.*"):  # the idle clock taken up again
            model(fw.randn(2, 4))
        del model
    gc.collect()
    assert all(r() is None for r in refs)  # nothing hookkit keeps holds the models alive
    # and the maps did not grow (an older test's model freed meanwhile may make them shrink)
    after = (len(router._registry), len(clock._clocks), len(select_module._kept))
    assert all(a <= b for a, b in zip(after, before)), (after, before)


def test_steps_count_from_zero_again_after_the_last_context_closes(fw):
    model = _blocks_model(fw)
    x = fw.randn(2, 4)
    with hookkit.capture(model, "blocks.0") as first:
        model(x)
        model(x)
    with hookkit.capture(model, "blocks.0") as second:
        model(x)
    assert [r.step for r in first.calls("blocks.0")] == [0, 1]
    assert [r.step for r in second.calls("blocks.0")] == [0]
    assert hookkit.core.router.forward_count(model) is None


def test_a_removed_capture_is_freed_without_the_garbage_collector(fw):
    model = _blocks_model(fw)
    gc.collect()
    gc.disable()
    try:
        with hookkit.capture(model, "blocks.*", grads=True) as cap:
            model(fw.randn(2, 4))
        ref = weakref.ref(cap)
        del cap
        assert ref() is None  # its records (the outputs it holds) go at once, not at the next collection
    finally:
        gc.enable()
