"""The retrieval ladder (`toolgym eval --ladder`, benchmarks/ladder.py): datasets, rungs, the
"not trained" rows, agreement with a direct evaluation, and bad input."""
import json

import pytest

from toolgym.data import load_dataset
from toolgym.retrieval import build_index
from toolgym.retrieval.metrics import completeness_at_k, ndcg_at_k
from toolgym.cli.main import main
from toolgym.evaluation.ladder import (LADDER_DATASETS, NOT_TRAINED, RUNG_ORDER, STAGE_LABELS, ladder_markdown,
                                     load_ladder_data, reranker_stages, run_ladder)


def test_seal_tools_ladder_is_the_heldout_split_never_trained_on():
    data = load_ladder_data("seal_tools", limit=None)
    train = load_dataset("seal_tools", split="train").tasks
    assert data.total == len(data.tasks) == 100
    assert not {t.id for t in data.tasks} & {t.id for t in train}
    assert not {t.query for t in data.tasks} & {t.query for t in train}


def test_cap_is_a_seeded_sample_in_dataset_order():
    a, b = load_ladder_data("api_bank", limit=30), load_ladder_data("api_bank", limit=30)
    full = load_dataset("api_bank").tasks
    assert [t.id for t in a.tasks] == [t.id for t in b.tasks] and len(a.tasks) == 30 and a.total == len(full)
    order = {t.id: i for i, t in enumerate(full)}
    assert [order[t.id] for t in a.tasks] == sorted(order[t.id] for t in a.tasks)
    assert [t.id for t in load_ladder_data("api_bank", limit=30, seed=1).tasks] != [t.id for t in a.tasks]


def test_dialogue_sets_split_by_category():
    ind, ood = load_ladder_data("dialogue_in_domain", limit=None), load_ladder_data("dialogue_ood", limit=None)
    assert ind.tasks and ood.tasks and {t.split for t in ind.tasks} == {"test"} and {t.split for t in ood.tasks} == {"ood"}
    cats = lambda d: {d.corpus[g].category for t in d.tasks for g in t.gold}  # noqa: E731
    assert not cats(ind) & cats(ood)


def test_unknown_ladder_dataset_is_refused():
    with pytest.raises(ValueError, match="unknown ladder dataset"):
        load_ladder_data("seal")


def test_ladder_rungs_agree_with_direct_evaluation_and_name_the_missing_models():
    data = load_ladder_data("api_bank", limit=12)
    result = run_ladder(data, log=lambda m: None)
    assert list(result["rungs"]) == list(RUNG_ORDER)
    for label in ("fine-tuned dense", "hybrid (BM25 + fine-tuned)", *STAGE_LABELS.values(),
                  "+ decomposition (trained policy)", "+ decomposition (policy-gated request + clauses)"):
        assert result["rungs"][label] == {"status": NOT_TRAINED}
    # BM25 rung = BM25 top 20 scored directly.
    index = build_index(data.corpus, "bm25")
    ranked = [index.search(t.context_text(), k=20).ids for t in data.tasks]
    bm25 = result["rungs"]["BM25"]
    assert bm25["N@5"] == pytest.approx(100 * sum(ndcg_at_k(r, t.gold, 5) for r, t in zip(ranked, data.tasks)) / 12)
    assert bm25["C@10"] == pytest.approx(100 * sum(completeness_at_k(r, t.gold, 10) for r, t in zip(ranked, data.tasks)) / 12)
    dyn = result["rungs"]["+ dynamic top-K (Alg. 2)"]
    assert 1 <= dyn["K"] <= 20 and 0 <= dyn["C@K"] <= 100 and "N@5" not in dyn
    assert result["rungs"]["+ decomposition (clause splitter)"]["clauses_per_query"] >= 1
    table = ladder_markdown(result)
    assert table.count(NOT_TRAINED) == 7 and "| BM25 |" in table
    # the request-then-clauses rule = its sub-queries retrieved and fused round robin, by hand
    from toolgym.retrieval.decompose import request_then_clauses
    from toolgym.retrieval.fusion import fuse_round_robin

    hybrid = build_index(data.corpus, "hybrid")
    fused = [fuse_round_robin([hybrid.search(q, k=20).ids for q in request_then_clauses(t.context_text(), t.query)], k=20)
             for t in data.tasks]
    assert result["rungs"]["+ decomposition (request + clauses)"]["C@10"] == pytest.approx(
        100 * sum(completeness_at_k(r, t.gold, 10) for r, t in zip(fused, data.tasks)) / 12)
    # every measured rung keeps the per-query rows its numbers are the means of
    for label, m in result["rungs"].items():
        if m.get("status") == NOT_TRAINED:
            assert label not in result["per_query"]
            continue
        rows = result["per_query"][label]
        assert [r["task_id"] for r in rows] == [t.id for t in data.tasks]
        for key in ("N@5", "C@10", "C@20", "C@K"):
            if key in m:
                assert m[key] == pytest.approx(100 * sum(r[key] for r in rows) / len(rows))
    assert [r["C@10"] for r in result["per_query"]["BM25"]] == [completeness_at_k(r, t.gold, 10)
                                                                 for r, t in zip(ranked, data.tasks)]


