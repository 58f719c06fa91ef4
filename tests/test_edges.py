"""Trust at the edges: frozen weights, several backwards of one forward, nested forwards, call
order, copies that can be cleaned, names and scopes. Each test is one case of a class of training
patterns (LoRA, multi-task losses, GAN steps, reference passes, EMA copies, mixed precision)."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit
from hookkit.core.router import attached
from models import hooks_left


def freeze(fw, p) -> None:
    if fw.name == "torch":
        p.requires_grad_(False)
    else:
        p.stop_gradient = True


def lora_model(fw):
    """A LoRA-style block: a frozen base Linear plus a trainable low-rank update, then a head."""

    class LoRALinear(fw.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.base = fw.linear(6, 6)
            self.lora_a = fw.linear(6, 2)
            self.lora_b = fw.linear(2, 6)
            for p in fw.params(self.base):
                freeze(fw, p)

        def forward(self, x):
            return self.base(x) + self.lora_b(self.lora_a(x))

    class Net(fw.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.q = LoRALinear()
            self.head = fw.linear(6, 3)

        def forward(self, x):
            return self.head(self.q(x))

    return Net()


def weights(fw, model) -> dict[str, np.ndarray]:
    return {k: fw.numpy(v).copy() for k, v in model.state_dict().items()}


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


# -- 1. frozen parameters ----------------------------------------------------------------------------


def test_prune_a_frozen_base_weight(fw):
    """A LoRA base layer is frozen: pruning it needs no gradient hook, and works."""
    model = lora_model(fw)
    before = weights(fw, model)
    p = hookkit.prune(model, ["q.base", "head"], amount=0.5)
    assert attached(model.q.base)["param_grad"] == 0 and attached(model.head)["param_grad"] == 1
    base = fw.numpy(model.q.base.weight)
    assert (base == 0).sum() == base.size // 2
    opt = fw.adam(model, lr=0.1)
    for _ in range(2):
        model(fw.randn(4, 6)).sum().backward()
        fw.step(opt)
    np.testing.assert_array_equal(fw.numpy(model.q.base.weight), base)  # frozen: untouched by training
    assert (fw.numpy(model.head.weight)[fw.numpy(p.masks["head.weight"]) == 0] == 0).all()
    p.remove()
    np.testing.assert_array_equal(fw.numpy(model.q.base.weight), before["q.base.weight"])
    assert not hooks_left(model)


@pytest.mark.parametrize("fails_at", ["attach", "mask"])
def test_refused_prune_leaves_every_weight_and_hook(fw, monkeypatch, fails_at):
    """A call that fails half-way (here: on the second layer) changes nothing at all."""
    from hookkit.interventions import pruning

    model = fw.mlp((5, 8, 8, 3))
    before = weights(fw, model)
    seen = []
    name = "_mask_in_place" if fails_at == "mask" else "attach"
    original = getattr(pruning, name)

    def failing(*args, **kwargs):
        seen.append(1)
        if len(seen) == 2:
            raise RuntimeError("refused")
        return original(*args, **kwargs)

    monkeypatch.setattr(pruning, name, failing)
    with pytest.raises(RuntimeError, match="refused"):
        hookkit.prune(model, ["0", "2", "4"], amount=0.5)
    monkeypatch.setattr(pruning, name, original)
    assert_same(weights(fw, model), before)
    assert not hooks_left(model)
    assert all(attached(m)["param_grad"] == 0 for _, m in hookkit.select(model, hookkit.WITH_PARAMS))


def test_tied_weight_is_pruned_and_restored_once(fw):
    """Two selected layers share one weight (tied embeddings): remove() gives back its values."""
    model = fw.mlp((4, 4, 4))
    model[2].weight = model[0].weight
    before = fw.numpy(model[0].weight).copy()
    p = hookkit.prune(model, ["0", "2"], amount=0.5)
    assert (fw.numpy(model[2].weight) == 0).sum() == 8
    np.testing.assert_array_equal(fw.numpy(p.masks["0.weight"]), fw.numpy(p.masks["2.weight"]))
    p.remove()
    np.testing.assert_array_equal(fw.numpy(model[0].weight), before)
    assert not hooks_left(model)


def test_parameter_features_on_frozen_weights(fw):
    """clip_grad and GradientStats on a frozen base: no hook on it, the trainable parts served."""
    model = lora_model(fw)
    x = fw.randn(4, 6)
    with hookkit.GradientStats(model, ["q.base", "q.lora_a", "head"]) as gstats, hookkit.clip_grad(model, "q", value=1e-4, target="params"):
        assert attached(model.q.base)["param_grad"] == 0
        model(x).sum().backward()
    assert len(gstats.param_stats("q.base")["step"]) == 0
    assert list(gstats.param_stats("q.lora_a")["step"]) == [0]
    assert len(gstats.layer_stats("q.base")["step"]) == 0  # nothing upstream trains: no gradient reaches it
    assert list(gstats.layer_stats("head")["step"]) == [0]
    assert np.abs(fw.grad(model.q.lora_a.weight)).max() <= 1e-4 + 1e-9
    assert fw.grad(model.q.base.weight) is None
    assert not hooks_left(model)


# -- 2. several backwards of one forward ------------------------------------------------------------


def clear_grads(fw, model) -> None:
    for p in fw.params(model):
        if fw.name == "torch":
            p.grad = None
        else:
            p.clear_gradient()


def norm(fw, ts) -> float:
    return float(np.sqrt(sum((fw.numpy(t).astype(np.float64) ** 2).sum() for t in ts)))


def test_param_stats_one_row_per_backward(fw):
    """Two losses of one forward, backward after backward: one row each, each that backward's gradient."""
    model = fw.mlp((4, 6, 2))
    x = fw.randn(5, 4)
    with hookkit.GradientStats(model) as gstats:
        for _ in range(2):
            out = model(x)
            (out * out).sum().backward(retain_graph=True)
            ga = norm(fw, [p.grad for p in fw.params(model[2])])
            clear_grads(fw, model)
            (3 * out).sum().backward()
            gb = norm(fw, [p.grad for p in fw.params(model[2])])
            clear_grads(fw, model)
    p = gstats.param_stats("2")
    assert list(p["step"]) == [0, 0, 1, 1] and list(p["backward"]) == [0, 1, 0, 1]
    np.testing.assert_allclose(p["norm"][2:], [ga, gb], rtol=1e-5)
    out = fw.numpy(model(x)).astype(np.float64)
    layer = gstats.layer_stats("2")  # the output gradient: 2 * out, then 3 everywhere
    assert list(layer["step"]) == [0, 0, 1, 1] and list(layer["backward"]) == [0, 1, 0, 1] and list(layer["call"]) == [0] * 4
    np.testing.assert_allclose(layer["norm"][2:], [np.linalg.norm(2 * out), 3 * np.sqrt(out.size)], rtol=1e-5)
    names, steps, norms = gstats.gradient_flow()  # per step: the backwards combined
    np.testing.assert_allclose(norms[names.index("2"), 1], np.hypot(*layer["norm"][2:].astype(np.float64)), rtol=1e-6)


