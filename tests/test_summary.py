"""hookkit.summary and ``hookkit summary``: counts checked against independent computations."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hookkit
from hookkit.apps.cli import main as cli_main
from models import hooks_left

HERE = Path(__file__).resolve().parent


# -- targets for the command line (module-level so that `test_summary:make_mlp` imports) ----------
def make_mlp(width: int = 8, framework: str = "torch"):
    """A 5 -> width -> 3 MLP on either framework."""
    from models import make_framework

    return make_framework(framework).mlp((5, width, 3))


def make_nothing():
    return 42


def _row(s, name, call=0):
    return next(r for r in s.all_rows if r.name == name and r.call == call)


# -- mult-adds ------------------------------------------------------------------------------------
def test_linear_and_conv_mult_adds_are_textbook(fw):
    model = fw.sequential(fw.conv2d(4, 6, 3, stride=2, padding=1, groups=2), fw.relu(), fw.flatten(), fw.linear(6 * 5 * 5, 7))
    s = hookkit.summary(model, (2, 4, 10, 10))
    conv_out = 2 * 6 * 5 * 5  # N * Cout * Hout * Wout with stride 2, padding 1
    conv = conv_out * (4 // 2) * 3 * 3
    linear = 2 * (6 * 5 * 5) * 7
    assert _row(s, "0").mult_adds == conv
    assert _row(s, "0").output_shapes == [[2, 6, 5, 5]]
    assert _row(s, "3").mult_adds == linear
    assert _row(s, "1").mult_adds == 0
    assert s.total_mult_adds == conv + linear == _row(s, "").mult_adds
    assert _row(s, "0").kernel_size == [3, 3]
    assert s.total_params == sum(fw.numpy(p).size for p in model.parameters())
    if fw.name == "paddle":
        assert "per layer type (Paddle)" in s.mult_adds_method and "per layer type (Paddle)" in str(s)
    else:
        assert "per operator" in s.mult_adds_method


def _tiny_attention(torch, d: int, sdpa: bool):
    class TinyAttention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k, self.v = (torch.nn.Linear(d, d, bias=False) for _ in range(3))

        def forward(self, x):
            q, k, v = self.q(x), self.k(x), self.v(x)
            if sdpa:  # 2 heads through the fused kernel
                b, t, _ = x.shape
                q, k, v = (z.view(b, t, 2, d // 2).transpose(1, 2) for z in (q, k, v))
                return torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d)
            att = (q @ k.transpose(-2, -1) / d**0.5).softmax(-1)
            return att @ v

    return TinyAttention()


@pytest.mark.parametrize("sdpa", [False, True])
def test_attention_counts_its_two_matmuls(torch_fw, sdpa):
    b, t, d = 2, 5, 8
    s = hookkit.summary(_tiny_attention(torch_fw.lib, d, sdpa), (b, t, d))
    projections = 3 * b * t * d * d
    matmuls = b * t * t * d + b * t * t * d  # q @ k^T and att @ v
    assert s.total_mult_adds == projections + matmuls
    assert sum(_row(s, n).mult_adds for n in "qkv") == projections


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_paddle_multihead_attention_rule(paddle_fw, mode):
    b, t, e = 2, 5, 16
    mha = paddle_fw.nn.MultiHeadAttention(e, 4, dropout=0.1)
    s = hookkit.summary(mha, (b, t, e), mode=mode)
    assert s.total_mult_adds == 4 * b * t * e * e + 2 * b * t * t * e
    assert _row(s, "q_proj").mult_adds == b * t * e * e


# -- parameters -----------------------------------------------------------------------------------
def test_tied_parameters_counted_once_and_flagged(fw):
    a, b = fw.linear(4, 4), fw.linear(4, 4)
    b.weight = a.weight
    model = fw.sequential(a, fw.relu(), b)
    s = hookkit.summary(model, (3, 4))
    assert s.total_params == sum(fw.numpy(p).size for p in model.parameters()) == 16 + 4 + 4
    assert s.tied == ["0.weight = 2.weight"]
    assert _row(s, "0").tied and _row(s, "2").tied and not _row(s, "1").tied
    assert "(tied)" in str(s) and "Tied parameters (counted once): 0.weight = 2.weight" in str(s)
    assert s.param_bytes == 24 * 4


def test_trainable_partial_and_frozen(fw):
    model = fw.mlp((5, 6, 3))
    for p in model[0].parameters():
        if fw.name == "paddle":
            p.stop_gradient = True
        else:
            p.requires_grad_(False)
    s = hookkit.summary(model, (2, 5))
    assert _row(s, "0").trainable is False and _row(s, "2").trainable is True
    assert _row(s, "").trainable == "Partial" and _row(s, "1").trainable is None
    assert s.trainable_params == 6 * 3 + 3 and s.non_trainable_params == 5 * 6 + 6
    assert "Partial" in str(s)


def _small_transformers():
    transformers = pytest.importorskip("transformers")
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=64))
    bert = transformers.BertModel(
        transformers.BertConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=100, max_position_embeddings=64
        )
    )
    vit = transformers.ViTModel(
        transformers.ViTConfig(
            image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
        )
    )
    return gpt2, bert, vit


def test_transformers_param_totals_and_mult_adds(torch_fw):
    import torch

    gpt2, bert, vit = _small_transformers()
    ids = torch.zeros(1, 16, dtype=torch.long)
    s = hookkit.summary(gpt2, input_data={"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    naive = sum(p.numel() for _, p in gpt2.named_parameters(remove_duplicate=False))
    assert s.total_params == sum(p.numel() for p in gpt2.parameters()) < naive  # tied embedding once
    assert s.tied == ["transformer.wte.weight = lm_head.weight"]
    assert _row(s, "lm_head").tied and _row(s, "lm_head").mult_adds == 16 * 64 * 1000
    assert _row(s, "transformer.h.0").input_shapes[0] == [1, 16, 64]
    assert _row(s, "").output_shapes[0] == [1, 16, 1000]

    s = hookkit.summary(bert, {"input_ids": (2, 12), "attention_mask": (2, 12)}, dtypes="long")
    assert s.total_params == sum(p.numel() for p in bert.parameters())

    s = hookkit.summary(vit, (1, 3, 32, 32), depth=10)
    assert s.total_params == sum(p.numel() for p in vit.parameters())
    t, e, i, layers = 17, 32, 64, 2  # 16 patches + [CLS]
    patch_embed = e * 16 * 3 * 8 * 8
    per_layer = 4 * t * e * e + 2 * t * t * e + 2 * t * e * i  # q, k, v, out; attention; MLP
    assert s.total_mult_adds == patch_embed + layers * per_layer + e * e  # + pooler on [CLS]


def test_paddle_resnet18_matches_paddle_summary(paddle_fw):
    import paddle

    model = paddle.vision.models.resnet18()
    s = hookkit.summary(model, (1, 3, 32, 32), depth=1)
    with contextlib.redirect_stdout(io.StringIO()):
        ref = paddle.summary(model, (1, 3, 32, 32))
    assert s.total_params == int(ref["total_params"])
    assert s.trainable_params == int(ref["trainable_params"])
    assert [r.name for r in s.rows][:3] == ["", "conv1", "bn1"] and max(r.depth for r in s.rows) == 1
    conv1 = _row(s, "conv1")
    assert conv1.mult_adds == 64 * 16 * 16 * 3 * 7 * 7


# -- calls, inputs, modes -------------------------------------------------------------------------
def test_repeated_calls_give_one_row_each(fw):
    model = fw.shared_block_model()
    s = hookkit.summary(model, (2, 4))
    rows = [r for r in s.rows if r.name == "block"]
    assert [r.call for r in rows] == [0, 1, 2] and all(r.calls == 3 for r in rows)
    assert all(r.mult_adds == 2 * 6 * 6 for r in rows)
    assert [r.name for r in s.rows] == ["", "inp", "block", "block", "block", "out"]
    assert s.total_params == sum(fw.numpy(p).size for p in model.parameters())
    assert s.total_mult_adds == 2 * (4 * 6 + 3 * 6 * 6 + 6 * 2)
    text = str(s)
    assert "block (Linear) [call 2]" in text and "(recursive)" in text


def _two_input_model(fw):
    class TwoInputs(fw.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.emb = fw.nn.Embedding(10, 4)
            self.fc = fw.linear(4, 3)

        def forward(self, ids, mask=None):
            h = self.emb(ids)
            if mask is not None:
                h = h * mask.unsqueeze(-1)
            return self.fc(h)

    return TwoInputs()


def test_dict_list_and_integer_inputs(fw):
    model = _two_input_model(fw)
    ids = fw.labels([[1, 2, 3], [4, 5, 6]])
    mask = fw.tensor([[1, 1, 0], [1, 0, 0]])
    s = hookkit.summary(model, input_data={"ids": ids, "mask": mask})
    assert _row(s, "").input_shapes == [[2, 3], [2, 3]]
    assert _row(s, "fc").mult_adds == 2 * 3 * 4 * 3
    s2 = hookkit.summary(model, input_data=[ids, mask])
    assert _row(s2, "").input_shapes == [[2, 3], [2, 3]]
    s3 = hookkit.summary(model, [(2, 3), (2, 3)], dtypes=["long", "float32"])
    assert _row(s3, "emb").output_shapes == [[2, 3, 4]]
    s4 = hookkit.summary(model, {"ids": (1, 7)}, dtypes="int64")
    assert _row(s4, "fc").output_shapes == [[1, 7, 3]]
    assert s4.input_bytes == 7 * 8


def _mode_probe(fw):
    seen = []

    class Probe(fw.Layer):
        def forward(self, x):
            seen.append(self.training)
            return x

    return fw.sequential(fw.linear(3, 3), Probe(), fw.linear(3, 2)), seen


def test_training_mode_restored(fw):
    model, seen = _mode_probe(fw)
    model.train()
    model[2].eval()  # a mixed state must come back exactly
    hookkit.summary(model, (1, 3))
    hookkit.summary(model, (1, 3), mode="train")
    hookkit.summary(model, (1, 3), mode="same")
    assert seen == [False, True, True]
    assert [m.training for m in (model, model[0], model[1], model[2])] == [True, True, True, False]
    model.eval()
    hookkit.summary(model, (1, 3), mode="train")
    assert not any(m.training for m in (model, model[0], model[1], model[2]))
    assert not hooks_left(model)


def test_gradients_are_off_during_the_forward(fw):
    seen = []

    class Probe(fw.Layer):
        def forward(self, x):
            seen.append(fw.lib.is_grad_enabled())
            return x

    hookkit.summary(fw.sequential(Probe()), (1, 2))
    assert seen == [False] and fw.lib.is_grad_enabled()


# -- failures ---------------------------------------------------------------------------------------
def test_failing_forward_prints_rows_and_names_layer(fw, capsys):
    model = fw.sequential(fw.linear(4, 6), fw.relu(), fw.linear(7, 2))
    model.train()
    with pytest.raises(Exception) as info:
        hookkit.summary(model, (3, 4))
    exc = info.value
    assert "hookkit.summary: the forward failed in layer '2' (Linear, call 0" in "\n".join(exc.__notes__)
    assert exc.hookkit_layer == "2"
    out = capsys.readouterr().out
    assert "0 (Linear)" in out and "FAILED" in out and "[3, 6]" in out
    partial = exc.hookkit_summary
    assert [r.name for r in partial.rows] == ["", "0", "1", "2"]
    assert partial.rows[1].finished and partial.rows[3].failed and not partial.rows[0].finished
    assert partial.total_params == 4 * 6 + 6 + 7 * 2 + 2
    assert model.training and all(m.training for m in model)
    assert not hooks_left(model)
    # a later summary of a fixed model works (nothing left half-open)
    ok = hookkit.summary(fw.sequential(fw.linear(4, 6)), (3, 4))
    assert ok.total_mult_adds == 3 * 4 * 6


def test_failure_in_a_parents_own_code_names_the_parent(fw, capsys):
    class Parent(fw.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.fc = fw.linear(4, 4)

        def forward(self, x):
            self.fc(x)
            raise KeyError("boom")

    model = fw.sequential(fw.linear(4, 4), Parent())
    with pytest.raises(KeyError) as info:
        hookkit.summary(model, (1, 4))
    assert info.value.hookkit_layer == "1"
    assert "layer '1' (Parent, call 0" in info.value.__notes__[-1]
    assert not hooks_left(model)


def test_failure_in_a_hook_is_attributed_to_that_layer(fw, capsys):
    model = fw.sequential(fw.linear(4, 4), fw.relu(), fw.linear(4, 2))

    def bad(layer, args, output):
        raise RuntimeError("hook broke")

    with hookkit.on_forward(model, "1", bad):
        with pytest.raises(RuntimeError) as info:
            hookkit.summary(model, (1, 4))
    assert info.value.hookkit_layer == "1"
    assert _row(info.value.hookkit_summary, "1").failed
    assert not hooks_left(model)


def test_failure_in_a_pre_hook_and_below_depth(fw, capsys):
    model = fw.sequential(fw.linear(4, 4), fw.sequential(fw.relu(), fw.linear(5, 2)))

    with pytest.raises(Exception) as info:  # the failing call is two levels down: shown anyway
        hookkit.summary(model, (1, 4), depth=1)
    assert [r.name for r in info.value.hookkit_summary.rows] == ["", "0", "1", "1.1"]
    assert info.value.hookkit_summary.rows[-1].failed and "1.1 (Linear)" in capsys.readouterr().out

    def bad(layer, args):
        raise ValueError("pre hook broke")

    model = fw.sequential(fw.linear(4, 4), fw.relu(), fw.linear(4, 2))
    with hookkit.on_forward_pre(model, "2", bad):
        with pytest.raises(ValueError) as info:
            hookkit.summary(model, (1, 4))
    assert "in a hook on layer '2', before the layer ran" in info.value.__notes__[-1]
    assert not any(r.failed for r in info.value.hookkit_summary.all_rows)
    assert not hooks_left(model)


def test_argument_errors_are_clear(fw):
    model = fw.mlp()
    with pytest.raises(ValueError, match="give input_size or input_data, not both"):
        hookkit.summary(model, (1, 5), input_data=fw.randn(1, 5))
    with pytest.raises(ValueError, match="depth must be an int >= 0; got -1"):
        hookkit.summary(model, (1, 5), depth=-1)
    with pytest.raises(ValueError, match=r"summary\(\): input_size must be a shape whose every dimension is positive; got \(0, 5\)"):
        hookkit.summary(model, (0, 5))
    with pytest.raises(ValueError, match=r"summary\(\): columns must be column names among input_size, .*; got 'shapes'"):
        hookkit.summary(model, (1, 5), columns=["shapes"])
    with pytest.raises(ValueError, match=r"summary\(\): dtypes must be dtype names among float16, .*; got 'complex7'"):
        hookkit.summary(model, (1, 5), dtypes="complex7")
    with pytest.raises(ValueError, match=r"summary\(\): dtypes must be one dtype for all inputs or one per input \(1\)"):
        hookkit.summary(model, (1, 5), dtypes=["float32", "float32"])
    with pytest.raises(ValueError, match=r"summary\(\): mode must be one of 'eval', "):
        hookkit.summary(model, (1, 5), mode="inference")
    with pytest.raises(TypeError, match=r"summary\(\): input_size must be a shape like"):
        hookkit.summary(model, "1,5")
    with pytest.raises(TypeError, match=r"summary\(\): input_data must be a tensor, a list/tuple of tensors or a dict"):
        hookkit.summary(model, input_data={1, 2})
    assert not hooks_left(model)


# -- output forms ---------------------------------------------------------------------------------
def test_table_json_and_depth(fw):
    model = fw.small_cnn()
    s = hookkit.summary(model, (2, 1, 8, 8), depth=0, columns=("output_size", "num_params", "params_percent", "kernel_size"))
    assert len(s.rows) == 1 and len(s.all_rows) == 10
    text = str(s)
    assert "\x1b[" not in text and "Param %" in text and "Mult-Adds" not in text.splitlines()[1]
    assert repr(s) == text  # stdout is not a terminal under pytest
    data = json.loads(s.to_json())
    assert data["total_params"] == s.total_params == sum(fw.numpy(p).size for p in model.parameters())
    assert data["rows"][0]["output_shapes"] == [[2, 10]]
    assert data["activation_bytes"] == sum(r.output_bytes for r in s.all_rows if r.leaf) > 0
    bn_out = 2 * 8 * 8 * 8 * 4
    assert _row(s, "bn1").output_bytes == bn_out
    rich_text = s._render_rich()
    assert "\x1b[" in rich_text and "SmallCNN" in rich_text and "┏" in rich_text


# -- command line ---------------------------------------------------------------------------------
def test_cli_table_json_and_kw(capsys):
    assert cli_main(["summary", "test_summary:make_mlp", "--input-size", "2,5", "--kw", "width=7"]) == 0
    out = capsys.readouterr().out
    assert "0 (Linear)" in out and f"Total params: {5 * 7 + 7 + 7 * 3 + 3:,}" in out
    assert cli_main(["summary", "test_summary:make_mlp", "--input-size", "2,5", "--kw", "framework=paddle", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["framework"] == "paddle" and data["total_params"] == 5 * 8 + 8 + 8 * 3 + 3


def test_cli_transformers_class_with_config_kw(capsys):
    pytest.importorskip("transformers")
    argv = ["summary", "transformers:GPT2LMHeadModel", "--kw", "n_layer=1", "--kw", "n_embd=32", "--kw", "n_head=2"]
    argv += ["--kw", "vocab_size=100", "--input-size", "1,8", "--dtype", "long", "--json", "--depth", "1"]
    assert cli_main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    import transformers

    ref = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100))
    assert data["total_params"] == sum(p.numel() for p in ref.parameters())
    assert {r["depth"] for r in data["rows"]} == {0, 1}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["no_such_module_xyz:f", "--input-size", "1,5"], "cannot import module 'no_such_module_xyz'"),
        (["test_summary:make_mpl", "--input-size", "1,5"], "has no attribute 'make_mpl' ('make_mpl' is missing; closest: make_mlp"),
        (["test_summary:make_nothing", "--input-size", "1,5"], "returned int, not a model"),
        (["test_summary:make_mlp", "--input-size", "1,4"], "in layer '0' (Linear, call 0"),
        (["test_summary:make_mlp", "--input-size", "1,a"], "--input-size '1,a' is not a shape: give positive integers separated"),
        (["test_summary:make_mlp", "--input-size", "1,x"], "--input-size '1,x' is not a shape"),
        (["test_summary:make_mlp", "--input-size", "1,,5"], "is not a shape"),
        (["test_summary:make_mlp", "--input-size", "1,0"], "every dimension must be positive"),
        (
            ["test_summary:make_mlp", "--input-size", "1,5", "--kw", "widht=3"],
            "--kw widht=3: test_summary:make_mlp takes no 'widht'; did you mean width?",
        ),
        (["test_summary:make_mlp", "--input-size", "1,5", "--kw", "nope=1"], "takes no 'nope'; valid: framework, width"),
        (["test_summary:make_mlp", "--input-size", "1,5", "--kw", "width=3", "--kw", "width=4"], "--kw width is given twice"),
        (["test_summary:make_mlp", "--input-size", "1,5", "--kw", "width"], "--kw expects key=value"),
        (["test_summary:make_mlp", "--input-size", "1,5", "--dtype", "complex7"], "--dtype must be dtype names among float16"),
        (["test_summary:make_mlp", "--dtype", "long"], "--dtype needs an --input-size"),
        (["test_summary:make_mlp", "--input-size", "1,5", "--depth", "-1"], "--depth must be >= 0"),
        (["transformers:GPT2LMHeadModel", "--kw", "n_layr=1", "--input-size", "1,8"], "GPT2Config takes no 'n_layr'; did you mean n_layer"),
        (["make_mlp", "--input-size", "1,5"], "TARGET must look like package.module:callable"),
    ],
)
def test_cli_errors(capsys, argv, message):
    assert cli_main(["summary", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.slow
def test_cli_subprocess():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "hookkit.apps.cli", "summary", "test_summary:make_mlp", "--input-size", "3,5", "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, cwd=HERE)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["total_mult_adds"] == 3 * (5 * 8 + 8 * 3) and data["model"] == "Sequential"
    assert "Traceback" not in done.stderr


def test_cli_without_input_gives_the_parameter_table(capsys):
    assert cli_main(["summary", "test_summary:make_mlp", "--kw", "width=7"]) == 0
    out = capsys.readouterr().out
    assert "Param #" in out and "Output Shape" not in out and "no input given: parameters only" in out
    assert f"Total params: {5 * 7 + 7 + 7 * 3 + 3:,}" in out


def test_cli_hints_dtype_long_for_embeddings(capsys):
    pytest.importorskip("transformers")
    argv = ["summary", "transformers:GPT2LMHeadModel", "--kw", "n_layer=1", "--kw", "n_embd=32", "--kw", "n_head=2"]
    assert cli_main([*argv, "--kw", "vocab_size=100", "--input-size", "1,8"]) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # (transformers' own logging may write above it)
    assert last.startswith("hookkit summary: error:") and "in layer 'transformer.wte' (Embedding" in last and "--dtype long" in last
    # the hidden_size alias of n_embd is a valid config key
    alias = [*argv[:4], "--kw", "hidden_size=32", "--kw", "n_head=2", "--kw", "vocab_size=100"]
    assert cli_main([*alias, "--input-size", "1,8", "--dtype", "long", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total_params"] > 0


# -- recurrent layers and attention: textbook counts --------------------------------------------------
def _rnn_textbook(gates: int, inp: int, hidden: int, layers: int, dirs: int, tokens: int, proj: int = 0) -> int:
    out = proj or hidden
    total = 0
    for layer in range(layers):
        i = inp if layer == 0 else out * dirs
        per_dir = gates * hidden * (i + out) + (hidden * proj if proj else 0)
        total += dirs * per_dir
    return tokens * total


@pytest.mark.parametrize("kind, gates", [("LSTM", 4), ("GRU", 3), ("RNN", 1)])
@pytest.mark.parametrize("layers, bidirectional, batch_first", [(1, False, False), (2, True, True)])
def test_torch_recurrent_layers_textbook(torch_fw, kind, gates, layers, bidirectional, batch_first):
    nn = torch_fw.nn
    layer = getattr(nn, kind)(6, 5, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first)
    b, t = 3, 7
    shape = (b, t, 6) if batch_first else (t, b, 6)
    for mode in ("eval", "train"):  # train: the CPU LSTM kernel is mkldnn_rnn_layer either way
        s = hookkit.summary(layer, shape, mode=mode)
        assert s.total_mult_adds == _rnn_textbook(gates, 6, 5, layers, 2 if bidirectional else 1, b * t)


def test_torch_lstm_projection_and_packed_sequence(torch_fw):
    import torch

    lstm = torch.nn.LSTM(6, 5, proj_size=3)
    s = hookkit.summary(lstm, (7, 2, 6))
    assert s.total_mult_adds == _rnn_textbook(4, 6, 5, 1, 1, 14, proj=3)

    class Packed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = torch.nn.LSTM(6, 5, num_layers=2, bidirectional=True)

        def forward(self, x, lengths):
            return self.lstm(torch.nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False))[1][0]

    s = hookkit.summary(Packed(), input_data=[torch.randn(7, 3, 6), torch.tensor([7, 2, 4])])
    assert s.total_mult_adds == _rnn_textbook(4, 6, 5, 2, 2, 7 + 2 + 4)  # padding is not computed


def test_torch_rnn_and_attention_kernels_have_formulas(torch_fw):
    """Kernels PyTorch picks on GPUs (cuDNN RNN, flash / efficient / cuDNN attention) counted on meta tensors."""
    import torch

    from hookkit.backends import backend_for

    counter = backend_for(torch.nn.Linear(1, 1)).mult_add_counter()
    meta = {"device": "meta"}
    x, h = torch.empty(7, 2, 6, **meta), torch.empty(1, 2, 5, **meta)
    weights = [torch.empty(20, 6, **meta), torch.empty(20, 5, **meta), torch.empty(20, **meta), torch.empty(20, **meta)]
    q = torch.empty(2, 4, 9, 16, **meta, dtype=torch.float16)
    k = torch.empty(2, 4, 11, 16, **meta, dtype=torch.float16)
    aten = torch.ops.aten
    with counter:
        aten._cudnn_rnn(x, weights, 4, None, h, h, 2, 5, 0, 1, False, 0.0, False, False, [], None)
        rnn = counter.total()
        aten._scaled_dot_product_flash_attention(q, k, k)
        aten._scaled_dot_product_efficient_attention(q, k, k, None, False)
        aten._scaled_dot_product_cudnn_attention(q, k, k, None, False)
        aten._scaled_dot_product_fused_attention_overrideable(q, k, k)
    assert rnn == 14 * 20 * (6 + 5)
    assert counter.total() - rnn == 4 * (2 * 2 * 4 * 9 * 11 * 16)


def _vit_block(torch, e: int, heads: int, mlp: int):
    class Block(torch.nn.Module):  # torchvision's EncoderBlock layout
        def __init__(self) -> None:
            super().__init__()
            self.ln_1, self.ln_2 = torch.nn.LayerNorm(e), torch.nn.LayerNorm(e)
            self.self_attention = torch.nn.MultiheadAttention(e, heads, batch_first=True)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(e, mlp), torch.nn.GELU(), torch.nn.Linear(mlp, e))

        def forward(self, x):
            y = self.ln_1(x)
            x = x + self.self_attention(y, y, y, need_weights=False)[0]
            return x + self.mlp(self.ln_2(x))

    return Block()


def test_torch_attention_fast_path_eval_and_train(torch_fw):
    import torch

    b, t, e, heads, mlp = 2, 10, 16, 4, 32
    attention = 4 * b * t * e * e + 2 * b * t * t * e  # q, k, v, out projections; q @ k^T and weights @ v
    block = torch.nn.Sequential(torch.nn.Conv2d(3, e, 4, stride=4), torch.nn.Flatten(2))

    class ViT(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.patch = block
            self.blocks = torch.nn.Sequential(*[_vit_block(torch, e, heads, mlp) for _ in range(2)])

        def forward(self, x):
            return self.blocks(self.patch(x).transpose(1, 2))

    patches = b * t * e * 3 * 4 * 4  # 40x4 image -> 10 patches
    per_block = attention + 2 * b * t * e * mlp
    for mode in ("eval", "train"):  # eval takes aten._native_multi_head_attention
        s = hookkit.summary(ViT(), (b, 3, 4, 40), mode=mode)
        assert s.total_mult_adds == patches + 2 * per_block, mode
        assert {r.name: r.mult_adds for r in s.all_rows}["blocks.0.self_attention"] == attention

    layer = torch.nn.TransformerEncoderLayer(e, heads, mlp, batch_first=True)
    for mode in ("eval", "train"):  # eval: aten._transformer_encoder_layer_fwd, the whole layer in one kernel
        assert hookkit.summary(layer, (b, t, e), mode=mode).total_mult_adds == per_block

    encoder = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(e, heads, mlp, batch_first=True), 2)
    mask = torch.zeros(b, t, dtype=torch.bool)
    mask[1, 6:] = True  # the second sequence has 6 real tokens: the nested-tensor fast path skips the padding
    s = hookkit.summary(encoder.eval(), input_data={"src": torch.randn(b, t, e), "src_key_padding_mask": mask})
    lengths = [10, 6]
    per_layer = sum(4 * n * e * e + 2 * n * n * e + 2 * n * e * mlp for n in lengths)
    assert s.total_mult_adds == 2 * per_layer


@pytest.mark.parametrize("kind, gates", [("LSTM", 4), ("GRU", 3), ("SimpleRNN", 1)])
def test_paddle_recurrent_layers_textbook(paddle_fw, kind, gates):
    nn = paddle_fw.nn
    b, t = 3, 7
    for layers, direction in ((1, "forward"), (2, "bidirect")):
        layer = getattr(nn, kind)(6, 5, num_layers=layers, direction=direction)
        s = hookkit.summary(layer, (b, t, 6))
        assert s.total_mult_adds == _rnn_textbook(gates, 6, 5, layers, 2 if direction == "bidirect" else 1, b * t)
    cell_name = {"LSTM": "LSTMCell", "GRU": "GRUCell", "SimpleRNN": "SimpleRNNCell"}[kind]
    wrapped = nn.RNN(getattr(nn, cell_name)(6, 5))  # the cell runs per step: counted once, by the cell
    s = hookkit.summary(wrapped, (b, t, 6))
    assert s.total_mult_adds == _rnn_textbook(gates, 6, 5, 1, 1, b * t)
    assert [r.mult_adds for r in s.all_rows if r.name == "cell"] == [b * gates * 5 * 11] * t


def test_paddle_attention_against_paddle_flops_rules(paddle_fw):
    """paddle.flops (paddle 3.3.1) fails on any layer with sublayers (int() of a [1]-tensor), so its
    per-layer rules (paddle.hapi.dynamic_flops.register_hooks) are compared directly. It has none for
    MultiHeadAttention or the recurrent layers: hookkit's attention matmuls and RNN rules are extra."""
    import paddle
    from paddle.hapi import dynamic_flops

    b, t, e = 2, 5, 16
    layer = paddle.nn.TransformerEncoderLayer(e, 4, 32, dropout=0.0)
    s = hookkit.summary(layer, (b, t, e), depth=5)
    assert dynamic_flops.register_hooks.get(paddle.nn.MultiHeadAttention) is None
    assert dynamic_flops.register_hooks.get(paddle.nn.LSTM) is None
    linears = [(n, m) for n, m in layer.named_sublayers() if isinstance(m, paddle.nn.Linear)]
    assert len(linears) == 6
    with hookkit.capture(layer, [n for n, _ in linears], inputs=True) as cap:
        layer(paddle.randn([b, t, e]))
    for name, m in linears:
        m.total_ops = paddle.zeros([1], dtype="int64")
        rec = cap.calls(name)[0]
        dynamic_flops.count_linear(m, (rec.inputs[0],), rec.output)
        assert _row(s, name).mult_adds == int(m.total_ops.item()), name
    matmuls = 2 * b * t * t * e
    assert _row(s, "self_attn").mult_adds == 4 * b * t * e * e + matmuls
    norms = 2 * b * t * e
    assert s.total_mult_adds == 4 * b * t * e * e + matmuls + 2 * b * t * e * 32 + norms


