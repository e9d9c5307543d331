"""``toolgym fit-retriever CONFIG [key=value ...]``: :func:`toolgym.fitting.retriever.fit_retriever`."""
from __future__ import annotations

import argparse
import json

from toolgym.cli.fit_common import add_config_arguments, config_from_args
from toolgym.fitting.retriever import FitRetrieverConfig, fit_retriever


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args, FitRetrieverConfig)
    if args.print_config:
        from toolgym.trainers.config import config_yaml

        print(config_yaml(cfg))
        return 0
    summary = fit_retriever(cfg)
    print(json.dumps({k: summary[k] for k in ("model_dir", "steps", "elapsed_s", "heldout")}, indent=2))
    return 0
