"""DropHookModel: seed 000's plug-in dropout wrapper, its demonstration and its contract."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit
from hookkit.core import router


def torch_resnet(fw, width: int = 8, num_classes: int = 10):
    """A small ResNet-style model: stem, layer1..layer4 of BasicBlocks, pool, fc."""
    nn = fw.nn

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            return self.relu(self.bn2(self.conv2(out)) + identity)

    class ResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            w = width
            self.conv1 = nn.Conv2d(3, w, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(w)
            self.relu = nn.ReLU(inplace=True)
            self.layer1 = nn.Sequential(BasicBlock(w, w, 1))
            self.layer2 = nn.Sequential(BasicBlock(w, 2 * w, 2))
            self.layer3 = nn.Sequential(BasicBlock(2 * w, 4 * w, 2), BasicBlock(4 * w, 4 * w, 1))
            self.layer4 = nn.Sequential(BasicBlock(4 * w, 8 * w, 2))
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(8 * w, num_classes)

        def forward(self, x):
            x = self.relu(self.bn1(self.conv1(x)))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(self.avgpool(x).flatten(1))

    return ResNet()


def resnet(fw):
    """The seed's model on Paddle (resnet18, 10 classes), a ResNet-style one on PyTorch; and its input size."""
    if fw.name == "paddle":
        import paddle.vision  # noqa: F401  (ships with paddlepaddle)

        return fw.lib.vision.models.resnet18(num_classes=10), 64  # layer4 sees 2x2 maps
    return torch_resnet(fw), 16  # layer4 sees 2x2 maps


def load(fw, model, state):
    return model.load_state_dict(state) if fw.name == "torch" else model.set_state_dict(state)


def layers_of(fw, model):
    return [m for _, m in (model.named_modules() if fw.name == "torch" else model.named_sublayers(include_self=True))]


def assert_nothing_attached(fw, model):
    for layer in layers_of(fw, model):
        assert set(router.attached(layer).values()) == {0}


@pytest.fixture
def one_thread(fw):
    """PyTorch's intra-op threads spin when the machine's cores are busy: one thread is the fast choice here."""
    if fw.name != "torch":
        yield
        return
    before = fw.lib.get_num_threads()
    fw.lib.set_num_threads(1)
    try:
        yield
    finally:
        fw.lib.set_num_threads(before)


@pytest.mark.slow
def test_seed_demonstration(fw, one_thread):
    """Seed 000 section 2: Dropout2D(p=0.3) after layer3 and layer4 via seed-style hook functions."""
    fw.seed(0)
    model, size = resnet(fw)
    dropout2d_1, dropout2d_2 = fw.dropout2d(0.3), fw.dropout2d(0.3)
    dropout2d_1.train()
    dropout2d_2.train()

    def farward_hook_1(module, input, output):
        return dropout2d_1(output)

    def farward_hook_2(module, input, output):
        return dropout2d_2(output)

    drop_model = hookkit.DropHookModel(
        model, [model.layer4, model.layer3], [farward_hook_1, farward_hook_2], ["forwar_post_hook", "forwar_post_hook"]
    )
    test_data = fw.tensor(np.random.rand(1, 3, size, size))

    drop_model.train()
    train_outs = [fw.numpy(drop_model(test_data)) for _ in range(5)]
    for i in range(5):
        for j in range(i):
            assert not np.array_equal(train_outs[i], train_outs[j])

    drop_model.eval()
    eval_outs = [fw.numpy(drop_model(test_data)) for _ in range(5)]
    for out in eval_outs[1:]:
        assert np.array_equal(out, eval_outs[0])
    plain, _ = resnet(fw)
    load(fw, plain, drop_model.state_dict())
    plain.eval()
    assert np.array_equal(fw.numpy(plain(test_data)), eval_outs[0])
    # the train-mode differences are the dropout's: the plain model's train forwards agree
    plain.train()
    assert np.array_equal(fw.numpy(plain(test_data)), fw.numpy(plain(test_data)))

    opt = fw.adam(drop_model, lr=1e-3)
    x_data = fw.tensor(np.random.rand(4, 3, 32, 32))  # BatchNorm is fine with 4 samples of 1x1 maps
    y_data = fw.labels([1, 4, 7, 9])
    drop_model.train()
    losses = []
    for _ in range(10):
        loss = fw.cross_entropy(drop_model(x_data), y_data)
        loss.backward()
        fw.step(opt)
        losses.append(float(fw.numpy(loss)))
    assert losses[-1] < losses[0]
    assert router.attached(model.layer3)["forward"] == 1 and router.attached(model.layer4)["forward"] == 1


