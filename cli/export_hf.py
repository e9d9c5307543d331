"""``toolgym export-hf ENV --out DIR``: an env's tasks and corpus as a Hugging Face datasets folder
(:func:`toolgym.trainers.export_hf.export_hf`)."""
from __future__ import annotations

import argparse

from toolgym.cli.main import check_output_dir
from toolgym.trainers.export_hf import check_max_tasks, export_hf, parse_env_kwargs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("env_id", help="a registered env id (toolgym envs), e.g. toolgym/ToolSearch-v0")
    parser.add_argument("--out", required=True, help="output folder (README.md, tasks/<split>.parquet, corpus/tools.parquet)")
    parser.add_argument("--split", action="append", default=None,
                        help="task split to export (repeat for several; default: the env's tasks as built)")
    parser.add_argument("--max-tasks", type=int, default=None, help="export only the first N tasks of each split")
    parser.add_argument("--env-kwargs", default="{}", help='JSON object of gymnasium.make keyword arguments')


def run(args: argparse.Namespace) -> int:
    check_max_tasks(args.max_tasks)
    check_output_dir(args.out, "--out")
    counts = export_hf(args.env_id, args.out, args.split, parse_env_kwargs(args.env_kwargs), args.max_tasks)
    print(f"wrote {sum(counts.values())} tasks ({', '.join(f'{k}: {v}' for k, v in counts.items())}) to {args.out}")
    return 0
