"""`oneiro-export`: write a drafter in a serving engine's format. One subcommand, `vllm`."""

from __future__ import annotations

import argparse
import sys

from .vllm_export import VllmExportRefused, export_for_vllm


def _vllm_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="oneiro-export vllm")
    parser.add_argument("drafter_dir", metavar="DRAFTER_DIR", help="a saved drafter (whole or target-relative)")
    parser.add_argument("out_dir", metavar="OUT_DIR", help="the folder to write (new or empty)")
    parser.add_argument("--target", required=True,
                        help="the drafter's target: a reference model name (e.g. smollm2-135m-instruct) or a model "
                             "directory / Hub id")
    parser.add_argument("--num-speculative-tokens", type=int, default=3,
                        help="k in the serving commands the folder's README shows (default 3)")
    return parser


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="oneiro-export", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    _vllm_parser(commands.add_parser("vllm", help="a folder vLLM loads as a draft model (method eagle3)"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.num_speculative_tokens < 1:
        print("oneiro-export: --num-speculative-tokens must be >= 1. Fix: e.g. --num-speculative-tokens 3.",
              file=sys.stderr)
        return 2
    try:
        out = export_for_vllm(args.drafter_dir, args.out_dir, args.target, args.num_speculative_tokens)
    except VllmExportRefused as err:
        print(f"oneiro-export: refused: {err}", file=sys.stderr)
        return 2
    print(f"wrote {out} (serve it as described in {out / 'README.md'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
