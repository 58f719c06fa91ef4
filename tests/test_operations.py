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
from tolerance import assert_close


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


def close(fw, a, b, rtol=0.0, atol=0.0):
    """Bit for bit unless a tolerance is given: an operation site runs the forward's own kernels in the
    forward's order, and the comparisons here write the same computation out with the same framework
    calls (a copy of the model, a patched or zeroed value fed to the same layers, a doubling)."""
    if rtol == 0 and atol == 0:
        np.testing.assert_array_equal(fw.numpy(a), fw.numpy(b))
    else:
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
    with pytest.warns(RuntimeWarning, match=r"operation '::mul_0' never ran in the 1 call\(s\) of its layer's forward"):
        with hookkit.capture(b, "::mul_0") as cap:
            b(fw.randn(2))
    with pytest.raises(KeyError, match="has not run"):
        cap["::mul_0"]


def test_frame_reading_calls_see_the_forward(torch_fw):
    import sys

    import torch

    class Framed(torch.nn.Module):
        def forward(self, x):
            name = sys._getframe(0).f_code.co_name
            return x + (1 if name == "forward" else 100)

    m = Framed()
    assert "_getframe_0" not in hookkit.ops(m, m).names
    with hookkit.capture(m, "::add_0") as cap:
        out = m(torch.zeros(1))
    assert float(out) == float(cap["::add_0"]) == 1.0  # the frame read is the forward's, not the dispatcher's


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


# -- every verb on an operation -------------------------------------------------------------------
# GPT-2's block returns the result of its last add: ``h.N::add_2`` and the layer ``h.N`` carry the
# same tensor, so a verb at the operation must give exactly what it gives at the layer.


def test_gpt2_residual_add_is_the_input_of_ln_2(torch_fw):
    model = gpt2()
    with hookkit.capture(model, ["transformer.h.*::add_0", "transformer.h.*.ln_2"], inputs=True, grads=True) as cap:
        model(ids()).logits.sum().backward()
    for i in range(2):
        ln2 = cap.calls(f"transformer.h.{i}.ln_2")[0]
        close(torch_fw, cap[f"transformer.h.{i}::add_0"], ln2.inputs[0], rtol=0, atol=0)
        assert cap.grads[f"transformer.h.{i}::add_0"].shape == ln2.inputs[0].shape
    # the gradient at the add: its only consumers are ln_2 and the second residual add
    g_out = cap.grads["transformer.h.1::add_0"]
    assert float(g_out.abs().sum()) > 0


def test_llama_rotary_q_k_equal_the_formula(torch_fw):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
        vocab_size=50, max_position_embeddings=32, attn_implementation="eager",
    )  # fmt: skip
    model = LlamaForCausalLM(cfg).eval()
    listed = hookkit.ops(model, "model.layers.0.self_attn")
    assert listed["apply_rotary_pos_emb_0"].kind == "function"
    spec = "model.layers.0.self_attn::apply_rotary_pos_emb_0"
    resid = ["model.layers.0::add_0", "model.layers.0.post_attention_layernorm"]
    with hookkit.capture(model, [spec, "model.layers.0.self_attn.q_proj", *resid], inputs=True) as cap:
        model(ids())
    # the residual stream between attention and MLP is what the post-attention norm normalizes
    close(torch_fw, cap[resid[0]], cap.calls(resid[1])[0].inputs[0], rtol=0, atol=0)
    rec = cap.calls(spec)[0]
    q, k, cos, sin = rec.inputs[:4]
    # q as the attention computes it from its projection, then the rotary formula written out
    q_proj = cap["model.layers.0.self_attn.q_proj"]
    close(torch_fw, q, q_proj.view(2, 6, 2, 8).transpose(1, 2), rtol=0, atol=0)

    def rotate_half(t):
        return torch.cat((-t[..., 4:], t[..., :4]), dim=-1)

    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    q_rot, k_rot = rec.output
    close(torch_fw, q_rot, q * cos + rotate_half(q) * sin)
    close(torch_fw, k_rot, k * cos + rotate_half(k) * sin)


