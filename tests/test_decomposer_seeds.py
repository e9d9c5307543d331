"""benchmarks/decomposer_seeds.py: the decomposer-vs-fixed-rules bars, on hand-computed numbers."""
from __future__ import annotations

import json

import pytest

from benchmarks import decomposer_seeds as ds


def _rows(c10, n5):
    return [{"task_id": f"t{i}", "C@10": c, "N@5": n} for i, (c, n) in enumerate(zip(c10, n5))]


def _ladder(a_policy, b_policy):
    """Two sources; the policy rows given per source as (C@10 list, N@5 list)."""
    return {
        "A": {ds.RAW: _rows([1, 1, 0, 0], [1, .5, 0, 0]), ds.CLAUSES: _rows([1, 1, 1, 0], [.5, .5, .5, 0]),
              ds.POLICY: _rows(*a_policy)},
        "B": {ds.RAW: _rows([0, 0, 1, 1], [.5, .5, .5, .5]), ds.CLAUSES: _rows([0, 0, 0, 1], [0, 0, 0, 0]),
              ds.POLICY: _rows(*b_policy)},
    }


B_POLICY = ([1, 0, 1, 1], [.5, .5, .5, .5])
SEEDS = {0: _ladder(([1, 1, 1, 1], [1, 1, 0, 0]), B_POLICY),
         1: _ladder(([1, 1, 1, 0], [1, .5, 0, 0]), B_POLICY),
         2: _ladder(([1, 1, 0, 0], [.5, .5, 0, 0]), B_POLICY)}


def test_fixed_rules_ceiling_and_seed_level_difference_on_hand_numbers():
    res = ds.compare(SEEDS)
    a_c10 = res["sources"]["A"]["metrics"]["C@10"]
    assert (a_c10["raw"], a_c10["clauses"], a_c10["better"], a_c10["ceiling"]) == (50.0, 75.0, "clauses", 75.0)
    assert [v["policy"] for v in a_c10["per_seed"].values()] == [100.0, 75.0, 50.0]
    assert [v["gain"] for v in a_c10["per_seed"].values()] == [25.0, 0.0, -25.0]
    # seed 0 against the clauses rows: d = [0, 0, 0, 1] -> mean .25, sd .5, se .25 (25 points)
    assert a_c10["per_seed"][0]["se"] == pytest.approx(25.0)
    lvl = a_c10["seed_level"]
    assert lvl["mean"] == pytest.approx(0.0) and lvl["se"] == pytest.approx(25 / 3 ** 0.5) and lvl["df"] == 2
    assert a_c10["holds"] and not a_c10["above"]  # 75 >= 75 - 1, not above 75
    a_n5 = res["sources"]["A"]["metrics"]["N@5"]
    # raw and clauses tie at 37.5: the tie goes to not splitting; the per-query best is 50
    assert (a_n5["raw"], a_n5["clauses"], a_n5["better"], a_n5["ceiling"]) == (37.5, 37.5, "raw", 50.0)
    assert a_n5["policy_mean"] == pytest.approx(37.5) and a_n5["holds"] and not a_n5["above"]
    b = res["sources"]["B"]
    assert b["metrics"]["C@10"]["above"] and b["metrics"]["N@5"]["holds"] and not b["metrics"]["N@5"]["above"]
    assert b["metrics"]["C@10"]["seed_level"]["se"] == 0.0  # every seed the same: no spread
    assert res["sources"]["A"]["holds"] and not res["sources"]["A"]["above_both"] and b["above_both"]
    assert res["above_both"] == ["B"] and res["below_bar"] == []
    assert not res["verdict"]  # above both on one source only; two are needed


def test_a_source_below_the_bar_and_too_few_seeds_fail_the_verdict():
    low = {s: _ladder(([1, 1, 0, 0], [1, .5, 0, 0]), B_POLICY) for s in (0, 1, 2)}  # A: C@10 50 < 75 - 1
    res = ds.compare(low)
    assert res["below_bar"] == ["A"] and not res["verdict"]
    both_above = {s: _ladder(([1, 1, 1, 1], [1, .5, .5, 0]), B_POLICY) for s in (0, 1, 2)}
    assert ds.compare(both_above)["verdict"]  # A above on C@10 (100 > 75) and N@5 (50 > 37.5), B above on C@10
    assert not ds.compare({0: both_above[0], 1: both_above[1]})["verdict"]  # 2 seeds < 3


def test_ladders_of_other_queries_or_retrievers_are_refused():
    other = _ladder(([1, 1, 1, 1], [1, 1, 0, 0]), B_POLICY)
    other["A"][ds.RAW] = _rows([1, 1, 1, 0], [1, .5, 0, 0])  # another retriever's raw rung
    with pytest.raises(ValueError, match="differs from seed 0"):
        ds.compare({0: SEEDS[0], 1: other})
    no_policy = {0: {"A": {ds.RAW: _rows([1], [1]), ds.CLAUSES: _rows([1], [1])}}}
    with pytest.raises(ValueError, match="no trained-policy rung"):
        ds.compare(no_policy)
    with pytest.raises(ValueError, match="no ladder file"):
        ds.compare({})


def test_the_command_reads_ladder_files_and_their_per_query_rows(tmp_path, capsys):
    paths = []
    for seed, ladder in SEEDS.items():
        rows = tmp_path / f"ladder_seed{seed}_queries.json"
        rows.write_text(json.dumps({f"{s}/{r}": v for s, rungs in ladder.items() for r, v in rungs.items()}))
        path = tmp_path / f"ladder_seed{seed}.json"
        path.write_text(json.dumps({"results": {}, "per_query_file": str(rows)}))
        paths.append(str(path))
    assert ds.main(["--ladders", *paths, "--warm", paths[0], "--no-report"]) == 0
    out = capsys.readouterr().out
    assert "**Does not hold**: 3 seed(s)" in out and "above both rules on 1 source(s) (B" in out
    assert "+0.0 ± 14.4 (t 0.00, df 2)" in out  # source A, C@10, seed level
    with pytest.raises(SystemExit):
        ds.main(["--ladders", paths[0], paths[0], "--no-report"])  # two files for seed 0
