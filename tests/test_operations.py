"""Operation sites: every call and operator inside a layer's forward as a hook site (hookkit.ops,
"layer::op" specs), on both frameworks; values checked against the same computation by hand."""

from __future__ import annotations

import copy
import functools
import pickle
import threading

import numpy as np
import pytest

import hookkit
from hookkit.sites.operations.install import _Installed


def doubled(fn):
    """A decorator whose behaviour must survive the rewrite: the block's output times two."""

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        return fn(self, *args, **kwargs) * 2

    return wrapper


def make_model(fw):
    """A norm, a loop of residual updates, a functional GELU and a projection: ``F`` is a closure
    cell of the forward, ``scale`` a default, ``reps`` keyword-only, ``super()`` the class cell."""
    F = fw.F

    class Block(fw.Layer):
        def __init__(self, d):
            super().__init__()
            self.norm = fw.nn.LayerNorm(d)
            self.fc1 = fw.linear(d, 2 * d)
            self.fc2 = fw.linear(2 * d, d)

        @doubled
        def forward(self, x, scale=0.5, *, reps=3):
            h = self.norm(x)
            for _ in range(reps):
                h = h * scale + x
            a = F.gelu(self.fc1(h))
            tag = super().extra_repr()
            return self.fc2(a) + h if tag == "" else None

    class Net(fw.Layer):
        def __init__(self, d=6):
            super().__init__()
            self.inp = fw.linear(4, d)
            self.block = Block(d)
            self.other = Block(d)
            self.head = fw.linear(d, 3)

        def forward(self, x):
            return self.head(self.other(self.block(self.inp(x))))

    fw.seed(0)
    return Net()


def by_hand(fw, block, x, edit_h=None):
    """The block's forward written out: ``edit_h(h, k)`` edits the k-th loop add's result."""
    h = block.norm(x)
    for k in range(3):
        h = h * 0.5 + x
        if edit_h is not None:
            h = edit_h(h, k)
    a = fw.F.gelu(block.fc1(h))
    return (block.fc2(a) + h) * 2, h, a


