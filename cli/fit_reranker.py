"""``toolgym fit-reranker CONFIG [key=value ...]``: :func:`toolgym.fitting.reranker.fit_reranker`."""
from __future__ import annotations

import argparse
import json

from toolgym.cli.fit_common import add_config_arguments, config_from_args
from toolgym.fitting.reranker import FitRerankerConfig, fit_reranker


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args, FitRerankerConfig)
    if args.print_config:
        from toolgym.trainers.config import config_yaml

        print(config_yaml(cfg))
        return 0
    summary = fit_reranker(cfg)
    short = {s: v.get("heldout") for s, v in summary["stages"].items()}
    print(json.dumps({"model_dir": summary["model_dir"], "steps": summary["steps"], "elapsed_s": summary["elapsed_s"],
                      "retriever_heldout": summary.get("retriever_heldout"), "heldout_by_stage": short}, indent=2))
    return 0
