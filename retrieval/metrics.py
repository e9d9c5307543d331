"""Retrieval and selection metrics with binary relevance, ranks from 1 (docs/decisions.md#metrics).

These are the numbers every reward and every ``toolgym eval`` table is built on; the tests
cross-check NDCG and Recall against ``ir_measures`` on random rankings.
"""
from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence


def _discount(rank: int) -> float:
    return 1.0 / math.log2(rank + 1)


def ndcg_at_k(ranking: Sequence[str], gold: Collection[str], k: int) -> float:
    """NDCG@K = sum_{j<=K} 1[t_j in G]/log2(j+1) / sum_{j<=min(|G|,K)} 1/log2(j+1).

    Duplicate ids in ``ranking`` count once (at their first rank). Empty gold gives 0.
    """
    if k <= 0:
        raise ValueError(f"k must be positive, got {k}")
    if not gold:
        return 0.0
    gold = set(gold)
    seen: set[str] = set()
    dcg = 0.0
    for j, tool in enumerate(ranking[:k], start=1):
        if tool in gold and tool not in seen:
            dcg += _discount(j)
        seen.add(tool)
    ideal = sum(_discount(j) for j in range(1, min(len(gold), k) + 1))
    return dcg / ideal


def recall_at_k(ranking: Sequence[str], gold: Collection[str], k: int) -> float:
    """Recall@K = |top_K ∩ G| / |G| (0 for empty gold)."""
    if not gold:
        return 0.0
    return len(set(ranking[:k]) & set(gold)) / len(set(gold))


def completeness_at_k(ranking: Sequence[str], gold: Collection[str], k: int) -> float:
    """Completeness@K = 1[G ⊆ top_K] (0 for empty gold)."""
    if not gold:
        return 0.0
    return float(set(gold) <= set(ranking[:k]))


def selection_prf(selected: Iterable[str] | None, gold: Collection[str]) -> tuple[float, float, float]:
    """Precision, recall and F1 of a submitted set against the gold set (0 where undefined)."""
    chosen = set(selected or ())
    gold = set(gold)
    hit = len(chosen & gold)
    precision = hit / len(chosen) if chosen else 0.0
    recall = hit / len(gold) if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def selection_match(selected: Iterable[str] | None, gold: Collection[str]) -> float:
    """Match = 1[S == G] as sets; a missing selection never matches."""
    if selected is None:
        return 0.0
    return float(set(selected) == set(gold))


def search_recall(seen: Collection[str], gold: Collection[str]) -> float:
    """SRecall = share of G that appeared in any search result of the episode."""
    if not gold:
        return 0.0
    return len(set(seen) & set(gold)) / len(set(gold))


NDCG_GAINS = ("clipped", "signed")  # the NDCG term of R_cf: the paper's max(0, ·), or the plain difference


def check_ndcg_gain(ndcg_gain: str) -> str:
    """``ndcg_gain`` when it is one of :data:`NDCG_GAINS`, else a ValueError naming them."""
    if ndcg_gain not in NDCG_GAINS:
        raise ValueError(f"ndcg_gain must be one of {NDCG_GAINS}, got {ndcg_gain!r}")
    return ndcg_gain


def check_counterfactual_weights(lambda_ndcg: float, lambda_full: float) -> tuple[float, float]:
    """The two weights of :func:`counterfactual_decomposition_reward` as floats; a non-number or a
    non-finite weight (inf, NaN) is a ValueError, so a bad config fails when it is read, not as NaN
    rewards mid-training. Negative weights are allowed (an ablation may penalise a term)."""
    out = []
    for name, value in (("lambda_ndcg", lambda_ndcg), ("lambda_full", lambda_full)):
        try:
            f = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a number, got {value!r}") from None
        if not math.isfinite(f):
            raise ValueError(f"{name} must be finite, got {value!r}")
        out.append(f)
    return out[0], out[1]


def counterfactual_decomposition_reward(
    raw_ranking: Sequence[str],
    atom_ranking: Sequence[str],
    gold: Collection[str],
    k: int,
    lambda_ndcg: float = 1.0,
    lambda_full: float = 1.0,
    ndcg_gain: str = "clipped",
) -> float:
    """MagicSelector's counterfactual reward of a decomposition (docs/decisions.md#counterfactual-reward).

    R_cf = λ_ndcg · max(0, N_atom − N_raw) + λ_full · (1[G ⊆ T_atom^K] − 1[G ⊆ T_raw^K]),
    with N = NDCG@K against G, T_raw^K the top-K for the raw context and T_atom^K the fused
    top-K of the subtasks. It lives here, beside NDCG, so the environment's default reward and
    the reward module are the same function.

    ``ndcg_gain="signed"`` (a toolgym variant, not the paper's) drops the clip: λ_ndcg · (N_atom − N_raw).
    Why: with the clip a split that ranks the gold tools lower scores the same as no split, so a
    policy that only decides whether to split gets no signal against harmful splits (docs/learning.md).
    """
    check_ndcg_gain(ndcg_gain)
    n_raw = ndcg_at_k(raw_ranking, gold, k)
    n_atom = ndcg_at_k(atom_ranking, gold, k)
    full_gain = completeness_at_k(atom_ranking, gold, k) - completeness_at_k(raw_ranking, gold, k)
    gain = n_atom - n_raw if ndcg_gain == "signed" else max(0.0, n_atom - n_raw)
    return lambda_ndcg * gain + lambda_full * full_gain
