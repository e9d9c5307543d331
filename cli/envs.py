"""``toolgym envs``: list the registered environment ids (those whose data is missing here are
marked unavailable, with where to put the data)."""
from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--details", action="store_true", help="also show each id's dataset and vector support")


def run(args: argparse.Namespace) -> int:
    import gymnasium

    from toolgym.envs import registered_ids, unavailable_reason

    for env_id in registered_ids():
        reason = unavailable_reason(env_id)
        note = f"  (unavailable: {reason})" if reason else ""
        if not args.details:
            print(env_id + note)
            continue
        spec = gymnasium.spec(env_id)
        kind = "decompose" if "decomposition" in str(spec.entry_point) else "tool-search"
        batched = "batched make_vec" if spec.vector_entry_point else "sync make_vec"
        print(f"{env_id:45s} {kind:12s} dataset={spec.kwargs.get('dataset')!s:18s} {batched}{note}")
    return 0
