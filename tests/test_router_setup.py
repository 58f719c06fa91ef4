"""The router's one-pass set-up and removal (issue 38): what a context places goes in one pass, a
closed capture is freed without the garbage collector, and the fast paths number calls as before."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from tests.models import hooks_left

import hookkit


def test_a_closed_capture_is_freed_without_the_gc(fw):
    model = fw.mlp()
    x = fw.randn(2, 5)
    with hookkit.capture(model, "0"):  # the process's first capture may hold one-time set-up (imports)
        model(x)
    gc.collect()
    gc.disable()
    try:
        with hookkit.capture(model, ["0", "2"]) as cap:
            model(x)
        kept = cap["2"]
        ref = weakref.ref(cap)
        del cap
        assert ref() is None  # no reference cycle keeps it: freed when its last name goes
    finally:
        gc.enable()
    assert tuple(kept.shape) == (2, 3) and not hooks_left(model)


def test_one_handle_removes_every_layer_and_keeps_other_consumers(fw):
    model = fw.mlp((5, 6, 7, 3))
    x = fw.randn(2, 5)
    seen: list[str] = []
    keep = hookkit.on_forward(model, "2", lambda m, i, o: seen.append("keep"))
    h = hookkit.on_forward(model, ["0", "2", "4"], lambda m, i, o: seen.append("all"))
    model(x)
    assert seen.count("all") == 3 and seen.count("keep") == 1
    h.remove()
    h.remove()  # idempotent
    seen.clear()
    model(x)
    assert seen == ["keep"]  # the layer's other consumer still runs after the group went
    keep.remove()
    assert not hooks_left(model)


def test_a_plain_consumer_error_names_the_layer_and_the_call(fw):
    """The plain single-consumer path counts calls per forward: a layer run twice in the second
    forward fails at its call 1 there, named in the error."""
    lin = fw.linear(4, 4)
    model = fw.sequential(lin, fw.relu(), lin)  # the same layer twice per forward
    x = fw.randn(1, 4)
    calls = []

    def boom(m, i, o):
        calls.append(len(calls))
        if len(calls) == 4:  # second forward, second call
            raise ValueError("boom")

    with hookkit.on_forward(model, "0", boom):
        model(x)
        with pytest.raises(ValueError) as info:
            model(x)
    text = str(info.value) + " ".join(getattr(info.value, "__notes__", []))
    assert "'0'" in text and "call 1" in text, text
    assert not hooks_left(model)


def test_calls_are_numbered_from_zero_in_each_forward(fw):
    model = fw.mlp()
    x = fw.randn(3, 5)
    with hookkit.capture(model, "0") as cap:
        for _ in range(3):
            model(x)
    recs = cap.calls("0")
    assert [(r.step, r.call) for r in recs] == [(0, 0), (1, 0), (2, 0)]
    np.testing.assert_allclose(fw.numpy(recs[-1].output), fw.numpy(model[0](x)), rtol=1e-6)
