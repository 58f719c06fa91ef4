"""The core: handles, selection, the one-hook router, the registration API, the exception path, leaks."""

from __future__ import annotations

import gc
import re
import subprocess
import sys
import weakref

import numpy as np
import pytest

import hookkit
from hookkit.core import router
from hookkit.core.router import attached
from models import hooks_left
from tolerance import assert_close


def native_hooks(fw, layer) -> int:
    if fw.name == "torch":
        return len(layer._forward_hooks) + len(layer._forward_pre_hooks)
    return len(layer._forward_post_hooks) + len(layer._forward_pre_hooks)


def total_native(fw, model) -> int:
    return sum(native_hooks(fw, m) for m in (model.modules() if fw.name == "torch" else model.sublayers(include_self=True)))


def test_import_needs_no_framework():
    code = "import sys, hookkit; assert 'torch' not in sys.modules and 'paddle' not in sys.modules; print(hookkit.__version__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_unsupported_model_error():
    with pytest.raises(hookkit.UnsupportedModel, match=r"capture\(\): model must be a model: a layer of torch, paddle"):
        hookkit.capture(object(), "x")


# -- handles ---------------------------------------------------------------------------------------


def test_handle_remove_is_idempotent_and_context_manager_removes_on_error(fw):
    model = fw.mlp()
    h = hookkit.on_forward(model, "0", lambda m, i, o: None)
    assert native_hooks(fw, model[0]) >= 1
    h.remove()
    h.remove()
    assert h.removed and native_hooks(fw, model[0]) == 0
    with pytest.raises(RuntimeError, match="inside"):
        with hookkit.on_forward(model, ["0", "2"], lambda m, i, o: None):
            raise RuntimeError("inside")
    assert not hooks_left(model)


def test_handle_group_removes_all_even_if_one_fails():
    calls = []

    def bad():
        calls.append("bad")
        raise ValueError("cannot")

    group = hookkit.HandleGroup([hookkit.Handle(lambda: calls.append("a")), hookkit.Handle(bad), hookkit.Handle(lambda: calls.append("c"))])
    with pytest.raises(ValueError):
        group.remove()
    assert calls == ["c", "bad", "a"] and len(group) == 3
    group.remove()  # idempotent
    assert calls == ["c", "bad", "a"]


def test_remove_all_keeps_other_hooks(fw):
    model = fw.mlp()
    seen = []
    if fw.name == "torch":
        own = model[0].register_forward_hook(lambda m, i, o: seen.append("user"))
    else:
        own = model[0].register_forward_post_hook(lambda m, i, o: seen.append("user"))
    hookkit.on_forward(model, hookkit.LEAVES, lambda m, i, o: seen.append("hookkit"))
    hookkit.on_backward(model, "0", lambda m, gi, go: None)
    hookkit.capture(model, hookkit.ALL)
    assert hookkit.remove_all(model) >= 3
    assert total_native(fw, model) == 1  # the user's own
    seen.clear()
    model(fw.randn(2, 5))
    assert seen == ["user"]
    own.remove()


def test_model_is_not_kept_alive(fw):
    model = fw.small_cnn()
    ref = weakref.ref(model)
    x = fw.randn(2, 1, 8, 8, requires_grad=True)
    with hookkit.capture(model, hookkit.LEAVES, grads=True, inputs=True) as cap:
        model(x).sum().backward()
    with hookkit.on_backward(model, "conv1", lambda m, gi, go: None):
        model(x).sum().backward()
    assert len(cap.calls("conv1")) == 1
    del model
    gc.collect()
    assert ref() is None


def test_torch_model_freed_without_gc(torch_fw):
    model = torch_fw.small_cnn()
    ref = weakref.ref(model)
    with hookkit.capture(model, hookkit.LEAVES) as cap:
        model(torch_fw.randn(2, 1, 8, 8))
    assert "fc" in cap
    del model
    assert ref() is None


# -- selection -------------------------------------------------------------------------------------


