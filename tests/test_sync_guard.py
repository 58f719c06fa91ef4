"""No host sync in the hot paths, on both frameworks: the detector (tests/sync_guard.py) catches every
kind of host read hookkit (or a hook it runs) could make, and wraps capture, the statistics per step,
watch_nonfinite per step, edits/patch/steer, generation per step, extract per batch, CAM and
attribution per forward. The reads that are documented (once per step, per batch, per call's result)
are allowed by the function that makes them, with the reason."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit
from hookkit.backends import backend_for
from sync_guard import READS, HostSyncError, no_host_sync

# The documented reads, by the function that makes them.
NONFINITE = {"hookkit.observers.nonfinite.watch_nonfinite.check": "watch_nonfinite: the one read per training step (documented)"}
CAM = {
    "hookkit.analyses.cam.template.run_cam": "cam returns numpy maps: one read of the finished maps per call",
    "hookkit.analyses.cam.forwards.LayerView.masked_scores": "ScoreCAM: which channels' masks are empty, once per layer",
}
ATTRIBUTION = {}  # attribute returns a framework tensor: no read at all
EXTRACT = {
    "hookkit.observers.extract._Collector.rows": "extract writes rows: one read per layer per batch (documented)",
    "hookkit.observers.extract._fingerprint": "extract names its run by the weights' fingerprint: once per run",
}


@pytest.fixture
def device_route(monkeypatch):
    """The framework-ops route a GPU takes, forced on the CPU (the CPU route reads host memory on purpose)."""

    def use(model):
        monkeypatch.setattr(type(backend_for(model)), "host_routes", False)
        return model

    return use


def steps(fw, model, n: int = 3, opt=None):
    """n training steps of a small CNN on random 8x8 images: forward, backward, SGD (no optimizer read)."""
    x = fw.tensor(np.random.default_rng(0).standard_normal((4, 1, 8, 8)).astype(np.float32))
    for _ in range(n):
        out = model(x)
        (out * out).mean().backward()
        if opt is not None:
            opt.step()
            opt.clear_grad() if fw.name == "paddle" else opt.zero_grad()


def sgd(fw, model):
    if fw.name == "torch":
        return fw.lib.optim.SGD(model.parameters(), lr=0.01)
    return fw.lib.optimizer.SGD(learning_rate=0.01, parameters=model.parameters())


# -- the detector ----------------------------------------------------------------------------------
def read(fw, t, op: str):
    if op == "item":
        return t.mean().item() if fw.name == "torch" else t.mean().item()
    if op in ("__bool__", "__float__", "__int__", "__index__"):
        scalar = t.sum() > 0 if op == "__bool__" else t.sum()
        if op == "__index__":
            scalar = scalar.astype("int64") if fw.name == "paddle" else scalar.long()
        return {"__bool__": bool, "__float__": float, "__int__": int, "__index__": lambda s: [0, 1][s.__index__() % 2]}[op](scalar)
    if op == "__array__":
        return np.asarray(t)
    return getattr(t, op)()


@pytest.mark.parametrize("op", READS)
def test_the_guard_fails_on_each_kind_of_read_in_a_hook(fw, op):
    model = fw.mlp()
    x = fw.randn(2, 5)
    with pytest.raises(HostSyncError, match=op.strip("_")):
        with no_host_sync():
            with hookkit.on_forward(model, "0", lambda layer, inputs, out: [read(fw, out, op)] and None):
                model(x)


def test_a_planted_item_in_a_hook_fails_and_the_same_read_named_passes(fw):
    model = fw.mlp()
    x = fw.randn(2, 5)

    def planted(layer, inputs, out):
        out.mean().item()

    with pytest.raises(HostSyncError, match=r"item in .*planted"):
        with no_host_sync():
            with hookkit.on_forward(model, "0", planted):
                model(x)
    with no_host_sync(
        allow={f"{__name__}.test_a_planted_item_in_a_hook_fails_and_the_same_read_named_passes.<locals>.planted": "a test read"}
    ) as g:
        with hookkit.on_forward(model, "0", planted):
            model(x)
    assert g.allowed == {"a test read": 1} and not g.violations
    with no_host_sync() as g:  # outside hookkit (the test itself, a model's own forward) nothing is judged
        fw.numpy(model(x))
    assert not g.violations


def test_a_planted_item_in_a_backward_hook_fails(fw):
    """torch's function mode does not reach backward hooks: the guard's method patches do."""
    model = fw.mlp()

    def planted(layer, grad):
        grad.abs().max().item()

    with pytest.raises(HostSyncError, match=r"item in .*planted"):
        with no_host_sync():
            with hookkit.on_output_grad(model, "0", planted):
                out = model(fw.randn(2, 5))
                out.sum().backward()


def test_a_read_hookkit_swallows_is_still_reported(torch_fw):
    model = torch_fw.mlp()

    def planted(layer, inputs, out):
        try:
            out.sum().item()
        except HostSyncError:
            pass

    with pytest.raises(HostSyncError, match="planted"):
        with no_host_sync():
            with hookkit.on_forward(model, "0", planted):
                model(torch_fw.randn(2, 5))


# -- the hot paths ---------------------------------------------------------------------------------
def test_capture_forward_and_backward(fw, device_route):
    model = device_route(fw.small_cnn())
    with no_host_sync():
        with hookkit.capture(model, ["conv1", "relu2", "fc"], grads=True) as cap:
            steps(fw, model, 2)
    assert len(cap.calls("fc")) == 2


def test_statistics_per_training_step(fw, device_route):
    model = device_route(fw.small_cnn())
    opt = sgd(fw, model)
    with (
        hookkit.ActivationStats(model, hist=True) as acts,
        hookkit.GradientStats(model) as grads,
        hookkit.WeightStats(model, optimizer=opt, hist=True) as weights,
    ):
        with no_host_sync():
            steps(fw, model, 3, opt)
    assert len(acts.layer_stats("fc")["mean"]) == 3 and len(grads.layer_stats("fc")["norm"]) == 3
    assert len(weights.param_stats("fc.weight")["mean"]) >= 2


def test_watch_nonfinite_reads_once_per_step(fw, device_route):
    model = device_route(fw.small_cnn())
    with hookkit.watch_nonfinite(model, explode=1e6, vanish=1e-12):
        with no_host_sync(allow=NONFINITE) as guard:
            steps(fw, model, 3)
    assert sum(guard.allowed.values()) == 3


def test_edit_patch_steer(fw, device_route):
    model = device_route(fw.mlp((5, 8, 8, 3)))
    x = fw.randn(4, 5)
    with hookkit.capture(model, "2") as clean:
        model(x)
    vector = fw.tensor(np.ones(8, np.float32))
    with no_host_sync():
        with hookkit.edit(model, "0", lambda out, ev: out * 2):
            model(x)
        with hookkit.patch(model, "2", clean["2"]):
            model(x)
        with hookkit.steer(model, "2", vector, scale=0.5):
            model(x)


def test_cam_and_attribution_per_forward(fw, device_route):
    model = device_route(fw.small_cnn(width=4))
    x = fw.tensor(np.random.default_rng(0).standard_normal((2, 1, 8, 8)).astype(np.float32))
    per_read = 2 if fw.name == "torch" else 1  # torch's to_numpy is t.cpu().numpy(): two calls, one read
    with no_host_sync(allow=CAM) as guard:
        for method in ("gradcam", "gradcam++", "layercam", "scorecam"):  # ScoreCAM: 8 channel forwards
            hookkit.cam(model, "conv2", x, method, target=[0, 1])
    run_cam, masked = CAM.values()
    assert guard.allowed == {run_cam: 4 * per_read, masked: per_read}  # once per call, once per layer: not per forward
    linear = device_route(fw.mlp((64, 8, 3)))
    flat = fw.tensor(np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32))
    with no_host_sync(allow=ATTRIBUTION):
        hookkit.attribute(linear, "1", flat, "integrated_gradients", target=1, n_steps=8)
        hookkit.attribute(linear, None, flat, "gradient", target=1)


def test_extract_per_batch(fw, device_route, tmp_path):
    model = device_route(fw.small_cnn(width=4))
    batches = [fw.tensor(np.random.default_rng(i).standard_normal((3, 1, 8, 8)).astype(np.float32)) for i in range(3)]
    with no_host_sync(allow=EXTRACT) as guard:
        hookkit.extract(model, batches, ["conv1", "fc"], tmp_path / "f", progress=False)
    per_read = 2 if fw.name == "torch" else 1
    rows, fingerprint = EXTRACT.values()
    assert guard.allowed[rows] == 3 * 2 * per_read  # 3 batches x 2 layers
    assert guard.allowed[fingerprint] == len(model.state_dict()) * per_read  # each weight and buffer once, when the run opens
    assert np.asarray(hookkit.load_features(tmp_path / "f")["fc"]).shape == (9, 10)


def test_generation_per_step(device_route):
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    cfg = tf.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64, bos_token_id=1, eos_token_id=None, pad_token_id=0)
    model = device_route(tf.GPT2LMHeadModel(cfg).eval())
    ids = torch.randint(2, 100, (2, 5))
    with no_host_sync():  # transformers' own per-step reads (stopping criteria) are not hookkit's
        with hookkit.capture(model, "transformer.h.1") as cap, hookkit.steer(model, "transformer.h.0", torch.ones(32), scale=0.1):
            model.generate(ids, max_new_tokens=4, do_sample=False)
    assert len(cap.calls("transformer.h.1")) == 4


def test_paddle_incremental_decoding_per_step(device_route):
    paddle = pytest.importorskip("paddle")
    dec = paddle.nn.TransformerDecoder(paddle.nn.TransformerDecoderLayer(16, 2, 32, dropout=0.0), 2)
    device_route(dec).eval()
    memory, tgt = paddle.randn([2, 3, 16]), paddle.randn([2, 4, 16])
    with no_host_sync():
        with hookkit.capture(dec, "layers.0") as cap, hookkit.steer(dec, "layers.0", paddle.ones([16]), scale=0.5, positions=[1, 3]):
            cache = dec.gen_cache(memory)
            for t in range(4):
                _, cache = dec(tgt[:, t : t + 1], memory, None, None, cache)
    assert [r.gen_step for r in cap.calls("layers.0")] == [0, 1, 2, 3]
