"""hookkit.graph: the calls of one forward as data (edges = the hand-written data flow), folded at a
depth, a failing forward, both frameworks, torchview's module graph, and the picture (SVG, HTML,
dot, report section, headless Chromium)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import hookkit
from hookkit.observers.graph import Graph

HAS_DOT = shutil.which("dot") is not None
try:
    import graphviz  # noqa: F401

    HAS_GRAPHVIZ = True
except ImportError:
    HAS_GRAPHVIZ = False
needs_dot = pytest.mark.skipif(
    not (HAS_DOT and HAS_GRAPHVIZ),
    reason="Graphviz's dot and the graphviz package are needed (apt-get install graphviz; .ci/run installs it)",
)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


# -- models: each with its data flow written out by hand ------------------------------------------
def models(fw):
    nn, L = fw.nn, fw.Layer

    class Add(L):
        def forward(self, a, b):
            return a + b

    class Residual(L):
        """A residual branch through modules only: x -> fc1 -> add(x, .) -> fc2."""

        def __init__(self):
            super().__init__()
            self.fc1, self.add, self.fc2 = fw.linear(4, 4), Add(), fw.linear(4, 3)

        def forward(self, x):
            return self.fc2(self.add(x, self.fc1(x)))

    class Block(L):
        """x + fc(ln(x)): the residual add is the block's own code."""

        def __init__(self):
            super().__init__()
            self.ln, self.fc = nn.LayerNorm(4), fw.linear(4, 4)

        def forward(self, x):
            return x + self.fc(self.ln(x))

    class TwoInTwoOut(L):
        """Two inputs, a module called twice (shared), a loop over blocks, a dict output."""

        def __init__(self):
            super().__init__()
            self.inp = fw.linear(3, 4)
            self.blocks = (nn.ModuleList if fw.name == "torch" else nn.LayerList)([Block(), Block()])
            self.act = nn.ReLU()
            self.head = fw.linear(4, 2)
            self.side = fw.linear(5, 2)

        def forward(self, x, y):
            h = self.act(self.inp(x))
            for block in self.blocks:
                h = block(h)
            h = self.act(h)
            return {"logits": self.head(h), "aux": self.side(y)}

    class Broken(L):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2, self.fc3 = fw.linear(4, 6), fw.linear(5, 2), fw.linear(2, 2)

        def forward(self, x):
            return self.fc3(self.fc2(self.fc1(x)))  # fc2 takes 5 features, fc1 gives 6

    return Residual, TwoInTwoOut, Broken


def test_residual_through_modules(fw):
    Residual, _, _ = models(fw)
    g = hookkit.graph(Residual(), fw.randn(2, 4))
    assert [n.id for n in g.nodes] == ["input:x", "fc1:0", "add:0", "fc2:0", "output:output"]
    assert g.edge_pairs() == [
        ("input:x", "fc1:0"),
        ("input:x", "add:0"),  # the residual branch: the very tensor x
        ("fc1:0", "add:0"),
        ("add:0", "fc2:0"),
        ("fc2:0", "output:output"),
    ]
    fc2 = g.node("fc2:0")
    assert (fc2.type, fc2.shapes, fc2.dtypes, fc2.params, fc2.call, fc2.depth) == ("Linear", [[2, 3]], ["float32"], 4 * 3 + 3, 0, 1)
    assert g.error is None


