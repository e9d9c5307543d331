"""Records round-trip through JSON; fusion, clause splitting and the counterfactual reward on hand numbers."""
import functools
import json
import math
import random

import pytest

from toolgym.data.records import SearchEvent, Task, Trajectory, first_found, read_rollouts, write_rollouts
from toolgym.retrieval.corpus import Tool, ToolCorpus
from toolgym.retrieval.decompose import split_into_clauses
from toolgym.retrieval.fusion import fuse, fuse_max_score, fuse_round_robin, fuse_rrf
from toolgym.data.readers import DatasetFormatError
from toolgym.retrieval.metrics import counterfactual_decomposition_reward


def test_task_and_trajectory_roundtrip(tmp_path):
    task = Task(id="t1", query="q", gold={"a", "b"}, messages=[{"role": "user", "content": "hi"}],
                subtasks=["x", "y"], group="G1")
    traj = Trajectory(task_id="t1", events=[SearchEvent(0, "q", None, ["a", "c"], ["a"])], selection=["a"],
                      terminated_by="submit", num_turns=2, token_ids=[1, 2, 3], loss_mask=[0, 1, 1],
                      turn_spans=[(1, 3)])
    assert Task.from_dict(json.loads(json.dumps(task.to_dict()))) == task
    again = Trajectory.from_dict(json.loads(json.dumps(traj.to_dict())))
    assert again == traj and again.seen == {"a", "c"}
    path = tmp_path / "r.jsonl"
    assert write_rollouts(path, [(task, [traj, traj])]) == 1
    [(t2, trajs)] = read_rollouts(path)
    assert t2 == task and trajs == [traj, traj]


def test_read_rollouts_names_bad_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"task": {"id": "1", "query": "q", "gold": ["a"]}, "trajectories": []}\n{"task": \n')
    with pytest.raises(DatasetFormatError, match=r"bad.jsonl:2"):
        read_rollouts(path)


def test_first_found_keeps_rank_order_and_skips_seen():
    assert first_found(["x", "b", "a", "c"], frozenset({"a", "b", "c"}), {"c"}) == ["b", "a"]


def test_corpus_rejects_empty_duplicates_and_unknown_category():
    with pytest.raises(ValueError, match="empty"):
        ToolCorpus([])
    with pytest.raises(ValueError, match="duplicate"):
        ToolCorpus([Tool("a", "a", ""), Tool("a", "b", "")])
    corpus = ToolCorpus([Tool("a", "A", "does a", "cat1"), Tool("b", "B", "does b", "cat2")])
    corpus.check_category("cat1")
    with pytest.raises(ValueError, match="unknown category"):
        corpus.check_category("nope")
    assert corpus.text(corpus["a"]) == "cat1 | A: does a"
    assert corpus.content_hash != ToolCorpus([Tool("a", "A", "does A", "cat1")]).content_hash


def test_fusion_by_hand():
    lists = [["a", "b", "c"], ["d", "a", "e"]]
    assert fuse_round_robin(lists) == ["a", "d", "b", "c", "e"]
    assert fuse_round_robin(lists, k=2) == ["a", "d"]
    # RRF with c=60: a = 1/61 + 1/62, d = 1/61, b = 1/62, e = 1/63, c = 1/63 (b before c: first seen)
    assert fuse_rrf(lists) == ["a", "d", "b", "c", "e"]
    assert fuse_max_score(lists, [[0.9, 0.5, 0.1], [0.95, 0.2, 0.3]]) == ["d", "a", "b", "e", "c"]
    with pytest.raises(ValueError):
        fuse(lists, "max_score")
    with pytest.raises(ValueError, match="unknown fusion"):
        fuse(lists, "borda")


@functools.lru_cache(maxsize=None)
def _lcm_of_range(low: int, high: int) -> int:
    return math.lcm(*range(low, high + 1))


def _rrf_exactly(rankings: list[list[str]], c: int = 60, max_rank: int = 200) -> list[str]:
    """The tie rule spelled out in integers: score * L with L = lcm(c+1 .. c+max_rank), so every
    1/(c + rank) is a whole number and equal sums are equal ints; equal ones in first-seen order."""
    lcm = _lcm_of_range(c + 1, c + max_rank)
    score: dict[str, int] = {}
    for ranking in rankings:
        assert len(ranking) <= max_rank
        seen: set[str] = set()
        for rank, tool in enumerate(ranking, start=1):
            if tool not in seen:
                seen.add(tool)
                score[tool] = score.get(tool, 0) + lcm // (c + rank)
    first = {tool: i for i, tool in enumerate(score)}
    return sorted(score, key=lambda t: (-score[t], first[t]))


def test_rrf_exact_tie_goes_to_the_first_seen_tool():
    # y at ranks (3, 80), x at (24, 30): 1/63 + 1/140 = 1/84 + 1/90 = 29/1260, but the float sums
    # differ in the last bit (x's is larger). y is seen first (rank 3 of list 1), so y wins.
    one = [f"p{i}" for i in range(100)]
    two = [f"q{i}" for i in range(100)]
    one[2], one[23] = "y", "x"
    two[29], two[79] = "x", "y"
    assert 1 / 84 + 1 / 90 != 1 / 63 + 1 / 140
    fused = fuse_rrf([one, two])
    assert fused.index("y") == fused.index("x") - 1
    assert fused == _rrf_exactly([one, two])


def test_rrf_tie_rule_holds_exactly_on_random_fusions():
    rng = random.Random(0)
    for _ in range(20_000):
        pool = [f"t{i}" for i in range(rng.randint(20, 200))]
        lists = [rng.sample(pool, rng.randint(1, min(100, len(pool)))) for _ in range(rng.randint(2, 4))]
        if rng.random() < 0.2:  # a repeat inside one list counts at its first place only
            lists[0] = lists[0] + lists[0][:3]
        expected = _rrf_exactly(lists)
        assert fuse_rrf(lists) == expected
        assert fuse_rrf(lists, k=5) == expected[:5]


def test_rrf_refuses_a_bad_constant():
    for c in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="RRF constant"):
            fuse_rrf([["a"]], c=c)