# -- the model comes back exactly as it was ---------------------------------------------------------
def _state(fw, model):
    return {k: fw.numpy(v).copy() for k, v in model.state_dict().items()}


def _bn_model(fw):
    bn1d = fw.nn.BatchNorm1d if fw.name == "torch" else fw.nn.BatchNorm1D
    return fw.sequential(fw.linear(4, 6), bn1d(6), fw.relu(), fw.linear(6, 3))


@pytest.mark.parametrize("mode", ["train", "eval", "same"])
def test_summary_leaves_state_flags_and_hooks_unchanged(fw, mode):
    model = _bn_model(fw)
    model.train()
    model[3].eval()
    frozen = model[3].weight
    if fw.name == "torch":
        frozen.requires_grad_(False)
    else:
        frozen.stop_gradient = True
    seen = []
    user_hook = model[0].register_forward_post_hook if fw.name == "paddle" else model[0].register_forward_hook
    handle = user_hook(lambda layer, args, out: seen.append(1))
    before = _state(fw, model)
    hookkit.summary(model, (8, 4), mode=mode)
    after = _state(fw, model)
    assert before.keys() == after.keys() and all((before[k] == after[k]).all() for k in before)  # BN statistics too
    assert [m.training for m in (model, model[0], model[1], model[3])] == [True, True, True, False]
    assert fw.requires_grad(model[3].weight) is False and fw.requires_grad(model[0].weight) is True
    assert seen == [1] and not hooks_left(model)[1:] and hooks_left(model) in ([], ["0"])  # the user's hook stays
    handle.remove()
    assert not hooks_left(model)


