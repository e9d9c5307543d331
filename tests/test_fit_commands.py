"""The three ``toolgym fit-*`` commands end to end on tiny slices (a few steps each): each writes
its model folder, metrics JSONL, plot and summary, and the result loads where it is used.
The training runs are marked ``slow`` (CI selects them with ``-m "slow or not slow"``)."""
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from toolgym.data import load_corpus, load_dataset
from toolgym.retrieval import build_index
from toolgym.retrieval.corpus import Tool, ToolCorpus
from toolgym.cli.main import main


def _write_slice(tmp_path, corpus, tasks, extra_tools=30):
    gold = {g for t in tasks for g in t.gold}
    tools = [corpus[g] for g in sorted(gold)] + [t for t in corpus.tools if t.id not in gold][:extra_tools]
    small = ToolCorpus(tools, name="tiny")
    small.save_jsonl(tmp_path / "corpus.jsonl")
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(t.to_dict()) + "\n" for t in tasks))
    return small


@pytest.fixture(scope="module")
def seal_slice(tmp_path_factory, seal):
    root = tmp_path_factory.mktemp("seal_slice")
    tasks = [t for t in seal.tasks if len(t.gold) >= 2][:12]
    _write_slice(root, seal.corpus, tasks)
    return root


def _config(path, **keys):
    path.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in keys.items()))
    return str(path)


def _check_run(out):
    assert (out / "metrics.jsonl").exists() and (out / "curves.png").stat().st_size > 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("loss" in r and np.isfinite(r["loss"]) for r in rows)
    return json.loads((out / "summary.json").read_text()), rows


@pytest.mark.slow  # loads MiniLM and trains it for a few steps
def test_fit_retriever_tiny(seal_slice, tmp_path, capsys):
    cfg = _config(tmp_path / "r.yaml", corpus_path=str(seal_slice / "corpus.jsonl"), tasks_path=str(seal_slice / "tasks.jsonl"),
                  heldout_fraction=0.25, max_steps=2, batch_size=4, max_length=48, hard_negative_rounds=1, progress=False)
    out = tmp_path / "run"
    assert main(["fit-retriever", cfg, "--output-dir", str(out), "--budget-minutes", "0"]) == 0
    summary, rows = _check_run(out)
    assert summary["steps"] == 4 and [r["stage"] for r in summary["rounds"]] == ["random_negatives", "hard_negatives_1"]
    assert summary["eval_tasks"] == 3 and 0 <= summary["heldout"]["C@10"] <= 100
    # The fine-tuned folder is a dense index like any other, with its own embedding cache file.
    corpus = load_corpus(seal_slice / "corpus.jsonl")
    tuned = build_index(corpus, "dense", model=summary["model_dir"], cache_dir=tmp_path / "cache")
    base = build_index(corpus, "dense", cache_dir=tmp_path / "cache")
    assert tuned.embedding_cache_path != base.embedding_cache_path and tuned.embedding_cache_path.exists()
    assert not np.allclose(tuned.tool_embeddings(), base.tool_embeddings())
    # Its hybrid weight: the tuned one on the library it trained on, the zero-shot one elsewhere.
    settings = json.loads((Path(summary["model_dir"]) / "toolgym_hybrid.json").read_text())
    assert list(settings["trained_corpora"].values()) == [corpus.ids_hash] and settings["zero_shot_bm25_weight"] == 0.35
    (name,) = settings["library_weights"]  # one training library: its own weight, tuned on its set-aside queries
    mine = settings["library_weights"][name]["bm25_weight"]
    own = build_index(corpus, "hybrid", model=summary["model_dir"], cache_dir=tmp_path / "cache")
    assert (own.bm25_weight, own.bm25_weight_source) == (mine, f"model folder, tuned on {name}")
    # A slice of that library is another library whose tools were all seen: that library's weight.
    part = build_index(ToolCorpus(list(corpus.tools)[:5], name="a slice"), "hybrid", model=summary["model_dir"],
                       cache_dir=tmp_path / "cache")
    assert (part.bm25_weight, part.bm25_weight_source) == (mine, "model folder, 100% of the tools seen")
    other = ToolCorpus([Tool(id="new1", name="fresh_tool", description="A tool it never trained on.", category="c")],
                       name="another library")
    zero = build_index(other, "hybrid", model=summary["model_dir"], cache_dir=tmp_path / "cache")
    assert (zero.bm25_weight, zero.bm25_weight_source) == (0.35, "model folder, zero-shot")