def test_own_code_shared_module_loop_two_inputs_dict_output(fw):
    _, TwoInTwoOut, _ = models(fw)
    model = TwoInTwoOut()
    g = hookkit.graph(model, (fw.randn(2, 3), fw.randn(2, 5)), depth=1)
    ids = [n.id for n in g.nodes]
    assert ids == [
        "input:x",
        "input:y",
        "inp:0",
        "act:0",
        "blocks.0:0",
        "blocks.1:0",
        "act:1",
        "head:0",
        "side:0",
        "output:logits",
        "output:aux",
    ]
    assert g.edge_pairs() == [
        ("input:x", "inp:0"),
        ("inp:0", "act:0"),
        ("act:0", "blocks.0:0"),
        ("blocks.0:0", "blocks.1:0"),
        ("blocks.1:0", "act:1"),  # the shared ReLU, second call
        ("act:1", "head:0"),
        ("input:y", "side:0"),
        ("head:0", "output:logits"),
        ("side:0", "output:aux"),
    ]
    assert [g.node(i).call for i in ("act:0", "act:1")] == [0, 1]
    assert g.node("blocks.0:0").params == 4 * 4 + 4 + 2 * 4  # fc + LayerNorm
    # the blocks expanded: the residual add is each block's own code, after its fc
    g2 = g.at_depth(2)
    assert g2.edge_pairs() == [
        ("input:x", "inp:0"),
        ("inp:0", "act:0"),
        ("act:0", "blocks.0.ln:0"),
        ("blocks.0.ln:0", "blocks.0.fc:0"),
        ("act:0", "blocks.0:0/code@2"),  # x, the residual
        ("blocks.0.fc:0", "blocks.0:0/code@2"),  # fc(ln(x)), freed after the add
        ("blocks.0:0/code@2", "blocks.1.ln:0"),
        ("blocks.1.ln:0", "blocks.1.fc:0"),
        ("blocks.0:0/code@2", "blocks.1:0/code@2"),
        ("blocks.1.fc:0", "blocks.1:0/code@2"),
        ("blocks.1:0/code@2", "act:1"),
        ("act:1", "head:0"),
        ("input:y", "side:0"),
        ("head:0", "output:logits"),
        ("side:0", "output:aux"),
    ]
    assert {n.id for n in g2.nodes} - {n.id for n in g.nodes} == {
        "blocks.0.ln:0",
        "blocks.0.fc:0",
        "blocks.0:0/code@2",
        "blocks.1.ln:0",
        "blocks.1.fc:0",
        "blocks.1:0/code@2",
    }
    # the full tree is data: JSON and back, the same graph
    again = Graph.from_dict(json.loads(g2.to_json()))
    assert again.edge_pairs() == g2.edge_pairs() and [n.id for n in again.nodes] == [n.id for n in g2.nodes]
    assert hookkit.core.router.attached(model.inp) == dict.fromkeys(hookkit.core.router.EVENTS, 0)  # nothing left behind


def test_a_layer_called_in_a_loop(fw):
    model = fw.shared_block_model()  # inp, then block three times with a tanh in the model's code, then out
    g = hookkit.graph(model, fw.randn(3, 4))
    assert g.edge_pairs() == [
        ("input:x", "inp:0"),
        ("inp:0", "block:0"),
        ("code@2", "block:1"),  # tanh(block(x)): the model's own code
        ("code@3", "block:2"),
        ("code@4", "out:0"),
        ("out:0", "output:output"),
        ("input:x", "code@2"),  # the first own-code node is fed by the model's inputs (it could use them)
        ("code@2", "code@3"),
        ("code@3", "code@4"),
        ("block:0", "code@2"),
        ("block:1", "code@3"),
        ("block:2", "code@4"),
    ]
    assert [g.node(f"block:{i}").call for i in range(3)] == [0, 1, 2]


def test_operation_sites_are_nodes_inside_their_layer(fw):
    """ops=: the residual add and a functional relu become nodes; the own-code guess is gone."""

    class Block(fw.Layer):
        def __init__(self):
            super().__init__()
            self.ln, self.fc = fw.nn.LayerNorm(4), fw.linear(4, 4)

        def forward(self, x):
            return x + fw.F.relu(self.fc(self.ln(x)))

    class M(fw.Layer):
        def __init__(self):
            super().__init__()
            self.block, self.head = Block(), fw.linear(4, 2)

        def forward(self, x):
            return self.head(self.block(x))

    model = M()
    listed = {o.kind: o.name for o in hookkit.ops(model, "block")}
    relu, add = f"block::{listed['function']}:0", f"block::{listed['operator']}:0"
    g = hookkit.graph(model, fw.randn(2, 4), depth=2, ops="block::*")
    assert g.edge_pairs() == [
        ("input:x", "block.ln:0"),
        ("block.ln:0", "block.fc:0"),
        ("block.fc:0", relu),
        ("input:x", add),  # the residual, now seen where it happens
        (relu, add),
        (add, "head:0"),
        ("head:0", "output:output"),
    ]
    assert (g.node(add).kind, g.node(add).type, g.node(add).parent, g.node(add).shapes) == ("op", "+", "block:0", [[2, 4]])
    assert [n.id for n in g.at_depth(1).nodes] == ["input:x", "block:0", "head:0", "output:output"]
    assert "forward" not in vars(model.block)  # the rewritten forward is gone with the hooks
    assert hookkit.core.router.attached(model.block) == dict.fromkeys(hookkit.core.router.EVENTS, 0)