def test_summary_restores_state_when_the_forward_fails(fw):
    class Breaks(fw.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.body = _bn_model(fw)

        def forward(self, x):
            self.body(x)
            raise ValueError("after the BatchNorm ran")

    model = Breaks()
    model.eval()
    before = _state(fw, model)
    with pytest.raises(ValueError):
        hookkit.summary(model, (8, 4), mode="train")
    after = _state(fw, model)
    assert all((before[k] == after[k]).all() for k in before)
    assert not model.training and not hooks_left(model)


# -- no input, containers, layers hooks cannot reach ------------------------------------------------
def test_no_input_gives_the_parameter_tree(fw):
    model = fw.small_cnn()
    s = hookkit.summary(model)
    assert not s.forward_ran and s.total_params == sum(fw.numpy(p).size for p in model.parameters())
    assert [r.name for r in s.rows][:3] == ["", "conv1", "bn1"] and all(r.static for r in s.all_rows)
    assert s.columns == ("num_params", "trainable") and "Mult-Adds" not in str(s)
    assert "no input given: parameters only" in str(s) and s.to_dict()["forward_ran"] is False
    assert not hooks_left(model)


def test_empty_containers(fw):
    layer_list = fw.nn.ModuleList if fw.name == "torch" else fw.nn.LayerList

    class WithEmpty(fw.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.extra = layer_list()
            self.fc = fw.linear(3, 2)

        def forward(self, x):
            for layer in self.extra:
                x = layer(x)
            return self.fc(x)

    s = hookkit.summary(WithEmpty(), (1, 3))
    assert s.total_params == 8 and s.total_mult_adds == 6 and [r.name for r in s.rows] == ["", "fc"]
    for inputs in (None, (1, 3)):  # a bare container has no forward: its parameter tree
        s = hookkit.summary(layer_list(), inputs)
        assert s.total_params == 0 and not s.forward_ran
    s = hookkit.summary(layer_list([fw.linear(2, 2)]), (1, 2))
    assert s.total_params == 6 and "container without forward()" in str(s)


def test_scripted_child_is_an_opaque_row_and_hooks_refuse_it_clearly(torch_fw):
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.jit.script(torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.ReLU())))
    s = hookkit.summary(model, (2, 4))
    assert [(r.name, r.static, r.depth) for r in s.rows] == [
        ("", False, 0),
        ("0", False, 1),
        ("1", True, 1),
        ("1.0", True, 2),
        ("1.1", True, 2),
    ]
    assert _row(s, "1").note == "scripted" and _row(s, "1.0").type == "Linear" and _row(s, "1").params == 18
    assert s.total_mult_adds == _row(s, "").mult_adds == 2 * 4 * 5 + 2 * 5 * 3  # the scripted ops count in the parent
    assert not hooks_left(model)
    with pytest.raises(hookkit.HookkitError, match=r"cannot hook layer '1': it is a ScriptModule \(RecursiveScriptModule"):
        hookkit.capture(model, "1")
    with pytest.raises(hookkit.HookkitError, match="cannot hook layer '1.0'"):
        hookkit.on_forward(model, "1.0", lambda *a: None)
    assert not hooks_left(model)
    traced = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.jit.trace(torch.nn.Linear(5, 3), torch.randn(1, 5)))
    s = hookkit.summary(traced, (2, 4))
    assert _row(s, "1").note == "scripted" and s.total_mult_adds == 2 * 4 * 5 + 2 * 5 * 3


