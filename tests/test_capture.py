"""capture: per-call records, nested outputs, gradients, devices, errors; on a transformers GPT-2 too."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit
from hookkit.core.errors import InvalidArgument
from hookkit.observers.capture import TopK


@pytest.fixture(scope="module")
def gpt2():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100, n_positions=32)).eval()
    return model


def test_capture_last_output_and_every_call(fw):
    model = fw.small_cnn()
    x = fw.randn(3, 1, 8, 8)
    with hookkit.capture(model, ["conv1", "fc"]) as cap:
        y = model(x)
        model(x)
    assert list(cap) == ["conv1", "fc"] and len(cap) == 2
    np.testing.assert_allclose(fw.numpy(cap["fc"]), fw.numpy(y), rtol=1e-6)
    np.testing.assert_allclose(fw.numpy(cap["conv1"]), fw.numpy(model.conv1(x)), rtol=1e-6)
    assert [r.step for r in cap.calls("fc")] == [0, 1]
    assert not fw.requires_grad(cap["fc"])  # detached by default
    cap.clear()
    assert "fc" not in cap


def test_capture_grads_match_autograd(fw):
    model = fw.mlp((4, 8, 3))
    x = fw.randn(6, 4)
    with hookkit.capture(model, hookkit.LEAVES, grads=True) as cap:
        y = model(x)
        (y * y).sum().backward()
    np.testing.assert_allclose(fw.numpy(cap.grads["2"]), 2 * fw.numpy(y), rtol=1e-5)
    w = fw.numpy(model[2].weight)
    g_hidden = 2 * fw.numpy(y) @ (w.T if fw.name == "paddle" else w)
    np.testing.assert_allclose(fw.numpy(cap.grads["1"]), g_hidden, rtol=1e-4, atol=1e-6)
    assert set(cap.grads.keys()) == {"0", "1", "2"}
    with pytest.raises(KeyError, match="grads=True"):
        hookkit.capture(model, "0").grads["0"]


def test_capture_inputs_kwargs_clone_and_to_cpu(fw):
    model = fw.mlp()
    x = fw.randn(2, 5)
    with hookkit.capture(model, "2", inputs=True, to="cpu", clone=True) as cap:
        model(x)
    rec = cap.calls("2")[0]
    np.testing.assert_allclose(fw.numpy(rec.inputs[0]), fw.numpy(model[1](model[0](x))), rtol=1e-6)
    assert rec.kwargs == {} and "cpu" in str(rec.output.place if fw.name == "paddle" else rec.output.device).lower()


def test_clone_protects_against_later_inplace_ops(torch_fw):
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(inplace=True))
    x = torch.tensor([[-1.0, 2.0, -3.0]])
    with hookkit.capture(model, "0") as shared, hookkit.capture(model, "0", clone=True) as cloned:
        model(x)
    raw = model[0](x).detach()
    np.testing.assert_allclose(cloned["0"].numpy(), raw.numpy(), rtol=1e-6)
    assert (shared["0"] >= 0).all()  # without clone, the in-place ReLU changed what was kept


def test_capture_errors_name_layers(fw):
    model = fw.mlp()
    cap = hookkit.capture(model, ["0", "2"])
    with pytest.raises(KeyError, match="has not run"):
        cap["0"]
    with pytest.raises(KeyError, match="'3' is not captured"):
        cap["3"]
    cap.remove()
    assert repr(cap).endswith("removed>")


def test_capture_gpt2_blocks_by_glob_keeps_tuples_whole(gpt2):
    import torch

    ids = torch.randint(0, 100, (2, 10))
    with hookkit.capture(gpt2, "transformer.h.*", grads=True) as cap:
        out = gpt2(input_ids=ids, labels=ids)
        out.loss.backward()
    assert list(cap) == ["transformer.h.0", "transformer.h.1"]
    block_out = cap["transformer.h.1"]
    hidden = block_out[0] if isinstance(block_out, tuple) else block_out
    assert hidden.shape == (2, 10, 32)
    grad = cap.grads["transformer.h.1"]
    grad_hidden = grad[0] if isinstance(grad, tuple) else grad
    assert grad_hidden.shape == (2, 10, 32) and torch.isfinite(grad_hidden).all()
    gpt2.zero_grad()


def test_capture_model_output_dataclass_and_kwargs(gpt2):
    import torch

    ids = torch.randint(0, 100, (1, 6))
    mask = torch.ones_like(ids)
    with hookkit.capture(gpt2, hookkit.ALL, inputs=True) as cap, torch.no_grad():
        out = gpt2(input_ids=ids, attention_mask=mask)
    root = cap.calls("")[0]
    assert type(root.output).__name__ == "CausalLMOutputWithCrossAttentions"
    torch.testing.assert_close(root.output.logits, out.logits)
    assert set(root.kwargs) >= {"input_ids", "attention_mask"}
    assert len(cap.calls("transformer.h.0.attn")) == 1
    assert "transformer.h.0.attn.c_attn" in cap and cap["transformer.h.0.attn.c_attn"].shape == (1, 6, 96)


def test_capture_nested_dict_outputs(fw):
    fwk = fw

    class Heads(fwk.Layer):
        def __init__(self):
            super().__init__()
            self.a = fwk.linear(3, 2)
            self.b = fwk.linear(3, 4)

        def forward(self, x):
            return {"a": self.a(x), "pair": (self.b(x), x)}

    class Model(fwk.Layer):
        def __init__(self):
            super().__init__()
            self.heads = Heads()

        def forward(self, x):
            out = self.heads(x)
            return out["a"].sum() + out["pair"][0].sum()

    model = Model()
    x = fw.randn(2, 3)
    with hookkit.capture(model, "heads", grads=True) as cap:
        model(x).backward()
    out = cap["heads"]
    assert set(out) == {"a", "pair"} and tuple(out["pair"][0].shape) == (2, 4)
    grad = cap.grads["heads"]
    assert np.all(fw.numpy(grad["a"]) == 1) and np.all(fw.numpy(grad["pair"][0]) == 1)
    assert grad["pair"][1] is None  # the input passed through takes no gradient


@pytest.mark.slow
def test_capture_under_torch_compile_keeps_every_call_and_grads(torch_fw):
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(3, 4)
    with hookkit.capture(model, ["0", "2"], grads=True) as cap:
        compiled = torch.compile(model, backend="eager")
        compiled(x).sum().backward()
        compiled(x)
    assert len(cap.calls("0")) == 2
    expected = (torch.ones(3, 2) @ model[2].weight) * (model[0](x) > 0)
    torch.testing.assert_close(cap.grads["0"], expected.detach())
    assert cap.calls("0")[1].grad is None  # the second forward had no backward


def test_capture_keep_bounds_what_is_held(fw):
    model = fw.shared_block_model()  # "block" runs three times per forward
    xs = [fw.randn(2, 4) for _ in range(5)]
    with hookkit.capture(model, ["block", "out"], keep="last") as last, hookkit.capture(model, ["block", "out"], keep=2) as two:
        with hookkit.capture(model, "out") as every:
            for x in xs:
                y = model(x)
    assert [r.step for r in last.calls("block")] == [4, 4, 4] and [r.call for r in last.calls("block")] == [0, 1, 2]
    np.testing.assert_allclose(fw.numpy(last["out"]), fw.numpy(y), rtol=1e-6)
    assert [r.step for r in two.calls("block")] == [3, 3, 3, 4, 4, 4] and [r.step for r in two.calls("out")] == [3, 4]
    assert len(every.calls("out")) == 5
    with hookkit.capture(model, "out", keep=2) as cap:
        model(xs[0])
        model(xs[1])
        cap.clear()
        model(xs[2])
        assert len(cap.calls("out")) == 1  # cleared: the steps held before count no more
    with pytest.raises(ValueError, match=r"capture\(\): keep must be 'all', 'last' or a number"):
        hookkit.capture(model, "out", keep=0)
    with pytest.raises(ValueError, match=r"capture\(\): keep must be .*; got 'first'"):
        hookkit.capture(model, "out", keep="first")


def test_capture_keep_last_with_grads(fw):
    model = fw.mlp((4, 6, 2))
    with hookkit.capture(model, "0", grads=True, keep="last") as cap:
        for _ in range(3):
            model(fw.randn(3, 4, requires_grad=True)).sum().backward()
    assert len(cap.calls("0")) == 1 and cap.calls("0")[0].step == 2
    assert tuple(cap.grads["0"].shape) == (3, 6)


def test_capture_detaches_model_outputs_and_caches(gpt2):
    """HF ModelOutput holding a DynamicCache (past_key_values), caches passed as inputs too: no
    tensor kept by a detached capture takes part in autograd."""
    import dataclasses
    from collections import namedtuple

    import torch

    def tensors(obj, seen):
        if id(obj) in seen:
            return []
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            return [obj]
        if isinstance(obj, dict):
            obj = list(obj.values())
        elif dataclasses.is_dataclass(obj) or (hasattr(obj, "__dict__") and not isinstance(obj, type)):
            obj = list(vars(obj).values())
        if isinstance(obj, (list, tuple)):
            return [t for o in obj for t in tensors(o, seen)]
        return []

    ids = torch.randint(0, 100, (2, 6))
    with hookkit.capture(gpt2, hookkit.ALL, inputs=True) as cap:
        out = gpt2(input_ids=ids, use_cache=True)
        gpt2(input_ids=ids[:, -1:], past_key_values=out.past_key_values, use_cache=True)
    roots = cap.calls("")
    assert type(roots[0].output.past_key_values).__name__ == "DynamicCache"
    kept = tensors([(r.output, r.inputs, r.kwargs) for name in cap for r in cap.calls(name)], set())
    assert len(kept) > 50 and not any(t.requires_grad or t.grad_fn is not None for t in kept)
    assert sum(t.requires_grad for t in tensors(out, set())) > 0  # the model's own output is untouched
    cache = roots[0].output.past_key_values
    keys = cache.layers[0].keys
    torch.testing.assert_close(keys, out.past_key_values.layers[0].keys[:, :, :6].detach())

    # plain containers of one's own: nested dicts, dataclasses, namedtuples
    Pair = namedtuple("Pair", "a b")

    @dataclasses.dataclass
    class Box:
        x: torch.Tensor
        extra: dict

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x):
            h = self.lin(x)
            return Box(h, {"pair": Pair(h * 2, [h, {"deep": h + 1}])})

    model = torch.nn.Sequential(Wrap())
    with hookkit.capture(model, "0") as cap:
        model(torch.randn(2, 3))
    kept = tensors(cap["0"], set())
    assert isinstance(cap["0"], Box) and isinstance(cap["0"].extra["pair"], Pair)
    assert len(kept) == 4 and not any(t.requires_grad for t in kept)


def _top_by_hand(dense: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(-dense, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(dense, order, -1), order


def test_capture_top_k_keeps_the_largest_values_and_their_indices(fw):
    model = fw.mlp((5, 10, 3))
    x = fw.randn(4, 5)
    with hookkit.capture(model, ["0", "2"]) as dense, hookkit.capture(model, ["0", "2"], top_k=3) as top:
        model(x)
        model(x * 2)
    for name in ("0", "2"):
        rec = top[name]
        assert isinstance(rec, TopK) and not fw.requires_grad(rec.values)
        values, indices = (fw.numpy(t) for t in rec)  # tensors of the framework, [4, 3] each
        assert values.shape == indices.shape == (4, 3)
        want_v, want_i = _top_by_hand(fw.numpy(dense[name]), 3)
        np.testing.assert_array_equal(values, want_v)  # topk copies the values: equal, not close
        np.testing.assert_array_equal(indices, want_i)
    first = top.calls("0")[0].output  # every call has its own record
    np.testing.assert_array_equal(fw.numpy(first.values), _top_by_hand(fw.numpy(dense.calls("0")[0].output), 3)[0])


def test_capture_top_k_reads_the_tensor_at_index_and_works_with_keep_and_to(fw):
    fwk = fw

    class Pair(fwk.Layer):
        def __init__(self):
            super().__init__()
            self.a = fwk.linear(3, 2)
            self.b = fwk.linear(3, 6)

        def forward(self, x):
            return self.a(x), self.b(x)

    model = Pair()
    x = fw.randn(2, 5, 3)
    with hookkit.capture(model, "", top_k=4, index=1, keep="last", to="cpu") as cap:
        model(x)
        _, b = model(x + 1)
    assert len(cap.calls("")) == 1
    values, indices = cap[""]
    want_v, want_i = _top_by_hand(fw.numpy(b), 4)
    np.testing.assert_array_equal(fw.numpy(values), want_v)
    np.testing.assert_array_equal(fw.numpy(indices), want_i)
    with pytest.raises(InvalidArgument, match="sequence"):
        cap.sequence("")


def test_capture_top_k_errors_name_the_argument_and_the_layer(fw):
    model = fw.mlp((5, 10, 3))
    for bad in (0, -1, True, 2.0, "3"):
        with pytest.raises(InvalidArgument, match=r"capture\(\).*top_k"):
            hookkit.capture(model, "0", top_k=bad)
    with pytest.raises(InvalidArgument, match="outputs=False"):
        hookkit.capture(model, "0", top_k=2, outputs=False, inputs=True)
    with hookkit.capture(model, "2", top_k=4) as cap, pytest.raises(InvalidArgument, match=r"top_k=4.*'2'.*\[2, 3\].*1\.\.3"):
        model(fw.randn(2, 5))
    assert not cap.calls("2")
