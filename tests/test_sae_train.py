"""hookkit.train_sae: SAEs trained on activations streamed in bounded memory (sklearn digits and a
small model's activations), checkpoints in SAELens's format, resumable after a kill."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits

import hookkit
from hookkit.core.validate import ArgumentTypeError, InvalidArgument
from hookkit.sae import SAE, read_sae_metrics, train_sae
from tolerance import assert_close

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def digits() -> np.ndarray:
    return (load_digits().data / 16).astype(np.float32)


def _fit(x, arch="topk", **kw):
    args = dict(k=8, steps=200, batch_size=128, lr=3e-3, buffer_size=512, log_every=20, framework="torch")
    args.update(kw)
    return train_sae(x, 96, arch, **args)


def _ev(sae, fw, x):
    out = fw.numpy(sae(fw.tensor(x)))
    return 1 - ((out - x) ** 2).sum(-1).mean() / ((x - x.mean(0)) ** 2).sum(-1).mean()


def test_topk_learns_and_the_checkpoint_reloads_the_same(torch_fw, digits, tmp_path):
    run = _fit(digits, out=tmp_path / "run")
    last = run.metrics[-1]
    assert last["l0"] == 8 and last["step"] == 199
    assert last["explained_variance"] > 0.6 > run.metrics[0]["explained_variance"]  # it learned
    assert _ev(run.sae, torch_fw, digits) > 0.6
    loaded = SAE.load(tmp_path / "run" / "final")
    x = torch_fw.tensor(digits[:50])
    np.testing.assert_array_equal(torch_fw.numpy(loaded(x)), torch_fw.numpy(run.sae(x)))
    assert read_sae_metrics(str(tmp_path / "run")) == run.metrics
    W = torch_fw.numpy(run.sae.W_dec)
    np.testing.assert_allclose(np.linalg.norm(W, axis=1), 1, rtol=1e-5)  # the decoder-norm constraint


def test_batchtopk_saves_its_jumprelu_form_and_standard_trades_l1(torch_fw, digits):
    run = _fit(digits, "batchtopk")
    assert run.sae.architecture == "jumprelu"
    l0 = (torch_fw.numpy(run.sae.encode(torch_fw.tensor(digits))) > 0).sum(-1).mean()
    assert 2 < l0 < 24  # the threshold keeps about k=8 per row on average
    loose, tight = _fit(digits, "standard", l1_coefficient=1e-3), _fit(digits, "standard", l1_coefficient=0.05)
    assert tight.metrics[-1]["l0"] < loose.metrics[-1]["l0"]
    assert loose.metrics[-1]["explained_variance"] > 0.8


def test_killed_run_resumes_to_the_uninterrupted_weights(fw, digits, tmp_path):
    whole = _fit(digits, steps=60, checkpoint_every=20, out=tmp_path / "whole", framework=fw.name)

    class Kill:
        def add_scalar(self, tag, value, step):
            if step >= 45:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _fit(digits, steps=60, checkpoint_every=20, out=tmp_path / "killed", writer=Kill(), log_every=1, framework=fw.name)
    resumed = _fit(digits, steps=60, checkpoint_every=20, out=tmp_path / "killed", framework=fw.name)
    for key in ("W_enc", "W_dec", "b_enc", "b_dec"):
        np.testing.assert_array_equal(fw.numpy(resumed.sae.weights[key]), fw.numpy(whole.sae.weights[key]))
    assert resumed.steps == 60 and resumed.samples == 60 * 128


@pytest.mark.parametrize("arch", ["topk", "batchtopk"])
def test_normalisation_is_folded_into_the_saved_weights(torch_fw, digits, arch):
    run = _fit(digits * 40, arch, normalize_activations="expected_average_only_in")
    assert run.sae.normalize_activations == "none"
    assert _ev(run.sae, torch_fw, digits * 40) > 0.6  # raw activations in, raw reconstructions out
    assert run.metrics[-1]["explained_variance"] == pytest.approx(_ev(run.sae, torch_fw, digits * 40), abs=0.1)


def test_sources_extract_folder_and_model(torch_fw, tmp_path):
    model = torch_fw.mlp((6, 16, 3))
    data = [torch_fw.randn(64, 6) for _ in range(8)]
    hookkit.extract(model, data, "1", str(tmp_path / "feats"), progress=False)
    seen = []

    class W:
        def add_scalar(self, tag, value, step):
            seen.append(tag)

    a = train_sae(str(tmp_path / "feats"), 32, "topk", k=4, steps=30, batch_size=64, buffer_size=256, writer=W(), framework="torch")
    b = train_sae((model, "1", data), 32, "topk", k=4, steps=30, batch_size=64, buffer_size=256)
    assert a.sae.d_in == b.sae.d_in == 16 and b.sae.hook_name == "1"
    assert {"sae/mse", "sae/explained_variance", "sae/l0", "sae/dead_fraction", "sae/lr"} <= set(seen)
    with hookkit.splice(model, "1", b.sae) as sp, hookkit.capture(model, sp.features) as cap:
        model(data[0])
    assert cap[sp.features].shape == (64, 32)


def test_paddle_trains_too(paddle_fw, digits):
    run = _fit(digits, steps=120, framework="paddle")
    assert run.sae.backend.name == "paddle" and run.metrics[-1]["explained_variance"] > 0.5


def test_bad_arguments(digits):
    with pytest.raises(InvalidArgument, match="architecture"):
        train_sae(digits, 32, "gated")
    with pytest.raises(InvalidArgument, match="k"):
        train_sae(digits, 32, "topk", k=64)
    with pytest.raises(InvalidArgument, match=r"batch_size must be at most the number of rows of the source \(10\)"):
        train_sae(digits[:10], 32, k=4, batch_size=16)
    with pytest.raises(ArgumentTypeError, match="writer"):
        train_sae(digits, 32, writer=object())


def test_checkpoint_loads_in_sae_lens(digits, tmp_path):
    sae_lens = pytest.importorskip("sae_lens")
    import torch

    run = _fit(digits, out=tmp_path / "run")
    theirs = sae_lens.SAE.load_from_disk(str(tmp_path / "run" / "final"))
    x = torch.from_numpy(digits[:64])
    with torch.no_grad():
        torch.testing.assert_close(theirs(x), run.sae(x), rtol=0, atol=1e-6)


def test_jumprelu_trades_l0_and_its_estimator_matches_the_formula(fw, digits, rng):
    loose = _fit(digits, "jumprelu", l0_coefficient=1e-3, framework=fw.name, steps=120)
    tight = _fit(digits, "jumprelu", l0_coefficient=0.05, framework=fw.name, steps=120)
    assert tight.metrics[-1]["l0"] < 0.7 * loose.metrics[-1]["l0"]
    assert tight.sae.architecture == "jumprelu" and (fw.numpy(tight.sae.threshold) >= 0).all()
    # the straight-through estimator (SAELens's JumpReLU and Step), by hand: bandwidth 0.5
    ops = hookkit.sae.SAE.from_arrays(
        **{k: np.zeros(s, np.float32) for k, s in (("W_enc", (3, 4)), ("b_enc", 4), ("W_dec", (4, 3)), ("b_dec", 3))}, framework=fw.name
    ).ops
    h = rng.normal(size=(5, 4)).astype(np.float32)
    thr = np.asarray([0.1, 0.3, -0.2, 0.5], np.float32)
    g = rng.normal(size=(5, 4)).astype(np.float32)
    rect = (np.abs((h - thr) / 0.5) < 0.5).astype(np.float32)
    for op, want_h, coef in ((ops.jumprelu, (h > thr) * g, thr / 0.5), (ops.step_l0, None, 1 / 0.5)):
        want_t = -(coef * rect * g).sum(0)
        ht, tt = fw.tensor(h, requires_grad=True), fw.tensor(thr, requires_grad=True)
        out = op(ht, tt, 0.5)
        (out * fw.tensor(g)).sum().backward()
        # a product or two per row, then the sum over the 5 rows (of terms of both signs) in another order
        assert_close(fw.grad(tt), want_t, dtype="float32", n_ops=8, scale=float(np.abs(coef * rect * g).sum(0).max()))
        if want_h is not None:
            np.testing.assert_allclose(fw.grad(ht), want_h, rtol=1e-6)
            np.testing.assert_array_equal(fw.numpy(out), h * (h > thr))


def test_ce_loss_recovered_when_a_model_is_given(torch_fw, rng):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=40, n_positions=16)).eval()
    data = [torch.randint(0, 40, (8, 12)) for _ in range(6)]

    def loss(m, ids):
        return m(ids, labels=ids).loss

    run = train_sae(
        (model, "transformer.h.0", data),
        64,
        "topk",
        k=8,
        steps=60,
        batch_size=96,
        lr=3e-3,
        buffer_size=384,
        ce_loss=loss,
        ce_every=30,
        log_every=30,
    )
    ce = [m["ce_loss_recovered"] for m in run.metrics if "ce_loss_recovered" in m]
    assert len(ce) == 3 and ce[-1] > ce[0]  # training recovers more of the loss
    # by hand at the end: (zero - spliced) / (zero - clean)
    with torch.no_grad():
        clean = loss(model, data[0]).item()
        with hookkit.ablate(model, "transformer.h.0"):
            zero = loss(model, data[0]).item()
        with hookkit.splice(model, "transformer.h.0", run.sae, error_term=False):
            spliced = loss(model, data[0]).item()
    assert ce[-1] == pytest.approx((zero - spliced) / (zero - clean), rel=1e-4)
    with pytest.raises(InvalidArgument, match="ce_loss"):
        train_sae(np.zeros((10, 4), np.float32), 8, k=2, ce_loss=loss)


def _dp_rank(out: str) -> int:
    import torch.distributed as dist

    x = (load_digits().data / 16).astype(np.float32)
    run = train_sae(x, 96, "topk", k=8, steps=3, batch_size=128, lr=1e-3, buffer_size=1024, out=out, framework="torch")
    np.savez(f"{out}-rank{dist.get_rank()}.npz", **{k: v.detach().numpy() for k, v in run.sae.weights.items()}, samples=run.samples)
    return 0


def test_data_parallel_ranks_train_one_sae(digits, tmp_path):
    from hookkit.core.registry import backend_named

    out = str(tmp_path / "dp")
    assert backend_named("torch").launch(2, _dp_rank, (out,)) == [0, 0]
    r0, r1 = np.load(f"{out}-rank0.npz"), np.load(f"{out}-rank1.npz")
    single = train_sae(digits, 96, "topk", k=8, steps=3, batch_size=256, lr=1e-3, buffer_size=1024, framework="torch")
    for key in ("W_enc", "b_enc", "W_dec", "b_dec"):
        np.testing.assert_array_equal(r0[key], r1[key])  # gradients averaged: the ranks agree exactly
        # two ranks of 128 rows each step == one process of 256 (the same rows): equal up to rounding
        np.testing.assert_allclose(r0[key], single.sae.state_arrays()[key], rtol=1e-4, atol=1e-5)
    assert int(r0["samples"]) == single.samples == 3 * 256
    loaded = SAE.load(tmp_path / "dp" / "final")  # written once, by rank 0
    np.testing.assert_array_equal(loaded.state_arrays()["W_dec"], r0["W_dec"])


def test_one_shot_iterators_are_refused(torch_fw):
    model = torch_fw.mlp((6, 16, 3))
    with pytest.raises(ArgumentTypeError, match="re-iterable"):
        train_sae((model, "1", (torch_fw.randn(4, 6) for _ in range(3))), 8, k=2)