def test_to_static_child_is_an_opaque_row(paddle_fw):
    import paddle

    model = paddle.nn.Sequential(paddle.nn.Linear(4, 5), paddle.jit.to_static(paddle.nn.Linear(5, 3)))
    s = hookkit.summary(model, (2, 4))
    assert [(r.name, r.static) for r in s.rows] == [("", False), ("0", False), ("1", True)]
    assert _row(s, "1").note == "to_static" and s.total_params == 25 + 18
    assert s.total_mult_adds == 2 * 4 * 5  # Paddle counts per layer call: the converted layer's is not seen
    assert "to_static" in str(s) and not hooks_left(model)


def test_embedding_with_float_input_hints_dtype_long(fw, capsys):
    model = fw.sequential(fw.nn.Embedding(10, 4), fw.linear(4, 2))
    with pytest.raises(Exception) as info:
        hookkit.summary(model, (2, 3))
    assert "pass dtypes='long'" in "\n".join(info.value.__notes__)
    assert hookkit.summary(model, (2, 3), dtypes="long").total_params == 10 * 4 + 4 * 2 + 2


def test_lazy_layers_count_once_initialized(torch_fw):
    nn = torch_fw.nn
    model = nn.Sequential(nn.LazyLinear(4), nn.Linear(4, 2))
    s = hookkit.summary(model)
    assert s.total_params == 4 * 2 + 2 and "2 parameters of lazy layers are not initialized yet" in str(s)
    assert hookkit.summary(model, (1, 3)).total_params == 3 * 4 + 4 + 4 * 2 + 2  # the forward initializes them


def test_float_dtypes_of_made_inputs(fw):
    model = fw.linear(5, 3)
    wide = [("float64", 8)] + ([("bfloat16", 2)] if fw.name == "torch" else [])  # Paddle has no bfloat16 CPU matmul
    for dtype, size in wide:
        if fw.name == "torch":
            model.to(getattr(fw.lib, dtype))
        else:
            model.to(dtype=dtype)
        s = hookkit.summary(model, (2, 5), dtypes=dtype)
        assert s.input_bytes == 2 * 5 * size and s.param_bytes == (5 * 3 + 3) * size and s.total_mult_adds == 2 * 5 * 3