def test_one_backward_of_two_forwards_is_backward_zero_of_each(fw):
    """Gradient accumulation over one summed loss: each forward's output rows are its backward 0; a
    parameter's gradient of that backward is one tensor, recorded once, under the latest forward."""
    model = fw.mlp((4, 6, 2))
    with hookkit.GradientStats(model) as gstats:
        loss = model(fw.randn(3, 4)).sum() + model(fw.randn(3, 4)).sum()
        loss.backward()
        model(fw.randn(3, 4)).sum().backward()
    p = gstats.param_stats("0")
    assert list(p["step"]) == [1, 2] and list(p["backward"]) == [0, 0]
    out = gstats.layer_stats("0")
    assert list(out["step"]) == [0, 1, 2] and list(out["backward"]) == [0, 0, 0]


def test_output_gradient_rows_under_create_graph(fw):
    """A gradient penalty: the first-order gradient taken with create_graph, then the penalty's
    backward. Each backward that reaches a layer's output is its own row."""
    model = fw.sequential(fw.linear(3, 4), fw.nn.Tanh(), fw.linear(4, 1))
    x = fw.randn(5, 3, requires_grad=True)
    with hookkit.GradientStats(model, hookkit.LEAVES) as gstats:
        loss = model(x).sum()
        if fw.name == "torch":
            import torch

            (gx,) = torch.autograd.grad(loss, x, create_graph=True)
        else:
            import paddle

            (gx,) = paddle.grad(loss, x, create_graph=True)
        (gx * gx).sum().backward()
    last = gstats.layer_stats("2")  # the penalty does not depend on the last layer's output
    assert list(last["backward"]) == [0]
    np.testing.assert_allclose(last["norm"], [np.sqrt(5)], rtol=1e-6)  # d sum / d out: ones
    tanh = gstats.layer_stats("1")
    assert list(tanh["step"]) == [0, 0] and list(tanh["backward"]) == [0, 1]
    w2 = fw.numpy(model[2].weight).ravel()
    np.testing.assert_allclose(tanh["norm"][0], np.sqrt(5) * np.linalg.norm(w2), rtol=1e-5)  # first order: w2 per sample
    p = gstats.param_stats("0")  # parameters take a gradient only in the penalty's backward
    assert list(p["backward"]) == [1]