def test_select_specs(fw):
    model = fw.small_cnn()
    names = lambda spec: [n for n, _ in hookkit.select(model, spec)]  # noqa: E731
    assert names("conv*") == ["conv1", "conv2"]
    assert names("relu?") == ["relu1", "relu2"]
    assert names(re.compile(r"(conv|fc)\d?")) == ["conv1", "conv2", "fc"]
    assert names(type(model.conv1)) == ["conv1", "conv2"]
    assert names((type(model.conv1), type(model.fc))) == ["conv1", "conv2", "fc"]
    assert names(lambda n, m: n.endswith("1")) == ["conv1", "bn1", "relu1", "pool1"]
    assert names(model.fc) == ["fc"]
    assert names(["fc", "conv1", "conv*"]) == ["conv1", "conv2", "fc"]  # model order, no duplicates
    assert names(hookkit.WITH_PARAMS) == ["conv1", "bn1", "conv2", "fc"]
    assert "" not in names(hookkit.LEAVES) and len(names(hookkit.LEAVES)) == 9
    assert names(hookkit.ALL)[0] == ""


def test_select_glob_star_stays_within_a_name(fw):
    outer = fw.sequential(fw.mlp(), fw.sequential(fw.mlp()))
    assert [n for n, _ in hookkit.select(outer, "*.0")] == ["0.0", "1.0"]
    assert [n for n, _ in hookkit.select(outer, "**.0")] == ["0.0", "1.0", "1.0.0"]


def test_layer_not_found_names_close_matches(fw):
    model = fw.small_cnn()
    with pytest.raises(hookkit.LayerNotFound, match=r"'conv3'.*closest: conv2, conv1"):
        hookkit.select(model, "conv3")
    with pytest.raises(hookkit.LayerNotFound) as info:
        hookkit.capture(model, ["fc", "bn9"])
    assert "bn1" in info.value.close
    assert not hooks_left(model)  # the valid 'fc' was not left hooked
    with pytest.raises(hookkit.LayerNotFound, match=r"Dropout.*no layer of this class"):
        hookkit.select(model, type(fw.dropout2d(0.5)))
    with pytest.raises(hookkit.LayerNotFound, match=r"\[\] \(an empty list selects no layer\)"):
        hookkit.select(model, [])
    with pytest.raises(hookkit.LayerNotFound, match=r"the predicate selected no layer"):
        hookkit.select(model, lambda name, layer: False)
    with pytest.raises(TypeError, match=r"select\(\): layers must be a name glob, .*; got 3"):
        hookkit.select(model, 3)
    with pytest.raises(ValueError, match="unknown layer preset"):
        hookkit.select(model, ":leafs")


# -- the router ------------------------------------------------------------------------------------


def test_one_native_hook_per_layer_and_event(fw):
    model = fw.mlp()
    group = hookkit.HandleGroup()
    for _ in range(5):
        group.add(hookkit.on_forward(model, "0", lambda m, i, o: None))
        group.add(hookkit.capture(model, "0"))
    assert attached(model[0])["forward"] == 10
    assert native_hooks(fw, model[0]) == 1
    group.remove()
    assert native_hooks(fw, model[0]) == 0 and not hooks_left(model)


def test_interventions_run_before_observers_whatever_the_order(fw):
    model = fw.mlp()
    order = []
    with hookkit.capture(model, "0") as cap:
        hookkit.on_forward(model, "0", lambda m, i, o: order.append("observer"), priority=hookkit.OBSERVER)
        with hookkit.on_forward(model, "0", lambda m, i, o: (order.append("intervention"), o * 0)[1]):
            y = model(fw.randn(3, 5))
    assert order == ["intervention", "observer"]
    assert np.all(fw.numpy(cap["0"]) == 0)  # the capture saw the changed output
    expected = fw.numpy(model[2](model[1](fw.tensor(np.zeros((3, 10))))))
    np.testing.assert_allclose(fw.numpy(y), expected, rtol=1e-6)
    hookkit.remove_all(model)


