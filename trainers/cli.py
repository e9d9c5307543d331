"""The ``toolgym`` command line: one subcommand per job, each in its own module.

Subcommand modules are imported lazily so ``toolgym envs`` does not pay for torch.
Each module exposes ``add_arguments(parser)`` and ``run(args) -> int``.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "eval": ("toolgym.trainers.eval_cmd", "evaluate a retriever, an agent or a policy on a dataset"),
    "envs": ("toolgym.trainers.envs_cmd", "list the registered environment ids"),
    "replay": ("toolgym.trainers.replay_cmd", "re-score saved rollouts under several reward schemes"),
    "train": ("toolgym.trainers.train_cmd", "train a policy with local GRPO from a YAML config"),
    "demos": ("toolgym.trainers.demos", "record scripted demonstration episodes (rejection-sampled) as JSONL"),
    "sft": ("toolgym.trainers.sft", "supervised warm start on demonstration episodes from a YAML config"),
}
# Subcommands whose extra arguments are omegaconf key=value overrides.
TAKES_OVERRIDES = ("train", "sft")


def build_parser(argv: list[str]) -> tuple[argparse.ArgumentParser, str | None]:
    parser = argparse.ArgumentParser(prog="toolgym", description="RL environments for agentic tool search")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:  # only the chosen command's module is imported
            importlib.import_module(module).add_arguments(p)
    return parser, chosen


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, chosen = build_parser(argv)
    if chosen is None or chosen not in SUBCOMMANDS:
        parser.print_help()
        return 0 if chosen is None else 2
    args, extra = parser.parse_known_args(argv)
    args.overrides = extra  # key=value config overrides for `train` and `sft`
    if extra and chosen not in TAKES_OVERRIDES:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    module = importlib.import_module(SUBCOMMANDS[chosen][0])
    try:
        return int(module.run(args) or 0)
    except (ValueError, FileNotFoundError, KeyError) as exc:
        # User errors get one clear line, not a traceback.
        print(f"toolgym {chosen}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
