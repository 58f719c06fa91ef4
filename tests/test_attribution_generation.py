"""hookkit.attribute_generation: each target token's log-probability attributed to the tokens before
it, against a hand computation on a GPT-2-style model (random weights from a config, no BOS token);
greedy generation of the targets; contrastive targets; torch and Paddle agree on a twin tiny LM; bad
calls fail naming the argument."""

from __future__ import annotations

import numpy as np
import pytest

import hookkit
from hookkit.core.errors import HookkitError
from models import hooks_left
from tolerance import assert_close, sum_ops


# hookkit.attribute's integrated gradients at the embeddings against the same or captum's: the steps may
# be chunked otherwise ("auto" reads the free memory), which regroups the steps' sum and changes the
# backward's batch shapes (log_softmax over 50, the tied head, one block of widths 32 and 128: at most
# 256 roundings), then the sum over the 32 embedding dims is float32 on one side, float64 on the other
def gen_ops(n_steps):
    return n_steps + 256 + sum_ops(32)


def terms(attr):
    """The size of the terms each token's sum over the embedding dims adds: sum |attr| per token."""
    return float(attr.abs().sum(-1).max())


@pytest.fixture(scope="module")
def gpt2():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50, n_positions=32, bos_token_id=None, eos_token_id=None)
    return GPT2LMHeadModel(cfg).eval()


def log_probs(model, seqs):
    import torch

    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor(seqs)).logits[:, -1].double(), -1).numpy()


def test_feature_ablation_by_hand_and_the_generated_prefix(gpt2):
    import torch

    ids = torch.tensor([[5, 17, 3, 9]])
    targets = [11, 2, 40]
    res = hookkit.attribute_generation(gpt2, ids, targets, "feature_ablation", baseline_id=0)
    full = [5, 17, 3, 9] + targets
    assert res.token_attr.shape == (3, 6) and res.input_attr.shape == (3, 4) and res.ids == full
    for t, y in enumerate(targets):
        prefix = full[: 4 + t]
        lp = log_probs(gpt2, [prefix])[0, y]
        want = [lp - log_probs(gpt2, [prefix[:i] + [0] + prefix[i + 1 :]])[0, y] for i in range(len(prefix))]
        # float32 log-probabilities of a small model: differences of numbers of order log(50)
        np.testing.assert_allclose(res.token_attr[t, : 4 + t], want, rtol=1e-4, atol=2e-5)
        assert np.isnan(res.token_attr[t, 4 + t :]).all()  # nothing after the predicted position
        np.testing.assert_allclose(res.scores[t], lp, rtol=1e-5)
    np.testing.assert_allclose(res.seq_attr, res.input_attr.sum(0))
    assert hooks_left(gpt2) == []


def test_integrated_gradients_at_the_embeddings_are_complete(gpt2):
    import torch

    ids = torch.tensor([3, 8, 21])  # one sequence, no batch axis, no BOS token
    res = hookkit.attribute_generation(gpt2, ids, [4, 30], n_steps=64)
    for t, y in enumerate([4, 30]):
        prefix = [3, 8, 21, 4][: 3 + t]
        gap = log_probs(gpt2, [prefix])[0, y] - log_probs(gpt2, [[0] * len(prefix)])[0, y]
        # Gauss-Legendre with 64 points on a smooth path: the sum is the gap to a few 1e-4
        np.testing.assert_allclose(np.nansum(res.token_attr[t]), gap, atol=1e-3 * max(1.0, abs(gap)))
    # the same numbers as hookkit.attribute at the embedding layer for the first target
    direct = hookkit.attribute(
        gpt2,
        "transformer.wte",
        ids[None],
        target=lambda o: torch.log_softmax(o.logits[:, -1], -1)[:, 4],
        baselines=torch.zeros(1, 3, dtype=torch.long),
        n_steps=64,
    )
    assert_close(res.token_attr[0, :3], direct.sum(-1)[0].double(), dtype="float32", n_ops=gen_ops(64), scale=terms(direct))


def test_greedy_generation_and_contrastive_targets(gpt2):
    import torch

    ids = torch.tensor([[7, 1, 33]])
    res = hookkit.attribute_generation(gpt2, ids, None, "feature_ablation", max_new_tokens=3)
    seq = [7, 1, 33]
    for _ in range(3):
        seq.append(int(log_probs(gpt2, [seq])[0].argmax()))
    assert res.target_ids == seq[3:]
    contrast = [(y + 1) % 50 for y in res.target_ids]
    c = hookkit.attribute_generation(gpt2, ids, res.target_ids, "feature_ablation", contrast_ids=contrast)
    p = np.exp(log_probs(gpt2, [seq[:3]])[0])
    p1 = np.exp(log_probs(gpt2, [[0] + seq[1:3]])[0])
    y, z = res.target_ids[0], contrast[0]
    np.testing.assert_allclose(c.token_attr[0, 0], (p[y] - p[z]) - (p1[y] - p1[z]), rtol=1e-4, atol=1e-6)
    fig = c.plot()
    assert len(fig.axes) == 2  # the heat map and its colour bar


