"""The router's forward_pre hot path (a call inside the root's forward, one scope): call numbers,
replaced inputs, errors named, bad returns refused, as on the general path."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from hookkit.core import router  # noqa: E402
from hookkit.core.validate import ArgumentTypeError  # noqa: E402


class Twice(torch.nn.Module):
    """``fc`` called twice per forward: its pre events number the calls 0 and 1."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.fc(x))


def test_pre_events_number_calls_and_steps_like_post_events():
    model = Twice()
    seen: list[tuple[str, str, int, int]] = []
    hs = [
        router.attach(
            model, [("fc", model.fc)], "forward_pre", lambda ev: seen.append(("pre", ev.name, ev.call, ev.step)), router.OBSERVER
        ),
        router.attach(model, [("fc", model.fc)], "forward", lambda ev: seen.append(("post", ev.name, ev.call, ev.step)), router.OBSERVER),
    ]
    try:
        model(torch.randn(2, 3))
        model(torch.randn(2, 3))
    finally:
        for h in hs:
            h.remove()
    steps = sorted({s for *_, s in seen})
    assert len(steps) == 2
    want = [(k, "fc", c, s) for s in steps for c in (0, 1) for k in ("pre", "post")]
    assert seen == want


def test_pre_replacement_reaches_the_layer_and_the_next_consumer():
    model = Twice()
    x = torch.randn(2, 3)
    got = []

    def double(ev):
        return (ev.args[0] * 2,), ev.kwargs

    def read(ev):
        got.append(ev.args[0].clone())

    hs = [
        router.attach(model, [("fc", model.fc)], "forward_pre", double),
        router.attach(model, [("fc", model.fc)], "forward_pre", read, router.OBSERVER),
    ]
    try:
        with torch.no_grad():
            out = model(x)
    finally:
        for h in hs:
            h.remove()
    with torch.no_grad():
        want = model.fc(2 * model.fc(2 * x))
    torch.testing.assert_close(out, want)  # same ops on the same values: equal up to rounding
    torch.testing.assert_close(got[0], 2 * x)


def test_pre_consumer_error_names_layer_and_call():
    model = Twice()

    def boom(ev):
        if ev.call == 1:
            raise ValueError("bad input")

    # the post-hook counts the calls: a layer with pre consumers only numbers every call 0 (as on main)
    hs = [
        router.attach(model, [("fc", model.fc)], "forward_pre", boom),
        router.attach(model, [("fc", model.fc)], "forward", lambda ev: None, router.OBSERVER),
    ]
    try:
        with pytest.raises(ValueError, match="bad input") as info:
            model(torch.randn(2, 3))
    finally:
        for h in hs:
            h.remove()
    assert info.value.hookkit_layer == "fc" and info.value.hookkit_call == 1
    assert any("forward pre hook on layer 'fc' (call 1)" in n for n in info.value.__notes__)


def test_pre_consumer_bad_return_is_refused():
    model = Twice()
    h = router.attach(model, [("fc", model.fc)], "forward_pre", lambda ev: ev.args)
    try:
        with pytest.raises(ArgumentTypeError, match=r"layer 'fc' must return None or \(args, kwargs\); got tuple"):
            model(torch.randn(2, 3))
    finally:
        h.remove()
    assert router.attached(model.fc)["forward_pre"] == 0
