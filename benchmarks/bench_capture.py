"""Forward-pass cost of capturing every leaf layer: hookkit vs plain hooks, fastai, TorchLens.

    /work/bench-venv/bin/python benchmarks/bench_capture.py [--threads 1] [--rounds 30] [--reps 10]

Workloads (CPU, random weights, eval mode, under torch.no_grad / paddle.no_grad):
  * GPT-2 (transformers GPT2LMHeadModel, 4 layers, width 128, 4 heads), batch 4 x 64 tokens
  * a ResNet-style CNN (4 stages x 2 BasicBlocks, width 32), input 8x3x64x64
  * Paddle: paddle.vision.models.resnet18(), input 8x3x64x64
Every "step" is one forward plus emptying what the hooks kept (cap.clear() / list.clear()),
so memory stays flat; the same emptying is done for plain hooks and hookkit.
Peers missing from the environment are reported as skipped.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--clock", choices=["cpu", "wall"], default="cpu", help="process CPU time (default) or wall time")
    p.add_argument("--grad", action="store_true", help="run forwards with autograd on (default: no_grad)")
    p.add_argument("--only", default="", help="comma list of workloads: gpt2,cnn,paddle")
    p.add_argument("--no-torchlens", action="store_true")
    p.add_argument("--markdown", default="", help="append the tables to this file")
    return p.parse_args()


ARGS = parse()
H.set_threads(ARGS.threads)
H.block_torchvision()
H.use_clock(ARGS.clock)

import torch  # noqa: E402
from torch import nn  # noqa: E402

import hookkit  # noqa: E402

torch.set_num_threads(ARGS.threads)


# -- models --------------------------------------------------------------------------------------
from _models import SmallResNet  # noqa: E402


def gpt2() -> tuple[nn.Module, dict]:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=128, n_head=4)).eval()
    ids = torch.randint(0, model.config.vocab_size, (4, 64))
    return model, {"input_ids": ids}


def cnn() -> tuple[nn.Module, dict]:
    torch.manual_seed(0)
    return SmallResNet(32).eval(), {"x": torch.randn(8, 3, 64, 64)}


# -- variants ------------------------------------------------------------------------------------
def torch_variants(model: nn.Module, inputs: dict) -> list[tuple[str, H.Setup]]:
    grad_ctx = torch.enable_grad if ARGS.grad else torch.no_grad
    named = hookkit.select(model, hookkit.LEAVES)

    def fwd() -> None:
        with grad_ctx():
            model(**inputs)

    def bare() -> tuple:
        return fwd, lambda: None

    def plain(n: int = 1) -> H.Setup:
        def setup() -> tuple:
            store: dict[str, list] = {name: [] for name, _ in named}
            handles = []
            for name, layer in named:
                keep = store[name].append
                for _ in range(n):
                    handles.append(layer.register_forward_hook(lambda m, i, o, keep=keep: keep(o.detach())))

            def step() -> None:
                fwd()
                for v in store.values():
                    v.clear()

            return step, lambda: [h.remove() for h in handles]

        return setup

    def captures(n: int) -> H.Setup:
        def setup() -> tuple:
            caps = [hookkit.capture(model, hookkit.LEAVES) for _ in range(n)]

            def step() -> None:
                fwd()
                for c in caps:
                    c.clear()

            return step, lambda: [c.remove() for c in caps]

        return setup

    def capture_plus_observers() -> tuple:
        cap = hookkit.capture(model, hookkit.LEAVES)
        seen = [0]

        def count(layer, inputs, output) -> None:  # a minimal observer: counts calls
            seen[0] += 1

        obs = [hookkit.on_forward(model, hookkit.LEAVES, count, priority=hookkit.OBSERVER) for _ in range(2)]

        def step() -> None:
            fwd()
            cap.clear()

        return step, lambda: [h.remove() for h in (cap, *obs)]

    variants: list[tuple[str, H.Setup]] = [
        ("bare", bare),
        ("plain hooks", plain(1)),
        ("hookkit.capture", captures(1)),
        ("hookkit: 3 captures", captures(3)),
        ("hookkit: capture + 2 observers", capture_plus_observers),
        ("plain hooks x3 per leaf", plain(3)),
    ]
    try:
        from fastai.callback.hook import hook_outputs

        def fastai() -> tuple:
            hooks = hook_outputs([m for _, m in named])
            return fwd, hooks.remove

        variants.append(("fastai hook_outputs", fastai))
    except Exception as exc:  # noqa: BLE001
        print(f"fastai skipped: {exc}", file=sys.stderr)
    if not ARGS.no_torchlens:
        try:
            import torchlens
            from torchlens.options import CaptureOptions

            args = list(inputs.values())

            # TorchLens 2.x: trace() (log_forward_pass is gone), default options: saves every op's output;
            # unwrap_when_done restores torch's functions after each trace, so the other variants
            # are not slowed down by TorchLens' wrappers.
            def tl_step() -> None:
                with grad_ctx():
                    torchlens.trace(model, args, capture=CaptureOptions(unwrap_when_done=True))

            variants.append(("TorchLens trace", lambda: (tl_step, lambda: None)))
        except Exception as exc:  # noqa: BLE001
            print(f"torchlens skipped: {exc}", file=sys.stderr)
    return variants


def paddle_variants() -> list[tuple[str, H.Setup]]:
    import paddle

    paddle.set_device("cpu")
    paddle.seed(0)
    model = paddle.vision.models.resnet18()
    model.eval()
    x = paddle.randn([8, 3, 64, 64])
    named = hookkit.select(model, hookkit.LEAVES)

    def fwd() -> None:
        with paddle.no_grad():
            model(x)

    def plain() -> tuple:
        store: dict[str, list] = {name: [] for name, _ in named}
        handles = []
        for name, layer in named:
            keep = store[name].append
            handles.append(layer.register_forward_post_hook(lambda m, i, o, keep=keep: keep(o.detach())))

        def step() -> None:
            fwd()
            for v in store.values():
                v.clear()

        return step, lambda: [h.remove() for h in handles]

    def cap() -> tuple:
        c = hookkit.capture(model, hookkit.LEAVES)

        def step() -> None:
            fwd()
            c.clear()

        return step, c.remove

    return [("bare", lambda: (fwd, lambda: None)), ("plain hooks", plain), ("hookkit.capture", cap)]


def kept_mib(model: nn.Module, inputs: dict) -> float:
    """MiB of distinct tensor storage kept alive by one capture of every leaf after one forward."""
    with hookkit.capture(model, hookkit.LEAVES) as c, torch.no_grad():
        model(**inputs)
        seen, total = set(), 0
        for rec in c.records():
            t = rec.output
            if isinstance(t, torch.Tensor):
                s = t.untyped_storage()
                if s.data_ptr() not in seen:
                    seen.add(s.data_ptr())
                    total += s.nbytes()
    return total / 2**20


def report(title: str, res: dict[str, H.Result], n_leaves: int, extra: str = "") -> str:
    rows = []
    for name, r in res.items():
        if r.error:
            rows.append([name, "failed", "", "", "", r.error.replace("|", "/")])
            continue
        vs_plain = H.ratio(res, name, "plain hooks") if name != "bare" else float("nan")
        rows.append(
            [
                name,
                f"{r.median_ms:.2f}",
                f"{H.ratio(res, name, 'bare'):.3f}",
                H.spread(res, name, "bare"),
                "" if vs_plain != vs_plain else f"{vs_plain:.3f}",
                f"{len(r.times)} steps",
            ]
        )
    head = ["variant", "ms/step (median)", "x bare", "x bare IQR", "x plain hooks", "n"]
    return f"\n#### {title} ({n_leaves} leaf layers hooked{extra})\n\n" + H.table(rows, head) + "\n"


def main() -> None:
    import transformers

    only = set(ARGS.only.split(",")) if ARGS.only else {"gpt2", "cnn", "paddle"}
    m = H.machine()
    out = [
        f"`{' '.join(['python', *sys.argv])}` — {m['date']}, {m['cpu']}, {m['cores']} cores, "
        f"torch.set_num_threads({ARGS.threads}), {ARGS.clock} clock, {'autograd on' if ARGS.grad else 'torch.no_grad()'}, "
        f"Python {m['python']}, torch {torch.__version__}, transformers {transformers.__version__}"
    ]
    try:
        import fastai

        out[0] += f", fastai {fastai.__version__}"
    except ImportError:
        pass
    try:
        from importlib.metadata import version

        out[0] += f", torchlens {version('torchlens')}"
    except Exception:  # noqa: BLE001
        pass
    slow = {"TorchLens trace": 1}
    for key, build in (("gpt2", gpt2), ("cnn", cnn)):
        if key not in only:
            continue
        model, inputs = build()
        n = len(hookkit.select(model, hookkit.LEAVES))
        res = H.run_interleaved(torch_variants(model, inputs), ARGS.rounds, ARGS.reps, slow=slow)
        title = "GPT-2 4x128, batch 4x64 tokens" if key == "gpt2" else "ResNet-style CNN, width 32, 8x3x64x64"
        out.append(report(title, res, n, f"; captured outputs keep {kept_mib(model, inputs):.1f} MiB alive per forward"))
        print(out[-1], flush=True)
    if "paddle" in only:
        import paddle

        res = H.run_interleaved(paddle_variants(), ARGS.rounds, ARGS.reps)
        import paddle.vision

        n = len(hookkit.select(paddle.vision.models.resnet18(), hookkit.LEAVES))
        out.append(report(f"Paddle {paddle.__version__} resnet18, 8x3x64x64", res, n))
        print(out[-1], flush=True)
    text = "\n".join(out)
    print(out[0])
    if ARGS.markdown:
        with open(ARGS.markdown, "a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
