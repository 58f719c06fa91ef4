"""Models placed by accelerate (``dispatch_model`` with CPU and disk entries, ``from_pretrained(device_map=...)``
with ``infer_auto_device_map`` + ``max_memory``): every verb gives the values of the same model in memory,
and accelerate's hooks are left as they were."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import hookkit
from models import hooks_left

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
accelerate = pytest.importorskip("accelerate")

# float32 on the CPU: the dispatched forward runs the same kernels on the same values (accelerate
# moves and loads weights, it does not recompute), so results agree to rounding of reordered sums
TOL = dict(rtol=1e-5, atol=1e-5)


def close(a, b):
    a = a.detach().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else np.asarray(b)
    np.testing.assert_allclose(b, a, **TOL)


def hf_hooks(model):
    return {n: m._hf_hook for n, m in model.named_modules() if hasattr(m, "_hf_hook")}


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """GPT-2 in memory, and a copy dispatched with two blocks on disk (``offload_dir``) and the rest on the CPU."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=4, n_embd=32, n_head=4, vocab_size=100, n_positions=64)
    ref = transformers.GPT2LMHeadModel(config).eval()
    device_map = {f"transformer.{n}": "cpu" for n in ("wte", "wpe", "drop", "h.0", "h.3", "ln_f")}
    device_map.update({"transformer.h.1": "disk", "transformer.h.2": "disk", "lm_head": "cpu"})
    placed = accelerate.dispatch_model(copy.deepcopy(ref), device_map=device_map, offload_dir=str(tmp_path_factory.mktemp("offload")))
    assert placed.transformer.h[1].attn.c_attn.weight.is_meta  # really offloaded: no data until accelerate's hook loads it
    return ref, placed, ["transformer.h.0", "transformer.h.1", "transformer.h.2.mlp"]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """Llama in memory, and the same weights loaded with ``from_pretrained(device_map=...)`` from
    ``infer_auto_device_map(max_memory=...)``: the embeddings on the CPU, the rest offloaded to disk."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, vocab_size=100
    )
    ref = transformers.LlamaForCausalLM(config).eval()
    folder = tmp_path_factory.mktemp("llama")
    ref.save_pretrained(folder)
    with accelerate.init_empty_weights():
        empty = transformers.LlamaForCausalLM(config)
    device_map = accelerate.infer_auto_device_map(empty, max_memory={"cpu": 70_000}, no_split_module_classes=["LlamaDecoderLayer"])
    assert "disk" in device_map.values() and "cpu" in device_map.values()
    offload = tmp_path_factory.mktemp("llama-offload")
    placed = transformers.LlamaForCausalLM.from_pretrained(
        folder, device_map=device_map, offload_folder=str(offload), local_files_only=True
    )
    placed.eval()
    assert placed.model.layers[1].self_attn.q_proj.weight.is_meta
    return ref, placed, ["model.layers.0", "model.layers.1", "model.layers.2.mlp"]


@pytest.fixture(params=["gpt2", "llama"])
def pair(request):
    return request.getfixturevalue(request.param)


IDS = torch.randint(0, 100, (2, 6), generator=torch.Generator().manual_seed(1))
CORRUPT = torch.randint(0, 100, (2, 6), generator=torch.Generator().manual_seed(2))


def both(pair, fn):
    ref, placed, layers = pair
    before = hf_hooks(placed)
    a, b = fn(ref, layers), fn(placed, layers)
    after = hf_hooks(placed)
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)  # accelerate's hooks untouched
    assert not hooks_left(placed)
    return a, b


def test_capture_and_gradients_kept_on_the_cpu(pair):
    def run(model, layers):
        with hookkit.capture(model, layers, grads=True, to="cpu") as cap:
            model(IDS).logits[:, -1].sum().backward()
        out = {n: (cap[n], cap.grads[n]) for n in layers}
        model.zero_grad(set_to_none=True)
        return out

    a, b = both(pair, run)
    for name in a:
        close(a[name][0], b[name][0])
        close(a[name][1], b[name][1])
        assert b[name][0].device.type == "cpu"


def test_statistics(pair):
    def run(model, layers):
        with hookkit.ActivationStats(model, layers, train_only=False) as stats:
            model(IDS)
            model(CORRUPT)
        return {n: stats.layer_stats(n) for n in layers}

    a, b = both(pair, run)
    for name in a:
        for key in ("mean", "std"):
            close(a[name][key], b[name][key])


@pytest.mark.parametrize("verb", ["steer", "ablate", "patch", "edit"])
def test_interventions(pair, verb):
    def run(model, layers):
        edits = {
            "steer": lambda: hookkit.steer(model, layers[1], torch.linspace(-1, 1, 32), scale=2.0, positions=[1, 3]),
            "ablate": lambda: hookkit.ablate(model, layers[2]),
            "patch": lambda: hookkit.patch(model, layers[1], torch.full((2, 6, 32), 0.5)),
            "edit": lambda: hookkit.edit(model, layers[0], lambda out, ev: out * 1.5),
        }
        with edits[verb]():
            edited = model(IDS).logits
        return edited, model(IDS).logits

    (a, a_after), (b, b_after) = both(pair, run)
    close(a, b)
    close(a_after, b_after)
    assert not torch.allclose(a, a_after)  # the edit changed the output, and it is gone afterwards


def test_logit_lens_and_patching_sweep(pair):
    def run(model, layers):
        lens = hookkit.logit_lens(model, IDS, layers=layers[:2])
        sweep = hookkit.patching_sweep(model, IDS, CORRUPT, layers[:2], metric=lambda out: out.logits[:, -1, 7], positions="all")
        return lens, sweep

    (lens_a, sweep_a), (lens_b, sweep_b) = both(pair, run)
    close(sweep_a, sweep_b)
    assert lens_a.names == lens_b.names and len(lens_a.names) == 2
    close(lens_a.logits, lens_b.logits)
    assert np.array_equal(lens_a.top(3)[0], lens_b.top(3)[0])


def test_attention_patterns_and_attribution_patching(pair):
    def run(model, layers):
        patterns = hookkit.attention_patterns(model, IDS)
        scores = hookkit.attribution_patching(model, IDS, CORRUPT, layers[:2], metric=lambda out: out.logits[:, -1, 7])
        return patterns, scores

    (pa, sa), (pb, sb) = both(pair, run)
    assert pa.keys() == pb.keys() and len(pa) >= 3
    for name in pa:
        close(pa[name], pb[name])
    close(sa, sb)


def test_attribute(pair):
    def run(model, layers):
        emb = "transformer.wte" if "transformer.h.0" in layers else "model.embed_tokens"
        return hookkit.attribute(model, emb, IDS, target=lambda out: out.logits[:, -1, 5], n_steps=8)

    a, b = both(pair, run)
    close(a, b)


def test_diff_between_the_model_in_memory_and_the_dispatched_one(pair):
    ref, placed, _ = pair
    result = hookkit.diff(ref, placed, IDS)
    assert result.first is None and len(result.rows) > 10 and not hooks_left(placed)


def test_generation_with_positions(pair):
    def run(model, layers):
        with hookkit.steer(model, layers[1], torch.ones(32), scale=4.0, positions="generated"):
            return model.generate(IDS[:1], max_new_tokens=4, do_sample=False, pad_token_id=0)

    a, b = both(pair, run)
    assert torch.equal(a, b)


def test_extract(pair, tmp_path):
    def run(model, layers):
        out = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        return hookkit.extract(model, [IDS[:1], IDS[1:]], layers[:2], out, progress=False)

    a, b = both(pair, run)
    for name in a.names if hasattr(a, "names") else a.keys():
        close(a.array(name) if hasattr(a, "array") else a[name], b.array(name) if hasattr(b, "array") else b[name])


def test_accelerate_hooks_still_work_after_hookkits_are_removed(gpt2):
    ref, placed, layers = gpt2
    with hookkit.capture(placed, layers), hookkit.steer(placed, layers[1], torch.ones(32)), hookkit.ActivationStats(placed, layers):
        placed(IDS)
    assert not hooks_left(placed)
    assert placed.transformer.h[1].attn.c_attn.weight.is_meta  # offloaded again after the forward, by accelerate
    close(ref(IDS).logits, placed(IDS).logits)


def test_cam_on_a_dispatched_cnn(tmp_path):
    torch.manual_seed(0)
    ref = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 5),
    ).eval()
    # the first layer on disk too: the model's first parameter is meta, inputs must not go there
    device_map = {"0": "disk", "1": "cpu", "2": "disk", "3": "cpu", "4": "cpu", "5": "cpu", "6": "disk"}
    placed = accelerate.dispatch_model(copy.deepcopy(ref), device_map=device_map, offload_dir=str(tmp_path / "offload"))
    assert placed[0].weight.is_meta and placed[2].weight.is_meta
    x = torch.randn(2, 3, 12, 12, generator=torch.Generator().manual_seed(0))
    for method in ("gradcam", "scorecam"):
        close(hookkit.cam(ref, "2", x, method, target=1), hookkit.cam(placed, "2", x, method, target=1))
    close(hookkit.attribute(ref, "2", x, target=1, n_steps=8), hookkit.attribute(placed, "2", x, target=1, n_steps=8))
    assert not hooks_left(placed) and hasattr(placed[2], "_hf_hook")
    # numpy batches (made on the model's input device), extracted from the dispatched model
    batches = [x[:1].numpy(), x[1:].numpy()]
    a = hookkit.extract(ref, batches, ["2", "5"], tmp_path / "a", progress=False)
    b = hookkit.extract(placed, batches, ["2", "5"], tmp_path / "b", progress=False)
    for name in ("2", "5"):
        close(a.array(name) if hasattr(a, "array") else a[name], b.array(name) if hasattr(b, "array") else b[name])


def test_summary_of_a_dispatched_model_equals_the_in_memory_one(gpt2):
    ref, placed, _ = gpt2
    a = hookkit.summary(ref, {"input_ids": (2, 6)}, dtypes="long")
    b = hookkit.summary(placed, {"input_ids": (2, 6)}, dtypes="long")
    assert not b.dry_run and b.total_params == a.total_params and b.param_bytes == a.param_bytes
    assert b.total_mult_adds == a.total_mult_adds and b.tied == a.tied
    assert [(r.name, r.output_shapes) for r in b.all_rows] == [(r.name, r.output_shapes) for r in a.all_rows]


@pytest.mark.parametrize(
    "verb", ["logit_lens", "attribute", "cam", "extract", "patching_sweep", "diff", "attention_patterns", "attribution_patching"]
)
def test_a_model_without_data_is_refused_naming_the_layer(verb, tmp_path):
    with torch.device("meta"):
        meta = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=4, vocab_size=100))
    calls = {
        "logit_lens": lambda: hookkit.logit_lens(meta, IDS),
        "attribute": lambda: hookkit.attribute(meta, "transformer.wte", IDS, target=lambda o: o.logits[:, -1, 0]),
        "cam": lambda: hookkit.cam(meta, "transformer.h.0", torch.zeros(1, 3, 8, 8)),
        "extract": lambda: hookkit.extract(meta, [IDS], "transformer.h.0", tmp_path / "x"),
        "patching_sweep": lambda: hookkit.patching_sweep(meta, IDS, CORRUPT, "transformer.h.0", metric=lambda o: o.logits[:, -1, 0]),
        "diff": lambda: hookkit.diff(meta, copy.deepcopy(meta), IDS),
        "attention_patterns": lambda: hookkit.attention_patterns(meta, IDS),
        "attribution_patching": lambda: hookkit.attribution_patching(
            meta, IDS, CORRUPT, "transformer.h.0", metric=lambda o: o.logits[:, -1, 0]
        ),
    }
    with pytest.raises(ValueError) as info:
        calls[verb]()
    message = str(info.value)
    assert f"{verb}():" in message and "layer 'transformer.wte' has 'weight' without data" in message
    assert "load its weights" in message and "dry run" in message