def test_views_and_eval_dropout_keep_their_producer(torch_fw):
    fw = torch_fw
    nn = fw.nn

    class M(fw.Layer):
        def __init__(self):
            super().__init__()
            self.fc, self.drop, self.out = fw.linear(6, 6), nn.Dropout(0.5), fw.linear(3, 1)

        def forward(self, x):
            h = self.drop(self.fc(x))  # eval: dropout hands its input back as is
            return self.out(h.view(-1, 3))  # a view of drop's output

    g = hookkit.graph(M(), fw.randn(2, 6))
    assert g.edge_pairs() == [("input:x", "fc:0"), ("fc:0", "drop:0"), ("drop:0", "out:0"), ("out:0", "output:output")]
    assert g.node("out:0").shapes == [[4, 1]]


def test_a_freed_tensor_s_id_reused_is_not_mistaken_for_it(torch_fw):
    fw = torch_fw

    class M(fw.Layer):
        def __init__(self):
            super().__init__()
            self.a, self.b = fw.linear(4, 4), fw.linear(4, 2)

        def forward(self, x):
            a = self.a(x)
            self.ids = [id(a)]
            del a  # freed: its id is free for the next tensor
            y = fw.lib.zeros(2, 4)
            self.ids.append(id(y))
            return self.b(y)

    model = M()
    g = hookkit.graph(model, fw.randn(2, 4))
    if model.ids[0] != model.ids[1]:
        pytest.skip("Python gave the new tensor another id this time: nothing to tell apart")
    assert ("a:0", "b:0") not in g.edge_pairs()
    assert ("code@1", "b:0") in g.edge_pairs()  # zeros(...) is the model's own code


def test_paddle_twin_gives_the_same_graph(torch_fw, paddle_fw):
    graphs = []
    for fw in (torch_fw, paddle_fw):
        fw.seed(0)
        _, TwoInTwoOut, _ = models(fw)
        g = hookkit.graph(TwoInTwoOut(), (fw.randn(2, 3), fw.randn(2, 5)), depth=2)
        graphs.append(g)
    t, p = graphs
    key = [(n.id, n.kind, n.shapes, n.dtypes, n.params, n.call, n.depth, n.parent) for n in t.nodes]
    assert key == [(n.id, n.kind, n.shapes, n.dtypes, n.params, n.call, n.depth, n.parent) for n in p.nodes]
    assert t.edge_pairs() == p.edge_pairs()
    assert [n.type for n in t.nodes if n.kind == "layer"] == [n.type for n in p.nodes if n.kind == "layer"]
    assert (t.framework, p.framework) == ("torch", "paddle")


def test_a_forward_that_raises_gives_the_partial_graph(fw):
    _, _, Broken = models(fw)
    model = Broken()
    with pytest.warns(hookkit.GraphWarning, match="layer 'fc2'"):
        g = hookkit.graph(model, fw.randn(2, 4))
    assert [n.id for n in g.nodes] == ["input:x", "fc1:0", "fc2:0"]
    assert g.edge_pairs() == [("input:x", "fc1:0"), ("fc1:0", "fc2:0")]
    failed = g.node("fc2:0")
    assert failed.error is not None and failed.error == g.error and not failed.finished
    assert g.node("fc1:0").error is None and g.node("fc1:0").shapes == [[2, 6]]
    # raise_errors=True: the model's own exception, the graph attached
    with pytest.raises(Exception) as info:
        hookkit.graph(model, fw.randn(2, 4), raise_errors=True)
    assert info.value.hookkit_graph.node("fc2:0").error == failed.error
    assert any("layer 'fc2'" in n for n in getattr(info.value, "__notes__", []))
    assert hookkit.core.router.attached(model.fc2) == dict.fromkeys(hookkit.core.router.EVENTS, 0)


