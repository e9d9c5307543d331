"""benchmarks/retriever_mixture.py: the leave-one-out matrix is the per-query rows' means, zero-shot cells marked,
and a finished run is never trained again."""
import argparse
import json
from pathlib import Path

import pytest

import benchmarks.retriever_mixture as rm

ROOT = Path(__file__).resolve().parent.parent


def _rows(*c10):
    return [{"task_id": f"t{i}", "C@10": c, "N@5": c / 2, "C@5": 0.0, "N@10": 0.0} for i, c in enumerate(c10)]


def test_matrix_cells_are_row_means_and_zero_shot_cells_are_bold():
    settings = {"budget_minutes": 1.0, "config": "c.yaml", "limit": None}
    results = [
        {"run": "bm25", "settings": settings, "trained_on": [], "rows": {"a": {"bm25": _rows(100, 0)}, "b": {"bm25": _rows(50)}}},
        {"run": "minus_b", "settings": settings, "trained_on": ["a"],
         "rows": {"a": {"dense": _rows(100, 100)}, "b": {"dense": _rows(0, 100, 50)}}},
    ]
    table = rm.report(results)
    assert "| bm25 | bm25 | 50.0 / 25.0 | 50.0 / 25.0 |" in table
    assert "| minus_b | dense | 100.0 / 50.0 | **50.0 / 25.0** |" in table  # b is zero-shot for minus_b


def test_a_finished_run_is_read_back_and_other_settings_are_refused(tmp_path):
    settings = {"budget_minutes": 1.0, "config": "c.yaml", "limit": 5, "sources": ["a"]}
    (tmp_path / "bm25.json").write_text(json.dumps({"run": "bm25", "settings": settings, "rows": {}}))
    args = argparse.Namespace(results=str(tmp_path))
    assert rm.run_one("bm25", args, [], settings)["settings"] == settings  # no source touched: nothing recomputed
    # nobody trains a reference row, so another training budget reuses it; another task limit does not
    assert rm.run_one("bm25", args, [], {**settings, "budget_minutes": 2.0})["run"] == "bm25"
    with pytest.raises(SystemExit, match="other settings"):
        rm.run_one("bm25", args, [], {**settings, "limit": 6})
    (tmp_path / "all.json").write_text(json.dumps({"run": "all", "settings": settings, "rows": {}}))
    with pytest.raises(SystemExit, match="other settings"):  # a trained row is tied to its budget
        rm.run_one("all", args, [], {**settings, "budget_minutes": 2.0})


def test_a_new_reference_row_is_written_and_committed_without_a_budget(tmp_path, monkeypatch):
    """The reference row's settings have no budget: naming it in the commit message raised KeyError
    after the evaluation, so the row was never written."""
    saved = []
    monkeypatch.setattr(rm, "evaluate_model", lambda model, sources, methods, weights: {})
    monkeypatch.setattr(rm, "_save", lambda path, result, commit, message: saved.append((path.name, message)))
    settings = {"budget_minutes": 12.0, "config": "c.yaml", "limit": None, "sources": []}
    rm.run_one("bm25", argparse.Namespace(results=str(tmp_path), commit=True), [], settings)
    assert saved == [("bm25.json", "retriever_mixture: bm25 (reference, untrained)")]


def test_the_legend_names_the_trained_runs_budget_not_the_references():
    ref = {"run": "bm25", "settings": {"budget_minutes": 40.0, "config": "c.yaml"}, "trained_on": [],
           "rows": {"a": {"bm25": _rows(1)}}}
    trained = {"run": "all", "settings": {"budget_minutes": 12.0, "config": "c.yaml"}, "trained_on": ["a"],
               "rows": {"a": {"dense": _rows(1)}}}
    assert "Training budget 12 min per run" in rm.report([ref, trained])


def test_fusion_margin_is_the_paired_difference_to_the_better_part():
    settings = {"budget_minutes": 1.0, "config": "c.yaml", "limit": None}
    results = [
        {"run": "bm25", "settings": settings, "trained_on": [], "rows": {"a": {"bm25": _rows(100, 0, 0)}}},
        {"run": "all", "settings": settings, "trained_on": ["a"],
         "rows": {"a": {"dense": _rows(100, 100, 0), "hybrid": _rows(100, 0, 100)}}},
    ]
    # dense (mean 66.7) is the better part; per-query differences 0, -100, +100: mean 0, se 57.7
    (m, se), = rm.fusion_margins(results)["all"].values()
    assert m == pytest.approx(0.0) and se == pytest.approx(100 / 3 ** 0.5)
    table = rm.report(results)
    assert "| all | +0.0 ± 57.7 |" in table
    # N@5 (half of C@10 in these rows) gets its own table: the same differences, halved
    (m, se), = rm.fusion_margins(results, "N@5")["all"].values()
    assert m == pytest.approx(0.0) and se == pytest.approx(50 / 3 ** 0.5)
    assert table.index("Hybrid C@10 −") < table.index("Hybrid N@5 −") and "| all | +0.0 ± 28.9 |" in table


