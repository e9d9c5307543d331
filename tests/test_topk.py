"""Dual-boundary dynamic top-K (MagicSelector Algorithm 2) on hand-computed lists."""
import numpy as np
import pytest

from toolgym.retrieval.topk import dual_boundary_dynamic_top_k


def unit(*degrees: float) -> np.ndarray:
    """2-D unit vectors at the given angles: cos(e_i, e_j) = cos(angle_j - angle_i)."""
    rad = np.radians(degrees)
    return np.stack([np.cos(rad), np.sin(rad)], axis=1)


def test_semantic_boundary_wins():
    # Δs = [.05, .55, .05, .05] -> K_score = 2 (keep items 1..2).
    # angles 0,0,0,90,90: sim = [1, 1, 0, 1], Δsim = [0, 1, -1] -> argmax i = 2 -> K_sim = 3.
    scores = [0.9, 0.85, 0.3, 0.25, 0.2]
    assert dual_boundary_dynamic_top_k(scores, unit(0, 0, 0, 90, 90)) == 3


def test_score_boundary_wins():
    # Δs = [.1, .1, .7, .05] -> K_score = 3.
    # angles 0,0,90,90,90: sim = [1, 0, 1, 1], Δsim = [1, -1, 0] -> i = 1 -> K_sim = 2.
    scores = [1.0, 0.9, 0.8, 0.1, 0.05]
    assert dual_boundary_dynamic_top_k(scores, unit(0, 0, 90, 90, 90)) == 3


def test_unnormalised_embeddings_and_partial_angles():
    # Scaling rows must not matter (cosine). angles 0, 60, 60, 60, 150, 150:
    # sim = [.5, 1, 1, 0, 1] -> Δsim = [-.5, 0, 1, -1] -> i = 3 -> K_sim = 4.
    # Δs = [3, 1, 1, 1, 1] -> K_score = 1.  K = max(1, 4) = 4.
    scores = [10.0, 7.0, 6.0, 5.0, 4.0, 3.0]
    emb = unit(0, 60, 60, 60, 150, 150) * np.array([[1.0], [2.0], [5.0], [0.5], [3.0], [7.0]])
    assert dual_boundary_dynamic_top_k(scores, emb) == 4


def test_ties_pick_the_first_boundary():
    # All gaps equal -> K_score = 1; identical embeddings -> Δsim all 0 -> i = 1 -> K_sim = 2.
    assert dual_boundary_dynamic_top_k([4.0, 3.0, 2.0, 1.0], unit(0, 0, 0, 0)) == 2


def test_three_items_is_the_smallest_real_case():
    # Δs = [.1, .5] -> K_score = 2; sim = [cos 90 = 0, cos 0 = 1], Δsim = [-1] -> K_sim = 2.
    assert dual_boundary_dynamic_top_k([0.9, 0.8, 0.3], unit(0, 90, 90)) == 2
    # Δs = [.8, .1] -> K_score = 1; sim = [1, 0] -> Δsim = [1] -> K_sim = 2.
    assert dual_boundary_dynamic_top_k([0.9, 0.1, 0.0], unit(0, 0, 90)) == 2


@pytest.mark.parametrize("n", [0, 1, 2])
def test_short_lists_keep_everything(n):
    assert dual_boundary_dynamic_top_k(np.linspace(1, 0, n), np.ones((n, 3))) == n


def test_result_is_within_bounds_on_random_lists():
    rng = np.random.default_rng(0)
    for n in range(3, 40):
        scores = np.sort(rng.normal(size=n))[::-1]
        k = dual_boundary_dynamic_top_k(scores, rng.normal(size=(n, 8)))
        assert 2 <= k <= n  # K_sim >= 2 always, K_score <= n - 1


def test_bad_input():
    with pytest.raises(ValueError, match="one embedding row per score"):
        dual_boundary_dynamic_top_k([3.0, 2.0, 1.0], np.ones((2, 4)))
    with pytest.raises(ValueError, match="descending"):
        dual_boundary_dynamic_top_k([1.0, 2.0, 3.0], np.ones((3, 4)))
    with pytest.raises(ValueError, match="all zeros"):
        dual_boundary_dynamic_top_k([3.0, 2.0, 1.0], np.array([[1.0, 0], [0, 0], [0, 1.0]]))
