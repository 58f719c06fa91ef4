"""The summary of a model whose weights hold no data (meta device): a dry run on fake tensors equal to
the real model's summary in every column, the training-memory plan, the CLI's --meta, Paddle's refusal."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

import hookkit
from hookkit.apps.cli import main as cli_main

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CONFIGS = {
    "gpt2": ("GPT2LMHeadModel", dict(n_layer=2, n_embd=32, n_head=4, vocab_size=100, n_positions=64)),
    "llama": (
        "LlamaForCausalLM",
        dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=100),
    ),
    "bert": ("BertModel", dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=100)),
}
INPUTS = {"input_ids": (2, 8), "attention_mask": (2, 8)}  # the mask: models that read it (.all(), .item()) run too


def build(kind: str, meta: bool):
    cls_name, kw = CONFIGS[kind]
    cls = getattr(transformers, cls_name)
    config = cls.config_class(**kw)
    if not meta:
        torch.manual_seed(0)
        return cls(config)
    with torch.device("meta"):
        return cls(config)


def rows(s):
    return [dataclasses.asdict(r) for r in s.all_rows]


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_meta_summary_equals_the_real_models_in_every_column(kind):
    real, meta = build(kind, False), build(kind, True)
    assert all(p.is_meta for p in meta.parameters())
    a = hookkit.summary(real, INPUTS, dtypes="long", mode="train", optimizer=torch.optim.AdamW(real.parameters()))
    opt = torch.optim.AdamW(meta.parameters())
    b = hookkit.summary(meta, INPUTS, dtypes="long", mode="train", optimizer=opt)
    assert rows(b) == rows(a)  # shapes, parameters, tied, mult-adds, output and saved bytes of every call
    da, db = a.to_dict(), b.to_dict()
    ta, tb = da.pop("training"), db.pop("training")
    for d in (da, db):
        d.pop("notes"), d.pop("dry_run")
    assert db == da
    assert b.saved_bytes > 0 and b.total_mult_adds > 0 and b.dry_run and not a.dry_run
    assert "dry run" in b.notes[-1] and "fake tensors" in b.notes[-1]
    # by hand: AdamW keeps two float32 moments and a float32 step counter for each parameter the loss reaches
    real(**{k: torch.zeros(v, dtype=torch.long) for k, v in INPUTS.items()})[0].sum().backward()
    reached = [p for p in real.parameters() if p.grad is not None]
    assert ta["optimizer_state"] == sum(2 * 4 * p.numel() + 4 for p in reached)
    for part in ("params", "buffers", "inputs", "gradients", "saved", "transient", "optimizer_state", "estimate"):
        assert tb[part] == ta[part], part
    assert tb["measured"] is None and "dry run" in tb["measured_how"]
    # nothing allocated, nothing left: weights still meta, no gradient, the optimizer's state untouched
    assert all(p.is_meta and p.grad is None for p in meta.parameters()) and not opt.state
    assert "not measured: a dry run" in str(b)


def test_init_empty_weights_model_with_real_buffers_and_tied_weights():
    accelerate = pytest.importorskip("accelerate")
    cls_name, kw = CONFIGS["gpt2"]
    with accelerate.init_empty_weights():
        meta = transformers.GPT2LMHeadModel(transformers.GPT2Config(**kw))
    meta.tie_weights()  # init_empty_weights re-creates the tied parameter: accelerate's docs tie them again
    real = build("gpt2", False)
    a, b = hookkit.summary(real, {"input_ids": (1, 8)}, dtypes="long"), hookkit.summary(meta, {"input_ids": (1, 8)}, dtypes="long")
    assert rows(a) == rows(b) and a.total_params == b.total_params and a.tied == b.tied == ["transformer.wte.weight = lm_head.weight"]


def test_meta_summary_of_given_inputs_and_a_bfloat16_model():
    real, meta = build("llama", False), build("llama", True)
    ids = {"input_ids": torch.randint(0, 100, (1, 8)), "attention_mask": torch.ones(1, 8, dtype=torch.long)}
    a, b = hookkit.summary(real, input_data=ids, mode="train"), hookkit.summary(meta, input_data=ids, mode="train")
    assert rows(a) == rows(b)
    half = hookkit.summary(meta.to(torch.bfloat16), input_data=ids, mode="train")  # .to(dtype) allocates nothing on meta
    assert half.param_bytes == a.param_bytes // 2 and 0 < half.saved_bytes < a.saved_bytes
    assert half.memory_plan().param_dtype == "bfloat16"


def test_a_forward_that_needs_values_names_the_layer():
    class ReadsValues(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(10, 4)

        def forward(self, ids):
            h = self.emb(ids)
            return h[h > 0]  # the output's shape depends on the values of an activation (fake: none)

    with torch.device("meta"):
        model = ReadsValues()
    with pytest.raises(Exception) as info:
        hookkit.summary(model, (1, 5), dtypes="long")
    assert "(root)" in str(info.value.__notes__) or "ReadsValues" in info.value.hookkit_summary.error


# -- the memory plan ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def llama_summary():
    return hookkit.summary(build("llama", True), {"input_ids": (1, 8)}, dtypes="long", mode="train")


def test_memory_plan_formulas_by_hand(llama_summary):
    s = llama_summary
    P = s.total_params
    blocks = [r for r in s.all_rows if r.name in ("model.layers.0", "model.layers.1")]
    block_params = blocks[0].params
    plan = s.memory_plan()
    assert plan.parts["params"] == plan.parts["gradients"] == 4 * P
    assert plan.parts["optimizer_state"] == 2 * 4 * P and plan.parts["master_weights"] == 0
    assert plan.parts["activations"] == s.saved_bytes
    assert plan.total == sum(plan.parts.values()) and plan.blocks == ["model.layers.0", "model.layers.1"]

    z3 = s.memory_plan(ranks=4, sharding="zero3", param_dtype="bfloat16", master_weights=True)
    unit = max(block_params, P - 2 * block_params)  # the root unit (embeddings, head, norm) or one block
    assert z3.parts["params"] == math.ceil(2 * P / 4) + 2 * unit
    assert z3.parts["gradients"] == math.ceil(2 * P / 4) + 2 * unit
    assert z3.parts["master_weights"] == math.ceil(4 * P / 4) and z3.parts["optimizer_state"] == math.ceil(2 * 4 * P / 4)
    assert z3.parts["activations"] == round(s.saved_bytes / 2)  # bf16 activations: half the float32 run's
    z1 = s.memory_plan(ranks=4, sharding="zero1")
    assert z1.parts["params"] == z1.parts["gradients"] == 4 * P and z1.parts["optimizer_state"] == 2 * P * 4 // 4
    z2 = s.memory_plan(ranks=4, sharding="zero2", optimizer="sgd-momentum")
    assert z2.parts["gradients"] == P and z2.parts["optimizer_state"] == P

    ck = s.memory_plan(checkpointing="blocks")
    inside = sum(r.saved_bytes for r in blocks)
    hidden = 1 * 8 * 32 * 4  # each block keeps its input hidden states [1, 8, 32] float32
    shared = blocks[0].input_bytes - hidden  # rotary tables and mask: once
    assert ck.parts["activations"] == s.saved_bytes - inside + 2 * hidden + shared + max(r.saved_bytes for r in blocks)
    assert ck.parts["activations"] < plan.parts["activations"]
    data = ck.to_dict()
    assert data["parts"] == ck.parts and data["checkpointing"] == "blocks"
    text = str(ck)
    assert "total per rank" in text and "checkpointing blocks" in text and "2 x LlamaDecoderLayer" in text
    import io

    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=160).print(ck)
    assert "total per rank" in buf.getvalue() and "optimizer_state" in buf.getvalue()
    assert isinstance(ck, hookkit.MemoryPlan)


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(sharding="zero4"), "sharding must be one of"),
        (dict(ranks=0), "ranks"),
        (dict(checkpointing="all"), "checkpointing must be False, True or 'blocks'"),
        (dict(optimizer="adamax"), "optimizer must be one of"),
        (dict(param_dtype="int8"), "param_dtype must be a floating dtype"),
    ],
)
def test_memory_plan_errors(llama_summary, kw, message):
    with pytest.raises((ValueError, TypeError)) as info:
        llama_summary.memory_plan(**kw)
    assert message in str(info.value) and "memory_plan()" in str(info.value)


def test_memory_plan_of_a_paddle_summary():
    paddle = pytest.importorskip("paddle")
    model = paddle.nn.Sequential(paddle.nn.Linear(6, 16), paddle.nn.ReLU(), paddle.nn.Linear(16, 3))
    s = hookkit.summary(model, (4, 6), mode="train")
    plan = s.memory_plan(ranks=2, sharding="fsdp")
    P = 6 * 16 + 16 + 16 * 3 + 3
    assert plan.params == P and plan.parts["optimizer_state"] == math.ceil(2 * 4 * P / 2)
    assert plan.parts["activations"] == s.saved_bytes > 0


def test_paddle_lazy_guard_is_counted_and_a_forward_refused():
    paddle = pytest.importorskip("paddle")
    with paddle.LazyGuard():
        model = paddle.nn.Sequential(paddle.nn.Linear(4, 8), paddle.nn.ReLU(), paddle.nn.Linear(8, 2))
    assert hookkit.summary(model).total_params == 4 * 8 + 8 + 8 * 2 + 2
    with pytest.raises(ValueError) as info:
        hookkit.summary(model, (2, 4))
    assert "'0.weight' has none" in str(info.value) and "LazyGuard" in str(info.value)


# -- the command line -----------------------------------------------------------------------------
def test_cli_meta_config_and_plan(capsys, tmp_path):
    cls_name, kw = CONFIGS["llama"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"architectures": [cls_name], "model_type": "llama", **kw}))
    argv = ["summary", f"transformers:{cls_name}", "--config", str(path), "--meta", "--input-size", "1,8", "--dtype", "long"]
    assert cli_main([*argv, "--json", "--plan", "ranks=2,sharding=fsdp,checkpointing=blocks"]) == 0
    data = json.loads(capsys.readouterr().out)
    ref = hookkit.summary(build("llama", False), {"input_ids": (1, 8)}, dtypes="long", mode="train")
    assert data["dry_run"] and data["total_params"] == ref.total_params and data["saved_bytes"] == ref.saved_bytes
    assert data["memory_plan"]["sharding"] == "fsdp" and data["memory_plan"]["ranks"] == 2
    inline = json.dumps({**kw, "num_hidden_layers": 1})
    assert cli_main(["summary", f"transformers:{cls_name}", "--config", inline, "--meta", "--input-size", "1,8", "--dtype", "long"]) == 0
    out = capsys.readouterr().out
    assert "dry run" in out and "model.layers.0" in out and "model.layers.1" not in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--config", "{not json"], "--config: not valid JSON"),
        (["--config", "/no/such/config.json"], "no such file"),
        (["--config", "[1, 2]"], "--config: a JSON object"),
        (["--plan", "ranks=2,shards=3"], "--plan: 'shards=3' is not key=value"),
        (["--plan", "sharding=zero9"], "--plan sharding must be one of"),
    ],
)
def test_cli_meta_errors(capsys, argv, message):
    base = ["summary", "transformers:LlamaForCausalLM", "--meta", "--input-size", "1,8", "--dtype", "long"]
    if "--config" not in argv:
        argv = [*argv, "--config", json.dumps(CONFIGS["llama"][1])]
    assert cli_main([*base, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_cli_meta_refuses_a_paddle_model(capsys):
    pytest.importorskip("paddle")
    assert cli_main(["summary", "test_summary:make_mlp", "--kw", "framework=paddle", "--meta", "--input-size", "1,5"]) == 2
    assert "only PyTorch has a meta device" in capsys.readouterr().err


def test_cli_config_needs_a_transformers_class(capsys):
    assert cli_main(["summary", "test_summary:make_mlp", "--config", "{}", "--input-size", "1,5"]) == 2
    assert "is not a transformers model class" in capsys.readouterr().err
