"""Training-loop callbacks, each in its real library's training loop: steps recorded, scalars logged, hooks gone after fit and after a failure."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit
from models import hooks_left

N, BATCH = 32, 8  # 4 batches per epoch


class RecordingWriter:
    """A scalar writer that keeps what it was given: ``add_scalar(tag, value, step)``."""

    def __init__(self) -> None:
        self.scalars: list[tuple[str, float, int]] = []

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.scalars.append((tag, float(value), int(step)))


def segment_means(series: np.ndarray, sizes: list[int]) -> list[float]:
    bounds = np.cumsum([0, *sizes])
    return [float(series[a:b].mean()) for a, b in zip(bounds[:-1], bounds[1:])]


# -- PyTorch Lightning ----------------------------------------------------------------------------
@pytest.fixture
def lightning():
    pl = pytest.importorskip("pytorch_lightning")
    import torch
    from torch import nn

    class LitMLP(pl.LightningModule):
        def __init__(self, fail_at: int | None = None, nan_at: int | None = None):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 3))
            self.fail_at, self.nan_at = fail_at, nan_at

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, i):
            if i == self.fail_at:
                raise RuntimeError("boom in training_step")
            x, y = batch
            if i == self.nan_at:
                x = x * float("nan")
            return nn.functional.cross_entropy(self.call_net(x), y)

        def call_net(self, x):
            return self(x)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class LitNoForward(LitMLP):
        """The common Lightning style: no forward of its own, training_step calls self.net(x)."""

        forward = pl.LightningModule.forward

        def call_net(self, x):
            return self.net(x)

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(N, 5), torch.randint(0, 3, (N,)))
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH)

    def fit(callback, epochs: int = 2, own_forward: bool = True, **module_kw):
        module = (LitMLP if own_forward else LitNoForward)(**module_kw)
        trainer = pl.Trainer(
            max_epochs=epochs,
            accelerator="cpu",
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[callback],
        )
        try:
            trainer.fit(module, loader)
        finally:
            fit.module = module
        return module

    return fit


@pytest.mark.slow
def test_lightning_records_every_step_logs_to_tensorboard_and_removes(lightning, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    from hookkit.integrations.lightning import HookkitCallback

    writer = SummaryWriter(str(tmp_path))
    cb = HookkitCallback(hist=True, writer=writer)
    module = lightning(cb, epochs=2)
    writer.close()
    acts, grads = cb.activation_stats, cb.gradient_stats
    assert "net.0" in acts.names and "net.2" in acts.names
    assert len(acts.steps) == 8 and len(grads.steps) == 8  # 2 epochs x 4 batches
    assert acts.layer_stats("net.0")["hist"].shape == (8, acts.bins)
    assert len(grads.layer_stats("net.2")["norm"]) == 8
    assert not hooks_left(module)
    # TensorBoard got, per epoch, the mean of that epoch's recorded steps (at the trainer's global step)
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    mean = events.Scalars("act/net.0/mean")
    assert [e.step for e in mean] == [4, 8]
    np.testing.assert_allclose([e.value for e in mean], segment_means(acts.layer_stats("net.0")["mean"], [4, 4]), rtol=1e-5)
    norm = events.Scalars("grad/net.2/norm")
    np.testing.assert_allclose([e.value for e in norm], segment_means(grads.layer_stats("net.2")["norm"], [4, 4]), rtol=1e-5)
    assert "param_grad/net.0/norm" in events.Tags()["scalars"]


@pytest.mark.slow
def test_lightning_every_and_layers(lightning):
    from hookkit.integrations.lightning import HookkitCallback

    cb = HookkitCallback(gradient_stats=False, layers="net.2", every=3)
    lightning(cb, epochs=2)
    assert cb.gradient_stats is None
    assert list(cb.activation_stats.names) == ["net.2"]
    assert len(cb.activation_stats.steps) == 3  # steps 0, 3, 6 of 8


@pytest.mark.slow
def test_lightning_module_without_forward_counts_batches(lightning):
    from hookkit.integrations.lightning import HookkitCallback

    cb = HookkitCallback(every=2)
    module = lightning(cb, epochs=2, own_forward=False)
    np.testing.assert_array_equal(cb.activation_stats.layer_stats("net.0")["step"], [0, 2, 4, 6])
    np.testing.assert_array_equal(cb.gradient_stats.layer_stats("net.2")["step"], [0, 2, 4, 6])
    assert not hooks_left(module)


@pytest.mark.slow
def test_lightning_removes_hooks_when_training_raises(lightning):
    from hookkit.integrations.lightning import HookkitCallback

    cb = HookkitCallback()
    with pytest.raises(RuntimeError, match="boom"):
        lightning(cb, epochs=1, fail_at=2)
    assert len(cb.activation_stats.steps) == 2
    assert not hooks_left(lightning.module)


@pytest.mark.slow
def test_lightning_nonfinite_raises_naming_the_layer_and_removes(lightning):
    from hookkit.integrations.lightning import HookkitCallback

    cb = HookkitCallback(activation_stats=False, gradient_stats=False, nonfinite=True)
    with pytest.raises(hookkit.NonFiniteError, match="net.0"):
        lightning(cb, epochs=1, nan_at=1)
    assert not hooks_left(lightning.module)


def test_writer_must_have_add_scalar():
    pytest.importorskip("pytorch_lightning")
    from hookkit.integrations.lightning import HookkitCallback

    with pytest.raises(TypeError, match="add_scalar"):
        HookkitCallback(writer=object())
    with pytest.raises(ValueError, match="every"):
        HookkitCallback(every=0)


# -- Hugging Face Trainer -------------------------------------------------------------------------
@pytest.fixture
def hf_trainer(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    import torch

    class FlakyGPT2(transformers.GPT2LMHeadModel):
        """Raises after its forward number ``fail_at`` ran (its layers included)."""

        fail_at: int | None = None
        calls = 0

        def forward(self, input_ids=None, labels=None, **kwargs):
            out = super().forward(input_ids=input_ids, labels=labels, **kwargs)
            self.calls += 1
            if self.calls - 1 == self.fail_at:
                raise IndexError("bad batch")
            return out

    def make(callback, fail_at: int | None = None, max_steps: int = 3):
        torch.manual_seed(0)
        config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16, bos_token_id=0, eos_token_id=0)
        model = FlakyGPT2(config)
        model.fail_at = fail_at
        items = []
        for _ in range(8):
            ids = torch.randint(0, 64, (12,))
            items.append({"input_ids": ids, "labels": ids.clone()})
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path),
            max_steps=max_steps,
            per_device_train_batch_size=2,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            disable_tqdm=True,
            dataloader_num_workers=0,
        )
        trainer = transformers.Trainer(model=model, args=args, train_dataset=items, callbacks=[callback])
        return trainer, model

    return make


@pytest.mark.slow
def test_huggingface_trainer_records_logs_and_removes(hf_trainer):
    from hookkit.integrations.huggingface import HookkitTrainerCallback

    writer = RecordingWriter()
    cb = HookkitTrainerCallback(layers=["transformer.h.0.mlp.c_fc", "transformer.h.0.attn.c_attn", "lm_head"], writer=writer)
    trainer, model = hf_trainer(cb)
    trainer.train()
    acts, grads = cb.activation_stats, cb.gradient_stats
    assert len(acts.steps) == 3 and len(grads.steps) == 3
    assert not hooks_left(model)
    # one log event per step: the writer got each step's value at that global step
    fc_mean = [(v, s) for t, v, s in writer.scalars if t == "act/transformer.h.0.mlp.c_fc/mean"]
    assert [s for _, s in fc_mean] == [1, 2, 3]
    np.testing.assert_allclose([v for v, _ in fc_mean], acts.layer_stats("transformer.h.0.mlp.c_fc")["mean"], rtol=1e-5)
    lm_norm = [v for t, v, _ in writer.scalars if t == "grad/lm_head/norm"]
    np.testing.assert_allclose(lm_norm, grads.layer_stats("lm_head")["norm"], rtol=1e-5)
    # ... and the same numbers went into the Trainer's own logs
    logged = [h for h in trainer.state.log_history if "act/lm_head/std" in h]
    assert len(logged) == 3
    np.testing.assert_allclose([h["act/lm_head/std"] for h in logged], acts.layer_stats("lm_head")["std"], rtol=1e-5)


@pytest.mark.slow
def test_huggingface_default_layers_and_removal_on_error(hf_trainer):
    from hookkit.integrations.huggingface import HookkitTrainerCallback

    cb = HookkitTrainerCallback()
    trainer, model = hf_trainer(cb, fail_at=2)
    with cb, pytest.raises(IndexError, match="bad batch"):
        trainer.train()
    assert not hooks_left(model)
    assert "transformer.h.0.mlp.c_fc" in cb.activation_stats.names
    # batches 0 and 1, and batch 2 whose forward ran before raising
    assert len(cb.activation_stats.layer_stats("transformer.h.0.mlp.c_fc")["mean"]) == 3
    assert len(cb.gradient_stats.layer_stats("transformer.h.0.mlp.c_fc")["norm"]) == 2


# -- paddle.Model.fit -------------------------------------------------------------------------------
@pytest.fixture
def paddle_fit():
    paddle = pytest.importorskip("paddle")
    from paddle import nn

    class Data(paddle.io.Dataset):
        def __init__(self) -> None:
            rng = np.random.default_rng(0)
            self.x = rng.normal(size=(N, 5)).astype("float32")
            self.y = rng.integers(0, 3, size=(N, 1)).astype("int64")

        def __getitem__(self, i):
            return self.x[i], self.y[i]

        def __len__(self) -> int:
            return N

    class Net(nn.Layer):
        def __init__(self, fail_at: int | None, nan_at: int | None) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 3))
            self.fail_at, self.nan_at, self.calls = fail_at, nan_at, 0

        def forward(self, x):
            if self.calls == self.nan_at:
                x = x * float("nan")
            out = self.body(x)
            self.calls += 1
            if self.calls - 1 == self.fail_at:
                raise RuntimeError("boom in forward")
            return out

    def fit(callback, epochs: int = 1, fail_at: int | None = None, nan_at: int | None = None):
        paddle.seed(0)
        net = Net(fail_at, nan_at)
        model = paddle.Model(net)
        model.prepare(paddle.optimizer.SGD(learning_rate=0.1, parameters=net.parameters()), nn.CrossEntropyLoss())
        fit.net = net
        model.fit(Data(), epochs=epochs, batch_size=BATCH, shuffle=False, verbose=0, callbacks=[callback])
        return net

    return fit


@pytest.mark.slow
def test_paddle_fit_records_logs_and_removes(paddle_fit):
    from hookkit.integrations.paddle_hapi import HookkitPaddleCallback

    writer = RecordingWriter()
    cb = HookkitPaddleCallback(hist=True, writer=writer)
    net = paddle_fit(cb, epochs=2)
    acts, grads = cb.activation_stats, cb.gradient_stats
    assert {"body.0", "body.2"} <= set(acts.names)
    assert len(acts.layer_stats("body.0")["mean"]) == 8 and len(grads.layer_stats("body.2")["norm"]) == 8
    assert acts.layer_stats("body.2")["hist"].shape == (8, acts.bins)
    assert not hooks_left(net)
    std = [(v, s) for t, v, s in writer.scalars if t == "act/body.2/std"]
    assert [s for _, s in std] == [4, 8]  # per epoch, at the global batch count
    np.testing.assert_allclose([v for v, _ in std], segment_means(acts.layer_stats("body.2")["std"], [4, 4]), rtol=1e-5)
    norm = [v for t, v, _ in writer.scalars if t == "grad/body.0/norm"]
    np.testing.assert_allclose(norm, segment_means(grads.layer_stats("body.0")["norm"], [4, 4]), rtol=1e-5)


@pytest.mark.slow
def test_paddle_fit_removes_hooks_when_training_raises(paddle_fit):
    from hookkit.integrations.paddle_hapi import HookkitPaddleCallback

    cb = HookkitPaddleCallback()
    with cb, pytest.raises(RuntimeError, match="boom"):
        paddle_fit(cb, fail_at=2)
    assert not hooks_left(paddle_fit.net)
    assert len(cb.activation_stats.layer_stats("body.0")["mean"]) == 3  # the failing forward ran its layers first
    assert len(cb.gradient_stats.layer_stats("body.0")["norm"]) == 2


@pytest.mark.slow
def test_paddle_fit_nonfinite_names_the_layer(paddle_fit):
    from hookkit.integrations.paddle_hapi import HookkitPaddleCallback

    cb = HookkitPaddleCallback(gradient_stats=False, nonfinite=True)
    with cb, pytest.raises(hookkit.NonFiniteError, match="body.0"):
        paddle_fit(cb, nan_at=1)
    assert not hooks_left(paddle_fit.net)
    assert len(cb.activation_stats.layer_stats("body.0")["mean"]) == 2  # the NaN forward was recorded too