def test_forward_pre_replaces_inputs_and_sees_kwargs(fw):
    fwk = fw

    class KW(fwk.Layer):
        def __init__(self):
            super().__init__()
            self.fc = fwk.linear(3, 2)

        def forward(self, x, scale=1.0):
            return self.fc(x) * scale

    class Outer(fwk.Layer):
        def __init__(self):
            super().__init__()
            self.kw = KW()

        def forward(self, x):
            return self.kw(x, scale=2.0)

    model = Outer()
    x = fw.randn(4, 3)
    seen = {}

    def pre(layer, args, kwargs):
        seen["kwargs"] = dict(kwargs)
        return (args[0] * 0,), {"scale": 5.0}

    def post(layer, args, kwargs, out):
        seen["post_kwargs"] = dict(kwargs)

    with hookkit.on_forward_pre(model, "kw", pre, with_kwargs=True), hookkit.on_forward(model, "kw", post, with_kwargs=True):
        y = model(x)
    assert seen["kwargs"] == {"scale": 2.0} and seen["post_kwargs"] == {"scale": 5.0}
    bias = fw.numpy(model.kw.fc.bias)
    np.testing.assert_allclose(fw.numpy(y), np.tile(bias * 5.0, (4, 1)), rtol=1e-6)
    with hookkit.on_forward_pre(model, "kw.fc", lambda layer, inputs: inputs[0] + 1):  # a single value is accepted
        y2 = model(fw.tensor(np.zeros((1, 3))))
    np.testing.assert_allclose(fw.numpy(y2), (fw.numpy(model.kw.fc(fw.tensor(np.ones((1, 3)))))) * 2.0, rtol=1e-6)


def test_bad_pre_hook_return_is_explained(fw):
    model = fw.mlp()
    with hookkit.on_forward_pre(model, "0", lambda m, i, k: "nope", with_kwargs=True):
        with pytest.raises(TypeError, match=r"layer '0' must return None or \(args, kwargs\)"):
            model(fw.randn(1, 5))
    assert not hooks_left(model)


def test_every_call_counts_and_steps_advance(fw):
    model = fw.shared_block_model()
    events = []
    with hookkit.on_forward(model, "block", lambda m, i, o: None), hookkit.capture(model, ["block", "out"]) as cap:
        for _ in range(2):
            model(fw.randn(2, 4))
    recs = cap.calls("block")
    assert [(r.call, r.step) for r in recs] == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]
    assert [(r.call, r.step) for r in cap.calls("out")] == [(0, 0), (0, 1)]
    # each record is that call's own output: call k+1's input is tanh(call k's output)
    rec0, rec1 = recs[0].output, recs[1].output
    t = np.tanh(fw.numpy(rec0))
    expected = fw.numpy(model.block(fw.tensor(t)))
    # numpy's tanh against the framework's (an ulp or two), then the block's 6-term dot of those values:
    # its terms are |W| |t| and |b|
    W = fw.numpy(model.block.weight) if fw.name == "torch" else fw.numpy(model.block.weight).T
    terms = np.abs(t) @ np.abs(W).T + np.abs(fw.numpy(model.block.bias))
    assert_close(fw.numpy(rec1), expected, dtype="float32", n_ops=8, scale=float(terms.max()))
    assert not events
    assert [r.name for r in cap.records()[:4]] == ["block", "block", "block", "out"]


def test_a_layer_with_only_forward_pre_consumers_counts_its_calls(fw):
    """A pre consumer alone (heads, inputs, the graph's pre events) sees each call's own index: a call
    is counted when it ends, so its layer gets the post-hook too."""
    model = fw.shared_block_model()
    seen = []
    with router.attach(model, [("block", model.block)], "forward_pre", lambda ev: seen.append((ev.step, ev.call)), router.OBSERVER):
        for _ in range(2):
            model(fw.randn(2, 4))
    assert seen == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert not hooks_left(model)


def test_plain_and_event_consumers_on_one_layer_share_its_call_indices(fw):
    model = fw.shared_block_model()
    seen = []
    with hookkit.on_forward(model, "block", lambda m, i, o: seen.append("plain")):  # no Event built
        with router.attach(model, [("block", model.block)], "forward", lambda ev: seen.append((ev.step, ev.call)), router.OBSERVER):
            model(fw.randn(2, 4))
        model(fw.randn(2, 4))  # the event consumer is gone: the plain one keeps counting
        with router.attach(model, [("block", model.block)], "forward", lambda ev: seen.append((ev.step, ev.call)), router.OBSERVER):
            model(fw.randn(2, 4))
    assert [s for s in seen if s != "plain"] == [(0, 0), (0, 1), (0, 2), (2, 0), (2, 1), (2, 2)]
    assert seen.count("plain") == 9