def test_standardised_fusion_by_hand():
    import numpy as np

    from toolgym.retrieval.fusion import fuse_standardised, standardise_rows

    # Row [1, 2, 3]: mean 2, std sqrt(2/3); a constant row has no spread and standardises to 0.
    z = standardise_rows(np.array([[1.0, 2.0, 3.0], [4.0, 4.0, 4.0]]))
    s = math.sqrt(2 / 3)
    np.testing.assert_allclose(z, [[-1 / s, 0.0, 1 / s], [0.0, 0.0, 0.0]])
    # [3, 0, 0]: mean 1, std sqrt(2) -> [2, -1, -1] / sqrt(2).
    fused = fuse_standardised([np.array([[1.0, 2.0, 3.0]]), np.array([[3.0, 0.0, 0.0]])], [0.5, 0.5])
    expected = 0.5 * np.array([-1 / s, 0.0, 1 / s]) + 0.5 * np.array([2.0, -1.0, -1.0]) / math.sqrt(2)
    np.testing.assert_allclose(fused, [expected])
    assert np.argsort(-fused[0]).tolist() == [2, 0, 1]
    # The scale of a retriever's scores does not matter, only its spread.
    np.testing.assert_allclose(fuse_standardised([np.array([[10.0, 20.0, 30.0]]), np.array([[0.3, 0.0, 0.0]])],
                                                 [0.5, 0.5]), fused)
    with pytest.raises(ValueError, match="weight"):
        fuse_standardised([np.zeros((1, 3))], [0.5, 0.5])
    for bad in (-0.1, float("nan")):
        with pytest.raises(ValueError, match="finite"):
            fuse_standardised([np.zeros((1, 3))], [bad])
    with pytest.raises(ValueError, match="shape"):
        fuse_standardised([np.zeros((1, 3)), np.zeros((1, 4))], [0.5, 0.5])
    with pytest.raises(ValueError, match="matrix"):
        standardise_rows(np.zeros(3))


def test_counterfactual_reward_by_hand():
    gold = {"a", "b"}
    raw = ["x", "a", "y"]          # N_raw@3 = (1/log2 3) / (1 + 1/log2 3); not complete
    atom = ["a", "b", "x"]         # N_atom@3 = 1; complete
    ideal = 1 + 1 / math.log2(3)
    n_raw = (1 / math.log2(3)) / ideal
    expected = 0.5 * (1 - n_raw) + 2.0 * (1 - 0)
    assert counterfactual_decomposition_reward(raw, atom, gold, 3, 0.5, 2.0) == pytest.approx(expected)
    # A worse decomposition: the NDCG term is clipped at 0 but losing completeness costs λ_full.
    assert counterfactual_decomposition_reward(atom, raw, gold, 3, 0.5, 2.0) == pytest.approx(-2.0)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Find a shelter near the address and then book a hotel in Paris; convert 5 USD to EUR.",
         ["Find a shelter near the address", "book a hotel in Paris", "convert 5 USD to EUR."]),
        ("Tell me about clubs, managers, and referees. I'm also curious about transfers he made.",
         ["Tell me about clubs, managers, and referees.", "I'm also curious about transfers he made."]),
        ("Check the weather. Ok.", ["Check the weather. Ok."]),
        ("   ", []),
    ],
)
def test_split_into_clauses(text, expected):
    assert split_into_clauses(text) == expected