# -- 7. files from elsewhere --------------------------------------------------------------------------


def _two_shards(tmp_path):
    from hookkit.observers import features as fmt

    out = tmp_path / "f"
    out.mkdir()
    shards = []
    for k in range(2):
        fmt.write_shard(str(out / fmt.shard_name(k)), {"fc": [np.full((2, 3), k, np.float32)]})
        shards.append({"file": fmt.shard_name(k), "count": 2, "batch_sizes": [2]})
    index = {
        "format": fmt.FORMAT,
        "version": 1,
        "metadata": {},
        "layers": {"fc": {"shape": [3], "dtype": "float32"}},
        "shards": shards,
        "count": 4,
        "batches": 2,
        "complete": True,
    }
    fmt.write_json(str(out / "index.json"), index)
    return out, index


@pytest.mark.parametrize(
    "order, match",
    [
        ([0, 0], r"lists shard 'shard-00000.safetensors' twice \(entries 0 and 1\)"),
        ([1, 0], r"lists shard 'shard-00001.safetensors' as entry 0; .* expected 'shard-00000.safetensors'"),
        ([1], r"expected 'shard-00000.safetensors'"),
    ],
)
def test_load_features_refuses_an_index_with_shards_twice_or_out_of_order(tmp_path, order, match):
    """Rows duplicated or reordered are refused, naming the file, never returned."""
    from hookkit.observers import features as fmt

    out, index = _two_shards(tmp_path)
    np.testing.assert_array_equal(np.asarray(hookkit.load_features(out)["fc"])[:, 0], [0, 0, 1, 1])
    shards = [index["shards"][k] for k in order]
    fmt.write_json(str(out / "index.json"), index | {"shards": shards, "count": 2 * len(order), "batches": len(order)})
    with pytest.raises(hookkit.FeaturesError, match=match):
        hookkit.load_features(out)


def test_load_features_refuses_a_wrong_batch_count(tmp_path):
    from hookkit.observers import features as fmt

    out, index = _two_shards(tmp_path)
    fmt.write_json(str(out / "index.json"), index | {"batches": 5})
    with pytest.raises(hookkit.FeaturesError, match="counts 5 batches but its shards list 2"):
        hookkit.load_features(out)
