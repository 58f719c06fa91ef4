"""Saved-for-backward bytes per layer and the training-memory estimate (hookkit.summary, mode="train")."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit


def _independent_count(fw, model, x):
    """The same saved-tensor hooks, storages deduplicated by hand: the total bytes autograd keeps."""
    params = {id(p) for p in fw.params(model)}
    if fw.name == "torch":
        import torch

        keys = {p.untyped_storage().data_ptr() for p in model.parameters()}
        sizes, keep = {}, []

        def pack(t):
            s = t.untyped_storage()
            if s.data_ptr() not in keys:
                sizes[s.data_ptr()] = s.nbytes()
                keep.append(t)
            return t

        model.train()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(x)
    else:
        import paddle

        keys = {p.data_ptr() - p._offset() for p in model.parameters()}
        sizes, keep = {}, []

        def pack(t):
            key = t.data_ptr() - t._offset()
            if key not in keys:
                sizes[key] = t._holder_size()
                keep.append(t)
            return t

        model.train()
        with paddle.autograd.saved_tensors_hooks(pack, lambda t: t):
            model(x)
    del params
    return sum(sizes.values())


def _rows(s):
    return {(r.name, r.call): r for r in s.all_rows}


def test_known_saves(fw):
    """Linear saves its input, ReLU its output (the next Linear's input: counted once, at ReLU), a frozen
    layer whose input needs no gradient saves nothing."""
    frozen = fw.linear(6, 8)
    for p in fw.params(frozen):
        p.stop_gradient = True if fw.name == "paddle" else p.requires_grad_(False)
    model = fw.sequential(frozen, fw.linear(8, 16), fw.relu(), fw.linear(16, 4))
    x = fw.randn(5, 6)
    s = hookkit.summary(model, input_data=x, mode="train")
    rows = _rows(s)
    assert rows[("0", 0)].saved_bytes == 0  # nothing of it needs a gradient
    assert rows[("1", 0)].saved_bytes == 5 * 8 * 4  # its input (the frozen layer's output)
    assert rows[("2", 0)].saved_bytes == 5 * 16 * 4  # its output
    assert rows[("3", 0)].saved_bytes == 0  # its input is ReLU's output, already counted
    assert rows[("", 0)].saved_bytes == s.saved_bytes == 5 * 8 * 4 + 5 * 16 * 4
    assert s.saved_bytes == _independent_count(fw, model, x)
    assert "saved" in s.columns and "Saved for backward" in str(s)
    assert "Saved" in str(s).splitlines()[1]


def test_saved_equals_independent_count_cnn(fw):
    model = fw.small_cnn()
    x = fw.randn(4, 1, 8, 8)
    s = hookkit.summary(model, input_data=x, mode="train")
    assert s.saved_bytes == _independent_count(fw, model, x) > 0
    leaves = sum(r.saved_bytes for r in s.all_rows if r.leaf)
    assert leaves <= s.saved_bytes  # functional ops in a parent's own forward count on the parent only


def test_eval_mode_has_no_saved_column(fw):
    s = hookkit.summary(fw.mlp(), (2, 5))
    assert "saved" not in s.columns and s.saved_bytes == 0 and s.training is None


def test_checkpointed_block_saves_its_input_only(fw):
    if fw.name == "torch":
        import torch
        from torch.utils.checkpoint import checkpoint

        def run(block, h):
            return checkpoint(block, h, use_reentrant=False)
    else:
        from paddle.distributed.fleet.utils import recompute

        def run(block, h):
            return recompute(block, h)  # reentrant: Paddle allows one pair of saved-tensor hooks at a time

    class Net(fw.Layer):
        def __init__(self):
            super().__init__()
            self.inp = fw.linear(6, 12)
            self.block = fw.sequential(fw.linear(12, 12), fw.relu(), fw.linear(12, 12))
            self.out = fw.linear(12, 2)

        def forward(self, x):
            return self.out(run(self.block, self.inp(x)))

    model = Net()
    x = fw.randn(3, 6)
    s = hookkit.summary(model, input_data=x, mode="train")
    rows = _rows(s)
    # the checkpoint saves the block's input (inp's output) from the root's forward: the root's row;
    # nothing inside the block is saved
    for name in ("block", "block.0", "block.1", "block.2"):
        assert rows.get((name, 0)) is None or rows[(name, 0)].saved_bytes == 0
    assert rows[("inp", 0)].saved_bytes == 3 * 6 * 4  # its input x
    assert rows[("out", 0)].saved_bytes == 3 * 12 * 4  # its input, the block's output
    assert s.saved_bytes == 3 * 6 * 4 + 3 * 12 * 4 + 3 * 12 * 4
    assert rows[("", 0)].saved_bytes == s.saved_bytes
    if fw.name == "torch":
        del torch


def _state(fw, model, opt):
    """Everything the estimate must leave as it was, as numpy arrays (and which gradients exist)."""
    out = {f"p{i}": fw.numpy(p).copy() for i, p in enumerate(fw.params(model))}
    out.update({f"g{i}": (None if p.grad is None else fw.numpy(p.grad).copy()) for i, p in enumerate(fw.params(model))})
    if fw.name == "torch":
        for i, st in enumerate(opt.state.values()):
            for k, v in st.items():
                out[f"s{i}{k}"] = fw.numpy(v).copy()
        out["groups"] = repr([{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups])
    else:
        for name, d in opt._accumulators.items():
            for pn, v in d.items():
                out[f"s{name}{pn}"] = v.numpy().copy()
    return out


def _same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], np.ndarray):
            assert a[k].tobytes() == b[k].tobytes(), k  # bit for bit
        else:
            assert a[k] == b[k], k


@pytest.mark.parametrize("warm", [False, True])
def test_estimate_leaves_everything_as_it_was(fw, warm):
    model = fw.small_cnn()
    model.train()
    opt = fw.adam(model, lr=0.1)
    x = fw.randn(4, 1, 8, 8)
    if warm:  # the optimizer has state and the parameters have gradients
        fw.cross_entropy(model(x), fw.labels([0, 1, 2, 3])).backward()
        opt.step()
        fw.cross_entropy(model(x), fw.labels([0, 1, 2, 3])).backward()
    before = _state(fw, model, opt)
    grads_before = [p.grad for p in fw.params(model)] if fw.name == "torch" else None
    s = hookkit.summary(model, input_data=x, mode="train", optimizer=opt)
    _same(before, _state(fw, model, opt))
    if grads_before is not None:
        assert all(a is b for a, b in zip(grads_before, [p.grad for p in fw.params(model)]))
    t = s.training
    assert t["optimizer_state"] >= 2 * t["gradients"]  # Adam: two moments per parameter
    assert t["gradients"] == sum(fw.numpy(p).nbytes for p in fw.params(model) if fw.requires_grad(p))
    assert t["params"] == s.param_bytes and t["saved"] > 0 and t["measured"] > t["params"]
    assert t["estimate"] == sum(t[k] for k in ("params", "buffers", "inputs", "gradients", "optimizer_state", "saved", "transient"))
    assert "Training memory estimate" in str(s) and "Measured peak" in str(s)
    assert hookkit.observers.summary.Summary.from_dict(s.to_dict()).training == s.training


def test_estimate_argument_errors(fw):
    model = fw.mlp()
    opt = fw.adam(model)
    with pytest.raises(ValueError, match="optimizer"):
        hookkit.summary(model, (2, 5), optimizer=opt)
    with pytest.raises((ValueError, TypeError), match="loss_fn"):
        hookkit.summary(model, (2, 5), mode="train", optimizer=opt, loss_fn=3)
    assert not any(hookkit.core.router.attached(model).values())


def test_report_shows_the_estimate_and_refuses_a_bad_one(torch_fw, tmp_path):
    import json

    model = torch_fw.mlp()
    s = hookkit.summary(model, (4, 5), mode="train", optimizer=torch_fw.adam(model))
    (tmp_path / "summary.json").write_text(s.to_json())
    page = hookkit.report(tmp_path).read_text()
    assert "Training memory estimate" in page and "Saved for backward" in page
    data = s.to_dict()
    data["training"] = "much"
    (tmp_path / "summary.json").write_text(json.dumps(data))
    with pytest.raises(hookkit.core.validate.InvalidFile, match="training"):
        hookkit.report(tmp_path)