def test_a_failure_in_a_block_s_own_code_is_on_its_own_code_node(torch_fw):
    fw = torch_fw

    class Block(fw.Layer):
        def __init__(self):
            super().__init__()
            self.fc = fw.linear(4, 4)

        def forward(self, x):
            return self.fc(x) @ x  # (2, 4) @ (2, 4): the shape error is in the block's code

    class M(fw.Layer):
        def __init__(self):
            super().__init__()
            self.block = Block()

        def forward(self, x):
            return self.block(x)

    with pytest.warns(hookkit.GraphWarning):
        g = hookkit.graph(M(), fw.randn(2, 4), depth=2)
    assert g.node("block:0").error and g.node("block:0/code@1").error == g.error
    assert "block:0/code@1" in [n.id for n in g.nodes]  # expanded: the error shows after block.fc


def test_arguments_are_checked(torch_fw):
    model = torch_fw.mlp()
    with pytest.raises(hookkit.HookkitError, match="graph"):
        hookkit.graph(model, torch_fw.randn(2, 5), depth=0)
    with pytest.raises(TypeError, match="inputs"):
        hookkit.graph(model, "x")
    with pytest.raises(hookkit.LayerNotFound):
        hookkit.graph(model, torch_fw.randn(2, 5), ops="9::add_0")
    g = hookkit.graph(model, torch_fw.randn(2, 5))
    with pytest.raises(KeyError, match="close"):
        g.node("0:9")


def test_the_model_comes_back_as_it_was(torch_fw):
    fw = torch_fw
    model = fw.small_cnn()
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    g = hookkit.graph(model, fw.randn(2, 1, 8, 8))
    assert model.training and all(m.training for m in model.modules())
    assert all(np.array_equal(before[k].numpy(), v.numpy()) for k, v in model.state_dict().items())
    model.eval()
    hookkit.graph(model, fw.randn(2, 1, 8, 8), mode="train")  # BatchNorm updates its statistics: put back
    assert not any(m.training for m in model.modules())
    assert all(np.array_equal(before[k].numpy(), v.numpy()) for k, v in model.state_dict().items())
    assert [n.name for n in g.nodes if n.kind == "layer"] == ["conv1", "bn1", "relu1", "pool1", "conv2", "relu2", "pool2", "flatten", "fc"]


# -- torchview's module-level graph ----------------------------------------------------------------
def _torchview_edges(model, x):
    """torchview's module graph at depth 1 as (class, class) pairs, inputs and outputs as 'input'/'output'."""
    torchview = pytest.importorskip("torchview")
    cg = torchview.draw_graph(model, input_data=list(x) if isinstance(x, tuple) else x, depth=1, save_graph=False, expand_nested=False)

    def label(node):
        kind = type(node).__name__
        if kind == "TensorNode":  # the model's input is named "input-tensor" (or "auxiliary-tensor"), its output "output-tensor"
            return "output" if node.name == "output-tensor" else "input"
        return node.name

    return sorted((label(a), label(b)) for a, b in cg.edge_list)


def test_module_graph_equals_torchview(torch_fw):
    fw = torch_fw
    Residual, TwoInTwoOut, _ = models(fw)
    cases = [
        (Residual(), fw.randn(2, 4)),
        (TwoInTwoOut(), (fw.randn(2, 3), fw.randn(2, 5))),  # a shared module, a loop, two inputs, a dict output
        (fw.small_cnn(), fw.randn(2, 1, 8, 8)),
        (fw.mlp((5, 8, 8, 3)), fw.randn(2, 5)),
    ]
    for model, x in cases:
        g = hookkit.graph(model, x, depth=1)
        types = {n.id: ("input" if n.kind == "input" else "output" if n.kind == "output" else n.type) for n in g.nodes}
        mine = sorted((types[a], types[b]) for a, b in g.edge_pairs())
        assert mine == _torchview_edges(model, x)