def test_contract_equals_the_plain_model(fw):
    model = fw.small_cnn()
    calls = []

    def hook(layer, inputs, output):
        calls.append(1)
        return output * 0.5

    dm = hookkit.DropHookModel(model, ["conv2"], [hook], ["forward_post_hook"])
    assert isinstance(dm, fw.Layer) and isinstance(dm, hookkit.DropHookModel)
    assert list(dm.state_dict().keys()) == list(model.state_dict().keys())
    assert not any(k.startswith("model.") for k in dm.state_dict())
    assert [n for n, _ in dm.named_parameters()] == [n for n, _ in model.named_parameters()]
    assert all(a is b for a, b in zip(dm.parameters(), model.parameters()))
    assert len(list(dm.parameters())) == len(list(model.parameters())) > 0

    x = fw.randn(3, 1, 8, 8)
    for _ in range(3):  # train()/eval() set the model's flags and place nothing new
        dm.train()
        assert all(m.training for m in layers_of(fw, model))
        dm.eval()
        assert not any(m.training for m in layers_of(fw, model))
    assert router.attached(model.conv2)["forward"] == 1

    dm.eval()
    assert np.array_equal(fw.numpy(dm(x)), fw.numpy(model(x)))
    assert calls == []  # the user's function is not called in eval mode
    dm.train()
    train_out = fw.numpy(dm(x))
    assert len(calls) == 1
    dm.remove_hooks()
    assert not np.array_equal(train_out, fw.numpy(dm(x)))  # the hook did act in training

    # loading a plain model's state into the wrapper, and the wrapper's into a plain model
    other = fw.small_cnn()
    load(fw, dm, other.state_dict())
    for (n, a), (m, b) in zip(model.named_parameters(), other.named_parameters()):
        assert n == m and np.array_equal(fw.numpy(a), fw.numpy(b))
    fresh = fw.small_cnn()
    load(fw, fresh, dm.state_dict())
    dm.eval()
    fresh.eval()
    assert np.array_equal(fw.numpy(dm(x)), fw.numpy(fresh(x)))
    assert_nothing_attached(fw, model)


def test_forward_pre_hook_acts_only_in_training(fw):
    model = fw.mlp((4, 6, 3))
    x = fw.randn(2, 4)

    def zero_inputs(layer, inputs):
        return inputs[0] * 0

    dm = hookkit.DropHookModel(model, [model[2]], [zero_inputs], "forward_pre_hook")
    dm.train()
    bias = fw.numpy(model[2].bias)
    np.testing.assert_array_equal(fw.numpy(dm(x)), np.broadcast_to(bias, (2, 3)))
    dm.eval()
    plain = fw.numpy(model(x))
    dm.remove_hooks()
    assert np.array_equal(plain, fw.numpy(model(x)))


def test_hook_returning_none_leaves_output(fw):
    model = fw.mlp()
    x = fw.randn(2, 5)
    plain = fw.numpy(model(x))
    seen = []
    dm = hookkit.DropHookModel(model, [model[0]], [lambda layer, inp, out: seen.append(out)], ["forward_post_hook"])
    dm.train()
    assert np.array_equal(fw.numpy(dm(x)), plain) and len(seen) == 1


def test_error_in_user_hook_names_the_layer(fw):
    model = fw.mlp()

    def bad(layer, inputs, output):
        raise RuntimeError("boom")

    dm = hookkit.DropHookModel(model, ["2"], [bad], ["forward_post_hook"])
    with pytest.raises(RuntimeError, match="boom") as err:
        dm(fw.randn(2, 5))
    assert "'2'" in "\n".join(err.value.__notes__)
    dm.remove_hooks()


@pytest.mark.parametrize(
    "layers, funcs, types, exc, words",
    [
        (["0"], [None], ["forward_hook"], ValueError, ["hook_types[0]", "'forward_hook'", "'forward_pre_hook'", "'forward_post_hook'"]),
        (
            ["0", "2"],
            [lambda *a: None],
            ["forward_post_hook"] * 2,
            ValueError,
            ["DropHookModel(): hook_funcs must be one function per layer of hook_layers (2)"],
        ),
        (
            ["0"],
            [lambda *a: None, lambda *a: None],
            ["forward_post_hook"],
            ValueError,
            ["hook_funcs must be one function per layer of hook_layers (1)"],
        ),
        ("0", [lambda *a: None], ["forward_post_hook"], TypeError, ["hook_layers", "list"]),
        (["0"], ["notfn"], ["forward_post_hook"], TypeError, ["hook_funcs[0]", "callable"]),
        (["0", "nope"], [lambda *a: None] * 2, ["forward_post_hook"] * 2, hookkit.LayerNotFound, ["nope"]),
    ],
)
def test_bad_arguments_raise_clearly_and_attach_nothing(fw, layers, funcs, types, exc, words):
    model = fw.mlp()
    with pytest.raises(exc) as err:
        hookkit.DropHookModel(model, layers, funcs, types)
    for w in words:
        assert w in str(err.value)
    assert_nothing_attached(fw, model)


