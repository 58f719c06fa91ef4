"""hookkit.diff and hookkit.port_weights: within each framework and across them (a PyTorch model and
the same model written for Paddle, weights ported)."""

from __future__ import annotations

import copy

import numpy as np
import paddle
import pytest
import torch

import hookkit
from hookkit.core.router import attached
from hookkit.core.validate import ArgumentTypeError

# -- twin models: the same architecture written in both frameworks, with the same layer names ----------
D, HEADS, VOCAB, T = 16, 2, 32, 6


class TorchAttention(torch.nn.Module):
    def __init__(self, d: int = D, heads: int = HEADS):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        return self.proj((att @ v).permute(0, 2, 1, 3).reshape(b, t, d))


class PaddleAttention(paddle.nn.Layer):
    def __init__(self, d: int = D, heads: int = HEADS):
        super().__init__()
        self.heads = heads
        self.qkv = paddle.nn.Linear(d, 3 * d)
        self.proj = paddle.nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).reshape([b, t, 3, self.heads, d // self.heads]).transpose([2, 0, 3, 1, 4])
        att = paddle.nn.functional.softmax(q @ k.transpose([0, 1, 3, 2]) / (d // self.heads) ** 0.5, axis=-1)
        return self.proj((att @ v).transpose([0, 2, 1, 3]).reshape([b, t, d]))


def _block(nn, attention):
    class Block(nn.Module if nn is torch.nn else nn.Layer):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(D)
            self.attn = attention()
            self.ln2 = nn.LayerNorm(D)
            self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    return Block


def _lm(nn, attention, blocks: int):
    Block = _block(nn, attention)
    container = nn.ModuleList if nn is torch.nn else nn.LayerList

    class TinyLM(nn.Module if nn is torch.nn else nn.Layer):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(VOCAB, D)
            self.blocks = container([Block() for _ in range(blocks)])
            self.ln_f = nn.LayerNorm(D)
            self.head = nn.Linear(D, VOCAB)

        def forward(self, ids):
            x = self.wte(ids)
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

    return TinyLM()


def torch_lm(blocks: int = 2) -> torch.nn.Module:
    return _lm(torch.nn, TorchAttention, blocks)


def paddle_lm(blocks: int = 2) -> paddle.nn.Layer:
    return _lm(paddle.nn, PaddleAttention, blocks)


def tokens(n: int = 2) -> np.ndarray:
    return np.random.default_rng(0).integers(0, VOCAB, size=(n, T)).astype("int64")


class TorchBasicBlock(torch.nn.Module):
    """paddle.vision's ResNet BasicBlock, in PyTorch, with its attribute names."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(cout)
        self.relu = torch.nn.ReLU()
        self.conv2 = torch.nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 1, stride=stride, bias=False), torch.nn.BatchNorm2d(cout))

    def forward(self, x):
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


class TorchResNet18(torch.nn.Module):
    """paddle.vision.models.resnet18(num_classes=10), in PyTorch, with its attribute names."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(64)
        self.relu = torch.nn.ReLU()
        self.maxpool = torch.nn.MaxPool2d(3, stride=2, padding=1)
        widths, cin = [64, 128, 256, 512], 64
        for i, w in enumerate(widths):
            stride = 1 if i == 0 else 2
            setattr(self, f"layer{i + 1}", torch.nn.Sequential(TorchBasicBlock(cin, w, stride), TorchBasicBlock(w, w)))
            cin = w
        self.avgpool = torch.nn.AdaptiveAvgPool2d((1, 1))
        self.fc = torch.nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def mlp(fw_name: str = "torch", names: bool = False):
    """A small MLP; ``names=True``: its layers named fc1/act/fc2/out instead of 0/1/2/3/4."""
    nn = torch.nn if fw_name == "torch" else paddle.nn
    layers = [nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 3)]
    if not names:
        return nn.Sequential(*layers)
    return (
        nn.Sequential(*[(n, m) for n, m in zip(["fc1", "act1", "fc2", "act2", "out"], layers)])
        if nn is paddle.nn
        else nn.Sequential(__import__("collections").OrderedDict(zip(["fc1", "act1", "fc2", "act2", "out"], layers)))
    )


def torch_mlp(names: bool = False):
    torch.manual_seed(0)
    return mlp("torch", names)


def paddle_mlp(names: bool = False):
    paddle.seed(0)
    return mlp("paddle", names)


def make(fw) -> object:
    fw.seed(0)
    return mlp(fw.name)


X = np.random.default_rng(1).standard_normal((5, 4)).astype("float32")
FWD_ROWS = ["0", "1", "2", "3", "4", ""]


def _nothing_attached(model, be) -> bool:
    return all(sum(attached(m).values()) == 0 for _, m in be.named_layers(model))


# -- within one framework ------------------------------------------------------------------------------
def test_identical_models_give_no_divergence(fw):
    a = make(fw)
    d = hookkit.diff(a, copy.deepcopy(a), X, backward=True)
    assert d.first is None and not d
    phases = [r.phase for r in d.rows]
    assert phases[:6] == ["forward"] * 6 and [r.layer for r in d.rows[:6]] == FWD_ROWS
    assert phases.count("output-grad") == 6 and phases.count("param-grad") == 6  # 3 Linear x (weight, bias)
    assert all(r.max_abs == 0 and r.mismatch == 0 and r.cosine == pytest.approx(1.0) for r in d.rows)
    assert d.unpaired == []
    # backward rows run from the loss back: the last layer's gradient comes first, the first layer's last
    back = [r.where for r in d.rows if r.phase != "forward"]
    assert back.index("4") < back.index("2") < back.index("0") and back[-2:] == ["0.weight", "0.bias"]


@pytest.mark.parametrize("k", ["0", "2", "4"])
def test_forward_perturbation_is_found_at_its_layer(fw, k):
    a = make(fw)
    b = copy.deepcopy(a)
    with hookkit.edit(b, k, lambda out, ev: out * 1.001):
        d = hookkit.diff(a, b, X)
    first = d.first
    assert (first.layer, first.layer_b, first.call, first.phase) == (k, k, 0, "forward")
    before = d.rows[: d.rows.index(first)]
    assert before and not any(r.diverged for r in before) if k != "0" else before == []
    # hand computation: b's output at k is a's times 1.001
    with hookkit.capture(a, k) as cap:
        a(fw.tensor(X))
    out = fw.numpy(cap[k])
    assert first.max_abs == pytest.approx(0.001 * np.abs(out).max(), rel=1e-3)
    assert first.rel_err == pytest.approx(1e-3, rel=1e-3)
    rms = np.sqrt(np.mean(out**2))
    assert first.mismatch == pytest.approx(np.mean(0.001 * np.abs(out) > 1e-5 + 1e-4 * np.maximum(np.abs(out), rms)), abs=0.05)
    assert _nothing_attached(a, hookkit.backends.backend_for(a)) and _nothing_attached(b, hookkit.backends.backend_for(b))


@pytest.mark.parametrize("k", ["0", "2"])
def test_gradient_perturbation_is_found_at_its_layer(fw, k):
    a = make(fw)
    b = copy.deepcopy(a)
    with hookkit.on_output_grad(b, k, lambda layer, g: g * 1.01):
        d = hookkit.diff(a, b, X, backward=True)
    assert d.first_in("forward") is None
    first = d.first
    assert (first.layer, first.call, first.phase) == (k, 0, "output-grad")
    assert first.rel_err == pytest.approx(0.01, rel=1e-3)
    back = [r for r in d.rows if r.phase != "forward"]
    assert not any(r.diverged for r in back[: back.index(first)])
    # the layer's own parameters' gradients follow from the changed gradient
    assert {r.part for r in back[back.index(first) + 1 :][:2]} == {"weight", "bias"}
    assert all(r.diverged for r in back[back.index(first) + 1 :][:2])


def test_model_state_left_as_found(fw):
    a, b = make(fw), make(fw)
    be = hookkit.backends.backend_for(a)
    a.train()
    b.eval()
    out = a(fw.tensor(X))
    (out.sum()).backward()
    before = [fw.numpy(p.grad).copy() for p in be.parameters(a)]
    hookkit.diff(a, b, X, backward=True)
    assert a.training and not b.training
    assert all(np.array_equal(fw.numpy(p.grad), g) for p, g in zip(be.parameters(a), before))
    assert all(p.grad is None for p in be.parameters(b))
    assert _nothing_attached(a, be) and _nothing_attached(b, be)


def test_tolerance_follows_the_dtypes(fw):
    a = make(fw)
    b = copy.deepcopy(a)
    if fw.name == "torch":
        b = b.double()
    else:
        b = b.to(dtype="float64")
    d = hookkit.diff(a, b, X, backward=True)
    assert d.first is None  # float32 vs float64: float32's tolerance
    assert {(r.rtol, r.atol) for r in d.rows} == {(1e-4, 1e-5)}
    assert {r.dtype_b for r in d.rows} == {"float64"}
    d = hookkit.diff(a, copy.deepcopy(a), X, rtol=0.0, atol=0.0)
    assert {(r.rtol, r.atol) for r in d.rows} == {(0.0, 0.0)}


def test_bfloat16_loosens_tolerance_downstream():
    torch.manual_seed(0)
    a = mlp("torch")
    b = copy.deepcopy(a).to(torch.bfloat16)
    d = hookkit.diff(a, b, X)
    assert [r.dtype_b for r in d.rows] == ["bfloat16"] * 6
    assert all((r.rtol, r.atol) == (5e-2, 1e-2) for r in d.rows)
    assert d.rows[0].rel_err > 1e-4  # bf16 weights: errors from the first layer


def test_a_layer_called_twice_is_compared_per_call(fw):
    class Twice(fw.Layer):
        def __init__(self):
            super().__init__()
            self.fc = fw.nn.Linear(4, 4)
            self.act = fw.nn.Tanh()

        def forward(self, x):
            return self.fc(self.act(self.fc(x)))

    a = Twice()
    b = copy.deepcopy(a)
    with hookkit.edit(b, "fc", lambda out, ev: out + 0.01, calls=[1]):
        d = hookkit.diff(a, b, X, backward=True)
    assert [(r.layer, r.call) for r in d.rows if r.phase == "forward"] == [("fc", 0), ("act", 0), ("fc", 1), ("", 0)]
    assert (d.first.layer, d.first.call, d.first.phase) == ("fc", 1, "forward")
    # backward: call 1 of fc (and the output, the same tensor), then act, then call 0; the shared weight's gradient once
    back = [(r.where, r.call) for r in d.rows if r.phase != "forward"]
    assert back[:4] == [("fc", 1), ("(root)", 0), ("act", 0), ("fc", 0)] and sorted(back[4:]) == [("fc.bias", 0), ("fc.weight", 0)]


def test_transformers_conv1d_weight_is_transposed_by_type():
    from transformers.pytorch_utils import Conv1D

    torch.manual_seed(0)
    conv = Conv1D(8, 4)  # GPT-2's projection: weight [in=4, out=8]
    linear = torch.nn.Linear(4, 8)
    hookkit.port_weights(conv, linear)
    assert torch.equal(linear.weight, conv.weight.T) and torch.equal(linear.bias, conv.bias)
    assert hookkit.diff(conv, linear, X, backward=True).first is None
    square = Conv1D(4, 4)
    pd = paddle.nn.Linear(4, 4)  # both store [in, out]: copied as is, though the shape cannot tell
    hookkit.port_weights(square, pd)
    assert np.array_equal(pd.weight.numpy(), square.weight.detach().numpy())


# -- pairing -------------------------------------------------------------------------------------------
def test_pairing_by_structure_when_names_differ(fw):
    a = mlp(fw.name)
    b = mlp(fw.name, names=True)
    hookkit.port_weights(a, b, map={"0": "fc1", "2": "fc2", "4": "out"})
    d = hookkit.diff(a, b, X, backward=True)
    assert d.pairing == "structure"
    assert [(r.layer, r.layer_b) for r in d.rows if r.phase == "forward"] == list(zip(FWD_ROWS, ["fc1", "act1", "fc2", "act2", "out", ""]))
    assert d.first is None
    with hookkit.edit(b, "fc2", lambda out, ev: out + 0.1):
        d = hookkit.diff(a, b, X)
    assert (d.first.layer, d.first.layer_b) == ("2", "fc2")


def test_pairing_by_map_dict_glob_and_callable(fw):
    a = mlp(fw.name)
    b = mlp(fw.name, names=True)
    hookkit.port_weights(a, b, map={"0": "fc1", "2": "fc2", "4": "out"})
    for m in ({"0": "fc1", "1": "act1", "2": "fc2", "3": "act2", "4": "out"}, lambda n: {"0": "fc1", "2": "fc2"}.get(n)):
        with hookkit.edit(b, "fc2", lambda out, ev: out + 0.1):
            d = hookkit.diff(a, b, X, map=m, backward=True)
        assert d.pairing == "map"
        assert (d.first.layer, d.first.layer_b, d.first.phase) == ("2", "fc2", "forward")
    # the callable left 1, 3, 4 of a unpaired; b's act1, act2, out too: listed, not skipped
    assert {(u.side, u.layer) for u in d.unpaired if u.phase == "forward"} == {
        ("a", "1"),
        ("a", "3"),
        ("a", "4"),
        ("b", "act1"),
        ("b", "act2"),
        ("b", "out"),
    }


def test_map_with_globs_across_blocks():
    ta = torch_lm(2)
    tb = torch_lm(2)
    hookkit.port_weights(ta, tb)
    d = hookkit.diff(ta, tb, tokens(), map={"blocks.*.mlp.*": "blocks.*.mlp.*"})
    assert d.pairing == "map" and d.first is None
    with hookkit.edit(tb, "blocks.1.mlp.0", lambda out, ev: out * 1.01):
        d = hookkit.diff(ta, tb, tokens(), layers="blocks.*.mlp.*", map={"blocks.*.mlp.*": "blocks.*.mlp.*"})
    assert d.first.layer == "blocks.1.mlp.0" and [r.layer for r in d.rows][:3] == ["blocks.0.mlp.0", "blocks.0.mlp.1", "blocks.0.mlp.2"]


def test_unpaired_calls_are_listed(fw):
    a = mlp(fw.name)
    nn = torch.nn if fw.name == "torch" else paddle.nn
    b = nn.Sequential(*[copy.deepcopy(m) for m in (a if fw.name == "torch" else a.children())], nn.Identity())
    d = hookkit.diff(a, b, X)
    assert d.first is None and len(d.rows) == 6
    assert [(u.side, u.layer, u.call) for u in d.unpaired] == [("b", "5", 0)]


# -- across frameworks ---------------------------------------------------------------------------------
def test_port_weights_round_trip_is_bit_exact_and_outputs_match():
    src = torch_lm(2)
    pd = paddle_lm(2)
    back = torch_lm(2)
    ported = hookkit.port_weights(src, pd)
    assert len(ported.copied) == len(src.state_dict()) and ported.skipped == []
    hookkit.port_weights(pd, back)
    for (n, t), (n2, t2) in zip(src.state_dict().items(), back.state_dict().items()):
        assert n == n2 and torch.equal(t, t2), n
    # Linear weights are transposed by type: Paddle's qkv weight is [in, out]
    assert np.array_equal(pd.blocks[0].attn.qkv.weight.numpy(), src.blocks[0].attn.qkv.weight.detach().numpy().T)
    ids = tokens()
    np.testing.assert_allclose(pd(paddle.to_tensor(ids)).numpy(), src(torch.from_numpy(ids)).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_square_weight_orientation_is_decided_by_type():
    src = torch_lm(1)
    pd = paddle_lm(1)
    hookkit.port_weights(src, pd)
    w = src.blocks[0].attn.proj.weight.detach().numpy()  # square [D, D]: its shape cannot tell
    assert not np.array_equal(w, w.T)
    assert np.array_equal(pd.blocks[0].attn.proj.weight.numpy(), w.T)


def test_diff_across_frameworks_finds_the_changed_block():
    src = torch_lm(3)
    pd = paddle_lm(3)
    hookkit.port_weights(src, pd)
    d = hookkit.diff(src, pd, tokens(), backward=True)
    assert d.first is None, d.first
    assert d.pairing == "name" and d.frameworks == ("torch", "paddle")
    assert {"forward", "output-grad", "param-grad"} == {r.phase for r in d.rows}
    assert not [u for u in d.unpaired if u.phase != "param-grad" or u.side != "b"]
    # a weight scaled by 1.001 inside block 1: found there, forwards and backwards
    w = pd.blocks[1].mlp[2].weight
    w.set_value(w.numpy() * 1.001)
    d = hookkit.diff(src, pd, tokens(), backward=True)
    assert (d.first.layer, d.first.phase) == ("blocks.1.mlp.2", "forward")
    assert d.first_in("param-grad").layer.startswith("blocks.1.") or d.first_in("param-grad").layer in ("head", "ln_f")
    assert not any(r.diverged for r in d.rows[: d.rows.index(d.first)])


def test_local_mode_names_the_changed_layer_forwards_and_backwards():
    src = torch_lm(3)
    pd = paddle_lm(3)
    hookkit.port_weights(src, pd)
    w = pd.blocks[1].mlp[2].weight
    w.set_value(w.numpy() * 1.001)
    d = hookkit.diff(src, pd, tokens(), backward=True, local=True)
    assert d.local and (d.first.layer, d.first.phase) == ("blocks.1.mlp.2", "forward")
    # every leaf of b ran on a's inputs: only the changed layer and the containers holding (or adding to) it differ
    assert {r.layer for r in d.rows if r.phase == "forward" and r.diverged} == {"blocks.1.mlp.2", "blocks.1.mlp", "blocks.1", "blocks.2"}
    # backward, each leaf handed a's gradient on: only the gradient the changed weight computes differs
    assert [(r.where, r.phase) for r in d.rows if r.phase != "forward" and r.diverged] == [("blocks.1.mlp.1", "output-grad")]
    assert d.first_in("backward").rel_err == pytest.approx(1e-3, rel=1e-2)
    assert _nothing_attached(pd, hookkit.backends.backend_for(pd))
    # code between two leaves (the attention's head split): named at the input b computed for the next leaf
    w.set_value(w.numpy() / 1.001)
    pd.blocks[1].attn.heads = 1
    d = hookkit.diff(src, pd, tokens(), backward=True, local=True)
    assert (d.first.where, d.first.part) == ("blocks.1.attn.proj (input)", "input")
    assert [r.where for r in d.rows if r.diverged] == ["blocks.1.attn.proj (input)", "blocks.1.attn.qkv"]
    assert hookkit.diff(src, pd, tokens()).first.where == "blocks.1.attn.proj"  # without local: the next leaf's output
    # without local=True the same change spreads to every row after it (forward) and from the loss on (backward)
    spread = hookkit.diff(src, pd, tokens(), backward=True)
    assert spread.first_in("backward").where == "head.weight" and sum(r.diverged for r in spread.rows) > 50


def test_gradient_edit_in_paddle_found_across_frameworks():
    src = torch_lm(2)
    pd = paddle_lm(2)
    hookkit.port_weights(src, pd)
    with hookkit.on_output_grad(pd, "blocks.0.mlp.1", lambda layer, g: g * 1.01):
        d = hookkit.diff(src, pd, tokens(), backward=True)
    assert d.first_in("forward") is None
    assert (d.first.layer, d.first.phase) == ("blocks.0.mlp.1", "output-grad")
    back = [r for r in d.rows if r.phase != "forward"]
    assert not any(r.diverged for r in back[: back.index(d.first)])


def test_resnet18_paddle_vision_to_torch_twin():
    paddle.seed(0)
    pd = paddle.vision.models.resnet18(num_classes=10)
    for _, layer in pd.named_sublayers():
        if isinstance(layer, paddle.nn.BatchNorm2D):  # running statistics that matter
            layer._mean.set_value(np.random.default_rng(0).normal(0, 0.1, layer._mean.shape).astype("float32"))
            layer._variance.set_value(np.random.default_rng(1).uniform(0.5, 1.5, layer._variance.shape).astype("float32"))
    tm = TorchResNet18()
    ported = hookkit.port_weights(pd, tm)
    assert len(ported.skipped) == 20 and all(s.endswith("num_batches_tracked") for s in ported.skipped)
    assert torch.equal(tm.bn1.running_var, torch.from_numpy(pd.bn1._variance.numpy()))
    assert torch.equal(tm.fc.weight, torch.from_numpy(pd.fc.weight.numpy().T))
    x = np.random.default_rng(2).standard_normal((2, 3, 32, 32)).astype("float32")
    d = hookkit.diff(pd, tm, x)
    assert d.first is None, d.first
    assert len(d.rows) > 60 and d.unpaired == []
    np.testing.assert_allclose(
        tm.eval()(torch.from_numpy(x)).detach().numpy(), pd.eval()(paddle.to_tensor(x)).numpy(), rtol=1e-4, atol=1e-5
    )


# -- errors --------------------------------------------------------------------------------------------
def test_error_when_nothing_pairs():
    a = mlp("torch")
    b = torch.nn.Sequential(collections_od(("lin", torch.nn.Linear(4, 2))))
    with pytest.raises(hookkit.HookkitError, match="no call of a pairs with a call of b"):
        hookkit.diff(a, b, X)
    assert _nothing_attached(a, hookkit.backends.backend_for(a)) and _nothing_attached(b, hookkit.backends.backend_for(b))


def collections_od(*items):
    from collections import OrderedDict

    return OrderedDict(items)


def test_error_for_inputs_that_cannot_be_converted():
    a, b = mlp("torch"), mlp("paddle")
    with pytest.raises(ArgumentTypeError, match=r"diff\(\): inputs\[0\] must be"):
        hookkit.diff(a, b, [object()])
    with pytest.raises(ArgumentTypeError, match="numeric values"):
        hookkit.diff(a, b, np.array(["a", "b"]))
    with pytest.raises(hookkit.HookkitError, match="inputs"):
        hookkit.diff(a, b, ())


def test_error_for_a_map_naming_a_missing_layer():
    a, b = mlp("torch"), mlp("torch", names=True)
    with pytest.raises(hookkit.LayerNotFound, match=r"'7'.*map key, in model a"):
        hookkit.diff(a, b, X, map={"7": "fc1"})
    with pytest.raises(hookkit.LayerNotFound, match=r"'fc9'.*in model b.*closest:.*fc1"):
        hookkit.diff(a, b, X, map={"0": "fc9"})
    with pytest.raises(ArgumentTypeError, match="map"):
        hookkit.diff(a, b, X, map=3)


def test_argument_errors_and_a_failing_forward_leave_nothing_attached():
    a = mlp("torch")
    b = copy.deepcopy(a)
    with pytest.raises(hookkit.HookkitError, match="b must be a model other than a"):
        hookkit.diff(a, a, X)
    with pytest.raises(ArgumentTypeError, match="backward"):
        hookkit.diff(a, b, X, backward="yes")
    with pytest.raises(hookkit.HookkitError, match="rtol"):
        hookkit.diff(a, b, X, rtol=-1)
    with pytest.raises(hookkit.HookkitError, match="local must be False when layers pair by structure"):
        hookkit.diff(a, mlp("torch", names=True), X, local=True)
    with pytest.raises(RuntimeError):
        hookkit.diff(a, b, np.zeros((2, 7), "float32"))  # wrong input width: the model raises
    be = hookkit.backends.backend_for(a)
    assert _nothing_attached(a, be) and _nothing_attached(b, be) and a.training


def test_port_weights_checks_everything_before_copying():
    src = torch_lm(2)
    dst = paddle_lm(3)
    before = {n: p.numpy().copy() for n, p in dst.named_parameters()}
    with pytest.raises(hookkit.PortError, match=r"dst blocks\.2\.ln1\.weight would not be written"):
        hookkit.port_weights(src, dst)
    assert all(np.array_equal(p.numpy(), before[n]) for n, p in dst.named_parameters())
    wide = paddle.nn.Linear(4, 9)
    with pytest.raises(hookkit.PortError, match=r"weight \[8, 4\] vs weight \[4, 9\]: shapes differ"):
        hookkit.port_weights(torch.nn.Linear(4, 8), wide)
    with pytest.raises(hookkit.LayerNotFound, match="map key"):
        hookkit.port_weights(src, paddle_lm(2), map={"blocks.9": "blocks.0"})


# -- output: table, plot, report ----------------------------------------------------------------------
def test_table_plot_and_report(tmp_path):
    import matplotlib.pyplot as plt

    a = mlp("torch")
    b = copy.deepcopy(a)
    with hookkit.edit(b, "2", lambda out, ev: out * 1.5):
        d = hookkit.diff(a, b, X, backward=True)
    text = str(d)
    assert "<< first divergence" in text and "First divergence: forward of 2, call 0" in text
    line = next(ln for ln in text.splitlines() if "<< first divergence" in ln)
    assert line.split()[1:3] == ["forward", "2"]
    assert "^ grows" in text
    assert "The backward pass diverges too (first: param-grad of 4.weight)" in text
    open_before = set(plt.get_fignums())  # another test's figure may be open: the plot adds none
    fig = d.plot()
    assert set(plt.get_fignums()) == open_before and len(fig.axes) == 1
    assert {t.get_text() for t in fig.axes[0].get_legend().get_texts()} >= {"forward output", "output gradient", "parameter gradient"}
    path = hookkit.report(d, tmp_path / "r.html")
    page = path.read_text()
    assert "Where the two runs diverge" in page and "first divergence" in page and "data:image/png" in page
    data = d.to_dict()
    assert data["rows"][data["first"]]["layer"] == "2"


# -- command line ---------------------------------------------------------------------------------------
def test_cli_diff(capsys):
    from hookkit.apps.cli import main

    code = main(["diff", "test_diff:torch_mlp", "test_diff:paddle_mlp", "--input-size", "3,4", "--port", "--backward"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "No divergence" in out and "param-grad" in out
    code = main(["diff", "test_diff:torch_mlp", "test_diff:paddle_mlp", "--input-size", "3,4", "--port", "--local"])
    assert code == 0 and "local: each leaf of b ran on a's inputs" in capsys.readouterr().out
    code = main(["diff", "test_diff:torch_mlp", "test_diff:paddle_mlp", "--input-size", "3,4"])
    assert code == 1 and "First divergence: forward of 0" in capsys.readouterr().out
    code = main(["diff", "test_diff:torch_mlp", "test_diff:nope", "--input-size", "3,4"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("hookkit diff: error:") and len(err.strip().splitlines()) == 1
    code = main(["diff", "test_diff:torch_mlp", "test_diff:paddle_mlp", "--input-size", "3,5"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("hookkit diff: error:") and len(err.strip().splitlines()) == 1
