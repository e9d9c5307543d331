"""Fusing several ranked lists into one (decomposition subtasks, hybrid retrieval).

All fusers deduplicate: a tool keeps its best position. Ties break by the order of the
input lists, so results are deterministic.
"""
from __future__ import annotations

from collections.abc import Sequence


def fuse_round_robin(rankings: Sequence[Sequence[str]], k: int | None = None) -> list[str]:
    """Take rank 1 of every list in order, then rank 2 of every list, ... skipping repeats."""
    out: list[str] = []
    seen: set[str] = set()
    depth = max((len(r) for r in rankings), default=0)
    for rank in range(depth):
        for ranking in rankings:
            if rank < len(ranking) and ranking[rank] not in seen:
                seen.add(ranking[rank])
                out.append(ranking[rank])
    return out[:k] if k is not None else out


def fuse_rrf(rankings: Sequence[Sequence[str]], k: int | None = None, c: float = 60.0) -> list[str]:
    """Reciprocal-rank fusion: score(t) = Σ_lists 1 / (c + rank(t)), ranks from 1."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        seen: set[str] = set()
        for rank, tool in enumerate(ranking, start=1):
            if tool in seen:
                continue
            seen.add(tool)
            scores[tool] = scores.get(tool, 0.0) + 1.0 / (c + rank)
    order = sorted(scores, key=lambda t: -scores[t])  # sorted() is stable: first-seen wins ties
    return order[:k] if k is not None else order


def fuse_max_score(
    rankings: Sequence[Sequence[str]], scores: Sequence[Sequence[float]], k: int | None = None
) -> list[str]:
    """Order by each tool's best retrieval score over all lists (scores must be comparable)."""
    if len(rankings) != len(scores):
        raise ValueError("fuse_max_score needs one score list per ranking")
    best: dict[str, float] = {}
    for ranking, values in zip(rankings, scores):
        if len(ranking) != len(values):
            raise ValueError("each ranking needs exactly one score per tool")
        for tool, value in zip(ranking, values):
            if tool not in best or value > best[tool]:
                best[tool] = float(value)
    order = sorted(best, key=lambda t: -best[t])
    return order[:k] if k is not None else order


FUSION_METHODS = ("round_robin", "rrf", "max_score")


def fuse(
    rankings: Sequence[Sequence[str]],
    method: str = "round_robin",
    k: int | None = None,
    scores: Sequence[Sequence[float]] | None = None,
) -> list[str]:
    """Dispatch to one of :data:`FUSION_METHODS`."""
    if method == "round_robin":
        return fuse_round_robin(rankings, k)
    if method == "rrf":
        return fuse_rrf(rankings, k)
    if method == "max_score":
        if scores is None:
            raise ValueError("fusion 'max_score' needs the retrieval scores")
        return fuse_max_score(rankings, scores, k)
    raise ValueError(f"unknown fusion method {method!r}; choose one of {FUSION_METHODS}")