def test_on_forward_sees_the_operation(fw):
    model = make_model(fw)
    seen = []
    with hookkit.on_forward(model, "block::gelu_0", lambda site, args, out: seen.append((site, args, out))):
        model(fw.randn(2, 4))
    ((site, args, out),) = seen
    assert site.name == "gelu_0" and site.layer is model.block
    close(fw, out, fw.F.gelu(args[0]))


def test_patch_and_ablate(fw):
    model = make_model(fw)
    clean_x, corrupt_x = fw.randn(2, 4), fw.randn(2, 4)
    with hookkit.capture(model, "block::add_1") as clean:
        clean_out = model(clean_x)
    with hookkit.patch(model, "block::add_1", clean):  # the block's output is 2 * this add: all downstream follows
        close(fw, model(corrupt_x), clean_out)
    with hookkit.ablate(model, "block::add_1"):
        got = model(corrupt_x)
    zero = fw.tensor(np.zeros((2, 6)))
    close(fw, got, model.head(model.other(zero)))


def test_steer_attribute_sweeps_stats_at_an_operation_as_at_the_layer(torch_fw):
    import torch

    fw = torch_fw
    model = gpt2()
    x, y = ids(), ids(t=6) % 7

    def metric(out):
        return out.logits[:, -1, 3] - out.logits[:, -1, 4]

    v = torch.linspace(-1, 1, 16)
    with hookkit.steer(model, "transformer.h.0::add_2", v, 2.0, positions=[1, 3]):
        at_op = model(x).logits
    with hookkit.steer(model, "transformer.h.0", v, 2.0, positions=[1, 3]):
        at_layer = model(x).logits
    close(fw, at_op, at_layer, rtol=0, atol=0)

    target = lambda out: out.logits[:, -1, 3]  # noqa: E731
    a_op = hookkit.attribute(model, "transformer.h.1::add_2", x, target=target, n_steps=4)
    a_layer = hookkit.attribute(model, "transformer.h.1", x, target=target, n_steps=4)
    close(fw, a_op, a_layer, rtol=1e-5, atol=1e-7)

    ops = hookkit.patching_sweep(model, x, y, "transformer.h.*::add_2", metric)
    layers = hookkit.patching_sweep(model, x, y, "transformer.h.*", metric)
    np.testing.assert_array_equal(ops, layers)  # the same values patched in at the same point: bit for bit
    est_ops = hookkit.attribution_patching(model, x, y, "transformer.h.*::add_2", metric)
    est_layers = hookkit.attribution_patching(model, x, y, "transformer.h.*", metric)
    np.testing.assert_array_equal(est_ops, est_layers)  # the same tensor, its same gradient

    with hookkit.ActivationStats(model, ["transformer.h.1::add_2", "transformer.h.1"]) as st:
        model(x)
    for key in ("mean", "std"):
        np.testing.assert_allclose(st.layer_stats("transformer.h.1::add_2")[key], st.layer_stats("transformer.h.1")[key], rtol=1e-6)


def test_watch_nonfinite_blames_the_operation(fw):
    model = make_model(fw)
    with pytest.raises(hookkit.NonFiniteError, match=r"'::mul_0'"):
        with hookkit.watch_nonfinite(model.block, "::*", grads=False):
            model.block(fw.randn(2, 6), scale=float("inf"))


def test_diff_pairs_operations_by_spec(torch_fw):
    import torch

    a = gpt2()
    b = copy.deepcopy(a)
    with torch.no_grad():
        b.transformer.h[1].attn.c_proj.weight.mul_(2)
    d = hookkit.diff(a, b, ids(), layers=["transformer.h.*::add_*"])
    text = str(d)
    assert "paired by name" in text and "First divergence: forward of transformer.h.1::add_0" in text


def test_checkpoint_recompute_is_the_same_call(torch_fw):
    model = gpt2()
    model.train()
    model.config.attn_pdrop = model.config.resid_pdrop = model.config.embd_pdrop = 0.0
    for mod in model.modules():
        if isinstance(mod, __import__("torch").nn.Dropout):
            mod.p = 0.0
    results = []
    for ckpt in (False, True):
        if ckpt:
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        with hookkit.capture(model, "transformer.h.*::add_0", grads=True) as cap:
            model(ids()).logits.sum().backward()
        results.append(cap)
    plain, ckpt = results
    assert len(ckpt.calls("transformer.h.0::add_0")) == len(plain.calls("transformer.h.0::add_0")) == 1
    # the recompute runs the same kernels, but the backward may accumulate in another order (and
    # nondeterministically on a GPU): a backward through the 50-logit head, ln_f and block 1 (widths 16, 64)
    assert_close(ckpt.grads["transformer.h.0::add_0"], plain.grads["transformer.h.0::add_0"], dtype="float32", n_ops=256)
    assert "forward" not in model.transformer.h[0].__dict__


