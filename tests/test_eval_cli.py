"""`toolgym eval` retriever mode: JSON keys, agreement with a direct computation, bad input."""
import json

import pytest

from toolgym.data import load_dataset, save_corpus_and_tasks
from toolgym.retrieval import ToolCorpus, build_index
from toolgym.retrieval.metrics import completeness_at_k, ndcg_at_k
from toolgym.cli.main import main


@pytest.fixture(scope="module")
def stb():
    return load_dataset("stabletoolbench")


def test_eval_json_agrees_with_direct_computation(tmp_path, stb, capsys):
    out = tmp_path / "m.json"
    assert main(["eval", "--dataset", "stabletoolbench", "--retriever", "bm25", "--limit", "120", "--k", "1,10",
                 "--json", str(out)]) == 0
    metrics = json.loads(out.read_text())
    tasks = stb.tasks[:120]
    index = build_index(stb.corpus, "bm25")
    ranked = [index.search(t.query, k=10).ids for t in tasks]
    n1 = 100 * sum(ndcg_at_k(r, t.gold, 1) for r, t in zip(ranked, tasks)) / len(tasks)
    c10 = 100 * sum(completeness_at_k(r, t.gold, 10) for r, t in zip(ranked, tasks)) / len(tasks)
    assert metrics["N@1"] == pytest.approx(n1)
    assert metrics["C@10"] == pytest.approx(c10)
    assert metrics["n"] == 120 and set(metrics["groups"]) == {"G1_instruction"}
    assert "G1_instruction" in capsys.readouterr().out


def test_the_default_pipeline_is_the_hybrid(tmp_path, stb):
    """`toolgym eval retrieval` without --retriever is the z-score hybrid (the ladder's best rung without training)."""
    corpus_path, tasks_path = tmp_path / "corpus.jsonl", tmp_path / "tasks.jsonl"
    tasks = stb.tasks[:6]
    gold = {g for t in tasks for g in t.gold}
    tools = [stb.corpus[g] for g in sorted(gold)] + [t for t in stb.corpus.tools if t.id not in gold][:30]
    save_corpus_and_tasks(ToolCorpus(tools, name="small"), tasks, corpus_path, tasks_path)
    out = tmp_path / "m.json"
    assert main(["eval", "--tasks", str(tasks_path), "--corpus", str(corpus_path), "--json", str(out)]) == 0
    metrics = json.loads(out.read_text())
    assert metrics["config"]["retriever"] == "hybrid"
    index = build_index(ToolCorpus(tools, name="small"), "hybrid")
    c10 = 100 * sum(completeness_at_k(index.search(t.query, k=10).ids, t.gold, 10) for t in tasks) / len(tasks)
    assert metrics["C@10"] == pytest.approx(c10)


def test_eval_from_paths_and_dynamic_topk(tmp_path, stb):
    corpus_path, tasks_path = tmp_path / "corpus.jsonl", tmp_path / "tasks.jsonl"
    save_corpus_and_tasks(stb.corpus, stb.tasks[:40], corpus_path, tasks_path)
    out = tmp_path / "m.json"
    assert main(["eval", "--tasks", str(tasks_path), "--corpus", str(corpus_path), "--retriever", "bm25", "--topk", "dynamic",
                 "--decompose", "clauses", "--json", str(out)]) == 0
    metrics = json.loads(out.read_text())
    assert 1 <= metrics["K"] <= 20 and 0 <= metrics["C@K"] <= 100
    assert metrics["config"]["decompose"] == "clauses"


@pytest.mark.parametrize("argv, message", [
    (["eval", "--dataset", "nope"], "unknown dataset"),
    (["eval"], "MODE"),
    (["eval", "retrieval"], "--dataset"),
    (["eval", "--dataset", "seal_tools", "--k", "0"], "positive"),
    (["eval", "--dataset", "seal_tools", "--topk", "lots"], "--topk"),
    (["eval", "--agent", "raw"], "--env"),
    (["eval", "policy", "--env", "toolgym/ToolSearch-v0"], "--policy"),
    (["eval", "--env", "toolgym/ToolSearch-v0", "--agent", "raw", "--constrained", "toolsearch"], "--constrained"),
    (["eval", "--env", "toolgym/ToolSearch-v0", "--policy", "tiny-llama", "--constrained", "json"], "--constrained"),
])
def test_eval_bad_input_is_one_clear_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message.lower() in err.lower() and "Traceback" not in err


@pytest.mark.slow
def test_rerank_reorders_the_same_candidates(tmp_path):
    """Reranking permutes the top candidates: recall at the candidate depth cannot change."""
    plain, reranked = tmp_path / "plain.json", tmp_path / "rerank.json"
    common = ["eval", "--dataset", "seal_tools", "--limit", "8", "--candidates", "10", "--k", "1,10"]
    assert main(common + ["--json", str(plain)]) == 0
    assert main(common + ["--rerank", "--json", str(reranked)]) == 0
    a, b = json.loads(plain.read_text()), json.loads(reranked.read_text())
    assert a["R@10"] == pytest.approx(b["R@10"]) and b["config"]["rerank"] == "minilm"


@pytest.mark.slow
def test_eval_policy_mode_runs_a_model_in_the_env(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["eval", "--env", "toolgym/Decompose-v0", "--policy", "tiny-llama", "--split", "heldout",
                 "--limit", "2", "--json", str(out)]) == 0
    metrics = json.loads(out.read_text())
    assert metrics["n"] == 2 and metrics["env_id"] == "toolgym/Decompose-v0" and "reward" in metrics
    assert "policy=tiny-llama" in capsys.readouterr().out
