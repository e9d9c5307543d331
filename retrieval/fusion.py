"""Fusing several ranked lists into one (decomposition subtasks, hybrid retrieval).

The list fusers deduplicate: a tool keeps its best position. Ties break by the order of the
input lists, so results are deterministic. :func:`fuse_standardised` fuses whole score
matrices instead (hybrid retrieval: every tool has a BM25 and a dense score).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np


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


def rrf_ranks(rankings: Sequence[Sequence[str]]) -> dict[str, list[int]]:
    """Each tool's 1-based rank in every list that holds it (its first place there), in list
    order; the dict's order is first-seen order (list 1 top to bottom, then list 2's new tools...)."""
    ranks: dict[str, list[int]] = {}
    for ranking in rankings:
        seen: set[str] = set()
        for rank, tool in enumerate(ranking, start=1):
            if tool in seen:
                continue
            seen.add(tool)
            ranks.setdefault(tool, []).append(rank)
    return ranks


# Floats closer than this (relative) are compared exactly: far above the rounding of a sum of
# reciprocals (a few ulps per list), so every pair outside a near-tie block is already ordered right.
_NEAR_TIE = 1e-9


def fuse_rrf(rankings: Sequence[Sequence[str]], k: int | None = None, c: float = 60.0) -> list[str]:
    """Reciprocal-rank fusion: score(t) = Σ_lists 1 / (c + rank(t)), ranks from 1.

    Exact ties go to the tool seen first (:func:`rrf_ranks` order). The sums are rationals, and
    equal ones can come from different ranks (1/70 + 1/105 = 1/63 + 1/126) whose float sums
    differ in the last bit; so tools whose float scores lie within ``_NEAR_TIE`` of each other
    are re-ordered by their exact :class:`fractions.Fraction` scores.
    """
    if not math.isfinite(c) or c < 0:
        raise ValueError(f"RRF constant c must be a finite number >= 0, got {c!r}")
    ranks = rrf_ranks(rankings)
    # fsum rounds the exact sum of the terms once, so the float never depends on list order.
    approx = {tool: math.fsum(1.0 / (c + r) for r in rs) for tool, rs in ranks.items()}
    order = sorted(ranks, key=lambda t: -approx[t])  # stable: first-seen first among equal floats
    first_seen = {tool: i for i, tool in enumerate(ranks)}
    exact_c = Fraction(c)
    start = 0
    while start < len(order):
        end = start + 1
        while end < len(order) and approx[order[end - 1]] - approx[order[end]] <= _NEAR_TIE * approx[order[end - 1]]:
            end += 1
        if end - start > 1:
            block = order[start:end]
            if len({tuple(sorted(ranks[t])) for t in block}) == 1:  # the same ranks: an exact tie
                order[start:end] = sorted(block, key=first_seen.__getitem__)
            else:
                exact = {t: sum((1 / (exact_c + r) for r in ranks[t]), Fraction(0)) for t in block}
                order[start:end] = sorted(block, key=lambda t: (-exact[t], first_seen[t]))
        start = end
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


def standardise_rows(scores: np.ndarray) -> np.ndarray:
    """Each row as z-scores over its own columns: (s - mean) / std (float64; a constant row is 0).

    A retriever's raw scores have no common scale (BM25 sums idf weights, cosine lies in
    [-1, 1]); how many standard deviations a tool stands above the candidate set is comparable
    across retrievers, queries and corpora, and it keeps how far ahead a confident top hit is,
    which ranks throw away.
    """
    x = np.asarray(scores, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"expected a (queries x tools) matrix, got shape {x.shape}")
    mean = x.mean(axis=1, keepdims=True)
    std = x.std(axis=1, keepdims=True)
    out = x - mean
    np.divide(out, std, out=out, where=std > 0)
    out[(std == 0).ravel()] = 0.0
    return out


def fuse_standardised(score_matrices: Sequence[np.ndarray], weights: Sequence[float]) -> np.ndarray:
    """Σ_i weights[i] · standardise_rows(score_matrices[i]): one fused score per (query, tool).

    Every matrix scores the same tools in the same column order (the whole candidate set, so
    no tool is missing from a list and no depth is needed). Weights must be finite and >= 0.
    """
    if len(score_matrices) != len(weights) or not score_matrices:
        raise ValueError("fuse_standardised needs one weight per score matrix (and at least one)")
    if any(not math.isfinite(w) or w < 0 for w in weights):
        raise ValueError(f"fusion weights must be finite and >= 0, got {list(weights)}")
    shape = np.shape(score_matrices[0])
    if any(np.shape(m) != shape for m in score_matrices):
        raise ValueError(f"score matrices differ in shape: {[np.shape(m) for m in score_matrices]}")
    fused = np.zeros(shape, dtype=np.float64)
    for matrix, weight in zip(score_matrices, weights):
        fused += float(weight) * standardise_rows(matrix)
    return fused


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