def test_hand_written_module_graph_of_a_cnn(torch_fw):
    """What torchview gives for the CNN (checked above where torchview is installed), by hand."""
    g = hookkit.graph(torch_fw.small_cnn(), torch_fw.randn(2, 1, 8, 8))
    chain = ["input:x", "conv1:0", "bn1:0", "relu1:0", "pool1:0", "conv2:0", "relu2:0", "pool2:0", "flatten:0", "fc:0", "output:output"]
    assert g.edge_pairs() == list(zip(chain, chain[1:]))
    assert g.node("flatten:0").shapes == [[2, 64]]


# -- the picture -------------------------------------------------------------------------------------
@needs_dot
def test_svg_html_dot_json_and_escaping(torch_fw, tmp_path):
    fw = torch_fw
    model = fw.sequential(fw.linear(4, 4), fw.relu())
    evil = '<script>alert("x")</script>&'
    model.add_module(evil, fw.linear(4, 2))
    g = hookkit.graph(model, fw.randn(2, 4))
    svg = g.svg()
    root = ET.fromstring(svg)  # well-formed XML: names are escaped by dot
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert evil in texts and "<script>" not in svg
    assert g._repr_svg_() == svg
    for ext in ("svg", "html", "dot", "json"):
        path = g.save(tmp_path / f"g.{ext}")
        text = open(path, encoding="utf-8").read()
        # pages escape the name; the dot source and JSON hold it as data (quoted)
        assert ("<script>" in text) == (ext in ("dot", "json"))
    assert json.loads(open(tmp_path / "g.json").read())["edges"][0] == {
        "src": "input:input",
        "dst": "0:0",
        "shape": [2, 4],
        "dtype": "float32",
        "count": 1,
        "tensor": 1,
    }
    assert "<svg" in open(tmp_path / "g.html").read()
    with pytest.raises(hookkit.HookkitError, match="svg"):
        g.save(tmp_path / "g.png")


def test_without_graphviz_the_data_still_works(torch_fw, monkeypatch):
    g = hookkit.graph(torch_fw.mlp(), torch_fw.randn(2, 5))
    monkeypatch.setattr(shutil, "which", lambda name: None)  # no dot program on PATH
    if HAS_GRAPHVIZ:
        with pytest.raises(ImportError, match="apt-get install graphviz"):
            g.svg()
    assert g._repr_svg_() is None and g._repr_html_() is None  # notebooks fall back to the text repr
    assert "digraph" in g.source() if HAS_GRAPHVIZ else g.to_dict()["edges"]


@needs_dot
def test_overlays(torch_fw):
    fw = torch_fw
    model = fw.mlp((5, 8, 8, 3))
    acts = hookkit.ActivationStats(model)
    for _ in range(2):
        model(fw.randn(16, 5))
    acts.remove()
    g = hookkit.graph(model, fw.randn(2, 5))
    src = g.source(overlay=acts)
    assert "activation std" in src and "legend" in src
    stds = {n: float(np.mean(acts.layer_stats(n)["std"])) for n in acts.names}
    lo, hi = min(stds, key=stds.get), max(stds, key=stds.get)
    coloured = g.with_overlay(acts).source()
    # the lowest std gets the scale's first colour, the highest its last, each value in its node
    assert 'fillcolor="#440154"' in coloured and 'fillcolor="#fde725"' in coloured
    assert 'fillcolor="#440154"' not in g.source()
    assert f"{stds[lo]:.3g}" in coloured and f"{stds[hi]:.3g}" in coloured
    assert "<svg" in g.with_overlay(acts).svg()
    dead = g.source(overlay=(acts, "near_zero"))
    assert "activation near_zero" in dead
    # a non-finite watch: the layer it names is red
    err = hookkit.NonFiniteError("2", "forward", 0, 0)
    assert 'fillcolor="#d62728"' in g.source(overlay=err) and "first non-finite value" in g.source(overlay=err)
    # a layer name: highlighted
    assert 'color="#ff7f0e"' in g.source(overlay="2")
    assert 'color="#ff7f0e"' not in g.source()
    with pytest.raises(TypeError, match="overlay"):
        g.source(overlay=3.5)
    with pytest.raises(hookkit.HookkitError, match="statistic"):
        g.source(overlay=(acts, "nope"))


