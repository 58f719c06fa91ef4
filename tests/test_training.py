"""Hooks under real training: the router owns parameter hooks, names and clocks belong to the root,
activation checkpointing, torch.compile, threads, torch.func, copies and pickling."""

from __future__ import annotations

import copy
import gc
import io
import pickle
import threading
import warnings
import weakref

import numpy as np
import pytest

import hookkit
from hookkit.core import events, router
from models import hooks_left


class Twice:
    """A model whose layer ``l`` runs twice per forward (weight sharing)."""

    @staticmethod
    def make(fw):
        class Model(fw.Layer):
            def __init__(self):
                super().__init__()
                self.l = fw.linear(4, 4)
                self.out = fw.linear(4, 2)

            def forward(self, x):
                return self.out(self.l(self.l(x)))

        return Model()


def param_hooks(fw, model) -> int:
    """How many native gradient hooks the model's parameters carry (PyTorch keeps them in a dict)."""
    if fw.name != "torch":
        return sum(router.attached(m)["param_grad"] for _, m in model.named_sublayers(include_self=True))
    return sum(len(p._backward_hooks or {}) for p in model.parameters())


# -- parameter gradients go through the router ---------------------------------------------------
@pytest.mark.parametrize("clip_first", [True, False])
def test_param_hooks_interventions_before_observers(fw, clip_first):
    """GradientStats sees the clipped parameter gradient whichever was created first, and the
    parameter carries one native hook for both; remove_all takes them off."""
    model = fw.sequential(fw.linear(8, 16), fw.relu(), fw.linear(16, 1))
    x = fw.randn(32, 8)
    if clip_first:
        clip = hookkit.clip_grad(model, "0", norm=1e-3, target="params")
        stats = hookkit.GradientStats(model, ["0"])
    else:
        stats = hookkit.GradientStats(model, ["0"])
        clip = hookkit.clip_grad(model, "0", norm=1e-3, target="params")
    (model(x) * 1000).sum().backward()
    assert stats.param_stats("0")["max_abs"][0] <= 1e-3 * 1.0001
    assert fw.numpy(model[0].weight.grad).max() <= 1e-3 * 1.0001
    if fw.name == "torch":
        assert len(model[0].weight._backward_hooks) == 1  # one native hook, two consumers
    assert router.attached(model[0])["param_grad"] == 4  # (weight, bias) x (clip, stats)
    hookkit.remove_all(model)
    assert param_hooks(fw, model) == 0 and hooks_left(model) == []
    clip.remove(), stats.remove()  # idempotent after remove_all


def test_param_grad_event_names_and_steps(fw):
    model = fw.sequential(fw.linear(3, 3), fw.linear(3, 1))
    seen = []
    h = router.attach(model, [("1", model[1])], "param_grad", lambda ev: seen.append((ev.name, ev.param_name, ev.step)))
    for _ in range(2):
        model(fw.randn(2, 3)).sum().backward()
    assert sorted(seen) == sorted([("1", "weight", 0), ("1", "bias", 0), ("1", "weight", 1), ("1", "bias", 1)])
    h.remove()
    assert param_hooks(fw, model) == 0


# -- names and clocks belong to the root ---------------------------------------------------------
def test_fastai_hook_on_a_layer_does_not_steal_the_models_clock(fw):
    model = Twice.make(fw)
    fastai_hook = hookkit.Hook(model.l, lambda m, i, o: o.mean())
    with hookkit.capture(model, "l") as cap:
        for _ in range(2):
            model(fw.randn(2, 4))
    assert [(r.step, r.call) for r in cap.calls("l")] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(r.name == "l" for r in cap.calls("l"))
    fastai_hook.remove()
    assert hooks_left(model) == []


def test_calls_restart_at_zero_after_remove_all(fw):
    model = Twice.make(fw)
    with hookkit.capture(model, "l"):
        model(fw.randn(2, 4))
    hookkit.remove_all(model)
    x = fw.randn(2, 4)
    plain = fw.numpy(model(x))
    with hookkit.ablate(model, "l", mode="zero", calls=[0]):
        edited = fw.numpy(model(x))
    assert not np.allclose(plain, edited)  # call 0 was edited: the numbering restarted
    with hookkit.run_until(model, "l", call=0) as run:
        run(x)


def test_same_layer_from_two_roots_gets_each_roots_name(fw):
    inner = fw.sequential(fw.linear(2, 2), fw.linear(2, 2))
    outer = fw.sequential(fw.linear(2, 2), inner)
    got = {}
    a = hookkit.on_forward(inner, "1", lambda layer, i, o: got.setdefault("inner", True) and None)
    with hookkit.capture(outer, "1.1") as cap:
        outer(fw.randn(1, 2))
    assert cap.calls("1.1")[0].name == "1.1" and got["inner"]
    # the error names the layer as the failing consumer's root sees it
    b = hookkit.on_forward(outer, "1.1", lambda layer, i, o: 1 / 0)
    with pytest.raises(ZeroDivisionError) as err:
        outer(fw.randn(1, 2))
    assert err.value.hookkit_layer == "1.1"
    a.remove(), b.remove()
    assert hooks_left(outer) == []


