"""MagicSelector's dual-boundary dynamic top-K (Algorithm 2, "Recall-Maximizing Fusion")."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def dual_boundary_dynamic_top_k(scores: Sequence[float] | np.ndarray, embeddings: np.ndarray) -> int:
    """How many items of a ranked list to keep (MagicSelector Algorithm 2; docs/decisions.md#dynamic-top-k).

    Inputs: ``scores`` s_1..s_n sorted descending (reranker scores) and ``embeddings``
    e_1..e_n (one row per item, same order; need not be normalised). With 1-based i:

    - score boundary: Δs_i = s_i − s_{i+1} for i = 1..n−1, ``K_score = argmax_i Δs_i``;
      the largest gap lies between items i and i+1, so keep items 1..K_score.
    - semantic boundary: sim_i = cos(e_i, e_{i+1}) for i = 1..n−1,
      Δsim_i = sim_i − sim_{i+1} for i = 1..n−2, ``K_sim = argmax_i Δsim_i + 1``; the largest
      drop means the pair (i+1, i+2) is far less alike than (i, i+1), a cluster boundary
      after item i+1, so keep items 1..i+1.
    - ``K_final = max(K_score, K_sim)`` (recall first), 1 <= K_final <= n.

    The returned value is that count: keep ``items[:K_final]``. Lists with n < 3 keep
    everything (Δsim needs three items). Ties in an argmax go to the smallest i (the
    first, i.e. the tightest boundary). O(n) time and memory beyond the input.

    Paper's pseudo-code: ``K_sim = argmax_i(Δsim_i)`` with no +1; toolgym adds the +1, which
    makes the cut land on the boundary the drop describes.
    """
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    e = np.asarray(embeddings, dtype=np.float64)
    n = s.shape[0]
    if e.ndim != 2 or e.shape[0] != n:
        raise ValueError(f"need one embedding row per score: {n} scores, embeddings of shape {e.shape}")
    if n < 3:
        return n
    if np.any(np.diff(s) > 1e-9 * max(1.0, float(np.abs(s).max()))):
        raise ValueError("scores must be sorted in descending order (rank 1 first)")
    norms = np.linalg.norm(e, axis=1)
    if np.any(norms == 0):
        raise ValueError("an embedding row is all zeros: cosine similarity is undefined")
    unit = e / norms[:, None]
    k_score = int(np.argmax(s[:-1] - s[1:])) + 1  # 0-based position p -> i = p + 1
    sim = np.einsum("ij,ij->i", unit[:-1], unit[1:])  # sim_i, i = 1..n-1
    k_sim = int(np.argmax(sim[:-1] - sim[1:])) + 1 + 1  # i = p + 1, then keep 1..i+1
    return max(k_score, k_sim)
