"""Interpolating a reranker with its first stage: the formula on hand-computed numbers, the weight
tuned on set-aside queries, the settings file a trained folder carries, and mixture batches."""
import json
import random

import numpy as np
import pytest

from toolgym.data.records import Task
from toolgym.fitting.reranker import mixture_batches, rerankings, tune_first_stage_weight
from toolgym.retrieval import SearchResult
from toolgym.retrieval.rerank import interpolate_with_first_stage, read_first_stage_weight


def test_interpolation_on_hand_computed_numbers():
    # first stage (3, 1, 2): mean 2, std sqrt(2/3) -> z = (1.2247, -1.2247, 0)
    # reranker (0, 0, 6):   mean 2, std sqrt(8)   -> z = (-0.7071, -0.7071, 1.4142)
    z1 = np.array([1, -1, 0]) / np.sqrt(2 / 3)
    z2 = np.array([-2, -2, 4]) / np.sqrt(8)
    got = interpolate_with_first_stage([3, 1, 2], [0, 0, 6], 0.25)
    np.testing.assert_allclose(got, 0.25 * z1 + 0.75 * z2)
    np.testing.assert_allclose(got, [-0.2241, -0.8365, 1.0607], atol=1e-4)
    np.testing.assert_allclose(interpolate_with_first_stage([3, 1, 2], [0, 0, 6], 1.0), z1)
    np.testing.assert_allclose(interpolate_with_first_stage([5, 5], [1, 2], 0.5), [-0.5, 0.5])  # constant list: z = 0


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), float("inf"), "0.5", None, True])
def test_interpolation_refuses_a_weight_outside_0_1(bad):
    with pytest.raises(ValueError, match="first_stage_weight"):
        interpolate_with_first_stage([1, 2], [2, 1], bad)


def test_interpolation_refuses_lists_of_other_lengths():
    with pytest.raises(ValueError, match="2 first-stage scores for 3"):
        interpolate_with_first_stage([1, 2], [1, 2, 3], 0.5)


def _task(i, gold):
    return Task(id=f"t{i}", query=f"query {i}", gold=list(gold))


def test_weight_one_keeps_the_input_order_and_zero_is_the_cross_encoder():
    lists = [SearchResult(("a", "b", "c"), (3.0, 2.0, 1.0))]
    ce = [np.array([0.0, 1.0, 5.0])]
    assert rerankings(lists, ce, 1.0) == [("a", "b", "c")]
    assert rerankings(lists, ce, 0.0) == [("c", "b", "a")]


def test_tuning_picks_the_weight_that_wins_on_the_set_aside_queries():
    # q1: the first stage has gold a on top, the cross-encoder puts d above it;
    # q2: the first stage has gold c third, the cross-encoder puts it first.
    tasks = [_task(1, "a"), _task(2, "c")]
    lists = [SearchResult(("a", "b", "c", "d"), (4.0, 3.0, 2.0, 1.0)), SearchResult(tuple("abcde"), (5.0, 4.0, 3.0, 2.0, 1.0))]
    scores = [np.array([0.0, 0.0, 0.0, 1.0]), np.array([0.0, 0.0, 1.0, 0.0, 0.0])]
    w, objective = tune_first_stage_weight([(tasks, lists, scores)], [0.0, 0.5, 1.0])
    # Objective (mean N@5 + mean C@10) / 2 in %, C@10 = 100 throughout:
    # w = 0: q1 gold at rank 2 (1 / log2 3), q2 at 1; w = 1: q1 at 1, q2 at 3 (1 / log2 4 = 0.5);
    # w = 0.5: q1 z-sums (a .38, d .20, b -.07, c -.51), q2 (c 1.0, a .46, b .10): both gold on top.
    n_rank2 = 1 / np.log2(3)
    assert objective["0"] == pytest.approx((100 * (n_rank2 + 1) / 2 + 100) / 2)
    assert objective["1"] == pytest.approx((100 * (1 + 0.5) / 2 + 100) / 2)
    assert objective["0.5"] == pytest.approx(100.0)
    assert w == 0.5


def test_ties_go_to_the_larger_weight():
    tasks = [_task(1, "a")]
    lists = [SearchResult(("a", "b"), (2.0, 1.0))]
    w, objective = tune_first_stage_weight([(tasks, lists, [np.array([5.0, 0.0])])], [0.0, 0.3, 1.0])
    assert len(set(objective.values())) == 1 and w == 1.0  # every weight puts a first: keep the input


def test_tuning_refuses_an_empty_or_bad_grid():
    dev = [([_task(1, "a")], [SearchResult(("a",), (1.0,))], [np.array([0.0])])]
    with pytest.raises(ValueError, match="empty"):
        tune_first_stage_weight(dev, [])
    with pytest.raises(ValueError, match="first_stage_weight"):
        tune_first_stage_weight(dev, [0.0, 2.0])


def test_settings_file_is_read_and_hostile_files_are_clear_errors(tmp_path):
    assert read_first_stage_weight(str(tmp_path)) == 0.0  # none saved: the cross-encoder alone
    f = tmp_path / "toolgym_rerank.json"
    f.write_text(json.dumps({"first_stage_weight": 0.35}))
    assert read_first_stage_weight(str(tmp_path)) == 0.35
    for text, match in [("{", "not JSON"), ("[1, 2]", "expected an object"), ('{"first_stage_weight": 7}', r"\[0, 1\]"),
                        ("[" * 100_000, "not JSON"), ('{"x": 1}', "expected an object")]:
        f.write_text(text)
        with pytest.raises(ValueError, match=match):
            read_first_stage_weight(str(tmp_path))
    f.write_text(" " * (1 << 21))
    with pytest.raises(ValueError, match="1 MiB"):
        read_first_stage_weight(str(tmp_path))


def test_mixture_batches_keep_each_batch_in_one_source_and_follow_the_weights():
    examples = {"big": [("big", i) for i in range(40)], "small": [("small", i) for i in range(8)]}
    batches = mixture_batches(examples, 4, {"big": 1.0, "small": 1.0}, 1, random.Random(0))
    assert len(batches) == 12  # every source's batches in all: 10 + 2
    assert all(len({src for src, _ in b}) == 1 for b in batches)  # never two libraries in one batch
    by_source = [b[0][0] for b in batches]
    assert by_source.count("big") == 6 and by_source.count("small") == 6  # equal weights: equal shares (small repeats)
    one = mixture_batches({"only": list(range(10))}, 3, {"only": 1.0}, 2, random.Random(0))
    assert sorted(x for b in one for x in b) == sorted(list(range(10)) * 2)  # two epochs of the one source
