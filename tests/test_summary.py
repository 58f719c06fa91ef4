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


def test_paddle_multihead_attention_rule(paddle_fw):
    b, t, e = 2, 5, 16
    mha = paddle_fw.nn.MultiHeadAttention(e, 4)
    s = hookkit.summary(mha, (b, t, e))
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
    with pytest.raises(ValueError, match="input_size=.*or input_data"):
        hookkit.summary(model)
    with pytest.raises(ValueError, match="valid: input_size"):
        hookkit.summary(model, (1, 5), columns=["shapes"])
    with pytest.raises(ValueError, match="unknown dtype 'complex7'"):
        hookkit.summary(model, (1, 5), dtypes="complex7")
    with pytest.raises(ValueError, match="mode"):
        hookkit.summary(model, (1, 5), mode="inference")
    with pytest.raises(TypeError, match="input_size"):
        hookkit.summary(model, "1,5")
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
        (["test_summary:make_mlp", "--input-size", "1,a"], "--input-size expects integers"),
        (["test_summary:make_mlp"], "give at least one --input-size"),
        (["test_summary:make_mlp", "--input-size", "1,5", "--kw", "nope=1"], "calling test_summary:make_mlp failed: TypeError"),
        (["make_mlp", "--input-size", "1,5"], "TARGET must look like package.module:callable"),
    ],
)
def test_cli_errors(capsys, argv, message):
    assert cli_main(["summary", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_cli_subprocess():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "hookkit.apps.cli", "summary", "test_summary:make_mlp", "--input-size", "3,5", "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, cwd=HERE)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["total_mult_adds"] == 3 * (5 * 8 + 8 * 3) and data["model"] == "Sequential"
    assert "Traceback" not in done.stderr
