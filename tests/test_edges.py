"""Trust at the edges: frozen weights, several backwards of one forward, nested forwards, call
order, copies that can be cleaned, names and scopes. Each test is one case of a class of training
patterns (LoRA, multi-task losses, GAN steps, reference passes, EMA copies, mixed precision)."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit
from hookkit.core.router import attached
from models import hooks_left
from tolerance import assert_close


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


# -- 8. the extract command line: one model per folder -------------------------------------------------

GPT2_KW = [
    "--kw",
    "n_layer=1",
    "--kw",
    "n_embd=16",
    "--kw",
    "n_head=2",
    "--kw",
    "vocab_size=100",
    "--kw",
    "n_positions=16",
    "--kw",
    "bos_token_id=0",
    "--kw",
    "eos_token_id=0",
]  # ids in the vocabulary: transformers warns (once a process) otherwise


def _gpt2_args(tmp_path, data="ids.npy", out="f", kw=True):
    return ["extract", "transformers:GPT2Model", *(GPT2_KW if kw else []), "--layers", "h.0", "--reduce", "mean:1", "--batch-size", "8"] + [
        "--shard-size",
        "200B",
        "--data",
        str(tmp_path / data),
        "--out",
        str(tmp_path / out),
    ]


@pytest.fixture
def ids_file(tmp_path):
    np.save(tmp_path / "ids.npy", np.random.default_rng(0).integers(0, 100, (40, 8)))
    return tmp_path


def test_cli_resume_gets_the_same_random_weights_and_refuses_others(ids_file, capsys):
    """A killed run re-run as the docs say writes its later rows from the same model: the random
    weights come from --seed (default 0); another seed in the same folder is refused, naming the weights."""
    import json

    from hookkit.apps.cli import main
    from hookkit.observers import features as fmt

    tmp = ids_file
    assert main(_gpt2_args(tmp)) == 0
    whole = np.asarray(hookkit.load_features(tmp / "f")["h.0"]).copy()
    # what kill -9 leaves: an index that lists the first shards only, not complete
    index = json.loads((tmp / "f" / "index.json").read_text())
    assert len(index["shards"]) > 2
    kept = index["shards"][:2]
    index.update(shards=kept, count=sum(s["count"] for s in kept), batches=sum(len(s["batch_sizes"]) for s in kept), complete=False)
    fmt.write_json(str(tmp / "f" / "index.json"), index)
    assert main(_gpt2_args(tmp)) == 0
    np.testing.assert_array_equal(np.asarray(hookkit.load_features(tmp / "f")["h.0"]), whole)
    capsys.readouterr()
    assert main([*_gpt2_args(tmp), "--seed", "1"]) == 2
    err = capsys.readouterr().err
    assert "weights:" in err and "wte.weight" in err and "Traceback" not in err


def test_cli_weights_from_a_file_and_a_pretrained_folder(ids_file, capsys):
    import torch
    from transformers import GPT2Config, GPT2Model

    from hookkit.apps.cli import main

    tmp = ids_file
    torch.manual_seed(7)
    model = GPT2Model(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=100, n_positions=16)).eval()
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp / "w.safetensors"))
    torch.save(model.state_dict(), tmp / "w.pt")
    model.save_pretrained(tmp / "pretrained")
    ids = torch.tensor(np.load(tmp / "ids.npy"))
    with hookkit.capture(model, "h.0") as cap, torch.no_grad():
        model(ids)
    out = cap["h.0"]
    want = (out[0] if isinstance(out, tuple) else out).mean(1).numpy()
    scale = float((out[0] if isinstance(out, tuple) else out).abs().max())
    for i, source in enumerate(["w.safetensors", "w.pt", "pretrained"]):
        args = _gpt2_args(tmp, out=f"f{i}", kw=source != "pretrained") + ["--weights", str(tmp / source)]
        assert main(args) == 0, capsys.readouterr().err
        # the block in batches of 8, not 40 (layer norms and dots of 16 terms, attention over 8 positions,
        # the 64-wide MLP: about 220 roundings), then the mean over 8 tokens of values of both signs
        got = np.asarray(hookkit.load_features(tmp / f"f{i}")["h.0"])
        assert_close(got, want, dtype="float32", n_ops=256, scale=scale)
    # weights of another model: refused before anything runs, naming the keys
    small = GPT2Model(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=100, n_positions=16))
    save_file({k: v.contiguous() for k, v in small.state_dict().items()}, str(tmp / "other.safetensors"))
    assert main(_gpt2_args(tmp, out="g") + ["--weights", str(tmp / "other.safetensors")]) == 2
    err = capsys.readouterr().err
    assert "do not fit the model" in err and "wte.weight [100, 8] (the model has [100, 16])" in err
    assert not (tmp / "g").exists()
    assert main(_gpt2_args(tmp, out="g") + ["--weights", str(tmp / "missing.pt")]) == 2
    assert "no such file or folder" in capsys.readouterr().err


def test_cli_weights_file_on_both_frameworks(fw, tmp_path, capsys):
    from hookkit.apps.cli import main

    model = fw.linear(6, 3)
    x = np.random.default_rng(1).standard_normal((10, 6)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    if fw.name == "torch":
        fw.lib.save(model.state_dict(), tmp_path / "w.pt")
        path, target, kw = tmp_path / "w.pt", "torch.nn:Linear", ["in_features=6", "out_features=3"]
    else:
        fw.lib.save(model.state_dict(), str(tmp_path / "w.pdparams"))
        path, target, kw = tmp_path / "w.pdparams", "paddle.nn:Linear", ["in_features=6", "out_features=3"]
    want = fw.numpy(model(fw.tensor(x)))
    args = [
        "extract",
        target,
        "--kw",
        kw[0],
        "--kw",
        kw[1],
        "--layers",
        "",
        "--data",
        str(tmp_path / "x.npy"),
        "--out",
        str(tmp_path / "f"),
    ]
    assert main([*args, "--weights", str(path)]) == 0, capsys.readouterr().err
    np.testing.assert_allclose(np.asarray(hookkit.load_features(tmp_path / "f")[""]), want, rtol=1e-6)
    assert main([*args[:-1], str(tmp_path / "g"), "--weights", str(tmp_path / "x.npy")]) == 2
    assert "reads" in capsys.readouterr().err and not (tmp_path / "g").exists()


@pytest.mark.parametrize(
    "data, hint",
    [("float", "--data-dtype int64"), ("long", "n_positions")],
)
def test_cli_forward_failures_are_one_line_with_a_hint_and_leave_no_index(ids_file, capsys, data, hint):
    from hookkit.apps.cli import main

    tmp = ids_file
    ids = np.load(tmp / "ids.npy")
    np.save(tmp / "bad.npy", ids.astype(np.float32) if data == "float" else np.tile(ids, (1, 3)))  # 24 > n_positions=16
    assert main(_gpt2_args(tmp, data="bad.npy")) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert err.startswith("hookkit extract: error: the model failed in the forward of batch 0") and hint in err
    assert not (tmp / "f").exists()  # no folder, no index.json tying it to these arguments
    assert main(_gpt2_args(tmp)) == 0  # the same folder then takes a good run


def test_extract_failing_before_its_first_shard_leaves_the_folder_free(fw, tmp_path):
    """The library too: a first forward that raises leaves no index.json; the folder takes other arguments."""
    model = fw.mlp((4, 3))
    out = tmp_path / "f"
    out.mkdir()
    bad = [fw.randn(2, 5)]  # 5 features for a 4-input layer
    with pytest.raises((RuntimeError, ValueError)) as err:
        hookkit.extract(model, bad, "0", out)
    assert any("forward of batch 0" in n for n in getattr(err.value, "__notes__", []))
    assert out.exists() and not (out / "index.json").exists()
    feats = hookkit.extract(model, [fw.randn(2, 4)], "0", out, dtype="float16")
    assert feats["0"].shape == (2, 3)


# -- 9. clip_grad under a gradient scaler ---------------------------------------------------------------


def test_clip_grad_with_a_scaler_clips_the_unscaled_gradient(torch_fw):
    """Under loss scaling the backward carries 65,536 x the gradient: scaler= makes value / norm
    apply to the true gradient (what unscale_ then clip_grad_value_ gives)."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    x = torch.randn(16, 4)
    model(x).pow(2).sum().backward()
    plain = {n: p.grad.clone() for n, p in model.named_parameters()}
    v, n = 0.05, 0.1
    want = {k: g.clamp(-v, v) for k, g in plain.items()}
    want = {k: g * min(1.0, n / (g.norm().item() + 1e-6)) if k.startswith("2.") else g for k, g in want.items()}
    for kind in ("with", "without"):
        model.zero_grad()
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        with (
            hookkit.clip_grad(model, ["0", "2"], value=v, target="params", scaler=scaler if kind == "with" else None),
            hookkit.clip_grad(model, "2", norm=n, target="params", scaler=scaler if kind == "with" else None),
        ):
            scaler.scale(model(x).pow(2).sum()).backward()
        scaler.unscale_(opt)
        got = {k: p.grad for k, p in model.named_parameters()}
        if kind == "with":
            for k in want:
                assert_close(got[k], want[k], dtype="float32", n_ops=32)  # scaled by 2**16 and back, clipped, an 8-wide backward
        else:  # the documented rule without scaler=: the thresholds met the scaled gradient
            assert got["0.weight"].abs().max() <= v / 2.0**16 * (1 + 1e-5)