# -- threads ---------------------------------------------------------------------------------------
def test_two_threads_get_their_own_call_indices(torch_fw):
    fw = torch_fw
    model = Twice.make(fw)
    start = threading.Barrier(2)
    seen: list[tuple[int, int, int]] = []
    lock = threading.Lock()

    def consumer(ev):
        with lock:
            seen.append((threading.get_ident(), ev.step, ev.call))

    h = router.attach(model, [("l", model.l)], "forward", consumer, router.OBSERVER)

    def run():
        start.wait()
        for _ in range(20):
            model(fw.randn(2, 4))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    h.remove()
    by_step: dict[int, list[int]] = {}
    for _ident, step, call in seen:
        by_step.setdefault(step, []).append(call)
    assert len(by_step) == 40  # every forward its own step, across both threads
    assert all(sorted(c) == [0, 1] for c in by_step.values())


# -- activation checkpointing ----------------------------------------------------------------------
def _checkpointed(torch_fw, use_reentrant):
    import torch
    from torch.utils.checkpoint import checkpoint

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.act, self.fc2 = torch.nn.Linear(6, 6), torch.nn.Tanh(), torch.nn.Linear(6, 6)

        def forward(self, x):
            return self.fc2(self.act(self.fc1(x)))

    class Net(torch.nn.Module):
        def __init__(self, ckpt):
            super().__init__()
            self.block, self.head, self.ckpt = Block(), torch.nn.Linear(6, 1), ckpt

        def forward(self, x):
            h = checkpoint(self.block, x, use_reentrant=use_reentrant) if self.ckpt else self.block(x)
            return self.head(h)

    torch.manual_seed(0)
    plain = Net(False)
    ckpt = Net(True)
    ckpt.load_state_dict(plain.state_dict())
    return plain, ckpt


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpoint_recompute_is_the_same_call(torch_fw, use_reentrant):
    import torch

    plain, ckpt = _checkpointed(torch_fw, use_reentrant)
    x = torch.randn(4, 6, requires_grad=True)
    grads = []
    for model in (plain, ckpt):
        with (
            hookkit.steer(model, "block.act", torch.ones(6), scale=0.5, calls=[0]),
            hookkit.capture(model, ["block.fc1", "block.act"], grads=True) as cap,
            hookkit.ActivationStats(model, ["block.fc1"]) as stats,
        ):
            model(x).sum().backward()
        assert [(r.step, r.call) for r in cap.calls("block.act")] == [(0, 0)]
        assert len(stats.layer_stats("block.fc1")["mean"]) == 1
        assert cap.grads["block.fc1"] is not None
        grads.append([p.grad.clone() for p in model.parameters()])
        assert hooks_left(model) == []
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)  # the recompute re-applied the edit: the same gradients


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_paddle_recompute_is_the_same_call(paddle_fw, use_reentrant):
    import paddle
    from paddle.distributed.fleet.utils import recompute

    class Net(paddle.nn.Layer):
        def __init__(self, ckpt):
            super().__init__()
            self.block = paddle.nn.Sequential(paddle.nn.Linear(6, 6), paddle.nn.Tanh())
            self.head, self.ckpt = paddle.nn.Linear(6, 1), ckpt

        def forward(self, x):
            h = recompute(self.block, x, use_reentrant=use_reentrant) if self.ckpt else self.block(x)
            return self.head(h)

    paddle.seed(0)
    plain, ckpt = Net(False), Net(True)
    ckpt.set_state_dict(plain.state_dict())
    grads = []
    data = np.random.default_rng(0).standard_normal((4, 6))
    for model in (plain, ckpt):
        x = paddle_fw.tensor(data, requires_grad=True)
        with (
            hookkit.steer(model, "block.1", paddle.ones([6]), scale=0.5, calls=[0]),
            hookkit.capture(model, "block.1", grads=True) as cap,
        ):
            model(x).sum().backward()
        assert [(r.step, r.call) for r in cap.calls("block.1")] == [(0, 0)]
        assert cap.grads["block.1"] is not None
        grads.append([p.grad.numpy().copy() for p in model.parameters()])
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-6)


