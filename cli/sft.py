"""``toolgym sft CONFIG [key=value ...]``: supervised warm start on demonstration episodes
(:mod:`toolgym.trainers.sft`)."""
from __future__ import annotations

import argparse
import os

from toolgym.trainers.config import config_yaml
from toolgym.trainers.sft import load_sft_config, sft


# -- CLI ------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config (configs/sft_toolsearch.yaml); key=value pairs after it override it")
    parser.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in run_dir")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--print-config", action="store_true", help="print the merged config and exit")


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: shared CPUs collapse with spinning threads
    cfg = load_sft_config(args.config, getattr(args, "overrides", None) or [])
    if args.print_config:
        print(config_yaml(cfg))
        return 0
    summary = sft(cfg, resume=args.resume, progress=not args.no_progress)
    print(f"{summary['steps']} steps in {summary['seconds']:.0f}s, mean loss {summary['train_loss']:.4f}")
    print(f"model: {summary['model']}\nmetrics: {summary['run_dir']}/metrics.jsonl")
    if summary.get("plot"):
        print(f"plot: {summary['plot']}")
    return 0
