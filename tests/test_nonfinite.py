"""watch_nonfinite: the first layer producing NaN/Inf, forward and backward; gradient warnings; removal."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import hookkit
from hookkit.core.router import attached


def raises_after_backward(fw, watch, loss):
    """Torch raises from backward(); Paddle turns exceptions inside backward into OSError, so the
    error found there is raised by the next check (forward, check(), exit)."""
    if fw.name == "torch":
        with pytest.raises(hookkit.NonFiniteError) as info:
            loss.backward()
    else:
        loss.backward()
        with pytest.raises(hookkit.NonFiniteError) as info:
            watch.check()
    return info.value


def no_hooks_left(model) -> bool:
    layers = model.modules() if hasattr(model, "modules") else model.sublayers(include_self=True)
    return all(sum(attached(m).values()) == 0 for m in layers)


def log_layer(fw):
    """log(x - 100): NaN for every |x| < 100, so this layer is certainly the first producer."""

    class ShiftedLog(fw.Layer):
        def forward(self, x):
            return (x - 100.0).log() if fw.name == "torch" else fw.lib.log(x - 100.0)

    return ShiftedLog()


def nan_on_call(fw, bad_call):
    """Identity, except on its ``bad_call``-th call (counted from 0), where it returns NaN."""

    class NanOnCall(fw.Layer):
        def __init__(self):
            super().__init__()
            self.n = 0

        def forward(self, x):
            self.n += 1
            return x * float("nan") if self.n - 1 == bad_call else x

    return NanOnCall()


def blow_up_backward(fw):
    """Identity forward; its backward multiplies the gradient by inf. The layers before it are the
    first whose output gradient is non-finite; the one right before it comes first in backward order."""
    custom_op = fw.lib.autograd.Function if fw.name == "torch" else fw.lib.autograd.PyLayer

    class Fn(custom_op):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            return g * float("inf")

    class BlowUp(fw.Layer):
        def forward(self, x):
            return Fn.apply(x)

    return BlowUp()


def test_unchecked_forward_raises_on_exit(fw):
    model = fw.sequential(fw.linear(4, 6), log_layer(fw), fw.linear(6, 2))
    with pytest.raises(hookkit.NonFiniteError, match="'1'"):
        with hookkit.watch_nonfinite(model):
            model(fw.randn(3, 4))  # grad enabled: a backward could follow, so the check waits; none comes
    assert no_hooks_left(model)


def test_forward_nan_names_the_first_layer(fw):
    model = fw.sequential(fw.linear(4, 6), log_layer(fw), fw.linear(6, 2))
    x = fw.randn(3, 4)
    with hookkit.watch_nonfinite(model) as watch:
        with fw.no_grad():
            with pytest.raises(hookkit.NonFiniteError) as info:
                model(x)  # no backward will follow: checked when the forward returns
    err = info.value
    assert (err.layer, err.phase, err.call, err.step) == ("1", "forward", 0, 0)
    assert "'1'" in str(err) and "forward" in str(err) and "step 0" in str(err)
    assert not getattr(err, "__notes__", None)  # no misleading "raised in a hook on layer ''" note
    assert watch.removed and no_hooks_left(model)


def test_forward_nan_in_training_surfaces_at_backward(fw):
    model = fw.sequential(fw.linear(4, 6), fw.linear(6, 6), log_layer(fw), fw.linear(6, 2))
    x = fw.randn(3, 4)
    with hookkit.watch_nonfinite(model) as watch:
        for _ in range(2):
            fw.lib.tanh(model[0](x)).sum().backward()  # healthy work, not through the root model
        out = model(x)  # one sync per step: the forward's flags wait for the backward
        err = raises_after_backward(fw, watch, out.sum())
    assert (err.layer, err.phase) == ("2", "forward")
    assert no_hooks_left(model)
    with hookkit.watch_nonfinite(model, eager=True):  # eager: checked at the end of the forward
        with pytest.raises(hookkit.NonFiniteError, match="'2'"):
            model(x)


def test_call_index_and_step(fw):
    model = fw.shared_block_model()
    model.block = fw.sequential(model.block, nan_on_call(fw, bad_call=4))  # steps 0..: calls 0,1,2 per step
    x = fw.randn(2, 4)
    with pytest.raises(hookkit.NonFiniteError) as info:
        with hookkit.watch_nonfinite(model, ["block.*", "out"]), fw.no_grad():
            model(x)  # step 0: calls 0-2 of the NaN layer are fine
            model(x)  # step 1: its call 1 (5th call overall) gives NaN
    err = info.value
    assert (err.layer, err.phase, err.call, err.step) == ("block.1", "forward", 1, 1)
    assert no_hooks_left(model)


def test_backward_inf_names_the_first_layer_in_backward_order(fw):
    model = fw.sequential(fw.linear(4, 6), fw.linear(6, 6), blow_up_backward(fw), fw.linear(6, 2))
    x = fw.randn(3, 4)
    with hookkit.watch_nonfinite(model) as watch:
        out = model(x)  # the forward is finite
        err = raises_after_backward(fw, watch, out.sum())
    assert (err.layer, err.phase, err.call, err.step) == ("1", "backward", 0, 0)  # not "0", which follows it
    assert "gradient" in str(err)
    if fw.name == "paddle":  # found inside backward, raised at the next forward of the model
        with hookkit.watch_nonfinite(model):
            model(x).sum().backward()
            with pytest.raises(hookkit.NonFiniteError, match="'1'"):
                model(x)
    assert no_hooks_left(model)


def test_check_and_exit_catch_what_the_model_call_did_not(fw):
    model = fw.sequential(fw.linear(4, 6), log_layer(fw))
    x = fw.randn(3, 4)
    watch = hookkit.watch_nonfinite(model)
    model[1](model[0](x))  # layers called outside the model's forward: nothing checks at once
    with pytest.raises(hookkit.NonFiniteError, match="'1'"):
        watch.check()
    watch.check()  # reported once
    with pytest.raises(hookkit.NonFiniteError, match="'1'"):
        with watch:
            model[1](x)
    assert watch.removed and no_hooks_left(model)


def test_an_error_in_the_block_is_not_masked_and_hooks_are_removed(fw):
    model = fw.sequential(fw.linear(4, 6), log_layer(fw))
    with pytest.raises(KeyError):
        with hookkit.watch_nonfinite(model):
            model[1](model[0](fw.randn(3, 4)))
            raise KeyError("user error")
    assert no_hooks_left(model)


def test_healthy_training_raises_nothing_and_gradient_warnings(fw):
    model = fw.mlp((5, 8, 3))
    x = fw.randn(4, 5)
    opt = fw.adam(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with hookkit.watch_nonfinite(model, explode=1e6, vanish=1e-12):
            for _ in range(3):
                model(x).sum().backward()
                fw.step(opt)
    with pytest.warns(hookkit.GradientWarning, match=r"exploding gradients \(max \|grad\| > 0\.5\).*'2'"):
        with hookkit.watch_nonfinite(model, explode=0.5):
            (model(x) * 10).sum().backward()
    with pytest.warns(hookkit.GradientWarning, match="vanishing gradients.*'0'"):
        with hookkit.watch_nonfinite(model, vanish=1e9):
            model(x).sum().backward()
    with pytest.raises(ValueError, match=r"watch_nonfinite\(\): explode must be"):
        hookkit.watch_nonfinite(model, explode=-1)
    assert no_hooks_left(model)


def test_grads_false_watches_the_forward_only(fw):
    model = fw.sequential(fw.linear(4, 6), blow_up_backward(fw), fw.linear(6, 2))
    with hookkit.watch_nonfinite(model, grads=False):
        model(fw.randn(3, 4)).sum().backward()  # the inf gradients are not watched
    assert np.isinf(fw.numpy(model[0].weight.grad)).any() or np.isnan(fw.numpy(model[0].weight.grad)).any()


def parent_made_nan(fw):
    """A block whose own forward code (not a layer) makes the NaN: sqrt of fc2's negative outputs."""

    class Block(fw.Layer):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2, self.norm = fw.nn.Linear(4, 4), fw.nn.Linear(4, 4), fw.nn.LayerNorm(4)

        def forward(self, x):
            h = self.fc2(self.fc1(x))
            h = fw.lib.sqrt(h)  # NaN wherever fc2 gave a negative value
            return self.norm(h)

    return fw.nn.Sequential(Block(), fw.nn.Linear(4, 2))