def test_generate_with_the_cache(torch_fw):
    import torch

    model = gpt2()
    x = ids(1, 4)
    with hookkit.capture(model, ["transformer.h.1::add_0", "transformer.h.1.ln_2"], inputs=True) as cap:
        out = model.generate(x, max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert [r.gen_step for r in cap.calls("transformer.h.1::add_0")] == [0, 1, 2]
    whole = cap.sequence("transformer.h.1::add_0")
    assert whole.shape == (1, 6, 16)
    steps = [r.inputs[0] for r in cap.calls("transformer.h.1.ln_2")]
    close(torch_fw, whole, torch.cat(steps, dim=1), rtol=0, atol=0)
    with torch.no_grad():
        plain = model.generate(x, max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert torch.equal(out, plain)


def test_torch_compile_sees_operation_sites(torch_fw):
    import torch

    fw = torch_fw
    model = make_model(fw)
    x = fw.randn(2, 4)
    compiled = torch.compile(model, backend="eager")
    plain = compiled(x)
    with hookkit.capture(model, "block::gelu_0", inputs=True) as cap:
        with hookkit.edit(model, "block::add_1", lambda out, ev: out * 0):
            edited = compiled(x)
    close(fw, cap["block::gelu_0"], fw.F.gelu(cap.calls("block::gelu_0")[0].inputs[0]))
    close(fw, edited, model.head(model.other(fw.tensor(np.zeros((2, 6))))))
    close(fw, compiled(x), plain)  # removed: the compiled model runs the class's forward again


def test_paddle_encoder_layer_residual_add(paddle_fw):
    import paddle

    fw = paddle_fw
    fw.seed(0)
    layer = paddle.nn.TransformerEncoder(paddle.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0), 2)
    layer.eval()
    listed = hookkit.ops(layer, "layers.0")
    assert listed["add_0"].line == "src = residual + self.dropout1(src)" and listed["self_attn_0"].kind == "submodule"
    with hookkit.capture(layer, ["layers.*::add_0", "layers.*.norm1"], inputs=True) as cap:
        layer(fw.randn(2, 5, 8))
    for i in range(2):  # post-norm: the residual add after attention is what norm1 normalizes
        close(fw, cap[f"layers.{i}::add_0"], cap.calls(f"layers.{i}.norm1")[0].inputs[0], rtol=0, atol=0)
    assert "forward" not in layer.layers[0].__dict__


def test_values_equal_nnsight_source(torch_fw):
    """Against nnsight's ``.source`` (a benchmark peer: skipped where it is not installed; the tests
    above check the same values against hand computations)."""
    nnsight = pytest.importorskip("nnsight")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    llama = LlamaForCausalLM(
        LlamaConfig(
            hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
            vocab_size=50, max_position_embeddings=32, attn_implementation="eager",
        )
    ).eval()  # fmt: skip
    x = ids()
    for model, ours, theirs in [
        (gpt2(), ["transformer.h.1::add_0"], lambda m: [m.transformer.h[1].source.hidden_states_1]),
        (
            llama,
            ["model.layers.1.self_attn::apply_rotary_pos_emb_0", "model.layers.1::add_0"],  # in execution order, as nnsight wants
            lambda m: [m.model.layers[1].self_attn.source.apply_rotary_pos_emb_0, m.model.layers[1].source.hidden_states_1],
        ),
    ]:
        wrapped = nnsight.NNsight(copy.deepcopy(model))  # nnsight keeps its forward on the instances: its own copy
        saved: list = []
        with torch.no_grad(), wrapped.trace(x):
            for op in theirs(wrapped):
                saved.append(op.output.save())
        with torch.no_grad(), hookkit.capture(model, ours) as cap:
            model(x)
        for name, value in zip(ours, saved):
            mine = cap[name]
            for a, b in zip(mine if isinstance(mine, tuple) else (mine,), value if isinstance(value, tuple) else (value,)):
                assert torch.equal(a, b), name


def test_gradients_at_an_operation(fw):
    model = make_model(fw)
    x = fw.randn(2, 4, requires_grad=True)
    with hookkit.capture(model, ["block::add_1", "block"], grads=True) as cap:
        model(x).sum().backward()
    # the block returns 2 * add_1 (its decorator doubles the output): d/d add_1 = 2 * d/d output
    close(fw, cap.grads["block::add_1"], 2 * cap.grads["block"])
    assert "forward" not in model.block.__dict__


def test_deepcopy_while_active(fw):
    model = make_model(fw)
    x = fw.randn(2, 4)
    with hookkit.capture(model, "block::gelu_0") as cap:
        twin = copy.deepcopy(model)
        close(fw, twin(x), model(x))
    assert len(cap.calls("block::gelu_0")) == 1  # the copy fed nothing
    assert not isinstance(twin.block.__dict__.get("forward"), _Installed)
    with hookkit.capture(twin, "block::gelu_0") as c2:
        twin(x)
    close(fw, c2["block::gelu_0"], cap["block::gelu_0"])
    assert not isinstance(twin.block.__dict__.get("forward"), _Installed)


def test_steps_on_generate(torch_fw):
    model = gpt2()
    with hookkit.capture(model, "transformer.h.0::add_0", steps=[1, 2]) as cap:
        model.generate(ids(1, 4), max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert [r.gen_step for r in cap.calls("transformer.h.0::add_0")] == [1, 2]
    assert all(r.output.shape == (1, 1, 16) for r in cap.calls("transformer.h.0::add_0"))


def test_other_hooks_untouched(torch_fw):
    fw = torch_fw
    model = make_model(fw)
    fired = []
    native = model.block.register_forward_hook(lambda m, a, out: fired.append(out))
    with hookkit.capture(model, "block::add_1") as cap:
        model(fw.randn(2, 4))
    model(fw.randn(2, 4))
    assert len(fired) == 2 and len(model.block._forward_hooks) == 1
    close(fw, fired[0], 2 * cap["block::add_1"])  # the native hook saw the block's output, made by the rewritten forward
    native.remove()


def test_a_class_forward_patched_later_is_rewritten_again(torch_fw):
    import torch

    class Twice(torch.nn.Module):
        def forward(self, x):
            return x * 2

    m = Twice()
    assert hookkit.ops(m, m).names == ["mul_0"]

    def forward(self, x):
        return x + 1

    Twice.forward = forward
    assert hookkit.ops(m, m).names == ["add_0"]
    with hookkit.capture(m, "::add_0") as cap:
        m(torch.ones(2))
    close(torch_fw, cap["::add_0"], torch.full((2,), 2.0))


def test_paddle_recompute_is_the_same_call(paddle_fw):
    import paddle
    from paddle.distributed.fleet.utils import recompute

    fw = paddle_fw

    class Wrapped(fw.Layer):
        """The toy model with its block called through ``recompute`` (``ckpt``) or directly."""

        def __init__(self, net, ckpt):
            super().__init__()
            self.block, self.ckpt = net.block, ckpt
            net.block = paddle.nn.Identity()
            self.net = net

        def forward(self, x):
            h = self.net.inp(x)
            h = recompute(self.block, h, use_reentrant=False) if self.ckpt else self.block(h)
            return self.net.head(self.net.other(h))

    grads = []
    data = np.random.default_rng(0).standard_normal((3, 4))
    for ckpt in (False, True):
        w = Wrapped(make_model(fw), ckpt)  # the same seed: the same weights
        x = fw.tensor(data, requires_grad=True)
        with (
            hookkit.steer(w, "block::add_1", paddle.ones([6]), scale=0.5, calls=[0]),
            hookkit.capture(w, "block::gelu_0", grads=True) as cap,
        ):
            w(x).sum().backward()
        assert [(r.step, r.call) for r in cap.calls("block::gelu_0")] == [(0, 0)]  # the recompute is the same call
        grads.append([cap.grads["block::gelu_0"].numpy(), x.grad.numpy()])
        assert "forward" not in w.block.__dict__
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)  # the recompute re-applied the steer
