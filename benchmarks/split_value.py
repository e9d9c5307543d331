"""Does splitting pay, per source, on the part a decomposer trains on and on the part it is judged on?

For every source of ``toolgym/Decompose-Mixture-v0`` this retrieves each request two ways in its own
library — whole, and the raw request followed by its clauses (``split_rule="request_clauses"``'s split,
:func:`toolgym.retrieval.decompose.request_then_clauses`) — and reports, over the requests the rule
splits (it leaves a one-clause request whole), the mean R_cf of splitting (the paper's clipped reward:
what a gate trained with ``counterfactual`` is paid), its signed variant, and the change in N@5 and C@10.
It does so on the training queries the retriever never trained on (``unseen_by_retriever``: where GRPO's
rewards come from) and on the held-out part (where the ladder judges). A source whose two parts disagree
in sign is one where a gate that learns R_cf's lesson is judged against the opposite lesson.

    python -m benchmarks.split_value --retriever runs/retriever_mixture/all/model --heldout-limit 100

Writes ``benchmarks/results/split_value.json`` and its docs/benchmarks.md section. Not run in CI.
"""
from __future__ import annotations

import argparse
import os
from collections import defaultdict
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: shared CPUs collapse with spinning threads

from benchmarks._report import markdown_table, write_report  # noqa: E402
from toolgym.retrieval.metrics import completeness_at_k, counterfactual_decomposition_reward, ndcg_at_k  # noqa: E402

K = 10


def split_rows(env: Any) -> list[dict[str, Any]]:
    """Per request of a mixture env's tasks: its source, whether the rule splits it, and the split's R_cf
    (clipped and signed), ΔN@5 and ΔC@10 against the whole request (0 where the rule leaves it whole)."""
    from toolgym.evaluation.retrieval import rank_tasks
    from toolgym.retrieval.decompose import request_then_clauses

    rows = []
    for source, sub in env.envs.items():
        raws, _ = rank_tasks(sub.index, sub.tasks, K, "none")
        fused_lists, _ = rank_tasks(sub.index, sub.tasks, K, "request_clauses")  # what split_rule searches
        for task, raw, fused in zip(sub.tasks, raws, fused_lists):
            rows.append({
                "task_id": task.id, "source": source, "split": len(request_then_clauses(task.context_text(), task.query)) > 1,
                "r_cf": counterfactual_decomposition_reward(raw, fused, task.gold, K),
                "r_cf_signed": counterfactual_decomposition_reward(raw, fused, task.gold, K, ndcg_gain="signed"),
                "d_ndcg5": ndcg_at_k(fused, task.gold, 5) - ndcg_at_k(raw, task.gold, 5),
                "d_c10": completeness_at_k(fused, task.gold, K) - completeness_at_k(raw, task.gold, K),
            })
    return rows


def per_source(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Means over the requests the rule splits, per source (``n``: requests, ``split``: how many split)."""
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by[r["source"]].append(r)
    out = {}
    for source, rs in by.items():
        split = [r for r in rs if r["split"]]
        mean = {k: (sum(r[k] for r in split) / len(split) if split else 0.0) for k in ("r_cf", "r_cf_signed", "d_ndcg5", "d_c10")}
        out[source] = {"n": len(rs), "split": len(split), **mean}
    return out


def main(argv: list[str] | None = None) -> None:
    import gymnasium

    import toolgym.envs  # noqa: F401

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--retriever", required=True, help="a toolgym fit-retriever model folder (the mixture retriever)")
    ap.add_argument("--heldout-limit", type=int, default=100, help="held-out requests per source (the ladder's 100)")
    args = ap.parse_args(argv)
    common = {"retriever": "hybrid", "retriever_options": {"model": args.retriever}}
    parts = {
        "train (never trained on by the retriever)": gymnasium.make(
            "toolgym/Decompose-Mixture-v0", split="train", limit=None, unseen_by_retriever=True, **common).unwrapped,
        "held-out": gymnasium.make("toolgym/Decompose-Mixture-v0", split="heldout", limit=args.heldout_limit, **common).unwrapped,
    }
    results = {part: per_source(split_rows(env)) for part, env in parts.items()}
    rows = []
    for source in next(iter(results.values())):
        for part, by_source in results.items():
            s = by_source[source]
            rows.append([source, part, s["n"], s["split"], f"{s['r_cf']:+.3f}", f"{s['r_cf_signed']:+.3f}",
                         f"{100 * s['d_ndcg5']:+.1f}", f"{100 * s['d_c10']:+.1f}"])
    body = (markdown_table(["source", "part", "requests", "split by the rule", "R_cf of splitting", "signed R_cf",
                            "ΔN@5 (points)", "ΔC@10 (points)"], rows)
            + "\n\nMeans over the requests the rule splits (the raw request, then its clauses, fused round robin, "
              "against the raw request alone; k = 10), with the mixture retriever's hybrid in each source's own "
              "library. The training part is the queries the retriever set aside (`unseen_by_retriever`): "
              "where a gate's GRPO rewards come from.")
    write_report("split_value", {"retriever": args.retriever, "heldout_limit": args.heldout_limit, "parts": results},
                 "Does splitting pay, per source, where a gate trains and where it is judged?", body)
    print(body)


if __name__ == "__main__":
    main()
