"""``toolgym train CONFIG [key=value ...]``: the command line of the local GRPO loop.

The pieces live in :mod:`toolgym.trainers.config` (settings), :mod:`toolgym.trainers.evaluate`
(policy loading and evaluation) and :mod:`toolgym.trainers.train` (the loop); the names other
code imported from here are re-exported.
"""
from __future__ import annotations

import argparse
import os
from typing import Any

from toolgym.trainers.config import config_yaml, load_train_config
from toolgym.trainers.evaluate import (build_policy, env_tasks, evaluate_policy, format_eval_table, load_policy,
                                       make_envs, pick_device)
from toolgym.trainers.train import task_order, tasks_for_step, train

__all__ = ["add_arguments", "build_policy", "env_tasks", "evaluate_policy", "format_eval_table",
           "load_train_config", "load_policy", "make_envs", "paired_summary", "pick_device", "run", "task_order",
           "tasks_for_step", "train"]


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
    from toolgym.trainers.cli import check_output_dir

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


def paired_summary(evals: dict[str, Any], key: str = "reward") -> str | None:
    """One line: the paired gain after − before of ``key`` over the tasks both evaluations of
    ``eval.json`` scored (:func:`~toolgym.trainers.paired_eval.paired_gain`), and whether it
    clears 2 standard errors; ``None`` unless both exist with their per-task rows."""
    from toolgym.trainers.paired_eval import paired_gain

    before, after = evals.get("before"), evals.get("after")
    if not (isinstance(before, dict) and isinstance(after, dict)):
        return None
    rows_b, rows_a = before.get("per_task"), after.get("per_task")
    if not (isinstance(rows_b, dict) and isinstance(rows_a, dict)):
        return None
    shared = [t for t in rows_b if t in rows_a]
    if not shared:
        return None
    g = paired_gain([rows_b[t][key] for t in shared], [rows_a[t][key] for t in shared])
    if g["exceeds_2se"]:
        verdict = "a gain: above 2 se"
    elif g["gain"] < -2 * g["se"]:
        verdict = "a loss: below -2 se"
    else:
        verdict = "within 2 se: no change shown"
    return (f"held-out {key}, after - before, paired over {g['n']} tasks: {g['gain']:+.3f} ± {g['se']:.3f} "
            f"({g['before']:.3f} -> {g['after']:.3f}; {verdict})")
