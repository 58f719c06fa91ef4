"""hookkit.graph's recording: a layer without sublayers (a leaf) has no pre event, so what that
must not change is checked here: a leaf given tensors by keyword, a leaf that raises inside a
block (given its input by keyword too), and parameter counts with a tied weight and a layer shared
by two parents (each parameter counted once per layer). Both frameworks, hand-written expectations."""

from __future__ import annotations

import pytest

import hookkit


def test_a_leaf_given_tensors_by_keyword_is_fed_by_them(fw):
    class Gate(fw.Layer):
        """No sublayers: a leaf, recorded from its forward event alone."""

        def forward(self, x, gate=None):
            return x * gate

    class M(fw.Layer):
        def __init__(self):
            super().__init__()
            self.fc, self.g, self.gate, self.out = fw.linear(4, 4), fw.linear(4, 4), Gate(), fw.linear(4, 2)

        def forward(self, x):
            h = self.gate(self.fc(x), gate=self.g(x))
            return self.out(input=h)  # everything by keyword

    g = hookkit.graph(M(), fw.randn(3, 4))
    assert [n.id for n in g.nodes] == ["input:x", "fc:0", "g:0", "gate:0", "out:0", "output:output"]
    assert g.edge_pairs() == [
        ("input:x", "fc:0"),
        ("input:x", "g:0"),
        ("fc:0", "gate:0"),
        ("g:0", "gate:0"),  # the keyword input
        ("gate:0", "out:0"),
        ("out:0", "output:output"),
    ]
    assert (g.node("gate:0").shapes, g.node("gate:0").params, g.node("out:0").shapes) == ([[3, 4]], 0, [[3, 2]])
    assert all(n.finished and n.error is None for n in g.nodes)


def test_a_leaf_that_raises_inside_a_block_is_the_failing_node(fw):
    class Block(fw.Layer):
        def __init__(self):
            super().__init__()
            self.ln, self.fc = fw.nn.LayerNorm(4), fw.linear(5, 2)  # fc takes 5 features, ln gives 4

        def forward(self, x):
            return self.fc(input=self.ln(x))

    class M(fw.Layer):
        def __init__(self):
            super().__init__()
            self.inp, self.block = fw.linear(3, 4), Block()

        def forward(self, x):
            return self.block(self.inp(x))

    model = M()
    with pytest.warns(hookkit.GraphWarning, match="layer 'block.fc'"):
        g = hookkit.graph(model, fw.randn(2, 3), depth=2)
    assert [n.id for n in g.nodes] == ["input:x", "inp:0", "block.ln:0", "block.fc:0"]
    # the failing call's input, given by keyword, read from the framework's call frame
    assert g.edge_pairs() == [("input:x", "inp:0"), ("inp:0", "block.ln:0"), ("block.ln:0", "block.fc:0")]
    failed = g.node("block.fc:0")
    assert failed.error == g.error and not failed.finished and failed.params == 5 * 2 + 2
    assert (failed.parent, failed.depth, failed.call, failed.shapes) == ("block:0", 2, 0, [])
    assert g.node("block:0").error is None and not g.node("block:0").finished  # open when it failed
    assert g.node("block.ln:0").finished and g.node("block.ln:0").shapes == [[2, 4]]
    assert hookkit.core.router.attached(model.block.fc) == dict.fromkeys(hookkit.core.router.EVENTS, 0)


def test_parameter_counts_with_a_tied_weight_and_a_shared_layer(fw):
    class Pair(fw.Layer):
        """Two linears sharing one weight (each keeps its own bias)."""

        def __init__(self):
            super().__init__()
            self.a, self.b = fw.linear(4, 4), fw.linear(4, 4)
            self.b.weight = self.a.weight

        def forward(self, x):
            return self.b(self.a(x))

    class Wrap(fw.Layer):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x)

    class Both(fw.Layer):
        """One linear reached through two parents."""

        def __init__(self):
            super().__init__()
            shared = fw.linear(4, 4)
            self.p1, self.p2 = Wrap(shared), Wrap(shared)

        def forward(self, x):
            return self.p2(self.p1(x))

    class M(fw.Layer):
        def __init__(self):
            super().__init__()
            self.pair, self.both = Pair(), Both()

        def forward(self, x):
            return self.both(self.pair(x))

    g = hookkit.graph(M(), fw.randn(2, 4), depth=3)
    params = {n.id: n.params for n in g.all_nodes if n.kind == "layer"}
    weight, bias = 4 * 4, 4
    assert params == {
        "pair:0": weight + 2 * bias,  # the tied weight once
        "pair.a:0": weight + bias,
        "pair.b:0": weight + bias,  # its weight is a's: still its own parameter
        "both:0": weight + bias,  # the shared linear once
        "both.p1:0": weight + bias,
        "both.p1.inner:0": weight + bias,
        "both.p2:0": weight + bias,
        "both.p1.inner:1": weight + bias,  # the second call of the shared linear, under its first name
    }
    assert g.node("both.p1.inner:1").parent == "both.p2:0"


def test_counts_without_sharing_equal_a_walk_of_each_layer(torch_fw):
    """The bottom-up sum (no sharing) against each layer's own parameters, counted directly."""
    model = torch_fw.mlp((5, 10, 3))
    g = hookkit.graph(model, torch_fw.randn(2, 5))
    for n in g.nodes:
        if n.kind == "layer":
            layer = model.get_submodule(n.name)
            assert n.params == sum(p.numel() for p in layer.parameters())