# -- copies: pickle, torch.save, deepcopy ---------------------------------------------------------
def double_output(layer, inputs, output):
    """A module-level hook function: it pickles (a lambda does not, as with any framework hook)."""
    return output * 2


def quarter_inputs(layer, inputs):
    return inputs[0] * 0.25


def _round_trips(fw, dm):
    import copy
    import io
    import pickle

    yield "pickle", pickle.loads(pickle.dumps(dm))
    yield "deepcopy", copy.deepcopy(dm)
    if fw.name == "torch":
        buf = io.BytesIO()
        fw.lib.save(dm, buf)
        buf.seek(0)
        yield "torch.save", fw.lib.load(buf, weights_only=False)


def test_a_copy_of_the_wrapper_has_its_own_hooks(fw):
    model = fw.mlp((4, 6, 3))
    dm = hookkit.DropHookModel(model, ["0", model[2]], [double_output, quarter_inputs], ["forward_post_hook", "forward_pre_hook"])
    x = fw.randn(2, 4)
    dm.train()
    hooked = fw.numpy(dm(x))
    dm.eval()
    plain = fw.numpy(dm(x))
    assert not np.allclose(hooked, plain)
    for how, twin in _round_trips(fw, dm):
        assert type(twin) is type(dm) and twin.model is not model, how
        twin.train()
        np.testing.assert_allclose(fw.numpy(twin(x)), hooked, rtol=1e-6, err_msg=how)  # placed once, not twice
        twin.eval()
        np.testing.assert_allclose(fw.numpy(twin(x)), plain, rtol=1e-6, err_msg=how)
        twin.train()
        twin.remove_hooks()  # the copy's hooks are its own: removing them leaves the original's
        np.testing.assert_allclose(fw.numpy(twin(x)), plain, rtol=1e-6, err_msg=how)
        dm.train()
        np.testing.assert_allclose(fw.numpy(dm(x)), hooked, rtol=1e-6, err_msg=how)


def test_unpickling_rebuilds_the_wrapper_class_in_a_fresh_process(fw, monkeypatch):
    import pickle

    from hookkit.interventions import drophook

    dm = hookkit.DropHookModel(fw.mlp((4, 6, 3)), ["0"], [double_output])
    data = pickle.dumps(dm)
    name = type(dm).__name__
    monkeypatch.delitem(drophook._classes, fw.name)  # as in a process that never built it
    monkeypatch.delattr(drophook, name)
    twin = pickle.loads(data)
    assert type(twin).__name__ == name and type(twin) is not type(dm)
    assert isinstance(twin, hookkit.DropHookModel) and isinstance(twin, backend_layer(fw))


def backend_layer(fw):
    return hookkit.backends.backend_for(fw.mlp()).layer_class()


def test_a_model_with_every_intervention_attached_pickles(fw):
    import copy
    import pickle

    model = fw.sequential(fw.conv2d(1, 4, 3, padding=1), fw.relu(), fw.linear(6, 3))
    x = fw.randn(2, 1, 6, 6)
    handles = [
        hookkit.dropout(model, "1", p=0.2),
        hookkit.channel_dropout(model, "0", p=0.2),
        hookkit.drop_block(model, "1", p=0.2, block_size=2),
        hookkit.drop_path(model, "1", p=0.1),
        hookkit.gaussian_noise(model, "2", std=0.1),
        hookkit.clip_grad(model, "0", value=1.0),
        hookkit.prune(model, "2", amount=0.5),
        hookkit.mask_activations(model, "1", threshold=0.1),
        hookkit.steer(model, "2", np.ones(3, np.float32)),
        hookkit.edit(model, "2", lambda out, ev: out * 2),  # a lambda: the copies do not carry it
    ]
    model(x)
    model.eval()
    hooked = fw.numpy(model(x))
    for twin in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        twin.eval()
        out = fw.numpy(twin(x))  # the copy runs without hookkit's hooks: no steer, no edit
        plain_w = fw.numpy(twin[2].weight)
        assert (plain_w == 0).mean() == pytest.approx(0.5, abs=0.02)  # pruned values are data: they stay
        assert not np.allclose(out, hooked)
    np.testing.assert_array_equal(fw.numpy(model(x)), hooked)  # the original keeps its hooks
    for h in handles:
        h.remove()
