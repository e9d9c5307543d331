"""A training mixture for fit-retriever: per-source batches in proportion to the weights, negatives and
held-out numbers per library, no held-out query trained on by any source."""
import json
import random

import pytest

from toolgym.cli.main import main
from toolgym.fitting.common import FitSource, proportional_batches


def test_proportional_batches_share_by_weight_on_hand_numbers():
    batches = {"a": [[0], [1], [2], [3]], "b": [[10], [11], [12], [13]]}
    plan = proportional_batches(batches, {"a": 1.0, "b": 3.0}, random.Random(0))
    # 8 batches in all: a gets 8 * 1/4 = 2, b gets 8 * 3/4 = 6 (its 4 batches, then its first 2 again)
    assert sorted(b[0] for s, b in plan if s == "a") == [0, 1]
    assert sorted(b[0] for s, b in plan if s == "b") == [10, 10, 11, 11, 12, 13]
    assert all((s == "a") == (b[0] < 10) for s, b in plan)  # every batch is one source's
    # largest remainders: 3 batches at 1:1:1 -> one each; 5 at 1:1 -> 3 + 2 (first source first)
    three = proportional_batches({"x": [[0]], "y": [[1]], "z": [[2]]}, {"x": 1, "y": 1, "z": 1}, random.Random(1))
    assert sorted(s for s, _ in three) == ["x", "y", "z"]
    five = proportional_batches({"x": [[0], [1], [2]], "y": [[3], [4]]}, {"x": 1, "y": 1}, random.Random(2), total=5)
    assert sorted(s for s, _ in five) == ["x", "x", "x", "y", "y"]
    assert proportional_batches({"x": []}, {"x": 1}, random.Random(0)) == []


def test_sources_are_checked(tmp_path):
    from dataclasses import dataclass, field

    from toolgym.fitting.common import load_sources

    @dataclass
    class Cfg:
        sources: list = field(default_factory=list)
        seed: int = 0

    with pytest.raises(ValueError, match="weight"):
        load_sources(Cfg([FitSource(dataset="api_bank", weight=0)]))
    with pytest.raises(ValueError, match="exactly one"):
        load_sources(Cfg([FitSource()]))
    with pytest.raises(ValueError, match="named"):
        load_sources(Cfg([FitSource(dataset="api_bank"), FitSource(dataset="api_bank")]))
    two = load_sources(Cfg([FitSource(dataset="api_bank", train_limit=20, eval_limit=5),
                            FitSource(dataset="metatool", weight=2.0, train_limit=20, eval_limit=5)]))
    assert [(s.name, len(s.train), len(s.heldout), s.weight) for s in two] == [("api_bank", 20, 5, 1.0),
                                                                              ("metatool", 20, 5, 2.0)]
    assert two[0].corpus.name != two[1].corpus.name  # each source keeps its own library


def _fit_two_sources(tmp_path, command, train_limit, eval_limit, metatool_weight, keys):
    """``command`` on API-Bank + MetaTool (first N tasks of each) with ``keys``; its run folder is
    ``tmp_path / "run"``; returns the summary."""
    cfg = tmp_path / "mix.yaml"
    cfg.write_text("\n".join([
        "sources:",
        f"  - {{dataset: api_bank, train_limit: {train_limit}, eval_limit: {eval_limit}}}",
        f"  - {{dataset: metatool, weight: {metatool_weight}, train_limit: {train_limit}, eval_limit: {eval_limit}}}",
        *keys, "progress: false", ""]))
    assert main([command, str(cfg), "--output-dir", str(tmp_path / "run"), "--budget-minutes", "0"]) == 0
    return json.loads((tmp_path / "run" / "summary.json").read_text())


@pytest.mark.slow  # loads MiniLM and trains it for a few steps
def test_fit_retriever_on_a_two_source_mixture(tmp_path):
    out = tmp_path / "run"
    summary = _fit_two_sources(tmp_path, "fit-retriever", 16, 6, 3.0,
                               ["max_steps: 4", "batch_size: 4", "max_length: 48", "hard_negative_rounds: 1"])
    assert set(summary["heldout_by_source"]) == {"api_bank", "metatool"}
    assert summary["eval_tasks"] == 12 and set(summary["rounds"][0]["triples"]) == {"api_bank", "metatool"}
    mean = (summary["heldout_by_source"]["api_bank"]["C@10"] + summary["heldout_by_source"]["metatool"]["C@10"]) / 2
    assert summary["heldout"]["C@10"] == pytest.approx(mean)
    evals = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"eval"' in line]
    assert {r["source"] for r in evals} == {"api_bank", "metatool"}


@pytest.mark.slow  # loads MiniLM and trains a cross-encoder for a few steps
def test_fit_reranker_on_a_two_source_mixture_tunes_and_saves_its_first_stage_weight(tmp_path):
    from toolgym.retrieval.rerank import CrossEncoderReranker

    out = tmp_path / "run"
    summary = _fit_two_sources(tmp_path, "fit-reranker", 20, 5, 2.0,
                               ["dev_fraction: 0.25", "stages: [pointwise]", "candidates: 5", "max_steps: 2",
                                "point_batch_size: 8", "max_length: 48", "first_stage_weights: [0.0, 0.5, 1.0]"])
    assert summary["sources"] == ["api_bank", "metatool"]
    assert summary["dev_tasks"] > 0 and summary["dev_tasks"] + summary["train_tasks"] == 40  # set aside, never trained on
    stage = summary["stages"]["pointwise"]
    assert set(stage["dev_objective"]) == {"0", "0.5", "1"}
    assert stage["dev_objective"][f"{stage['first_stage_weight']:g}"] == max(stage["dev_objective"].values())
    assert set(stage["heldout_by_source"]) == set(stage["heldout_interpolated_by_source"]) == {"api_bank", "metatool"}
    rows = json.loads((out / "heldout_per_query.json").read_text())
    assert {len(rows[s][k]) for s in rows for k in ("input", "pointwise", "pointwise+first_stage")} == {5}
    # The folder carries the weight; the reranker built from it reranks with it.
    folder = CrossEncoderReranker(stage["model_dir"], max_length=48)
    assert folder.first_stage_weight == stage["first_stage_weight"]
    keep = CrossEncoderReranker(stage["model_dir"], max_length=48, first_stage_weight=1.0)
    from toolgym.retrieval import SearchResult

    first = SearchResult(("x", "y", "z"), (3.0, 2.0, 1.0))
    assert keep.rerank("a query", first, texts=["one", "two", "three"]).ids == ("x", "y", "z")  # w = 1: the input order
