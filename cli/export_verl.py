"""``toolgym export-verl ENV --out DIR``: an env's tasks as the parquet dataset verl reads
(:func:`toolgym.trainers.export_verl.export_rows`)."""
from __future__ import annotations

import argparse
from pathlib import Path

from toolgym.trainers.export_hf import check_max_tasks, parse_env_kwargs, write_parquet
from toolgym.trainers.export_verl import export_rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("env_id", help="a registered env id (toolgym envs), e.g. toolgym/ToolSearch-StableToolBench-v0")
    parser.add_argument("--split", default="train", help="task split to export (default: train)")
    parser.add_argument("--out", required=True, help="output folder; writes <split>.parquet there")
    parser.add_argument("--max-tasks", type=int, default=None, help="export only the first N tasks (N >= 1)")
    parser.add_argument("--env-kwargs", default="{}", help='JSON object of gymnasium.make keyword arguments, e.g. \'{"max_turns": 6}\'')


def run(args: argparse.Namespace) -> int:
    check_max_tasks(args.max_tasks)  # before any work: 0 and negatives are not counts
    env_kwargs = parse_env_kwargs(args.env_kwargs)
    rows = export_rows(args.env_id, args.split, env_kwargs, args.max_tasks)
    if not rows:
        raise ValueError(f"{args.env_id} has no tasks in split {args.split!r}")
    path = write_parquet(rows, Path(args.out) / f"{args.split}.parquet")
    print(f"wrote {len(rows)} rows to {path}")
    return 0