def test_clip_grad_with_a_scaler_leaves_an_overflow_for_the_scaler(torch_fw):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    before = [p.detach().clone() for p in model.parameters()]
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with hookkit.clip_grad(model, ["0", "1"], value=1.0, scaler=scaler):
        scaler.scale(model(torch.randn(3, 4)).sum() * 1e36).backward()  # overflows once scaled
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 2.0**15  # the scaler saw the overflow and skipped the step
    for p, b in zip(model.parameters(), before):
        torch.testing.assert_close(p.detach(), b)


def test_clip_grad_scaler_argument(fw):
    model = fw.mlp((3, 2))
    with pytest.raises(ValueError, match=r"clip_grad\(\): scaler must be None or the gradient scaler"):
        hookkit.clip_grad(model, "0", value=1.0, scaler="amp")
    assert not hooks_left(model)
    if fw.name == "paddle":  # Paddle's scaler is off on the CPU: the gradient is the true one
        import paddle

        scaler = paddle.amp.GradScaler(init_loss_scaling=1024)
        x = fw.randn(5, 3)
        with hookkit.clip_grad(model, "0", value=1e-3, target="params", scaler=scaler):
            scaler.scale(model(x).sum()).backward()
        assert np.abs(fw.grad(model[0].weight)).max() <= 1e-3 + 1e-9
        assert np.abs(fw.grad(model[0].weight)).max() >= 1e-3 - 1e-9