@pytest.mark.slow  # loads MiniLM and trains it for a few steps
def test_fit_reranker_tiny_runs_all_three_stages(seal_slice, tmp_path):
    cfg = _config(tmp_path / "k.yaml", corpus_path=str(seal_slice / "corpus.jsonl"), tasks_path=str(seal_slice / "tasks.jsonl"),
                  heldout_fraction=0.25, max_steps=2, candidates=6, point_batch_size=8, list_size=4, list_batch_size=2,
                  distill_hard_negatives=2, distill_batch_size=2, max_length=64, progress=False)
    out = tmp_path / "run"
    assert main(["fit-reranker", cfg, "--output-dir", str(out), "--budget-minutes", "0"]) == 0
    summary, rows = _check_run(out)
    assert list(summary["stages"]) == ["pointwise", "listwise", "distilled"]
    assert {r["stage"] for r in rows if "loss" in r} == {"pointwise", "listwise", "distilled_r1"}
    assert all(s["steps"] == 2 and "heldout" in s for s in summary["stages"].values())
    # Every step trained at lr > 0 (the log holds the rate each step used; test_fit_schedule.py
    # checks the budget-sized schedule itself).
    assert all(r["lr"] > 0 for r in rows if "loss" in r)
    from toolgym.retrieval.rerank import CrossEncoderReranker

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a trained folder must not warn "untrained head"
        trained = CrossEncoderReranker(summary["model_dir"], max_length=64)
    assert not trained.untrained_head and np.isfinite(trained.score("convert money", ["a", "b"])).all()
    # Each stage is reported alone and interpolated with the first stage, at the weight its folder saved.
    last = summary["stages"]["distilled"]
    assert "heldout_interpolated" in last and trained.first_stage_weight == last["first_stage_weight"]


def test_fit_reranker_rejects_unknown_stage(seal_slice, tmp_path, capsys):
    cfg = _config(tmp_path / "bad.yaml", corpus_path=str(seal_slice / "corpus.jsonl"), tasks_path=str(seal_slice / "tasks.jsonl"),
                  stages=["pointwise", "magic"])
    assert main(["fit-reranker", cfg, "--output-dir", str(tmp_path / "x")]) == 2
    assert "unknown reranker stage" in capsys.readouterr().err


def test_fit_config_errors_are_one_line(tmp_path, capsys):
    assert main(["fit-retriever", str(tmp_path / "missing.yaml")]) == 2
    assert "not found" in capsys.readouterr().err
    cfg = _config(tmp_path / "typo.yaml", learning_rate=0.1)
    assert main(["fit-retriever", cfg]) == 2
    assert "learning_rate" in capsys.readouterr().err


@pytest.mark.slow  # loads MiniLM and trains it for a few steps
def test_fit_preference_tiny_reports_heldout_pairwise_accuracy(tmp_path):
    ultra = load_dataset("ultratool")  # read from the shared data folder at run time
    tasks = ultra.tasks[:16]
    _write_slice(tmp_path, ultra.corpus, tasks, extra_tools=0)
    cfg = _config(tmp_path / "p.yaml", corpus_path=str(tmp_path / "corpus.jsonl"), tasks_path=str(tmp_path / "tasks.jsonl"),
                  heldout_fraction=0.25, max_steps=3, batch_size=4, max_length=96, progress=False)
    out = tmp_path / "run"
    assert main(["fit-preference", cfg, "--output-dir", str(out), "--budget-minutes", "0"]) == 0
    summary, _ = _check_run(out)
    assert summary["steps"] == 3 and summary["heldout"]["pairs"] > 0
    assert 0 <= summary["heldout"]["accuracy"] <= 100 and summary["heldout"]["by_kind"]
    rows = summary["heldout"]["per_pair"]  # the accuracy is recomputable from the kept rows
    assert len(rows) == summary["heldout"]["pairs"]
    assert all(r["win"] == (r["chosen"] > r["rejected"]) for r in rows)
    assert summary["heldout"]["accuracy"] == pytest.approx(100 * sum(r["win"] for r in rows) / len(rows))
    for kind, acc in summary["heldout"]["by_kind"].items():
        mine = [r["win"] for r in rows if r["kind"] == kind]
        assert acc == pytest.approx(100 * sum(mine) / len(mine))
    from toolgym.rewards.preference import PreferenceScorer, preference_reward
    from toolgym.rewards.preference_model import CrossEncoderPreferenceScorer

    scorer = CrossEncoderPreferenceScorer(summary["model_dir"], max_length=96)
    assert isinstance(scorer, PreferenceScorer)
    task = tasks[0]
    s = scorer.score(task, [list(task.subtasks), list(task.subtasks[:1]), []])
    assert s.shape == (3,) and np.isfinite(s).all()
    assert 0 < preference_reward(s[1], s[0]) < 1
    hostile = ["x" * 1_000_000, "(" * 100_000] + ["again"] * 10_000
    assert np.isfinite(scorer.score(task, [hostile])).all()  # capped before tokenising
    with pytest.raises(ValueError, match="list of subtask strings"):
        scorer.score(task, ["one string"])  # type: ignore[list-item]
    with pytest.raises(FileNotFoundError):
        CrossEncoderPreferenceScorer(tmp_path / "nothing")
    # the preference reward reaches it by name (configs: reward.options.scorer=trained, model=DIR)
    from toolgym.rewards import get_reward

    reward = get_reward("preference", scorer="trained", model=summary["model_dir"], scorer_options={"max_length": 96})
    assert isinstance(reward.scorer, CrossEncoderPreferenceScorer)
    with pytest.raises(ValueError, match="needs model="):
        get_reward("preference", scorer="trained")