def test_reranker_stages_from_a_run_folder_or_one_model(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"retriever": "bm25", "stages": {
        "pointwise": {"model_dir": str(run / "pointwise")}, "distilled": {"model_dir": str(run / "distilled")}}}))
    stages, summary = reranker_stages(str(run))
    assert [s[0] for s in stages] == [STAGE_LABELS["pointwise"], STAGE_LABELS["distilled"]] and summary["retriever"] == "bm25"
    (tmp_path / "one").mkdir()
    assert reranker_stages(str(tmp_path / "one"))[0] == [("+ rerank (one)", str(tmp_path / "one"))]
    assert reranker_stages(None) == ([], {})
    with pytest.raises(FileNotFoundError):
        reranker_stages(str(tmp_path / "missing"))


def test_eval_ladder_cli_prints_every_rung_and_writes_json(tmp_path, capsys):
    out = tmp_path / "ladder.json"
    assert main(["eval", "--ladder", "--dataset", "metatool_multi", "--limit", "10", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["queries"] == 10 and list(result["rungs"]) == list(RUNG_ORDER)
    assert "not trained" in printed and "dynamic top-K" in printed


@pytest.mark.parametrize("argv, message", [
    (["eval", "ladder"], "--dataset"),
    (["eval", "ladder", "--dataset", "nope"], "has no ladder"),
    (["eval", "--ladder", "--dataset", "nope"], "has no ladder"),  # the mode-less spelling
    (["eval", "ladder", "--dataset", "api_bank", "--split", "test"], "unrecognized arguments: --split"),
    (["eval", "ladder", "--dataset", "api_bank", "--retriever-model", "/no/such/dir"], "no such folder"),
    (["eval", "retrieval", "--dataset", "api_bank", "--reranker-model", "x"], "unrecognized arguments: --reranker-model"),
])
def test_eval_ladder_bad_input_is_one_clear_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message.lower() in err.lower() and "Traceback" not in err


@pytest.mark.slow  # a CrossEncoder over 8 x 20 pairs
def test_ladder_with_a_reranker_folder_has_its_rung(tmp_path):
    import warnings

    from toolgym.retrieval.rerank import CrossEncoderReranker

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        CrossEncoderReranker(None).model.save(str(tmp_path / "ce"))
    data = load_ladder_data("api_bank", limit=8)
    result = run_ladder(data, reranker_model=str(tmp_path / "ce"), log=lambda m: None)
    rung = result["rungs"]["+ rerank (ce)"]
    # Reranking permutes the hybrid top 20: C@20 cannot change.
    assert rung["C@20"] == pytest.approx(result["rungs"]["hybrid (BM25 + MiniLM)"]["C@20"])
    # One folder is one rung, in the rerank rungs' place; the run's stage rows are not there.
    labels = list(result["rungs"])
    assert labels.index("+ rerank (ce)") == labels.index("hybrid (BM25 + fine-tuned)") + 1
    assert not set(STAGE_LABELS.values()) & set(labels)


@pytest.mark.slow  # a tiny random Llama writes the subtasks
def test_trained_decomposer_rung_runs_the_policy_on_the_ladder_tasks():
    from toolgym.evaluation.ladder import decomposer_rung

    data = load_ladder_data("metatool_multi", limit=3)
    out, rows = decomposer_rung(data, "tiny-llama", log=lambda m: None, retriever="hybrid")
    assert 0 <= out["N@5"] <= 100 and 0 <= out["C@10"] <= 100
    # one row per ladder query, in order; the rung is 100 x their mean, like every other rung
    assert [r["task_id"] for r in rows] == [t.id for t in data.tasks]
    assert out["C@10"] == pytest.approx(100 * sum(r["C@10"] for r in rows) / len(rows))
    assert out["subtasks_per_query"] == pytest.approx(sum(r["subtasks"] for r in rows) / len(rows))
    assert "hybrid list per subtask" in out["note"]


def test_mixture_heldout_ladder_is_each_sources_heldout_part_never_trained_on(tmp_path):
    """benchmarks/ladder.py --heldout-of: one dataset per mixture source, its held-out part (a seeded
    sample when capped), disjoint from every source's training queries."""
    import benchmarks.ladder as bench
    from toolgym.fitting.common import load_sources
    from toolgym.fitting.retriever import FitRetrieverConfig
    from toolgym.trainers.config import load_config

    cfg = tmp_path / "mix.yaml"
    cfg.write_text("sources:\n  - {dataset: seal_tools, train_split: train, eval_split: heldout}\n"
                   "  - {dataset: api_bank, heldout_fraction: 0.2}\n")
    full = bench.mixture_heldout_data(cfg, None)
    capped = bench.mixture_heldout_data(cfg, 30)
    sources = load_sources(load_config(FitRetrieverConfig, cfg))
    assert [d.name for d in full] == [s.name for s in sources] == ["seal_tools", "api_bank"]
    for d, s in zip(full, sources):
        assert [t.id for t in d.tasks] == [t.id for t in s.heldout] and d.total == len(s.heldout)
    train_texts = {t.context_text() for s in sources for t in s.train}
    assert all(t.context_text() not in train_texts for d in capped for t in d.tasks)
    assert [len(d.tasks) for d in capped] == [30, 30] and capped[0].total == 100
    order = {t.id: i for i, t in enumerate(full[1].tasks)}
    assert [order[t.id] for t in capped[1].tasks] == sorted(order[t.id] for t in capped[1].tasks)


def test_paired_over_the_first_stage_on_hand_computed_rows():
    from toolgym.evaluation.ladder import paired_over

    def rows(c10, n5):
        return [{"task_id": f"t{i}", "C@10": c, "N@5": n} for i, (c, n) in enumerate(zip(c10, n5))]

    per_query = {
        "hybrid (BM25 + fine-tuned)": rows([1, 0, 0, 1], [0.5, 0.0, 0.2, 1.0]),
        "+ decomposition (clause splitter)": rows([1, 1, 0, 1], [0.5, 0.4, 0.2, 1.0]),
        "+ decomposition (trained policy)": rows([1, 1, 1, 0], [0.5, 0.4, 0.6, 0.0]),
        "+ dynamic top-K (Alg. 2)": [{"task_id": f"t{i}", "K": 10} for i in range(4)],
    }
    out = paired_over(per_query, "hybrid (BM25 + fine-tuned)")
    assert set(out) == {"+ decomposition (clause splitter)", "+ decomposition (trained policy)",
                        "+ decomposition (trained policy) vs clause splitter"}
    # clauses: d = (0, 1, 0, 0): mean 0.25, sd sqrt(((.25)^2*3 + .75^2) / 3) = 0.5, se 0.5 / 2 = 0.25
    assert out["+ decomposition (clause splitter)"]["C@10"] == pytest.approx({"gain": 25.0, "se": 25.0})
    # policy vs clauses, C@10: d = (0, 0, 1, -1): mean 0, sd sqrt(2/3), se sqrt(2/3)/2
    assert out["+ decomposition (trained policy) vs clause splitter"]["C@10"]["gain"] == pytest.approx(0.0)
    assert out["+ decomposition (trained policy) vs clause splitter"]["C@10"]["se"] == pytest.approx(100 * (2 / 3) ** 0.5 / 2)
    # policy N@5 over the base: d = (0, .4, .4, -1): mean -0.05
    assert out["+ decomposition (trained policy)"]["N@5"]["gain"] == pytest.approx(-5.0)
    assert paired_over(per_query, "BM25") == {}
