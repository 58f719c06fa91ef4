"""``hookkit`` on the command line: ``demo``, ``summary``, ``extract``, ``report``, ``diff``.

Each subcommand's work lives in its feature module (``run_cli(args) -> int``); this file only parses.
The working directory is importable, as under ``python -m``: ``hookkit summary my_models:cnn`` finds
``./my_models.py`` without ``PYTHONPATH=.``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hookkit", description="Hooks for PyTorch and PaddlePaddle models: capture, inspect, monitor, visualize."
    )
    parser.add_argument("--version", action="version", version=f"hookkit {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser("demo", help="train a small CNN on bundled digits with hookkit attached and write an HTML report")
    demo.add_argument("--framework", default="torch", help="torch or paddle (default: torch)")
    demo.add_argument("--epochs", type=int, default=None, help="training epochs (default: the demo's own)")
    demo.add_argument("--out", default="hookkit-report", help="output folder (default: hookkit-report)")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")

    summary = sub.add_parser("summary", help="print a model's layer table: shapes, parameters, mult-adds")
    summary.add_argument("target", help="package.module:callable returning a model")
    summary.add_argument(
        "--input-size", action="append", default=[], help="input shape like 1,3,224,224 (repeat for several inputs; none: parameters only)"
    )
    summary.add_argument("--dtype", action="append", default=[], help="input dtype (float, long, ...), one per --input-size or one for all")
    summary.add_argument("--depth", type=int, default=3, help="layer tree depth to show (default: 3)")
    summary.add_argument("--kw", action="append", default=[], help="keyword for the callable or its config, like n_layer=2 (repeatable)")
    summary.add_argument("--json", action="store_true", help="print JSON instead of a table")
    summary.add_argument(
        "--config", default=None, help="a transformers config: a JSON file (config.json) or inline JSON; --kw overrides it"
    )
    summary.add_argument("--meta", action="store_true", help="build the model on the meta device (no weights allocated): a dry run")
    summary.add_argument("--mode", default="eval", choices=("eval", "train"), help="train: gradients on, the Saved column (default: eval)")
    summary.add_argument(
        "--plan",
        default=None,
        help="a training-memory plan (implies --mode train), like ranks=8,sharding=fsdp,checkpointing=blocks,param_dtype=bfloat16",
    )

    from hookkit.apps.extract_cli import add_parser as add_extract

    add_extract(sub)

    from hookkit.apps.diff_cli import add_parser as add_diff

    add_diff(sub)

    report = sub.add_parser("report", help="render the HTML report from a folder of saved statistics")
    report.add_argument("stats_dir", help="folder with saved ActivationStats / GradientStats")
    report.add_argument("--out", default=None, help="report file (default: STATS_DIR/report.html)")
    _add_examples(parser, sub.choices)
    return parser


#: one example per command, shown at the end of its --help
EXAMPLES = {
    "demo": "hookkit demo --framework torch --out hookkit-report    # then open hookkit-report/report.html",
    "summary": "hookkit summary my_models:cnn --input-size 1,3,32,32    # my_models.py in the working directory",
    "extract": "hookkit extract my_models:cnn --data images.npy --layers 'layer*' --out features/",
    "diff": "hookkit diff my_models:mlp_torch my_models:mlp_paddle --input-size 2,8 --port",
    "report": "hookkit report runs/stats --out report.html",
}


def _add_examples(parser: argparse.ArgumentParser, commands: dict[str, argparse.ArgumentParser]) -> None:
    for name, p in commands.items():
        if name in EXAMPLES:
            p.epilog = f"example:\n  {EXAMPLES[name]}"
            p.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "examples:\n" + "\n".join(f"  {e}" for e in EXAMPLES.values()) + "\n\n'hookkit COMMAND --help' for a command's options."
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def _cwd_importable() -> None:
    """Put the working directory first on ``sys.path`` as ``python -m`` does (a console script gets
    its own folder instead), so that ``module:callable`` targets of the user's files import."""
    cwd = os.getcwd()
    if not any(p in ("", cwd) or (p and os.path.abspath(p) == cwd) for p in sys.path):
        sys.path.insert(0, cwd)


def _version() -> str:
    from hookkit import __version__

    return __version__


def main(argv: Sequence[str] | None = None) -> int:
    _cwd_importable()
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "demo":
        from hookkit.apps.demo import run_cli
    elif args.command == "extract":
        from hookkit.apps.extract_cli import run_cli
    elif args.command == "summary":
        from hookkit.apps.summary_cli import run_cli
    elif args.command == "diff":
        from hookkit.apps.diff_cli import run_cli
    else:
        from hookkit.apps.report import run_cli
    return int(run_cli(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