def test_a_tuned_hybrid_is_never_clearly_below_its_better_part():
    """Item 4 for the trained encoders: in every committed run of the tuned folder, on every source's
    held-out part, hybrid C@10 >= max(BM25, dense) - max(1, 2 paired se)."""
    folder = ROOT / "benchmarks" / "results" / "retriever_mixture_tuned"
    results = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    margins = rm.fusion_margins(results)
    assert margins, "no trained run in the tuned folder"
    for run, by_source in margins.items():
        for source, (m, se) in by_source.items():
            assert m >= -max(1.0, 2 * se), (run, source, m, se)


def test_reevaluate_redoes_only_the_sources_whose_hybrid_weight_changed(tmp_path):
    """A file measured with the encoder's in-domain weight everywhere gets its left-out source's hybrid
    measured again at the zero-shot weight; the in-domain source's rows are left as they were."""
    from types import SimpleNamespace

    from benchmarks._report import weights_fingerprint
    from toolgym.data.records import Task
    from toolgym.retrieval.corpus import Tool, ToolCorpus
    from toolgym.retrieval.models import HYBRID_SETTINGS_FILE, minilm_path, trained_tool_hashes

    def corpus(name, words):
        return ToolCorpus([Tool(id=f"{name}{i}", name=w, description=f"Tool to {w}.", category="c")
                           for i, w in enumerate(words)], name=name)

    a = corpus("a", ["get weather", "convert currency", "book flight"])
    b = corpus("b", ["send email", "translate text", "read file", "play music"])
    sources = [SimpleNamespace(name="a", corpus=a, heldout=[Task(id="qa", query="weather today", gold=frozenset({"a0"}))]),
               SimpleNamespace(name="b", corpus=b, heldout=[Task(id="qb", query="translate this", gold=frozenset({"b1"})),
                                                            Task(id="qc", query="mail my boss", gold=frozenset({"b0"}))])]
    model = tmp_path / "run" / "model"
    model.mkdir(parents=True)
    for f in minilm_path().iterdir():
        (model / f.name).symlink_to(f, target_is_directory=f.is_dir())
    (model / HYBRID_SETTINGS_FILE).write_text(json.dumps(
        {"bm25_weight": 0.2, "trained_corpora": {"a": a.ids_hash}, "zero_shot_bm25_weight": 0.6,
         "library_weights": {"a": {"bm25_weight": 0.2, "tool_hashes": trained_tool_hashes(a.texts())}}}))
    (tmp_path / "run.yaml").write_text("zero_shot_bm25_weight: 0.6\n")  # the run's config: the same zero-shot weight
    fake = {"task_id": "old", "C@10": -1.0, "N@5": -1.0}
    result = {"run": "minus_b", "settings": {"budget_minutes": 1.0, "config": "c.yaml"}, "trained_on": ["a"], "weights_sha256": weights_fingerprint(model),
              "train_summary": {"model_dir": str(model), "hybrid_bm25_weight": 0.2},
              "rows": {"a": {"dense": [fake], "hybrid": [fake]}, "b": {"dense": [fake], "hybrid": [fake]}}}
    path = tmp_path / "minus_b.json"
    path.write_text(json.dumps(result))
    args = argparse.Namespace(commit=False)
    assert rm.reevaluate(path, args, sources) == ["b"]
    got = json.loads(path.read_text())
    assert got["rows"]["a"] == result["rows"]["a"] and got["rows"]["b"]["dense"] == [fake]
    assert [r["task_id"] for r in got["rows"]["b"]["hybrid"]] == ["qb", "qc"]
    assert got["hybrid_weights"] == {"a": {"bm25_weight": 0.2, "from": "model folder, tuned on a"},
                                     "b": {"bm25_weight": 0.6, "from": "model folder, zero-shot"}}
    assert rm.reevaluate(path, args, sources) == []  # already at the current weights
    shown = rm.report([got])
    assert "hybrid (w per library; zero-shot 0.6)" in shown and "| minus_b | 0.2 | **0.6** |" in shown
    (model / "model.safetensors").unlink()  # another model in the folder: refused, not silently re-measured
    with pytest.raises(SystemExit, match="cannot be re-evaluated"):
        rm.reevaluate(path, args, sources)
