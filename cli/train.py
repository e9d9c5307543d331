"""``toolgym train CONFIG [key=value ...]``: the local GRPO loop (:func:`toolgym.trainers.train.train`)
from a :class:`~toolgym.trainers.config.TrainConfig`; prints the before/after evaluation and its
paired gain when the config asks for both."""
from __future__ import annotations

import argparse
import os

from toolgym.cli.main import check_output_dir
from toolgym.evaluation.evaluate import format_eval_table
from toolgym.evaluation.paired import paired_summary
from toolgym.trainers.config import config_yaml, load_train_config
from toolgym.trainers.train import train


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config (configs/quickstart.yaml); key=value pairs after it override it")
    parser.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in run_dir")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--print-config", action="store_true", help="print the merged config and exit")


def run(args: argparse.Namespace) -> int:
    # Spinning OpenMP threads collapse throughput (20x measured) on a CPU shared with other
    # jobs; passive waiting costs nothing when the machine is idle. Must precede torch's import.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    cfg = load_train_config(args.config, getattr(args, "overrides", None) or [])
    check_output_dir(cfg.run_dir, "run_dir")  # before any work: a run_dir that is a file fails now
    if args.print_config:
        print(config_yaml(cfg))
        return 0
    threads = os.environ.get("TOOLGYM_THREADS")
    if threads:
        import torch

        torch.set_num_threads(int(threads))
    summary = train(cfg, resume=args.resume, progress=not args.no_progress)
    if summary.get("eval"):
        print(format_eval_table(summary["eval"]))
        paired = paired_summary(summary["eval"])
        if paired:
            print(paired)
    print(f"metrics: {summary['metrics']}")
    if summary.get("plot"):
        print(f"plot: {summary['plot']}")
    return 0
