"""benchmarks/reranker_mixture.py: each stage's cell is the per-query mean, its bracket the paired
difference from the input list with the standard error of the differences."""
import math

import benchmarks.reranker_mixture as rm


def _rows(n5, c10):
    return [{"task_id": f"t{i}", "N@5": a, "C@10": b} for i, (a, b) in enumerate(zip(n5, c10))]


def test_paired_difference_and_its_standard_error_on_hand_numbers():
    base = _rows([0.5, 0.5, 0.5], [0, 0, 0])
    rows = _rows([1.0, 0.5, 0.75], [1, 0, 0])
    # N@5 differences (points): 50, 0, 25 -> mean 25, sd 25, se 25 / sqrt 3
    mean, se = rm.paired(rows, base, "N@5")
    assert math.isclose(mean, 25.0) and math.isclose(se, 25.0 / math.sqrt(3))
    assert rm.paired([], [], "N@5") == (0.0, 0.0)


def test_report_counts_the_sources_a_stage_beats_its_input_on():
    summary = {"stages": {"pointwise": {"first_stage_weight": 0.4}}, "config": {"sources": [{"eval_limit": 3}]},
               "candidates": 20, "retriever": "hybrid", "retriever_model": "m", "dev_tasks": 10, "steps": 5,
               "elapsed_s": 60.0, "training_s": 30.0, "budget_minutes": 1.0, "train_tasks": 30}
    per_query = {
        "a": {"input": _rows([0.5, 0.5], [0, 1]), "pointwise": _rows([1.0, 0.5], [1, 1]),
              "pointwise+first_stage": _rows([0.5, 0.5], [0, 1])},
        "b": {"input": _rows([1.0], [1]), "pointwise": _rows([0.0], [0]), "pointwise+first_stage": _rows([1.0], [1])},
    }
    table = rm.report({"summary": summary, "per_query": per_query})
    assert "| input | 50.0 / 50.0 | 100.0 / 100.0 |  |" in table
    assert "| pointwise | 75.0 / 100.0 (+25.0 ± 25.0, +50.0 ± 50.0) | 0.0 / 0.0 (-100.0 ± 0.0, -100.0 ± 0.0) | 1 / 2 |" in table
    assert "| pointwise + first stage (w = 0.4) |" in table and table.rstrip().endswith("| 0 / 2 |")
