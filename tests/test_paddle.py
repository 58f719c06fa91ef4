"""Paddle-only behaviour: seeds 000 and 003 through hookkit, stop_gradient, to_static, no trace in the Layer."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit

paddle = pytest.importorskip("paddle")


class Model(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.flatten = paddle.nn.Flatten()

    def forward(self, inputs):
        return self.flatten(inputs)


def test_seed_000_forward_pre_and_post_hooks():
    model = Model()
    x = paddle.ones([10, 1], "float32")
    seen = []

    def forward_pre_hook(layer, input):
        seen.append(input)
        return input

    with hookkit.on_forward_pre(model, "flatten", forward_pre_hook):
        out = model(x)
    assert len(seen) == 1 and seen[0][0].shape == [10, 1] and np.all(out.numpy() == 1)
    with hookkit.on_forward_pre(model, "flatten", lambda layer, input: (input[0] * 3,)):
        assert np.all(model(x).numpy() == 3)

    def forward_post_hook(layer, input, output):
        return 2 * output

    handle = hookkit.on_forward(model, "flatten", forward_post_hook)
    out = model(x)
    assert out.shape == [10, 1] and np.all(out.numpy() == 2)
    handle.remove()
    assert np.all(model(x).numpy() == 1)


def test_seed_000_tensor_hooks():
    printed = []

    def print_hook_fn(grad):
        printed.append(grad.numpy().copy())

    def double_hook_fn(grad):
        grad = grad * 2
        return grad

    x = paddle.to_tensor([0.0, 1.0, 2.0, 3.0], stop_gradient=False)
    y = paddle.to_tensor([4.0, 5.0, 6.0, 7.0], stop_gradient=False)
    z = paddle.to_tensor([1.0, 2.0, 3.0, 4.0])
    h = hookkit.on_grad(x, print_hook_fn)
    hookkit.on_grad(x, double_hook_fn)
    w = x + y
    w_grads = []
    hookkit.on_grad(w, lambda grad: w_grads.append(grad.numpy().copy()))  # Paddle 3 keeps no .grad on non-leaves
    hookkit.on_grad(w, lambda grad: grad * 2)
    o = z.matmul(w)
    o.backward()
    np.testing.assert_array_equal(printed[0], [2.0, 4.0, 6.0, 8.0])
    np.testing.assert_array_equal(w_grads[0], [1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 8.0, 12.0, 16.0])
    np.testing.assert_array_equal(y.grad.numpy(), [2.0, 4.0, 6.0, 8.0])
    # remove the printing hook, keep the others
    h.remove()
    x.clear_grad()
    w = x + y
    hookkit.on_grad(w, lambda grad: grad * 2)
    z.matmul(w).backward()
    assert len(printed) == 1
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 8.0, 12.0, 16.0])


def test_stop_gradient_tensor_error_names_the_layer():
    t = paddle.ones([3])
    with pytest.raises(hookkit.GradientNotTracked, match="stop_gradient=True.*stop_gradient = False"):
        hookkit.on_grad(t, lambda g: g)


class Seed003(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        img = self.create_parameter([1, 3, 8, 8])
        self.add_parameter("img", img)
        saved = self.create_tensor(name="saved_tensor0")
        self.register_buffer("saved_tensor", saved, persistable=True)
        self.flatten = paddle.nn.Flatten()

    def forward(self):
        return self.flatten(self.img)


def test_seed_003_layer_model_hooks_leave_no_trace():
    model = Seed003()
    model.add_sublayer("fc", paddle.nn.Linear(192, 3))
    before = (sorted(model.state_dict()), len(model.buffers()), [p.name for p in model.parameters()])
    with hookkit.capture(model, hookkit.ALL, grads=True) as cap, hookkit.on_backward(model, "flatten", lambda *a: None):
        out = model.fc(model())
        out.sum().backward()
        assert (sorted(model.state_dict()), len(model.buffers()), [p.name for p in model.parameters()]) == before
    assert cap["flatten"].shape == [1, 192]
    assert cap.grads["flatten"].shape == [1, 192]
    assert model.img.grad is not None
    assert (sorted(model.state_dict()), len(model.buffers()), [p.name for p in model.parameters()]) == before
    assert not model._forward_pre_hooks and not model.flatten._forward_post_hooks


def test_to_static_model_is_refused_clearly():
    class Net(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.fc = paddle.nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(x)

    net = paddle.jit.to_static(Net(), full_graph=True)
    with pytest.raises(hookkit.HookkitError, match="to_static.*run once while tracing"):
        hookkit.capture(net, "fc")
    assert not net._forward_pre_hooks and not net.fc._forward_post_hooks
    plain = Net()
    plain.fc2 = paddle.jit.to_static(paddle.nn.Linear(2, 2))
    with pytest.raises(hookkit.HookkitError, match="layer 'fc2'"):
        hookkit.on_forward(plain, "fc2", lambda *a: None)
    with hookkit.capture(plain, "fc") as cap:  # the dygraph part stays hookable
        plain(paddle.randn([1, 4]))
    assert cap["fc"].shape == [1, 2]


def test_resnet18_capture_every_leaf_and_backward():
    net = paddle.vision.models.resnet18(num_classes=10)
    x = paddle.randn([2, 3, 32, 32])
    with hookkit.capture(net, hookkit.LEAVES, grads=True) as cap:
        net(x).sum().backward()
    assert len(cap.calls("layer1.0.relu")) == 2  # BasicBlock calls its ReLU twice
    assert cap["fc"].shape == [2, 10] and cap.grads["conv1"].shape == [2, 64, 16, 16]
    assert np.all(cap.grads["fc"].numpy() == 1)
    got = []
    with hookkit.on_backward(net, "layer2.0", lambda layer, gi, go: got.append((gi[0].shape, go[0].shape))):
        net(x).sum().backward()
    assert got == [([2, 64, 8, 8], [2, 128, 4, 4])]
