"""``toolgym fit-preference CONFIG [key=value ...]``: :func:`toolgym.fitting.preference.fit_preference`."""
from __future__ import annotations

import argparse
import json

from toolgym.cli.fit_common import add_config_arguments, config_from_args
from toolgym.fitting.preference import FitPreferenceConfig, fit_preference


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args, FitPreferenceConfig)
    if args.print_config:
        from toolgym.trainers.config import config_yaml

        print(config_yaml(cfg))
        return 0
    summary = fit_preference(cfg)
    print(json.dumps({k: summary.get(k) for k in ("model_dir", "steps", "elapsed_s", "train_pairs", "heldout_before", "heldout")},
                     indent=2))
    return 0
