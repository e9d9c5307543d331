"""``toolgym envs``: list the registered environment ids."""
from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--details", action="store_true", help="also show each id's dataset and vector support")


def run(args: argparse.Namespace) -> int:
    import gymnasium

    from toolgym.envs import registered_ids

    for env_id in registered_ids():
        if not args.details:
            print(env_id)
            continue
        spec = gymnasium.spec(env_id)
        kind = "decompose" if "decomposition" in str(spec.entry_point) else "tool-search"
        batched = "batched make_vec" if spec.vector_entry_point else "sync make_vec"
        print(f"{env_id:45s} {kind:12s} dataset={spec.kwargs.get('dataset')!s:18s} {batched}")
    return 0
