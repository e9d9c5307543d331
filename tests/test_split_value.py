"""benchmarks/split_value.py: the value of splitting per source, on hand rows and a tiny mixture."""
from __future__ import annotations

import pytest

from benchmarks import split_value
from toolgym.data.records import Task
from toolgym.envs.mixture import MixtureDecompositionEnv
from toolgym.retrieval.corpus import Tool, ToolCorpus


def test_per_source_means_only_over_the_requests_the_rule_splits():
    rows = [{"source": "a", "split": True, "r_cf": 1.0, "r_cf_signed": 0.5, "d_ndcg5": 0.2, "d_c10": 1.0},
            {"source": "a", "split": True, "r_cf": 0.0, "r_cf_signed": -0.5, "d_ndcg5": -0.4, "d_c10": 0.0},
            {"source": "a", "split": False, "r_cf": 0.0, "r_cf_signed": 0.0, "d_ndcg5": 0.0, "d_c10": 0.0},
            {"source": "b", "split": False, "r_cf": 0.0, "r_cf_signed": 0.0, "d_ndcg5": 0.0, "d_c10": 0.0}]
    got = split_value.per_source(rows)
    assert got["a"] == pytest.approx({"n": 3, "split": 2, "r_cf": 0.5, "r_cf_signed": 0.0, "d_ndcg5": -0.1, "d_c10": 0.5})
    assert got["b"] == {"n": 1, "split": 0, "r_cf": 0.0, "r_cf_signed": 0.0, "d_ndcg5": 0.0, "d_c10": 0.0}


def test_split_rows_on_a_tiny_mixture():
    corpus = ToolCorpus([Tool(n, n, f"{n} lookup", "G") for n in ("alpha", "beta", "gamma")], name="split-value-tiny")
    tasks = [Task(id="t-two", query="look up alpha please then look up beta please", gold=frozenset({"alpha", "beta"})),
             Task(id="t-one", query="look up gamma", gold=frozenset({"gamma"}))]
    env = MixtureDecompositionEnv([("tiny", corpus, tasks)])
    rows = {r["task_id"]: r for r in split_value.split_rows(env)}
    assert rows["t-two"]["split"] and not rows["t-one"]["split"]
    assert rows["t-one"] == {"task_id": "t-one", "source": "tiny", "split": False, "r_cf": 0.0, "r_cf_signed": 0.0,
                             "d_ndcg5": 0.0, "d_c10": 0.0}
    two = rows["t-two"]
    assert two["r_cf"] >= two["r_cf_signed"] and two["r_cf"] == pytest.approx(max(0.0, two["r_cf_signed"]))