def test_two_threads_inside_forwards_at_once_keep_their_call_indices(torch_fw):
    """Thread A stops inside its forward (in a hook of its first call); the main thread starts a
    forward and, inside its own first call, lets A finish; then it finishes. Each forward numbers
    its own calls 0, 1, 2 under its own step, before, during and after the overlap."""
    import threading

    fw = torch_fw
    model = fw.shared_block_model()
    inside, resume = threading.Event(), threading.Event()
    seen = []

    def consumer(ev):
        me = threading.current_thread().name
        seen.append((me, ev.step, ev.call))
        if ev.call == 0 and me == "A":
            inside.set()
            assert resume.wait(10)
        elif ev.call == 0 and ev.step == 2:  # the main thread, A waiting inside its forward
            resume.set()
            a.join(10)

    with router.attach(model, [("block", model.block)], "forward", consumer, router.OBSERVER):
        model(fw.randn(2, 4))  # one thread: the hot path
        a = threading.Thread(target=lambda: model(fw.randn(2, 4)), name="A")
        a.start()
        assert inside.wait(10)
        model(fw.randn(2, 4))
        model(fw.randn(2, 4))
    assert not a.is_alive()
    by_forward: dict[tuple, list[int]] = {}
    for who, step, call in seen:
        by_forward.setdefault((who, step), []).append(call)
    assert by_forward == {("MainThread", 0): [0, 1, 2], ("A", 1): [0, 1, 2], ("MainThread", 2): [0, 1, 2], ("MainThread", 3): [0, 1, 2]}


def test_a_root_taken_up_again_forgets_what_another_thread_ran(torch_fw):
    """A context closed after forwards in another (still living) thread, then a new one: a direct
    call of a layer in that thread is numbered in the new context's last forward, not in the
    forward that thread ran under the old context."""
    from concurrent.futures import ThreadPoolExecutor

    fw = torch_fw
    model = fw.shared_block_model()
    with ThreadPoolExecutor(max_workers=1) as other:  # one thread, kept for both contexts
        with hookkit.capture(model, "block"):
            other.submit(lambda: [model(fw.randn(2, 4)) for _ in range(3)]).result(10)  # steps 0, 1, 2 there
        with hookkit.capture(model, "block") as cap:
            model(fw.randn(2, 4))  # step 0 of the new context, in this thread
            other.submit(lambda: model.block(fw.randn(2, 6))).result(10)  # no root forward in that thread
    assert [r.step for r in cap.calls("block")] == [0, 0, 0, 0]  # 3 calls in the forward, then the direct one


def test_exception_in_user_hook_keeps_type_and_names_layer(fw):
    model = fw.shared_block_model()

    class Boom(Exception):
        pass

    def hook(layer, inputs, output):
        if hook.calls == 1:
            raise Boom("bad value")
        hook.calls += 1

    hook.calls = 0
    with pytest.raises(Boom, match="bad value") as info:
        with hookkit.on_forward(model, "block", hook), hookkit.capture(model, hookkit.LEAVES):
            model(fw.randn(2, 4))
    notes = " ".join(info.value.__notes__)
    assert "layer 'block'" in notes and "call 1" in notes
    assert info.value.hookkit_layer == "block" and info.value.hookkit_call == 1
    assert not hooks_left(model)


def test_exception_in_forward_removes_everything(fw):
    fwk = fw

    class Fails(fwk.Layer):
        def __init__(self):
            super().__init__()
            self.fc = fwk.linear(2, 2)

        def forward(self, x):
            self.fc(x)
            raise ValueError("forward failed")

    model = Fails()
    with pytest.raises(ValueError, match="forward failed"):
        with hookkit.capture(model, hookkit.ALL, grads=True), hookkit.on_backward(model, "fc", lambda *a: None):
            model(fw.randn(1, 2, requires_grad=True))
    assert not hooks_left(model)


# -- gradients -------------------------------------------------------------------------------------


def test_on_backward_grad_outputs_and_inputs_match_autograd(fw):
    model = fw.mlp((4, 6, 3))
    x = fw.randn(5, 4, requires_grad=True)
    got = []
    with hookkit.on_backward(model, "2", lambda layer, gi, go: got.append((gi, go))):
        y = model(x)
        (y * y).sum().backward()
    ((gi, go),) = got
    y_np = fw.numpy(y)
    np.testing.assert_allclose(fw.numpy(go[0]), 2 * y_np, rtol=1e-5)
    w = fw.numpy(model[2].weight)
    expected_gi = 2 * y_np @ (w.T if fw.name == "paddle" else w)  # paddle's Linear weight is [in, out]
    np.testing.assert_allclose(fw.numpy(gi[0]), expected_gi, rtol=1e-4, atol=1e-6)