# -- 3. a forward inside a forward ---------------------------------------------------------------------


def _three_layers(fw):
    return fw.sequential(fw.linear(4, 4), fw.relu(), fw.linear(4, 2))


def test_a_forward_inside_a_forward_keeps_the_outer_step_and_calls(fw):
    """A hook that runs a reference pass of the model: the outer forward's later layers keep the
    outer step and call numbers; the inner pass is numbered on its own."""
    model = _three_layers(fw)
    ref = fw.randn(1, 4)
    inner_done = []

    def reference_pass(layer, args, output):
        if not inner_done:
            inner_done.append(1)
            model(ref)

    with hookkit.capture(model, ["0", "2"]) as cap, hookkit.on_forward(model, "0", reference_pass):
        model(fw.randn(3, 4))
        model(fw.randn(3, 4))
    assert [(r.step, r.call) for r in cap.calls("0")] == [(1, 0), (0, 0), (2, 0)]
    assert [(r.step, r.call) for r in cap.calls("2")] == [(1, 0), (0, 0), (2, 0)]
    assert [tuple(r.output.shape)[0] for r in cap.calls("2")] == [1, 3, 3]  # the inner pass's batch is its own
    # in the order the calls happened: the inner pass ran inside the outer one's layer "0"
    assert [(r.name, r.step) for r in cap.records()] == [("0", 1), ("2", 1), ("0", 0), ("2", 0), ("0", 2), ("2", 2)]