def test_nan_made_in_the_parents_code_names_the_layers_around_it(fw):
    model = parent_made_nan(fw)
    x = fw.tensor(np.random.default_rng(0).normal(size=(8, 4)).astype("float32"))
    with pytest.raises(hookkit.NonFiniteError) as info:
        with hookkit.watch_nonfinite(model, grads=False):
            model(x)
    err = info.value
    assert (err.layer, err.phase, err.before, err.call, err.step) == ("0.norm", "input", "0.fc2", 0, 0)
    assert "forward code of its parent '0', between layer '0.fc2' and layer '0.norm'" in str(err)
    assert no_hooks_left(model)


def test_nan_in_the_model_input_is_not_blamed_on_the_first_layer(fw):
    model = fw.nn.Sequential(fw.nn.Linear(3, 3), fw.nn.ReLU())
    x = fw.tensor(np.array([[1.0, np.nan, 0.0]], dtype="float32"))
    with pytest.raises(hookkit.NonFiniteError, match="the model's input, or code that runs before the first watched layer") as info:
        with hookkit.watch_nonfinite(model, grads=False):
            model(x)
    assert (info.value.layer, info.value.phase, info.value.before) == ("0", "input", None)


def test_a_layer_output_feeding_the_next_layer_is_probed_once(fw):
    """In a chain the next layer's input is the previous output itself: no second reduction for it,
    and a NaN made by a layer is still blamed on that layer, not on the one after it."""
    model = fw.nn.Sequential(fw.nn.Linear(3, 3), log_layer(fw), fw.nn.Linear(3, 2))
    watch = hookkit.watch_nonfinite(model)  # a backward would follow: nothing is read at the forward's end
    model(fw.tensor(np.ones((2, 3), dtype="float32")))
    assert [e[0] for e in watch._entries] == ["input", "forward", "forward", "forward"]  # only the model input is probed
    with pytest.raises(hookkit.NonFiniteError) as info:
        watch.check()
    assert (info.value.layer, info.value.phase) == ("1", "forward")
    watch.remove()


def test_gradient_warnings_point_at_the_users_line(fw):
    model = fw.nn.Sequential(fw.nn.Linear(4, 8), fw.nn.ReLU(), fw.nn.Linear(8, 2))
    x = fw.tensor(np.random.default_rng(0).normal(size=(4, 4)).astype("float32"))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with hookkit.watch_nonfinite(model, explode=1e-9):
            (model(x) * 1e3).sum().backward()
    grads = [w for w in seen if issubclass(w.category, hookkit.GradientWarning)]
    assert grads and all(w.filename == __file__ for w in grads), [(w.filename, w.lineno) for w in grads]