def test_on_backward_replacing_grad_inputs_changes_upstream_grads(fw):
    model = fw.mlp((4, 6, 3))
    x = fw.randn(5, 4)
    with hookkit.on_backward(model, "2", lambda layer, gi, go: tuple(g * 0 for g in gi)):
        model(x).sum().backward()
    assert np.all(fw.grad(model[0].weight) == 0)
    assert np.any(fw.grad(model[2].weight) != 0)


def test_on_backward_inputs_without_grad_give_none(fw):
    model = fw.mlp((4, 6, 3))
    got = []
    with hookkit.on_backward(model, "0", lambda layer, gi, go: got.append((gi, go))):
        model(fw.randn(2, 4)).sum().backward()
    ((gi, go),) = got
    assert gi == (None,) and go[0] is not None and tuple(go[0].shape) == (2, 6)


def test_on_backward_with_tuple_outputs(fw):
    fwk = fw

    class Split(fwk.Layer):
        def __init__(self):
            super().__init__()
            self.fc = fwk.linear(4, 4)

        def forward(self, x):
            y = self.fc(x)
            return y * 2, y * 3

    class Model(fwk.Layer):
        def __init__(self):
            super().__init__()
            self.split = Split()

        def forward(self, x):
            a, b = self.split(x)
            return (a + b).sum()

    model = Model()
    got = []
    x = fw.randn(2, 4, requires_grad=True)
    with hookkit.on_backward(model, "split", lambda layer, gi, go: got.append((gi, go))):
        model(x).backward()
    ((gi, go),) = got
    assert len(go) == 2 and np.all(fw.numpy(go[0]) == 1) and np.all(fw.numpy(go[1]) == 1)
    np.testing.assert_allclose(fw.numpy(gi[0]), fw.grad(x), rtol=1e-6)


def test_on_backward_with_inplace_relu_where_torch_full_backward_hook_fails(torch_fw):
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True), nn.Linear(4, 2))
    x = torch.randn(3, 4, requires_grad=True)
    for i in (0, 1):  # PyTorch's own full backward hook fails on either layer
        h = model[i].register_full_backward_hook(lambda m, gi, go: None)
        with pytest.raises(RuntimeError, match="inplace"):
            model(x).sum().backward()
        h.remove()
    x.grad = None
    model.zero_grad()
    got = {}

    def keep(layer, gi, go):
        got[id(layer)] = (gi, go)

    with hookkit.on_backward(model, ["0", "1"], keep):
        model(x).sum().backward()
    ref_x = x.detach().clone().requires_grad_()
    model(ref_x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), ref_x.grad.numpy(), rtol=1e-6)
    gi_relu, go_relu = got[id(model[1])]
    pre = model[0](x).detach()
    np.testing.assert_allclose(go_relu[0].numpy(), np.tile(model[2].weight.sum(0).detach().numpy(), (3, 1)), rtol=1e-6)
    np.testing.assert_allclose(gi_relu[0].numpy(), (pre > 0).float().numpy() * go_relu[0].numpy(), rtol=1e-6)
    gi_lin, go_lin = got[id(model[0])]
    np.testing.assert_allclose(go_lin[0].numpy(), gi_relu[0].numpy(), rtol=1e-6)
    np.testing.assert_allclose(gi_lin[0].numpy(), x.grad.numpy(), rtol=1e-6)
    assert not hooks_left(model)


def test_output_grad_hook_replaces_gradient(fw):
    model = fw.mlp((4, 6, 3))
    x = fw.randn(2, 4)
    with hookkit.on_output_grad(model, "0", lambda layer, g: g * 0):
        model(x).sum().backward()
    assert np.all(fw.grad(model[0].weight) == 0) and np.any(fw.grad(model[2].weight) != 0)


