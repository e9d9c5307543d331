"""Retrieval and selection metrics on hand-computed numbers, and NDCG/Recall against ir_measures."""
import math
import random

import ir_measures
import pytest
from ir_measures import R, nDCG

from toolgym.retrieval.metrics import (
    completeness_at_k,
    ndcg_at_k,
    recall_at_k,
    search_recall,
    selection_match,
    selection_prf,
)

L3 = 1 / math.log2(3)  # 0.6309...
L5 = 1 / math.log2(5)  # 0.4306...
GOLD = {"g1", "g2", "g3"}
RANKING = ["x", "g1", "y", "g2", "g3"]


def test_ndcg_hand_numbers():
    # K=3: DCG = 1/log2(3); IDCG = 1 + 1/log2(3) + 1/log2(4) = 2.1309.
    assert ndcg_at_k(RANKING, GOLD, 3) == pytest.approx(L3 / (1 + L3 + 0.5))
    assert ndcg_at_k(RANKING, GOLD, 3) == pytest.approx(0.296082, abs=1e-6)
    # K=4: DCG = 1/log2(3) + 1/log2(5) = 1.0616; same IDCG (min(|G|, K) = 3) -> 0.4982.
    assert ndcg_at_k(RANKING, GOLD, 4) == pytest.approx((L3 + L5) / (1 + L3 + 0.5))
    assert ndcg_at_k(RANKING, GOLD, 4) == pytest.approx(0.498189, abs=1e-6)
    # The ideal is cut at K: one gold in first place with K=1 is perfect even though |G| = 3.
    assert ndcg_at_k(["g2", "x"], GOLD, 1) == 1.0
    assert ndcg_at_k(["x", "y"], GOLD, 2) == 0.0
    # A duplicate counts once: DCG = 1 + 0 + 1/log2(4) = 1.5; IDCG = 1 + 1/log2(3) -> 0.9197.
    assert ndcg_at_k(["g1", "g1", "g2"], {"g1", "g2"}, 3) == pytest.approx(1.5 / (1 + L3))
    assert ndcg_at_k(RANKING, set(), 3) == 0.0
    with pytest.raises(ValueError):
        ndcg_at_k(RANKING, GOLD, 0)


def test_recall_and_completeness_hand_numbers():
    assert recall_at_k(RANKING, GOLD, 3) == pytest.approx(1 / 3)
    assert recall_at_k(RANKING, GOLD, 4) == pytest.approx(2 / 3)
    assert recall_at_k(RANKING, GOLD, 50) == 1.0
    assert completeness_at_k(RANKING, GOLD, 4) == 0.0
    assert completeness_at_k(RANKING, GOLD, 5) == 1.0
    assert completeness_at_k(RANKING, set(), 5) == 0.0


def test_selection_hand_numbers():
    assert selection_prf({"g1", "g2", "z"}, GOLD) == pytest.approx((2 / 3, 2 / 3, 2 / 3))
    # P = 1, R = 1/2, F1 = 2 * 1 * 0.5 / 1.5 = 2/3.
    assert selection_prf(["g1"], {"g1", "g2"}) == pytest.approx((1.0, 0.5, 2 / 3))
    assert selection_prf([], GOLD) == (0.0, 0.0, 0.0)
    assert selection_prf(None, GOLD) == (0.0, 0.0, 0.0)
    assert selection_match(["g2", "g1", "g1"], {"g1", "g2"}) == 1.0
    assert selection_match(["g1"], {"g1", "g2"}) == 0.0
    assert selection_match(None, set()) == 0.0
    assert search_recall({"g1", "x"}, {"g1", "g2"}) == 0.5
    assert search_recall(["g1", "g2", "g3", "q"], GOLD) == 1.0


def _random_case(rng: random.Random, qid: str):
    docs = [f"d{i}" for i in range(40)]
    gold = set(rng.sample(docs, rng.randint(1, 6)))
    ranking = rng.sample(docs, rng.randint(1, 30))  # no duplicates, some gold may be missing
    return gold, ranking


@pytest.mark.parametrize("seed", range(5))
def test_ndcg_and_recall_match_ir_measures(seed):
    rng = random.Random(seed)
    qrels, run, ours = {}, {}, {}
    ks = (1, 3, 5, 10, 20)
    for q in range(40):
        qid = f"q{q}"
        gold, ranking = _random_case(rng, qid)
        qrels[qid] = {d: 1 for d in gold}
        # Strictly decreasing scores, so no evaluator has to break ties.
        run[qid] = {d: float(len(ranking) - j) for j, d in enumerate(ranking)}
        ours[qid] = {k: (ndcg_at_k(ranking, gold, k), recall_at_k(ranking, gold, k)) for k in ks}
    measures = [nDCG @ k for k in ks] + [R @ k for k in ks]
    seen = 0
    for m in ir_measures.iter_calc(measures, qrels, run):
        k = m.measure["cutoff"]
        expected = ours[m.query_id][k][0 if m.measure.NAME == "nDCG" else 1]
        assert m.value == pytest.approx(expected, abs=1e-9), (m, expected)
        seen += 1
    assert seen == 40 * len(measures)