def test_a_forward_that_raised_is_not_taken_for_an_outer_one(fw):
    model = _three_layers(fw)
    with hookkit.capture(model, ["2"]) as cap:
        with pytest.raises((RuntimeError, ValueError)):
            model(fw.randn(3, 5))  # the wrong width: raises in layer "0"
        model(fw.randn(3, 4))
        model(fw.randn(3, 4))
    assert [(r.step, r.call) for r in cap.calls("2")] == [(1, 0), (2, 0)]


def test_gradient_steps_after_a_nested_forward(fw):
    """The backward of the outer forward is numbered with the outer step."""
    model = _three_layers(fw)
    done = []

    def reference_pass(layer, args, output):
        if not done:
            done.append(1)
            with fw.no_grad():
                model(fw.randn(1, 4))

    with hookkit.GradientStats(model, ["0", "2"]) as gstats, hookkit.on_forward(model, "0", reference_pass):
        model(fw.randn(3, 4)).sum().backward()
    assert list(gstats.layer_stats("2")["step"]) == [0] and list(gstats.param_stats("0")["step"]) == [0]


# -- 4. records in the order the calls happened -------------------------------------------------------


def test_records_come_in_call_order_not_registration_order(fw):
    """``head`` is registered before ``body`` but runs after it; ``a`` and ``b`` interleave."""

    class Net(fw.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.head = fw.linear(4, 2)
            self.a = fw.linear(4, 4)
            self.b = fw.linear(4, 4)
            self.body = fw.linear(4, 4)

        def forward(self, x):
            x = self.body(x)
            for _ in range(2):
                x = self.b(self.a(x))
            return self.head(x)

    model = Net()
    with hookkit.capture(model) as cap:
        model(fw.randn(2, 4))
        model(fw.randn(2, 4))
    order = [(r.name, r.step, r.call) for r in cap.records()]
    one = [("body", 0), ("a", 0), ("b", 0), ("a", 1), ("b", 1), ("head", 0)]
    assert order == [(n, 0, c) for n, c in one] + [(n, 1, c) for n, c in one]


# -- 5. copies that can be cleaned ----------------------------------------------------------------------


def _native_hooks(model) -> int:
    n = 0
    for _, layer in hookkit.select(model, hookkit.ALL):
        for attr in ("_forward_hooks", "_forward_pre_hooks", "_forward_post_hooks"):
            n += len(getattr(layer, attr, {}) or {})
    return n


@pytest.mark.parametrize("how", ["deepcopy", "save_load"])
def test_remove_all_cleans_the_inert_hooks_a_copy_carries(fw, tmp_path, how):
    """An EMA copy, or a model saved while hooked and loaded again, carries inert hooks; remove_all
    on it removes them, and hooking it afterwards leaves no inert hook behind."""
    import copy

    model = fw.mlp((4, 4, 4, 2))
    with hookkit.capture(model, hookkit.LEAVES), hookkit.GradientStats(model):
        if how == "deepcopy":
            twin = copy.deepcopy(model)
        elif fw.name == "torch":
            fw.lib.save(model, tmp_path / "m.pt")
            twin = fw.lib.load(tmp_path / "m.pt", weights_only=False)
        else:
            import pickle

            twin = pickle.loads(pickle.dumps(model))
    assert not hooks_left(model)
    assert _native_hooks(twin) > 0  # inert: they feed nothing, but cost a call each
    assert hookkit.remove_all(twin) > 0
    assert _native_hooks(twin) == 0 and not hooks_left(twin)
    # a copy that gets hooked loses its inert hooks first: only its own remain, then none
    with hookkit.capture(model, hookkit.LEAVES):
        ema = copy.deepcopy(model)
    assert _native_hooks(ema) > 0
    with hookkit.capture(ema, hookkit.LEAVES) as cap:
        ema(fw.randn(2, 4))
    assert [r.step for r in cap.calls("0")] == [0]
    assert _native_hooks(ema) == 0


# -- 9. names and scope ------------------------------------------------------------------------------------


def test_a_shared_layer_answers_each_of_its_names(fw):
    """``self.a = self.b = shared``: named_layers lists it once; capture answers "b" as well."""

    class Tied(fw.Layer):
        def __init__(self) -> None:
            super().__init__()
            shared = fw.linear(3, 3)
            self.a = shared
            self.b = shared
            self.out = fw.linear(3, 1)

        def forward(self, x):
            return self.out(self.b(self.a(x)))

    model = Tied()
    assert hookkit.select(model, "b").names == ["b"] and hookkit.select(model, ["out", "b", "a"]).names == ["a", "b", "out"]
    with hookkit.capture(model, "b") as cap:
        model(fw.randn(2, 3))
    assert [(r.name, r.call) for r in cap.calls("b")] == [("b", 0), ("b", 1)]
    with pytest.raises(hookkit.LayerNotFound, match="no layer matches 'c'"):
        hookkit.select(model, "c")
    assert not hooks_left(model)


def test_steps_of_a_new_context_start_at_zero(fw):
    """Features attached together share one numbering; once all are gone, the next starts at 0."""
    model = fw.mlp((4, 3))
    with hookkit.ActivationStats(model, train_only=False) as first:
        for _ in range(3):
            model(fw.randn(2, 4))
        with hookkit.capture(model, "0") as joined:  # attached while another runs: its numbering
            model(fw.randn(2, 4))
    assert list(first.layer_stats("0")["step"]) == [0, 1, 2, 3] and [r.step for r in joined.calls("0")] == [3]
    with hookkit.ActivationStats(model, train_only=False) as second:
        model(fw.randn(2, 4))
    assert list(second.layer_stats("0")["step"]) == [0]


def test_summary_is_not_a_forward_of_the_features_left_open(fw):
    """summary() runs a trial forward of its own: a capture or statistics left open do not record
    it, and the model's steps do not move; run_until is a forward on the user's data and counts."""
    model = fw.mlp((4, 3))
    with hookkit.capture(model, "0") as cap, hookkit.ActivationStats(model, train_only=False) as stats:
        model(fw.randn(2, 4))
        table = hookkit.summary(model, (5, 4))
        assert "Linear" in str(table)
        model(fw.randn(2, 4))
        with hookkit.run_until(model, "0") as run:
            run(fw.randn(6, 4))
    assert [(r.step, tuple(r.output.shape)[0]) for r in cap.calls("0")] == [(0, 2), (1, 2), (2, 6)]
    assert list(stats.layer_stats("0")["step"]) == [0, 1, 2]
    assert not hooks_left(model)


def test_a_layer_swapped_in_after_attaching_is_named_in_the_error(fw):
    """Hooks stay on the layer object they were placed on: a head swapped in later is not hooked,
    and reading it says so instead of only "has not run"."""
    model = fw.mlp((4, 3, 2))
    with hookkit.capture(model, ["0", "2"]) as cap:
        model[2] = fw.linear(3, 2)
        model(fw.randn(2, 4))
        assert "0" in cap
        with pytest.raises(KeyError, match="'2' was replaced after the capture started, and the new layer is not hooked"):
            cap["2"]


def test_attach_params_skips_frozen_parameters(fw):
    """Any parameter feature: the router places no gradient hook on a frozen weight."""
    from hookkit.core.router import attach_params

    model = lora_model(fw)
    base = model.q.base
    seen = []
    with attach_params(model, [("q.base", base, "weight", base.weight), ("head", model.head, "weight", model.head.weight)], seen.append):
        model(fw.randn(2, 6)).sum().backward()
    assert [ev.name for ev in seen] == ["head"]