def test_on_grad_refuses_untracked_tensor(fw):
    t = fw.randn(3)
    flag = "requires_grad=False" if fw.name == "torch" else "stop_gradient=True"
    with pytest.raises(hookkit.GradientNotTracked, match=flag):
        hookkit.on_grad(t, lambda g: g)
    with pytest.raises(TypeError, match=r"on_grad\(\): tensor must be a tensor"):
        hookkit.on_grad(fw.mlp(), lambda g: g)


# -- seed 001 (PyTorch hook API course notes) --------------------------------------------------------


def test_seed_001_tensor_hooks(torch_fw):
    import torch

    w = torch.tensor([1.0], requires_grad=True)
    x = torch.tensor([2.0], requires_grad=True)
    a = torch.add(w, x)
    b = torch.add(w, 1)
    y = torch.mul(a, b)
    a_grad = []
    handle = hookkit.on_grad(a, a_grad.append)
    y.backward()
    assert a_grad[0].item() == 2.0 and a.grad is None  # the non-leaf gradient saved by the hook
    handle.remove()

    w = torch.tensor([1.0], requires_grad=True)
    x = torch.tensor([2.0], requires_grad=True)
    a = torch.add(w, x)
    b = torch.add(w, 1)
    y = torch.mul(a, b)

    def grad_hook(grad):
        grad *= 2
        return grad * 3

    hookkit.on_grad(w, grad_hook)
    y.backward()
    assert w.grad.item() == 30.0


def test_seed_001_module_hooks_call_order(torch_fw):
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 2, 3)
            self.pool1 = nn.MaxPool2d(2, 2)

        def forward(self, x):
            return self.pool1(self.conv1(x))

    net = Net()
    net.conv1.weight[0].detach().fill_(1)
    net.conv1.weight[1].detach().fill_(2)
    net.conv1.bias.data.detach().zero_()
    order, fmap_block, input_block = [], [], []
    hookkit.on_forward(net, "conv1", lambda m, i, o: (order.append("forward_hook"), fmap_block.append(o), input_block.append(i))[0])
    hookkit.on_forward_pre(net, "conv1", lambda m, i: order.append("forward_pre_hook"))
    hookkit.on_backward(net, "conv1", lambda m, gi, go: order.append("backward_hook"))
    output = net(torch.ones((1, 1, 4, 4)))
    order.append("after forward")
    nn.L1Loss()(torch.randn_like(output), output).backward()
    assert order == ["forward_pre_hook", "forward_hook", "after forward", "backward_hook"]
    assert fmap_block[0][0, 0].tolist() == [[9.0, 9.0], [9.0, 9.0]] and fmap_block[0][0, 1].tolist() == [[18.0, 18.0], [18.0, 18.0]]
    assert input_block[0][0].shape == (1, 1, 4, 4)
    hookkit.remove_all(net)
    assert not net.conv1._forward_hooks and not net.conv1._forward_pre_hooks


def test_layer_freed_after_a_forward_raised_under_on_backward(fw):
    fwk = fw

    class Fails(fwk.Layer):
        def __init__(self):
            super().__init__()
            self.fc = fwk.linear(2, 2)

        def forward(self, x):
            raise ValueError("forward failed")

    class Model(fwk.Layer):
        def __init__(self):
            super().__init__()
            self.fails = Fails()

        def forward(self, x):
            return self.fails(x)

    model = Model()
    ref = weakref.ref(model.fails)
    with pytest.raises(ValueError, match="forward failed"):
        with hookkit.on_backward(model, "fails", lambda *a: None):
            model(fw.randn(1, 2, requires_grad=True))  # the pre-hook wrapped the input, the post-hook never ran
    del model
    gc.collect()
    assert ref() is None


def test_backend_cast_converts_and_keeps_a_tensor_already_of_that_dtype(fw):
    """``cast`` is called on hot paths with tensors that are often already in the dtype: no copy then, on
    both frameworks (torch's ``.to`` behaves so; Paddle's ``astype`` copied)."""
    from hookkit.backends import backend_for

    be = backend_for(fw.mlp())
    t = fw.tensor(np.arange(6, dtype=np.float32))
    assert be.cast(t, "float32") is t
    d = be.cast(t, "float64")
    assert be.dtype_name(d) == "float64" and d is not t
    np.testing.assert_array_equal(fw.numpy(d), np.arange(6))
