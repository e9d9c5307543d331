"""Retrieval evaluation: rank every task's query (raw, or its clauses fused) and score the lists
(N@k, C@k, R@k, selection P/R/F1 of a cut list)."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from toolgym.data.records import Task
from toolgym.retrieval.metrics import completeness_at_k, ndcg_at_k, recall_at_k, selection_prf


def rank_tasks(
    index: Any,
    tasks: Sequence[Task],
    depth: int,
    decompose: str | Callable[[Sequence[Task]], list[list[str]]] = "none",
    reranker: Any = None,
) -> tuple[list[list[str]], list[list[float]]]:
    """Ranked ids and scores per task, searched in one batch (sub-queries flattened into it).

    ``decompose``: ``"none"`` (the raw request), ``"clauses"`` (the rule-based splitter),
    ``"request_clauses"`` (the raw request, then its clauses: :func:`~toolgym.retrieval.decompose.request_then_clauses`) or a
    callable giving each task's sub-queries (e.g. a trained
    :class:`~toolgym.evaluation.decomposer.PolicyDecomposer`); several sub-queries' lists are fused
    round robin."""
    from toolgym.retrieval.decompose import request_then_clauses, split_into_clauses
    from toolgym.retrieval.fusion import fuse_round_robin

    texts = [t.context_text() for t in tasks]
    if callable(decompose):
        split = list(decompose(tasks))
        if len(split) != len(tasks):
            raise ValueError(f"the decomposer gave {len(split)} lists of sub-queries for {len(tasks)} tasks")
        queries_per_task = [list(qs) or [x] for qs, x in zip(split, texts)]
    elif decompose in ("none", "clauses"):
        queries_per_task = [split_into_clauses(x) if decompose == "clauses" else [x] for x in texts]
    elif decompose == "request_clauses":
        queries_per_task = [request_then_clauses(x, t.query) for x, t in zip(texts, tasks)]
    else:
        raise ValueError(f"decompose must be 'none', 'clauses', 'request_clauses' or a callable, got {decompose!r}")
    flat = [q for qs in queries_per_task for q in qs]
    results = index.search_batch(flat, k=depth)
    if reranker is not None:
        results = reranker.rerank_batch(flat, results, k=depth)
    rankings, scores, pos = [], [], 0
    for qs in queries_per_task:
        group = results[pos : pos + len(qs)]
        pos += len(qs)
        if len(group) == 1:
            rankings.append(list(group[0].ids))
            scores.append(list(group[0].scores))
            continue
        fused = fuse_round_robin([r.ids for r in group], k=depth)
        best: dict[str, float] = {}
        for r in group:
            for tid, s in zip(r.ids, r.scores):
                best[tid] = max(best.get(tid, -np.inf), s)
        rankings.append(fused)
        scores.append([best[t] for t in fused])
    return rankings, scores


def evaluate_retrieval(
    index: Any,
    tasks: Sequence[Task],
    ks: Sequence[int],
    topk: str = "10",
    decompose: str | Callable[[Sequence[Task]], list[list[str]]] = "none",
    reranker: Any = None,
    candidates: int = 20,
    keep_rows: bool = False,
) -> dict[str, Any]:
    """Metrics in % (N@k, R@k, C@k; K, P@K, R@K, C@K, F1@K of the final cut) overall and per group.

    ``keep_rows``: also return ``per_task``, each query's metrics (fractions, as averaged) with its
    ``task_id``, so a benchmark can keep the rows its means come from.
    """
    from toolgym.retrieval.topk import dual_boundary_dynamic_top_k

    dynamic = topk == "dynamic"
    if not dynamic:
        try:
            fixed_k = int(topk)
        except ValueError:
            raise ValueError(f"--topk must be an integer or 'dynamic', got {topk!r}") from None
        if fixed_k <= 0:
            raise ValueError("--topk must be positive")
    if candidates <= 0:
        raise ValueError("--candidates must be positive")
    depth = max(max(ks), candidates if (dynamic or reranker is not None) else 0, 0 if dynamic else fixed_k)
    rankings, scores = rank_tasks(index, tasks, depth, decompose, reranker)
    embeddings = index.tool_embeddings() if dynamic else None
    corpus = index.corpus

    per_task: list[dict[str, float]] = []
    for task, ranking, score in zip(tasks, rankings, scores):
        row = {}
        for k in ks:
            row[f"N@{k}"] = ndcg_at_k(ranking, task.gold, k)
            row[f"R@{k}"] = recall_at_k(ranking, task.gold, k)
            row[f"C@{k}"] = completeness_at_k(ranking, task.gold, k)
        if dynamic:
            # Algorithm 2 reads score gaps, so it cuts a score-ordered list; for one retrieval
            # list that is the ranking itself, for fused clause lists each tool's best score.
            order = sorted(range(min(len(ranking), candidates)), key=lambda i: -score[i])
            cand = [ranking[i] for i in order]
            emb = embeddings[[corpus.index_of(t) for t in cand]] if cand else np.zeros((0, 1))
            cut = dual_boundary_dynamic_top_k(np.asarray([score[i] for i in order], dtype=float), emb) if cand else 0
            final = cand[:cut]
        else:
            final = ranking[:fixed_k]
        p, r, f1 = selection_prf(final, task.gold)
        row.update({"K": float(len(final)), "P@K": p, "R@K": r, "F1@K": f1,
                    "C@K": completeness_at_k(final, task.gold, max(len(final), 1))})
        per_task.append(row)

    def mean(rows: list[dict[str, float]]) -> dict[str, float]:
        out = {key: 100.0 * float(np.mean([r[key] for r in rows])) for key in rows[0] if key != "K"}
        out["K"] = float(np.mean([r["K"] for r in rows]))
        out["n"] = len(rows)
        return out

    result: dict[str, Any] = mean(per_task)
    by_group: dict[str, list[dict[str, float]]] = defaultdict(list)
    for task, row in zip(tasks, per_task):
        if task.group:
            by_group[task.group].append(row)
    if by_group:
        result["groups"] = {g: mean(rows) for g, rows in sorted(by_group.items())}
    if keep_rows:
        result["per_task"] = [{"task_id": task.id, **row} for task, row in zip(tasks, per_task)]
    return result