def close(fw, a, b, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(fw.numpy(a), fw.numpy(b), rtol=rtol, atol=atol)


def gpt2(n_layer=2):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=n_layer, n_embd=16, n_head=2, vocab_size=50, n_positions=32, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(cfg).eval()


def ids(b=2, t=6):
    import torch

    return torch.randint(0, 50, (b, t), generator=torch.Generator().manual_seed(1))


def test_listing(fw):
    model = make_model(fw)
    listed = hookkit.ops(model, "block")
    assert listed.names == ["norm_0", "range_0", "mul_0", "add_0", "fc1_0", "gelu_0", "extra_repr_0", "fc2_0", "add_1"]
    by = {o.name: o for o in listed}
    assert (by["norm_0"].kind, by["norm_0"].call) == ("submodule", "self.norm")
    assert (by["gelu_0"].kind, by["gelu_0"].call) == ("function", "F.gelu")
    assert (by["range_0"].kind, by["add_0"].kind, by["add_0"].call) == ("function", "operator", "+")
    assert by["extra_repr_0"].kind == "method"  # super().extra_repr: a method of a value
    assert by["add_0"].spec == "block::add_0" and by["add_0"].line == "h = h * scale + x"
    assert listed["gelu_0"].line == "a = F.gelu(self.fc1(h))"
    shown = str(listed)
    assert "mul_0, add_0" in shown and "def forward(self, x, scale=0.5, *, reps=3):" in shown
    assert "gelu_0" in listed._repr_html_()
    assert hookkit.ops(model, model.block).names == listed.names  # a layer object too
    # nothing installed by listing
    assert "forward" not in model.block.__dict__


def test_values_and_loop_counted_per_execution(fw):
    model = make_model(fw)
    x = fw.randn(2, 4)
    with hookkit.capture(model, ["block::add_0", "block::gelu_0", "block"], inputs=True) as cap:
        out = model(x)
    xb = model.inp(x)
    expected, h, a = by_hand(fw, model.block, xb)
    close(fw, cap["block"], expected)
    close(fw, cap["block::gelu_0"], a)
    adds = cap.calls("block::add_0")
    assert [r.call for r in adds] == [0, 1, 2]  # one record per execution of the loop's add
    close(fw, adds[-1].output, h)
    close(fw, out, model.head(model.other(expected)))
    assert "forward" not in model.block.__dict__


def test_glob_over_layers_and_ops(fw):
    model = make_model(fw)
    sel = hookkit.select(model, ["[bo]*::add_*", "head"])
    assert sel.names == ["block::add_0", "block::add_1", "other::add_0", "other::add_1", "head"]
    assert sel.layers[0].layer is model.block


def test_edit_changes_downstream_as_written(fw):
    model = make_model(fw)
    x = fw.randn(2, 4)
    with hookkit.edit(model, "block::add_0", lambda out, ev: out * 3.0, calls=1):
        got = model(x)
    want, _, _ = by_hand(fw, model.block, model.inp(x), lambda h, k: h * 3.0 if k == 1 else h)
    close(fw, got, model.head(model.other(want)))


def test_removed_exactly_also_when_the_forward_raises(fw):
    model = make_model(fw)
    block_cls = type(model.block)
    class_forward = block_cls.__dict__["forward"]
    own = []
    handle = hookkit.on_forward(model, "other", lambda layer, args, out: own.append(1))  # a hookkit hook beside
    with hookkit.capture(model, "block::add_1") as cap:
        assert isinstance(model.block.__dict__["forward"], _Installed)
        assert "forward" not in model.other.__dict__  # other instances of the class: untouched
        model(fw.randn(2, 4))
    assert "forward" not in model.block.__dict__ and block_cls.__dict__["forward"] is class_forward
    assert cap.calls("block::add_1")
    with pytest.raises(ValueError, match="boom"):
        with hookkit.edit(model, "block::gelu_0", lambda out, ev: (_ for _ in ()).throw(ValueError("boom"))):
            model(fw.randn(2, 4))
    assert "forward" not in model.block.__dict__
    # an instance forward set before: put back as it was
    mine = model.block.forward  # the class's, bound
    model.block.__dict__["forward"] = mine
    with hookkit.capture(model, "block::add_1"):
        model(fw.randn(2, 4))
    assert model.block.__dict__["forward"] is mine
    del model.block.__dict__["forward"]
    assert len(own) == 2  # the raising forward never reached "other"
    handle.remove()
    with hookkit.capture(model, "block::add_1"):
        assert hookkit.remove_all(model) >= 1
    assert "forward" not in model.block.__dict__


def test_errors(fw):
    model = make_model(fw)
    with pytest.raises(hookkit.LayerNotFound, match=r"no operation 'ad_0'.*closest: block::add_0"):
        hookkit.capture(model, "block::ad_0")
    with pytest.raises(hookkit.LayerNotFound, match="no layer matches 'blok'"):
        hookkit.capture(model, "blok::add_0")
    # a branch never taken: no record, and reading it says so
    with hookkit.capture(model, "head::*") as cap:
        model(fw.randn(2, 4))
    assert cap.names  # the head's forward is the framework's Linear: its source is readable

    class Lam(fw.Layer):
        pass

    lam = Lam()
    lam.forward = lambda x: x * 2
    with pytest.raises(hookkit.SourceUnavailable, match=r"layer '' \(Lam\).*not one of its methods"):
        hookkit.ops(lam, lam)


def test_unreadable_source_and_never_executed(torch_fw):
    import torch

    fw = torch_fw
    scripted = torch.jit.script(torch.nn.Linear(2, 2))
    with pytest.raises(hookkit.SourceUnavailable, match=r"layer '' \(RecursiveScriptModule\): its forward is .*no Python source"):
        hookkit.ops(scripted, scripted)
    exec_ns: dict = {}
    exec("import torch\nclass Made(torch.nn.Module):\n    def forward(self, x):\n        return x + 1\n", exec_ns)
    made = exec_ns["Made"]()
    with pytest.raises(hookkit.SourceUnavailable, match="cannot list the operations of layer ''.*source cannot be read"):
        hookkit.ops(made, made)

    class Branchy(torch.nn.Module):
        def forward(self, x, flag=False):
            if flag:
                x = x * 2
            return x + 1

    b = Branchy()
    with hookkit.capture(b, "::mul_0") as cap:
        b(fw.randn(2))
    with pytest.raises(KeyError, match="has not run"):
        cap["::mul_0"]


def test_tracebacks_show_the_original_lines(torch_fw):
    import traceback

    import torch

    class Bad(torch.nn.Module):
        def forward(self, x):
            y = x + 1
            return y @ torch.ones(5, 5)  # shapes do not match

    bad = Bad()
    with hookkit.capture(bad, "::add_0"):
        with pytest.raises(RuntimeError) as info:
            bad(torch.ones(2, 3))
    text = "".join(traceback.format_exception(info.value))
    assert "return y @ torch.ones(5, 5)  # shapes do not match" in text


def test_copies_carry_no_operation_site(torch_fw):
    fw = torch_fw
    model = gpt2()
    x = ids()
    with hookkit.capture(model, "transformer.h.0::add_0") as cap:
        twin = copy.deepcopy(model)
        blob = pickle.dumps(model)
        close(fw, twin(x).logits, model(x).logits)
        thawed = pickle.loads(blob)
        close(fw, thawed(x).logits, model(x).logits)
        assert len(cap.calls("transformer.h.0::add_0")) == 2  # the two calls of the model, none of the copies'
    for m in (twin, thawed):
        assert not isinstance(m.transformer.h[0].__dict__.get("forward"), _Installed)
        with hookkit.capture(m, "transformer.h.0::add_0") as c2:
            m(x)
        close(fw, c2["transformer.h.0::add_0"], cap["transformer.h.0::add_0"])


def test_threads_count_per_thread(torch_fw):
    fw = torch_fw
    model = make_model(fw)
    xs = [fw.randn(2, 4) for _ in range(4)]
    with hookkit.capture(model, "block::add_0") as cap:
        threads = [threading.Thread(target=model, args=(x,)) for x in xs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted(r.call for r in cap.calls("block::add_0")) == [0] * 4 + [1] * 4 + [2] * 4