def test_paddle_equals_torch_on_a_twin_lm(torch_fw, paddle_fw):
    def lm(fw):
        fw.seed(0)

        class LM(fw.Layer):
            def __init__(self):
                super().__init__()
                self.emb = fw.nn.Embedding(20, 6)
                self.head = fw.linear(6, 20)

            def forward(self, ids):
                e = self.emb(ids)
                n = fw.tensor(np.arange(1, e.shape[1] + 1, dtype=np.float32).reshape(1, -1, 1))
                return self.head(fw.lib.tanh(fw.lib.cumsum(e, 1) / n))  # causal: a running mean

        return LM()

    tm, pm = lm(torch_fw), lm(paddle_fw)
    pm.emb.weight.set_value(torch_fw.numpy(tm.emb.weight))
    pm.head.weight.set_value(torch_fw.numpy(tm.head.weight).T)
    pm.head.bias.set_value(torch_fw.numpy(tm.head.bias))
    ids = np.array([[3, 9, 4, 1]])
    for method, kw in (("feature_ablation", {}), ("integrated_gradients", {"layer": "emb", "n_steps": 8}), ("shapley", {})):
        got = [
            hookkit.attribute_generation(m, fw.tensor(ids, dtype="int64"), [5, 7], method, **kw).token_attr
            for fw, m in ((torch_fw, tm), (paddle_fw, pm))
        ]
        np.testing.assert_allclose(got[1], got[0], rtol=1e-4, atol=1e-5, err_msg=method)


@pytest.mark.parametrize(
    ("kw", "arg"),
    [
        ({"target_ids": [3, 50]}, "target_ids"),
        ({"target_ids": [3, -1]}, "target_ids"),
        ({"target_ids": [3, 4], "contrast_ids": [1]}, "contrast_ids"),
        ({"target_ids": [3], "contrast_ids": [99]}, "contrast_ids"),
        ({"target_ids": [3], "method": "occlusion"}, "method"),
        ({"target_ids": [3], "baseline_id": 50}, "baseline_id"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"target_ids": [[1, 2], [3, 4]]}, "target_ids"),
    ],
)
def test_bad_calls_name_the_argument(gpt2, kw, arg):
    import torch

    with pytest.raises(HookkitError, match=rf"attribute_generation\(\).*{arg}"):
        hookkit.attribute_generation(gpt2, torch.tensor([[1, 2, 3]]), **kw)
    assert hooks_left(gpt2) == []


def test_held_prefix_is_captums_meaning(gpt2):
    import torch

    ids, targets = torch.tensor([[3, 8, 21]]), [4, 30]
    held = hookkit.attribute_generation(gpt2, ids, targets, n_steps=16, attribute_prefix=False)
    assert np.isnan(held.token_attr[1, 3:]).all() and not np.isnan(held.input_attr).any()
    # the second target: the prompt scaled from pad ids, the generated token 4 held as it is
    direct = hookkit.attribute(
        gpt2,
        "transformer.wte",
        torch.tensor([[3, 8, 21, 4]]),
        target=lambda o: torch.log_softmax(o.logits[:, -1], -1)[:, 30],
        baselines=torch.tensor([[0, 0, 0, 4]]),
        n_steps=16,
    )
    assert_close(held.input_attr[1], direct.sum(-1)[0, :3].double(), dtype="float32", n_ops=gen_ops(16), scale=terms(direct))
    # one token ablated at a time: the prompt's columns do not depend on the prefix being held
    a = hookkit.attribute_generation(gpt2, ids, targets, "feature_ablation")
    b = hookkit.attribute_generation(gpt2, ids, targets, "feature_ablation", attribute_prefix=False)
    np.testing.assert_allclose(b.input_attr, a.input_attr, rtol=1e-6, atol=1e-7)


def test_equal_to_captums_llm_attribution(gpt2):
    torch = pytest.importorskip("torch")
    ca = pytest.importorskip("captum.attr")

    class IdTokenizer:  # text is space-separated ids
        def encode(self, text, return_tensors=None):
            return torch.tensor([[int(t) for t in text.split()]])

        def convert_ids_to_tokens(self, ids):
            return [str(i) for i in ids]

        def decode(self, ids, **kw):
            return " ".join(str(int(i)) for i in ids)

        def __call__(self, text, **kw):
            toks = text.split(" ")
            starts = np.cumsum([0] + [len(t) + 1 for t in toks[:-1]])
            return {"input_ids": [int(t) for t in toks], "offset_mapping": [(int(s), int(s) + len(t)) for s, t in zip(starts, toks)]}

    targets = torch.tensor([4, 30, 12])
    llm = ca.LLMGradientAttribution(ca.LayerIntegratedGradients(gpt2, gpt2.transformer.wte), IdTokenizer())
    want = llm.attribute(ca.TextTokenInput("3 8 21 7", IdTokenizer(), baselines=0), target=targets, n_steps=16).token_attr
    got = hookkit.attribute_generation(gpt2, torch.tensor([[3, 8, 21, 7]]), targets, n_steps=16, attribute_prefix=False)
    assert_close(got.input_attr, want.double(), dtype="float32", n_ops=gen_ops(16))