# -- torch.compile ---------------------------------------------------------------------------------
def test_compile_hooked_before_compiles_once_and_records_like_eager(torch_fw):
    import torch
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    x = torch.randn(3, 4)
    with hookkit.capture(model, ["0", "2"]) as eager:
        model(x)
    with hookkit.capture(model, "2") as cap:
        compiled = torch.compile(model, backend="eager")
        for _ in range(12):
            compiled(x)
    assert counters["stats"]["unique_graphs"] <= 2
    first = cap.calls("2")[0].step
    assert [(r.step, r.call) for r in cap.calls("2")] == [(first + i, 0) for i in range(12)]
    torch.testing.assert_close(cap["2"], eager["2"])


def test_compile_hook_after_first_call_takes_effect_and_removal_too(torch_fw):
    import torch

    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    compiled = torch.compile(model, backend="eager")
    x = torch.randn(3, 4)
    plain = compiled(x)
    with hookkit.capture(model, "0") as cap, hookkit.steer(model, "2", torch.ones(2)):
        steered = compiled(x)
    assert len(cap.calls("0")) == 1
    torch.testing.assert_close(steered, plain + 1)
    torch.testing.assert_close(compiled(x), plain)  # removed: the edit is gone too


# -- torch.func ------------------------------------------------------------------------------------
def test_torch_func_transforms_skip_observers_with_one_warning(torch_fw):
    import torch
    from torch.func import functional_call, grad, vmap

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    params = dict(model.named_parameters())
    x = torch.randn(5, 4)
    events.warned.discard("transformed")
    with (
        hookkit.capture(model, ["0"]) as cap,
        hookkit.ActivationStats(model, ["0"]) as stats,
        hookkit.GradientStats(model, ["0"]),
        hookkit.watch_nonfinite(model),
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always")
        y = functional_call(model, params, (x,))  # not a transform: observed
        per_sample = vmap(lambda xi: model(xi.unsqueeze(0)).squeeze(0))(x)
        g = grad(lambda p: functional_call(model, p, (x,)).sum())(params)
    assert len(cap.calls("0")) == 1 and len(stats.layer_stats("0")["mean"]) == 1
    assert per_sample.shape == (5, 1) and g["0.weight"].shape == (4, 4) and y.shape == (5, 1)
    assert sum("torch.func" in str(w.message) for w in caught) == 1


# -- copies and pickling ---------------------------------------------------------------------------
def test_deepcopy_of_a_hooked_model_feeds_nothing_of_the_original(fw):
    model = fw.sequential(fw.linear(4, 4), fw.relu(), fw.linear(4, 2))
    with hookkit.ActivationStats(model) as stats, hookkit.capture(model, "0") as cap:
        model(fw.randn(2, 4))
        twin = copy.deepcopy(model)
        twin(fw.randn(2, 4))
        twin(fw.randn(2, 4))
    assert len(stats.layer_stats("0")["mean"]) == 1 and len(cap.calls("0")) == 1
    with hookkit.capture(twin, "0") as twin_cap:  # the copy takes hooks of its own
        twin(fw.randn(2, 4))
    assert [(r.step, r.call) for r in twin_cap.calls("0")] == [(0, 0)]


def test_hooked_models_pickle_and_save(fw):
    model = fw.sequential(fw.linear(4, 4), fw.relu(), fw.linear(4, 2))
    x = fw.randn(2, 4)
    with hookkit.ActivationStats(model, hist=True), hookkit.dropout(model, "1", p=0.5), hookkit.clip_grad(model, "0", value=1.0):
        model(x).sum().backward()
        restored = pickle.loads(pickle.dumps(model))
        if fw.name == "torch":
            buf = io.BytesIO()
            fw.lib.save(model, buf)
            buf.seek(0)
            fw.lib.load(buf, weights_only=False)
        else:
            fw.lib.save(model.state_dict(), str(__import__("tempfile").mktemp()))
    restored.eval()
    model.eval()
    np.testing.assert_allclose(fw.numpy(restored(x)), fw.numpy(model(x)))


# -- leaks and half-attached state -----------------------------------------------------------------
def test_nothing_keeps_the_model_alive(fw):
    model = fw.sequential(fw.linear(4, 4), fw.relu(), fw.linear(4, 2))
    ref = weakref.ref(model)
    stats = hookkit.ActivationStats(model, hookkit.ALL)
    grads = hookkit.GradientStats(model)
    model(fw.randn(2, 4)).sum().backward()
    del model
    gc.collect()
    assert ref() is None
    assert len(stats.layer_stats("0")["mean"]) == 1 and grads.names  # still readable


def test_scripted_child_is_named_in_a_clear_error_and_nothing_stays(torch_fw):
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.jit.script(torch.nn.Linear(3, 3)))
    with pytest.raises(hookkit.HookkitError, match="'1'.*(script|Script)"):
        hookkit.ActivationStats(model, hookkit.ALL)
    assert hooks_left(model) == []
