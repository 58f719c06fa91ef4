"""Regenerate the figures of the user guide and the API reference (docs/images/guide-*.png):

    PYTHONPATH=src python docs/_ext/doc_figures.py [transformers|cnn]   # minutes on a 2-core CPU

Each figure is what the page's code returns, on small models trained here for seconds (so that
the pictures show structure, not the noise of random weights): a 2-block GPT-2 that learned to
copy a repeated sequence (logit lens, attention pattern, patching grid) and the small CNN of the
demo on scikit-learn's digits (attribution, CAM, feature maps, the statistics' figures). The images
are committed: the docs build never runs this.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

import hookkit
import hookkit.viz

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "images"
DPI = 110


def save(fig: object, name: str) -> None:
    fig.savefig(OUT / f"guide-{name}.png", dpi=DPI, bbox_inches="tight")  # type: ignore[attr-defined]
    print("wrote", OUT / f"guide-{name}.png")


# -- a GPT-2 that learned to copy: [8 random tokens] [the same 8 again] -------------------------------
def copying_gpt2() -> tuple[torch.nn.Module, torch.Tensor]:
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=32, n_positions=32, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)

    def batch(n: int) -> torch.Tensor:
        half = torch.randint(1, 32, (n, 8))
        return torch.cat([half, half], 1)

    for _ in range(300):
        ids = batch(16)
        loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    return model.eval(), batch(4)


SWEPT = ["transformer.drop", "transformer.h.0", "transformer.h.1"]  # the embeddings' sum, then each block


def transformer_figures() -> None:
    from hookkit.viz.figures import subplots

    model, ids = copying_gpt2()
    with torch.no_grad():
        lens = hookkit.logit_lens(model, ids)
    save(lens.plot(row=0, tokens=[f"t{i}" for i in range(32)]), "lens")

    pats = hookkit.attention_patterns(model, ids, layers="transformer.h.0.attn")["transformer.h.0.attn"]
    fig, axes = subplots(1, 4, figsize=(11, 3))
    for h, ax in enumerate(axes):
        ax.imshow(pats[0, h].detach().numpy(), cmap="viridis", vmin=0, vmax=1)
        ax.set_title(f"transformer.h.0.attn, head {h}", fontsize=8)
        ax.set_xlabel("key position")
        ax.set_xticks(range(0, 16, 4))
        ax.set_yticks(range(0, 16, 4))
    axes[0].set_ylabel("query position")
    save(fig, "attention")

    clean = ids[:1]  # one sequence: the metric then knows its token in every patched copy
    corrupted = clean.clone()
    corrupted[:, 3] = (corrupted[:, 3] % 31) + 1  # another token at position 3: position 11 cannot copy it
    target = int(clean[0, 3])

    def copied(out: torch.Tensor) -> torch.Tensor:  # the logit of the token to copy, predicted at position 10
        return out.logits[:, 10, target]

    with torch.no_grad():
        grid = hookkit.patching_sweep(model, clean, corrupted, SWEPT, copied)
    fig, ax = subplots(figsize=(8, 2.2))
    im = ax.imshow(grid, cmap="RdBu_r", aspect="auto", vmin=-np.abs(grid).max(), vmax=np.abs(grid).max())
    ax.set_yticks(range(grid.shape[0]), SWEPT)
    ax.set_xticks(range(grid.shape[1]))
    ax.set_xlabel("patched position")
    ax.set_title("patching_sweep: the copied token's logit at position 10, one clean activation at a time", fontsize=9)
    fig.colorbar(im, ax=ax, pad=0.01)
    save(fig, "patching")


# -- the demo's small CNN on the digits -------------------------------------------------------------
def digits_cnn() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor, object, object]:
    from sklearn.datasets import load_digits

    torch.manual_seed(0)
    d = load_digits()
    x = torch.tensor(d.images[:, None] / 16.0, dtype=torch.float32)
    y = torch.tensor(d.target)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(16 * 16, 10),
    )  # fmt: skip
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    acts = hookkit.ActivationStats(model, hist=True, range=(-1, 6))
    grads = hookkit.GradientStats(model)
    for _ in range(150):
        idx = torch.randint(0, 1500, (64,))
        loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        opt.zero_grad()
    acts.remove()
    grads.remove()
    return model.eval(), x[1500:1508], y[1500:1508], acts, grads


def cnn_figures() -> None:
    model, x, y, acts, grads = digits_cnn()
    pred = model(x).argmax(1).tolist()
    attr = hookkit.attribute(model, None, x, "integrated_gradients", target=y.tolist())
    heat = attr.abs().sum(1).detach().numpy()
    heat = heat / heat.reshape(len(heat), -1).max(1)[:, None, None]
    fig = hookkit.viz.gradcam_overlay(x, heat, predicted=pred, labels=y.tolist(), ncols=8)
    fig.axes[-1].set_ylabel("|integrated gradients| (scaled per image)", fontsize=9)  # the colorbar
    save(fig, "attribution")

    maps = hookkit.cam(model, "2", x, target=y.tolist())
    save(hookkit.viz.gradcam_overlay(x, maps, predicted=pred, labels=y.tolist(), ncols=8), "gradcam-overlay")
    grid = {m: hookkit.cam(model, "2", x[:3], m, target=y[:3].tolist()) for m in ("gradcam", "gradcam++", "layercam", "eigencam")}
    save(hookkit.viz.cam_grid(x[:3], grid, predicted=pred[:3], labels=y[:3].tolist()), "cam-grid")

    with hookkit.capture(model, "0") as cap:
        model(x)
    save(hookkit.viz.feature_maps(cap, "0", sample=0), "feature-maps")
    save(hookkit.viz.plot_layer_stats(acts, "2"), "layer-stats")
    save(hookkit.viz.color_dim(acts, "2"), "color-dim")
    save(hookkit.viz.hist(acts, "2"), "hist")
    save(hookkit.viz.gradient_flow(grads), "gradient-flow")


if __name__ == "__main__":
    import sys

    OUT.mkdir(parents=True, exist_ok=True)
    which = sys.argv[1:] or ["transformers", "cnn"]  # or one of them
    if "transformers" in which:
        transformer_figures()
    if "cnn" in which:
        cnn_figures()
