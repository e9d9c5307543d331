"""``toolgym replay ROLLOUTS.jsonl --scheme A --scheme B``: re-score saved rollouts under several reward
schemes (:mod:`toolgym.evaluation.replay`)."""
from __future__ import annotations

import argparse

from toolgym.evaluation.replay import load_reference, make_index, print_checks, print_table, replay
from toolgym.rewards import scheme_names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("rollouts", help="rollouts JSONL written by toolgym.data.records.write_rollouts")
    parser.add_argument("--scheme", action="append", required=True, metavar="NAME|CONFIG.yaml",
                        help=f"reward scheme to score with (repeatable): one of {scheme_names()} or a YAML reward config")
    parser.add_argument("--out", default="replay_report", help="folder for replay.json / replay.md / replay.png")
    parser.add_argument("--dataset", default=None,
                        help="dataset to check every group's task, gold and results against; its corpus is what "
                             "schemes that retrieve search (e.g. magicselector)")
    parser.add_argument("--corpus", default=None, help="a tool corpus JSONL instead of --dataset")
    parser.add_argument("--retriever", default="bm25", choices=("bm25", "dense", "hybrid"), help="retriever for those schemes")


def run(args: argparse.Namespace) -> int:
    from toolgym.cli.main import check_output_dir

    check_output_dir(args.out, "--out")  # before the scoring, not after it
    dataset, corpus = load_reference(args.dataset, args.corpus)
    index = make_index(args.dataset, args.corpus, args.retriever, corpus=corpus)
    report = replay(args.rollouts, args.scheme, args.out, index, dataset=dataset, corpus=corpus)
    print_table(report)
    print_checks(report)
    print(f"wrote {args.out}/replay.json, replay.md, replay.png")
    # A scheme that could score none of the groups is a failed comparison.
    return 1 if any(s["groups_scored"] == 0 for s in report["schemes"].values()) else 0
