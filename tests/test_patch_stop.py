"""Patching, ablation, steering, user edits and early stop (issue 6, part 2)."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit
from hookkit.interventions.stop import StopForward
from models import hooks_left
from tolerance import assert_close


def _mlp(fw):
    return fw.sequential(fw.linear(5, 10), fw.relu(), fw.linear(10, 3))


def _tanh(fw, t):
    return fw.lib.tanh(t)


# -- activation patching on GPT-2 ---------------------------------------------------------------
@pytest.fixture(scope="module")
def gpt2():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=32)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    clean = torch.randint(0, 100, (2, 7))
    corrupt = clean.clone()
    corrupt[:, 2] = (corrupt[:, 2] + 13) % 100
    return torch, model, clean, corrupt


def test_patching_restores_clean_run_gpt2(gpt2):
    torch, model, clean, corrupt = gpt2
    with torch.no_grad():
        with hookkit.capture(model, "transformer.h.*") as cap:
            clean_logits = model(clean).logits
        corrupt_logits = model(corrupt).logits
        assert not torch.allclose(clean_logits, corrupt_logits)
        for layers in ("transformer.h.*", "transformer.h.0", "transformer.h.1"):
            with hookkit.patch(model, layers, cap):
                patched = model(corrupt).logits
            assert torch.equal(patched, clean_logits), layers
        # a dict name -> tensor works alike
        with hookkit.patch(model, "transformer.h.1", {"transformer.h.1": cap["transformer.h.1"]}):
            assert torch.equal(model(corrupt).logits, clean_logits)
        assert torch.equal(model(corrupt).logits, corrupt_logits)
    assert not hooks_left(model)


def test_patching_tuple_and_model_outputs_gpt2(gpt2):
    torch, model, clean, corrupt = gpt2
    with torch.no_grad():
        # attention modules return a tuple (attn_output, attn_weights): the first tensor is patched
        with hookkit.capture(model, "transformer.h.*.attn") as clean_cap:
            model(clean)
        with hookkit.patch(model, "transformer.h.0.attn", clean_cap), hookkit.capture(model, "transformer.h.*.attn") as seen:
            model(corrupt)
        out = seen["transformer.h.0.attn"]
        assert isinstance(out, tuple)
        assert torch.equal(out[0], clean_cap["transformer.h.0.attn"][0])
        # a ModelOutput: zeroing the transformer's last_hidden_state makes the (bias-free) head output 0
        with hookkit.edit(model, "transformer", lambda t, ev: t * 0):
            logits = model(corrupt).logits
        assert torch.equal(logits, torch.zeros_like(logits))
        with pytest.raises(IndexError, match=r"layer 'transformer.h.0.attn' returns 1 tensors .*index=3 is out of range"):
            with hookkit.edit(model, "transformer.h.0.attn", lambda t, ev: t, index=3):
                model(corrupt)
        with pytest.raises(
            ValueError,
            match=r"patch\(\): values must be shaped like the outputs: layer 'transformer.h.0' \(call 0\) outputs \[2, 7, 64\]; got .*shape \[1, 7, 64\]",
        ):
            with hookkit.patch(model, "transformer.h.0", torch.zeros(1, 7, 64)):
                model(corrupt)
    assert not hooks_left(model)


# -- per-call patching --------------------------------------------------------------------------
def test_per_call_patching_shared_block(fw):
    model = fw.shared_block_model()
    x_clean, x_corrupt = fw.randn(3, 4), fw.randn(3, 4)
    with hookkit.capture(model, "block") as clean:
        clean_out = fw.numpy(model(x_clean))
    assert len(clean.calls("block")) == 3
    # patch call 1 only: call 0 keeps the corrupt value, call 1 gets the clean one
    with hookkit.patch(model, "block", clean, calls=[1]), hookkit.capture(model, "block") as seen:
        out = fw.numpy(model(x_corrupt))
    np.testing.assert_allclose(out, clean_out, rtol=1e-6)
    recs = seen.calls("block")
    np.testing.assert_array_equal(fw.numpy(recs[1].output), fw.numpy(clean.calls("block")[1].output))
    h0 = model.block(model.inp(x_corrupt))  # no hook left: plain calls
    np.testing.assert_allclose(fw.numpy(recs[0].output), fw.numpy(h0), rtol=1e-6)
    # a dict keyed by (name, call): only call 1 is zeroed, computed by hand
    zeros = fw.tensor(np.zeros((3, 6)))
    with hookkit.patch(model, "block", {("block", 1): zeros}):
        out = fw.numpy(model(x_corrupt))
    h = _tanh(fw, model.block(model.inp(x_corrupt)))
    h = _tanh(fw, zeros)
    h = _tanh(fw, model.block(h))
    np.testing.assert_allclose(out, fw.numpy(model.out(h)), rtol=1e-5)
    # a capture with fewer calls than the forward: a clear error
    with hookkit.run_until(model, "block", capture="block") as run:  # records call 0 only
        run(x_clean)
    one = run.capture
    with pytest.raises(ValueError, match=r"no stored output for layer 'block' call 1; the captured run has calls \[0\]"):
        with hookkit.patch(model, "block", one):
            model(x_corrupt)
    assert not hooks_left(model)


# -- ablation, steering, edit -------------------------------------------------------------------
def test_ablate_zero_and_mean(fw):
    model = _mlp(fw)
    x = fw.randn(4, 5)
    h = fw.numpy(model[0](x))
    tail = lambda a: fw.numpy(model[2](model[1](fw.tensor(a))))  # noqa: E731
    with hookkit.ablate(model, "0"):
        np.testing.assert_allclose(fw.numpy(model(x)), tail(np.zeros_like(h)), rtol=1e-6)
    with hookkit.ablate(model, "0", mode="mean"):
        # the batch mean of 4 rows summed in another order than numpy's, then the tail's 10-term dot of
        # those slightly different values: its terms are |W2| |relu(mean)| and |b2|
        W2 = fw.numpy(model[2].weight) if fw.name == "torch" else fw.numpy(model[2].weight).T
        terms = np.maximum(h.mean(0), 0) @ np.abs(W2).T + np.abs(fw.numpy(model[2].bias))
        assert_close(fw.numpy(model(x)), tail(np.broadcast_to(h.mean(0), h.shape)), dtype="float32", n_ops=16, scale=float(terms.max()))
    given = np.arange(10, dtype="float32")
    with hookkit.ablate(model, "0", mode="mean", mean=given):
        np.testing.assert_allclose(fw.numpy(model(x)), tail(np.broadcast_to(given, h.shape)), rtol=1e-6)
    with pytest.raises(ValueError, match=r"ablate\(\): mode must be one of 'zero', 'mean'; got 'one'"):
        hookkit.ablate(model, "0", mode="one")
    with pytest.raises(
        ValueError,
        match=r"ablate\(\): mean must be shaped like the output without the batch dim: \[10\] for layer '0'.*; got .*shape \[3\]",
    ):
        with hookkit.ablate(model, "0", mode="mean", mean=np.zeros(3)):
            model(x)
    assert not hooks_left(model)


def test_steer_and_edit(fw):
    model = _mlp(fw)
    x = fw.randn(4, 5)
    h = fw.numpy(model[0](x))
    tail = lambda a: fw.numpy(model[2](model[1](fw.tensor(a))))  # noqa: E731
    v = np.linspace(-1, 1, 10).astype("float32")
    with hookkit.steer(model, "0", v, scale=2.5), hookkit.capture(model, "0") as cap:
        out = fw.numpy(model(x))
    # bit for bit: the hooked layer's output is the plain one's, t + v * 2.5 is two correctly rounded
    # float32 operations (numpy's too), and the tail runs the same kernels on the same values
    np.testing.assert_array_equal(out, tail(h + 2.5 * v))
    np.testing.assert_allclose(fw.numpy(cap["0"]), h + 2.5 * v, rtol=1e-6)
    with hookkit.steer(model, "0", fw.tensor(v)):
        np.testing.assert_array_equal(fw.numpy(model(x)), tail(h + v))
    with pytest.raises(ValueError, match=r"steer\(\): vector must be of shape \[10\] for layer '0'.*; got .*shape \[9\]"):
        with hookkit.steer(model, "0", np.zeros(9)):
            model(x)
    seen = []

    def double(out, ev):
        seen.append((ev.name, ev.call))
        return out * 2

    with hookkit.edit(model, "0", double):
        np.testing.assert_array_equal(fw.numpy(model(x)), tail(2 * h))  # doubling is exact: bit for bit
    assert seen == [("0", 0)]
    # edit on some calls of a shared layer
    rep = fw.shared_block_model()
    xs = fw.randn(2, 4)
    with hookkit.edit(rep, "block", lambda out, ev: out * 0, calls=[2]):
        out = fw.numpy(rep(xs))
    np.testing.assert_allclose(out, fw.numpy(rep.out(_tanh(fw, fw.tensor(np.zeros((2, 6)))))), rtol=1e-6)
    assert not hooks_left(model) and not hooks_left(rep)


def test_patch_argument_errors(fw):
    model = _mlp(fw)
    with pytest.raises(
        ValueError, match=r"steer\(\): vector must be one value for every layer, or a dict .*\(selected: 0, 2; missing: 2\)"
    ):
        hookkit.steer(model, ["0", "2"], {"0": np.zeros(10)})
    with pytest.raises(ValueError, match=r"ablate\(\): mean must be .*\(selected: 0; not selected: 2\)"):
        hookkit.ablate(model, "0", mode="mean", mean={"0": np.zeros(10), "2": np.zeros(3)})
    with pytest.raises(TypeError, match=r"patch\(\): values must be a dict keyed by layer names or \(name, call\) pairs; got 3"):
        hookkit.patch(model, "0", {3: np.zeros(10)})
    with pytest.raises(ValueError, match=r"patch\(\): values must be a value for every selected layer; none for 2"):
        hookkit.patch(model, ["0", "2"], {"0": np.zeros(10)})
    x = fw.randn(2, 5)
    with hookkit.capture(model, "0", outputs=False) as no_outputs:
        model(x)
    with pytest.raises(ValueError, match=r"patch\(\): values must be a capture that kept outputs"):
        hookkit.patch(model, "0", no_outputs)
    with hookkit.capture(model, ["0", "2"]) as cap:
        model(x)
    with pytest.raises(
        ValueError, match=r"patch\(\): values must be a capture of every selected layer; '1' is not captured \(captured: 0, 2\)"
    ):
        hookkit.patch(model, "1", cap)
    with hookkit.capture(model, ["0", "2"]) as empty:
        pass
    with pytest.raises(ValueError, match=r"patch\(\): values must be a capture holding records of '0': run the clean forward"):
        hookkit.patch(model, "0", empty)
    with pytest.raises(
        ValueError,
        match=r"patch\(\): values must be shaped like the outputs: layer '0' \(call 0\) outputs \[2, 10\]; got .*shape \[3, 10\]",
    ):
        with hookkit.patch(model, "0", fw.randn(3, 10)):
            model(x)
    with pytest.raises(ValueError, match="values for layers that are not selected: 1"):
        hookkit.patch(model, "0", {"0": np.zeros(10), "1": np.zeros(10)})
    with pytest.raises(TypeError, match=r"edit\(\): calls must be None, an int >= 0 or a list of them .*; got 'all'"):
        hookkit.edit(model, "0", lambda t, ev: t, calls="all")
    with pytest.raises(hookkit.LayerNotFound):
        hookkit.ablate(model, "7")
    assert not hooks_left(model)


# -- early stop ---------------------------------------------------------------------------------
def _staged(fw):
    """a -> b -> boom, where boom raises and counts its calls."""

    class Boom(fw.Layer):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            raise RuntimeError("boom ran")

    class Staged(fw.Layer):
        def __init__(self):
            super().__init__()
            self.a = fw.linear(4, 6)
            self.b = fw.linear(6, 5)
            self.boom = Boom()
            self.unused = fw.linear(2, 2)

        def forward(self, x):
            return self.boom(self.b(self.a(x)))

    return Staged()


def test_run_until_stops_and_captures(fw):
    model = _staged(fw)
    x = fw.randn(3, 4)
    for training in (True, False):
        model.train() if training else model.eval()
        with hookkit.run_until(model, "b", capture=["a", "b", "boom"]) as run:
            out = run(x)
            assert run.stopped
            a = model.a(x)  # direct calls of hooked layers do not stop
            np.testing.assert_allclose(fw.numpy(out), fw.numpy(model.b(a)), rtol=1e-6)
            np.testing.assert_array_equal(fw.numpy(run.capture["a"]), fw.numpy(a))
            out2 = run(x)  # reusable: the capture holds this run's records only
        assert [r.call for r in run.capture.calls("a")] == [0]
        assert "boom" not in run.capture
        np.testing.assert_array_equal(fw.numpy(out2), fw.numpy(out))
        assert model.boom.calls == 0
        assert model.training is training and model.a.training is training
        assert not hooks_left(model)
    with pytest.raises(RuntimeError, match="boom ran"):
        model(x)


def test_stop_after_baukit_style_and_exception(fw):
    model = _staged(fw)
    x = fw.randn(2, 4)
    ran_on = False
    with hookkit.stop_after(model, "a") as run:
        model(x)
        ran_on = True
    assert not ran_on and run.stopped
    np.testing.assert_allclose(fw.numpy(run.output), fw.numpy(model.a(x)), rtol=1e-6)
    # the stop is no user error: not an Exception, no hookkit note
    h = hookkit.stop_after(model, "b")
    with pytest.raises(StopForward) as info:
        model(x)
    h.remove()
    assert not isinstance(info.value, Exception)
    assert not getattr(info.value, "__notes__", None) and not hasattr(info.value, "hookkit_layer")
    assert model.boom.calls == 0 and not hooks_left(model)


def test_stop_shared_block_call_and_errors(fw):
    model = fw.shared_block_model()
    x = fw.randn(2, 4)
    h = _tanh(fw, model.block(model.inp(x)))
    expected = fw.numpy(model.block(h))
    with hookkit.run_until(model, "block", call=1, capture="block") as run:
        out = run(x)
    np.testing.assert_allclose(fw.numpy(out), expected, rtol=1e-6)
    assert [r.call for r in run.capture.calls("block")] == [0, 1]
    with pytest.raises(hookkit.HookkitError, match="has been removed"):
        run(x)
    with pytest.raises(ValueError, match="run_until\\(\\): layer must match exactly one layer; '\\*' matches 3: inp, block, out"):
        hookkit.run_until(model, "*")
    with pytest.raises(hookkit.HookkitError, match="layer 'block' did not run a call 5 during this forward"):
        with hookkit.run_until(model, "block", call=5) as r:
            r(x)
    assert not hooks_left(model)


def test_index_on_tuple_outputs(fw):
    class Pair(fw.Layer):
        def forward(self, x):
            return x, x * 2

    class Model(fw.Layer):
        def __init__(self):
            super().__init__()
            self.pair = Pair()

        def forward(self, x):
            a, b = self.pair(x)
            return a + 10 * b

    model = Model()
    x = fw.randn(2, 3)
    xn = fw.numpy(x)
    with hookkit.ablate(model, "pair"):  # index=0: the first tensor only
        np.testing.assert_allclose(fw.numpy(model(x)), 20 * xn, rtol=1e-6)
    with hookkit.ablate(model, "pair", index=1):
        np.testing.assert_allclose(fw.numpy(model(x)), xn, rtol=1e-6)
    with hookkit.ablate(model, "pair", index=None):
        np.testing.assert_array_equal(fw.numpy(model(x)), np.zeros_like(xn))
    stored = (fw.tensor(np.ones((2, 3))), fw.tensor(np.zeros((2, 3))))
    with hookkit.patch(model, "pair", stored, index=None):
        np.testing.assert_array_equal(fw.numpy(model(x)), np.ones_like(xn))
    with hookkit.steer(model, "pair", np.ones(3), scale=0.5, index=1):
        # x + 10 * (2x + 0.5): near zero the sum cancels, so the error is relative to its terms
        assert_close(model(x), 21 * xn + 5, dtype="float32", n_ops=4, scale=5 + 21 * float(np.abs(xn).max()))
    with pytest.raises(TypeError, match="index must be None"):
        hookkit.ablate(model, "pair", index=-1)
    assert not hooks_left(model)


def test_run_until_keeps_gradients(fw):
    model = _staged(fw)
    x = fw.randn(3, 4, requires_grad=True)
    with hookkit.run_until(model, "b", capture=["a", "b"], grads=True) as run:
        out = run(x)
        out.sum().backward()  # inside the with: the capture's gradient hooks go on exit
    np.testing.assert_array_equal(fw.numpy(run.capture.grads["b"]), np.ones((3, 5), dtype="float32"))
    wb = fw.numpy(model.b.weight)  # torch [out, in], paddle [in, out]
    expected = np.ones((3, 5), dtype="float32") @ (wb if fw.name == "torch" else wb.T)
    np.testing.assert_allclose(fw.numpy(run.capture.grads["a"]), expected, rtol=1e-5)
    assert model.boom.calls == 0 and not hooks_left(model)


def test_a_stored_value_of_another_dtype_is_cast_to_the_outputs(fw):
    model = _mlp(fw)
    x = fw.randn(2, 5)
    stored = fw.tensor(np.linspace(-1, 1, 20).reshape(2, 10), dtype="float64")
    with hookkit.patch(model, "0", stored), hookkit.capture(model, "0") as cap:
        out = model(x)
    be = hookkit.backends.backend_for(model)
    assert be.dtype_name(cap["0"]) == be.dtype_name(out) == "float32"
    np.testing.assert_array_equal(fw.numpy(cap["0"]), np.linspace(-1, 1, 20).reshape(2, 10).astype(np.float32))
