"""The logit lens, patching sweeps and attribution patching, against hand computations and plain
loops on unmodified models: transformers GPT-2 and Llama (tiny configs, random weights) and a small
Paddle language model built on nn.TransformerEncoder."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit
from hookkit.core.router import attached
from tolerance import assert_close, sum_ops

# a hand-built reference against hookkit's path (other GEMM shapes, a batched norm and unembedding):
# the rounding of a norm and a product over a hidden size of at most 64
HIDDEN_OPS = 2 * sum_ops(64)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

V = 61


def gpt2():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=3, n_embd=32, n_head=4, vocab_size=V, n_positions=16, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg).eval()


def llama():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=48,
        vocab_size=V,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )
    return transformers.LlamaForCausalLM(cfg).eval()


def ids(b=2, t=6, seed=0):
    return torch.as_tensor(np.random.default_rng(seed).integers(1, V, (b, t)))


def metric(out):
    return out.logits[:, -1, 3] - out.logits[:, -1, 5]


def block_outputs(model, blocks, x):
    got = {}
    hooks = [
        b.register_forward_hook(lambda mod, a, o, i=i: got.__setitem__(i, o[0] if isinstance(o, tuple) else o))
        for i, b in enumerate(blocks)
    ]
    hooks.append(
        blocks[0].register_forward_pre_hook(lambda mod, a, kw: got.__setitem__("in", a[0] if a else kw["hidden_states"]), with_kwargs=True)
    )
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in hooks:
            h.remove()
    return got


def nothing_attached(model):
    return all(not any(attached(m).values()) for m in model.modules())


# -- logit lens ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [gpt2, llama], ids=["gpt2-layernorm", "llama-rmsnorm"])
def test_logit_lens_is_unembed_of_the_final_norm_of_each_point(make):
    model = make()
    x = ids()
    lens = hookkit.logit_lens(model, x)
    blocks, norm = (
        (model.transformer.h, model.transformer.ln_f) if hasattr(model, "transformer") else (model.model.layers, model.model.norm)
    )
    got = block_outputs(model, blocks, x)
    assert lens.names[0] == "embeddings" and len(lens.names) == len(blocks) + 1
    assert tuple(lens.logits.shape) == (len(blocks) + 1, 2, 6, V)
    with torch.no_grad():
        for k, key in enumerate(["in", *range(len(blocks))]):
            assert_close(lens.logits[k], model.lm_head(norm(got[key])), dtype=torch.float32, n_ops=HIDDEN_OPS)
        assert_close(lens.logits[-1], model(x).logits, dtype=torch.float32, n_ops=HIDDEN_OPS)
    assert nothing_attached(model)


def test_logit_lens_positions_top_k_and_plot():
    model = gpt2()
    x = ids()
    full = hookkit.logit_lens(model, x)
    part = hookkit.logit_lens(model, x, layers=["embeddings", "transformer.h.2"], positions=[-1, 1])
    assert part.names == ["embeddings", "transformer.h.2"] and part.positions == [5, 1]
    torch.testing.assert_close(part.logits, full.logits[[0, 3]][:, :, [5, 1]])
    top = hookkit.logit_lens(model, x, top_k=3)
    assert top.logits is None
    t_ids, t_probs = top.top(2)
    f_ids, f_probs = full.top(2)
    np.testing.assert_array_equal(t_ids, f_ids)
    np.testing.assert_allclose(t_probs, f_probs, atol=1e-6)
    probs = torch.softmax(full.logits, -1)
    np.testing.assert_allclose(f_probs[..., 0], probs.max(-1).values.numpy(), atol=1e-6)
    with pytest.raises(ValueError, match="at most 3"):
        top.top(4)
    import matplotlib.pyplot as plt

    open_before = set(plt.get_fignums())
    fig = full.plot(tokens=[f"t{i}" for i in range(V)])
    assert len(fig.axes[0].texts) == 4 * 6
    assert set(plt.get_fignums()) == open_before  # not registered with pyplot: nothing left open
    with pytest.raises(
        TypeError, match=r"LensResult.plot\(\): tokens must be None, a list of strings indexed by token id, or a callable; got 3"
    ):
        full.plot(tokens=3)
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_logit_lens_errors():
    model = gpt2()
    with pytest.raises(ValueError, match=r"positions must be .*\[-6, 5\].*6 tokens"):
        hookkit.logit_lens(model, ids(), positions=[6])
    with pytest.raises(hookkit.UnsupportedModel, match="no known block list"):
        hookkit.logit_lens(torch.nn.Sequential(torch.nn.Linear(3, 3)), torch.randn(2, 4, 3))
    with pytest.raises(ValueError, match="top_k"):
        hookkit.logit_lens(model, ids(), top_k=0)
    assert nothing_attached(model)


# -- a Paddle language model ------------------------------------------------------------------------------
def paddle_lm():
    paddle = pytest.importorskip("paddle")
    paddle.seed(0)

    class TinyLM(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.embed = paddle.nn.Embedding(V, 16)
            self.encoder = paddle.nn.TransformerEncoder(paddle.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0), 2)
            self.norm = paddle.nn.LayerNorm(16)
            self.head = paddle.nn.Linear(16, V)

        def forward(self, x):
            return self.head(self.norm(self.encoder(self.embed(x))))

    model = TinyLM()
    model.eval()
    return paddle, model


def test_logit_lens_paddle_with_norm_and_unembed_given():
    paddle, model = paddle_lm()
    x = paddle.to_tensor(ids().numpy())
    lens = hookkit.logit_lens(model, x, layers=["embeddings", "encoder.layers.*"], norm="norm", unembed=model.head)
    assert lens.names == ["embeddings", "encoder.layers.0", "encoder.layers.1"]
    np.testing.assert_allclose(lens.logits[-1].numpy(), model(x).numpy(), atol=1e-5)
    np.testing.assert_allclose(lens.logits[0].numpy(), model.head(model.norm(model.embed(x))).numpy(), atol=1e-5)


def paddle_metric(out):
    return out[:, -1, 3] - out[:, -1, 5]


def test_patching_sweep_and_attribution_paddle():
    paddle, model = paddle_lm()
    clean, corrupt = paddle.to_tensor(ids(seed=1).numpy()), paddle.to_tensor(ids(seed=2).numpy())
    grid = hookkit.patching_sweep(model, clean, corrupt, "encoder.layers.*", paddle_metric, batch_size=5)
    stored = {}
    for i, layer in enumerate(model.encoder.layers):
        h = layer.register_forward_post_hook(lambda lay, a, o, i=i: stored.__setitem__(i, o.clone()))
        model(clean)
        h.remove()
    ref = np.zeros((2, 6))
    for i, layer in enumerate(model.encoder.layers):
        for p in range(6):

            def hook(lay, a, o, i=i, p=p):
                o = o.clone()
                o[:, p] = stored[i][:, p]
                return o

            h = layer.register_forward_post_hook(hook)
            ref[i, p] = float(paddle_metric(model(corrupt)).mean())
            h.remove()
    np.testing.assert_allclose(grid, ref, atol=1e-5)
    est = hookkit.attribution_patching(model, clean, corrupt, "encoder.layers.*", paddle_metric, heads=False)
    assert est.shape == (2, 6)
    heads = hookkit.patching_sweep(model, clean, corrupt, "encoder.layers.*.self_attn", paddle_metric, heads=True, positions=[5])
    assert heads.shape == (2, 4, 1)


# -- patching sweep -----------------------------------------------------------------------------------------
def plain_sweep(model, modules, clean, corrupt, positions, heads=None, d=8, proj=None):
    """One patched forward per cell, by native hooks: the reference."""
    with torch.no_grad():
        stored = {}
        hooks = []
        for i, mod in enumerate(modules):
            if heads:
                hooks.append(mod.register_forward_pre_hook(lambda m, a, i=i: stored.setdefault(i, a[0].clone())))
            else:
                hooks.append(mod.register_forward_hook(lambda m, a, o, i=i: stored.setdefault(i, o.clone())))
        model(clean)
        for h in hooks:
            h.remove()
        cells = [(i, h, p) for i in range(len(modules)) for h in range(heads or 1) for p in positions]
        out = {}
        for i, h, p in cells:
            if heads:

                def pre(m, a, i=i, h=h, p=p):
                    z = a[0].clone()
                    z[:, p, h * d : (h + 1) * d] = stored[i][:, p, h * d : (h + 1) * d]
                    return (z,)

                hook = modules[i].register_forward_pre_hook(pre)
            else:

                def post(m, a, o, i=i, p=p):
                    o = o.clone()
                    o[:, p] = stored[i][:, p]
                    return o

                hook = modules[i].register_forward_hook(post)
            out[i, h, p] = metric(model(corrupt))
            hook.remove()
    shape = (len(modules), heads, len(positions)) if heads else (len(modules), len(positions))
    return np.array([out[c].numpy() for c in cells]).reshape(*shape, -1)


def test_patching_sweep_equals_the_plain_loop_gpt2():
    model = gpt2()
    clean, corrupt = ids(seed=1), ids(seed=2)
    ref = plain_sweep(model, list(model.transformer.h), clean, corrupt, range(6))
    for bs in (256, 5, 1):  # all cells of a layer in one forward, several forwards, one copy per forward
        grid = hookkit.patching_sweep(model, clean, corrupt, "transformer.h.*", metric, batch_size=bs)
        assert grid.shape == (3, 6)
        np.testing.assert_allclose(grid, ref.mean(-1), atol=1e-5)
    rows = hookkit.patching_sweep(model, clean, corrupt, "transformer.h.*", metric, positions=[-1, 0], per_row=True)
    assert rows.shape == (2, 3, 2)
    np.testing.assert_allclose(rows, np.moveaxis(ref[:, [5, 0]], -1, 0), atol=1e-5)
    assert nothing_attached(model)


def test_patching_sweep_heads_equals_the_plain_loop_llama():
    model = llama()
    clean, corrupt = ids(seed=1), ids(seed=2)
    projs = [layer.self_attn.o_proj for layer in model.model.layers]
    ref = plain_sweep(model, projs, clean, corrupt, [1, 4, 5], heads=4)
    grid = hookkit.patching_sweep(model, clean, corrupt, "model.layers.*.self_attn", metric, positions=[1, 4, 5], heads=True, batch_size=8)
    assert grid.shape == (2, 4, 3)
    np.testing.assert_allclose(grid, ref.mean(-1), atol=1e-5)


def test_patching_errors():
    model = gpt2()
    clean = ids(seed=1)
    for fn in (hookkit.patching_sweep, hookkit.attribution_patching):
        with pytest.raises(
            ValueError,
            match=r"metric must be a callable returning one value per batch row from metric\(output\), shape \[\d+\].*; got .*of shape \[\]",
        ):
            fn(model, clean, ids(seed=2), "transformer.h.0", lambda out: metric(out).sum())
        with pytest.raises(ValueError, match=r"positions must be .*6 tokens"):
            fn(model, clean, ids(seed=2), "transformer.h.0", metric, positions=[2, 9])
        with pytest.raises(ValueError, match="corrupted must be inputs shaped like clean"):
            fn(model, clean, ids(t=5), "transformer.h.0", metric)
        with pytest.raises(hookkit.UnsupportedModel, match="known families"):
            fn(model, clean, ids(seed=2), "transformer.h.0.mlp", metric, heads=True)
        with pytest.raises(ValueError, match="metric"):
            fn(model, clean, ids(seed=2), "transformer.h.0", "logit diff")
    with pytest.raises(ValueError, match=r"6 patched copies"):
        hookkit.patching_sweep(model, clean, ids(seed=2), "transformer.h.0", lambda out: metric(out)[:2])
    assert nothing_attached(model)
    assert model.training is False


# -- attribution patching -------------------------------------------------------------------------------------
def test_attribution_patching_is_the_formula_and_leaves_grads_alone():
    model = gpt2()
    clean, corrupt = ids(seed=1), ids(seed=2)
    model.train()  # restored afterwards; the analysis runs in eval mode
    marker = torch.full_like(model.lm_head.weight, 7.0)
    model.lm_head.weight.grad = marker.clone()
    est = hookkit.attribution_patching(model, clean, corrupt, "transformer.h.*", metric, per_row=True)
    assert model.training is True
    assert torch.equal(model.lm_head.weight.grad, marker)
    assert all(p.grad is None for p in model.parameters() if p is not model.lm_head.weight)  # wte is tied to it
    model.eval()
    blocks = model.transformer.h
    a_clean = block_outputs(model, blocks, clean)
    acts = {}
    hooks = [b.register_forward_hook(lambda m, a, o, i=i: acts.__setitem__(i, o)) for i, b in enumerate(blocks)]
    score = metric(model(corrupt)).sum()
    for h in hooks:
        h.remove()
    grads = torch.autograd.grad(score, [acts[i] for i in range(3)])
    want = torch.stack([((a_clean[i] - acts[i].detach()) * grads[i]).sum(-1) for i in range(3)], 1)  # [N, L, T]
    assert est.shape == (2, 3, 6)
    np.testing.assert_allclose(est, want.numpy(), atol=1e-6)
    mean = hookkit.attribution_patching(model, clean, corrupt, "transformer.h.*", metric, positions=[0, -1])
    np.testing.assert_allclose(mean, want.numpy()[:, :, [0, 5]].mean(0), atol=1e-6)


def test_attribution_patching_heads_is_the_formula_per_head_slice():
    model = llama()
    clean, corrupt = ids(seed=1), ids(seed=2)
    est = hookkit.attribution_patching(model, clean, corrupt, "model.layers.1.self_attn", metric, heads=True)
    proj = model.model.layers[1].self_attn.o_proj
    z = {}
    h = proj.register_forward_pre_hook(lambda m, a: z.__setitem__("clean", a[0].detach()))
    with torch.no_grad():
        model(clean)
    h.remove()
    h = proj.register_forward_pre_hook(lambda m, a: z.__setitem__("corr", a[0]))
    score = metric(model(corrupt)).sum()
    h.remove()
    (g,) = torch.autograd.grad(score, [z["corr"]])
    prod = ((z["clean"] - z["corr"].detach()) * g).reshape(2, 6, 4, 8).sum(-1)  # [N, T, H]
    assert est.shape == (1, 4, 6)
    np.testing.assert_allclose(est[0], prod.permute(0, 2, 1).mean(0).numpy(), atol=1e-6)


def test_patching_sweep_falls_back_when_the_model_cannot_broadcast_one_row():
    class Rigid(torch.nn.Module):
        """Reshapes with the batch size read at the start: one row broadcast into copies is refused."""

        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 3)

        def forward(self, x):
            n = x.shape[0]
            return self.b(torch.tanh(self.a(x))).reshape(n, -1)

    model = Rigid().eval()
    g = torch.Generator().manual_seed(0)
    clean, corrupt = torch.randn(2, 5, 4, generator=g), torch.randn(2, 5, 4, generator=g)

    def last(out):
        return out[:, -1]

    grid = hookkit.patching_sweep(model, clean, corrupt, "a", last, per_row=True)
    with torch.no_grad():
        a_clean = model.a(clean)
        ref = np.zeros((2, 1, 5))
        for p in range(5):
            h = model.a.register_forward_hook(lambda m, a, o, p=p: torch.cat([o[:, :p], a_clean[:, p : p + 1], o[:, p + 1 :]], 1))
            ref[:, 0, p] = last(model(corrupt)).numpy()
            h.remove()
    np.testing.assert_allclose(grid, ref, atol=1e-6)
    assert nothing_attached(model)