@needs_dot
def test_gradient_norm_overlay(fw):
    model = fw.mlp((5, 8, 3))
    grads = hookkit.GradientStats(model)
    model(fw.randn(4, 5)).sum().backward()
    grads.remove()
    src = hookkit.graph(model, fw.randn(2, 5)).source(overlay=grads)
    assert "output gradient norm" in src


@needs_dot
def test_report_section(torch_fw, tmp_path):
    _, _, Broken = models(torch_fw)
    with pytest.warns(hookkit.GraphWarning):
        g = hookkit.graph(Broken(), torch_fw.randn(2, 4))
    html = hookkit.report([], tmp_path / "r.html", graph=g).read_text(encoding="utf-8")  # the graph alone
    assert '<section id="graph">' in html and "<svg" in html and "fc2" in html
    assert "The forward failed: RuntimeError" in html
    with pytest.raises(TypeError, match="graph"):
        hookkit.report([], tmp_path / "r.html", graph="g")


@needs_dot
def test_gpt2_24_blocks_at_depth_2():
    transformers = pytest.importorskip("transformers")
    import torch

    cfg = transformers.GPT2Config(n_layer=24, n_embd=32, n_head=2, vocab_size=50, n_positions=32, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2Model(cfg).eval()
    g = hookkit.graph(model, {"input_ids": torch.zeros(1, 8, dtype=torch.long)}, depth=2)
    layers = [n.name for n in g.nodes if n.kind == "layer"]
    assert layers[:5] == ["wte", "wpe", "drop", "h.0.ln_1", "h.0.attn"] and layers[-1] == "ln_f"
    assert sum(1 for n in layers if n.endswith(".attn")) == 24
    # each block: its residual stream through its own code
    assert ("h.3.attn:0", "h.3:0/code@2") in g.edge_pairs() and ("h.3:0/code@4", "h.4.ln_1:0") in g.edge_pairs()
    assert [n.name for n in g.at_depth(1).nodes if n.kind == "layer"] == ["wte", "wpe", "drop", *[f"h.{i}" for i in range(24)], "ln_f"]
    assert "<svg" in g.svg()


@pytest.mark.slow
@needs_dot
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; .ci/run installs it)")
def test_the_svg_renders_in_chromium(torch_fw, tmp_path):
    """A screenshot of the saved page: the error node's red and the input node's blue are on screen."""
    import matplotlib.image as mpimg

    _, _, Broken = models(torch_fw)
    with pytest.warns(hookkit.GraphWarning):
        g = hookkit.graph(Broken(), torch_fw.randn(2, 4))
    page = g.save(tmp_path / "g.html")
    shot = tmp_path / "shot.png"
    with tempfile.TemporaryDirectory() as profile:
        cmd = [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={os.path.join(profile, 'p')}",
            f"--screenshot={shot}",
            "--window-size=800,900",
            f"file://{page}",
        ]
        subprocess.run(cmd, capture_output=True, timeout=120)
    pixels = (mpimg.imread(shot)[..., :3] * 255).round().astype(int)
    colours = {tuple(p) for p in pixels.reshape(-1, 3)[::3]}
    assert (0xFE, 0xE2, 0xE2) in colours  # the failing node's fill
    assert (0xDB, 0xEA, 0xFE) in colours  # the input node's fill
    assert len(colours) > 20  # text and lines, not a blank page
