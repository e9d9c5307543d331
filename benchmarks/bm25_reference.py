"""BM25 reference check of the document text: plain ``bm25s`` on ``ToolCorpus.texts()``, with and without stemming.

The table of docs/datasets.md ("BM25 reference"): ``bm25s.BM25()`` defaults (Lucene, k1 1.5,
b 0.75), ``bm25s.tokenize(..., stopwords="en")`` on the corpus texts and on the query, with and
without PyStemmer's English (Snowball) stemmer; N@1, N@5, C@10 in % from
``toolgym.retrieval.metrics``. API-Bank is scored on three queries: the utterance alone, the user
turns + the utterance, and ``Task.context_text()`` (every earlier turn + the utterance). Every
query's row goes to ``benchmarks/results/bm25_reference_queries.json`` (columns: ``task_id`` and each
metric in %, 4 decimals; one line per table row); the table is their means.

Run: ``nice -n 19 python -m benchmarks.bm25_reference`` (under a minute; no model).
"""
from __future__ import annotations

import json
import time
from typing import Any, Callable

from benchmarks._report import RESULTS, markdown_table, write_report  # noqa: E402

from toolgym.data import load_dataset  # noqa: E402
from toolgym.data.records import Task  # noqa: E402
from toolgym.retrieval.metrics import completeness_at_k, ndcg_at_k  # noqa: E402


def user_turns_and_query(task: Task) -> str:
    return " ".join([str(m.get("content", "")) for m in task.messages if m.get("role") == "user"] + [task.query])


QUERIES: dict[str, Callable[[Task], str]] = {
    "query": lambda t: t.query,
    "user turns + query": user_turns_and_query,
    "context_text": lambda t: t.context_text(),
}
# (row label, dataset, stemmer, query text)
ROWS = [
    ("stabletoolbench", "stabletoolbench", None, "query"),
    ("stabletoolbench", "stabletoolbench", "english", "query"),
    ("seal_tools (dev)", "seal_tools", None, "query"),
    ("seal_tools (dev)", "seal_tools", "english", "query"),
    ("metatool", "metatool", "english", "query"),
    ("metatool_multi", "metatool_multi", "english", "query"),
    ("api_bank (query only)", "api_bank", "english", "query"),
    ("api_bank (user turns + query)", "api_bank", "english", "user turns + query"),
    ("api_bank (all earlier turns + query = `Task.context_text()`, what `toolgym eval` uses)", "api_bank", "english",
     "context_text"),
    ("ultratool", "ultratool", "english", "query"),
]
METRICS = ("N@1", "N@5", "C@10")


def score(dataset: Any, stemmer_name: str | None, query_text: Callable[[Task], str]) -> list[dict[str, Any]]:
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer(stemmer_name) if stemmer_name else None
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(dataset.corpus.texts(), stopwords="en", stemmer=stemmer, show_progress=False),
                    show_progress=False)
    queries = bm25s.tokenize([query_text(t) for t in dataset.tasks], stopwords="en", stemmer=stemmer,
                             show_progress=False)
    results, _ = retriever.retrieve(queries, k=10, show_progress=False, n_threads=1)
    ids = dataset.corpus.ids
    rows = []
    for task, hits in zip(dataset.tasks, results):
        ranking = [ids[i] for i in hits]
        rows.append({"task_id": task.id, "N@1": round(100 * ndcg_at_k(ranking, task.gold, 1), 4),
                     "N@5": round(100 * ndcg_at_k(ranking, task.gold, 5), 4),
                     "C@10": round(100 * completeness_at_k(ranking, task.gold, 10), 4)})
    return rows


def means(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {m: sum(r[m] for r in rows) / len(rows) for m in METRICS}


def run_key(run: dict[str, Any]) -> str:
    return f"{run['label']} / {run['stemmer'] or 'none'}"


def table(runs: list[dict[str, Any]]) -> str:
    """The report's table, from the payload's runs (their ``queries`` and ``means``)."""
    return markdown_table(["dataset", "stemmer", "queries", *METRICS],
                          [[r["label"], r["stemmer"] or "none", r["queries"]]
                           + [f"{r['means'][m]:.1f}" for m in METRICS] for r in runs])


def main() -> None:
    start = time.perf_counter()
    loaded: dict[str, Any] = {}
    runs: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    per_query: dict[str, dict[str, list[Any]]] = {}
    for label, name, stemmer, query in ROWS:
        try:
            dataset = loaded.setdefault(name, load_dataset(name))
        except FileNotFoundError as exc:  # UltraTool / MetaTool read ../shared/data, which a fresh clone lacks
            skipped[label] = str(exc)
            continue
        rows = score(dataset, stemmer, QUERIES[query])
        runs.append({"label": label, "dataset": name, "stemmer": stemmer, "query": query, "queries": len(rows),
                     "means": means(rows)})
        per_query[run_key(runs[-1])] = {k: [r[k] for r in rows] for k in ("task_id", *METRICS)}  # columns: smaller
        print(label, stemmer, {k: round(v, 1) for k, v in runs[-1]["means"].items()}, flush=True)
    body = ("`bm25s` defaults (Lucene, k1 1.5, b 0.75), English stopwords, on `ToolCorpus.texts()` and the query, "
            "with and without the Snowball English stemmer; metrics in %, the means of the per-query rows in the "
            "JSON.\n\n" + table(runs))
    (RESULTS / "bm25_reference_queries.json").write_text(  # compact: one line per row of the table
        "{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in per_query.items()) + "\n}\n")
    write_report("bm25_reference", {"runs": runs, "skipped": skipped, "wall_s": time.perf_counter() - start},
                 "BM25 reference: document text, with and without stemming", body)
    print(body)


if __name__ == "__main__":
    main()
