"""Retrieval benchmark: index build / warm load, batched vs one-by-one search, quality anchors.

Speed (Seal-Tools corpus, 4,076 tools; 256 dev queries; LRU cache disabled everywhere):
- cold build of each method (dense: encoder load + encoding the corpus, fresh cache dir),
- warm load (``build_index`` again with the embedding cache on disk),
- ``search_batch`` of 256 queries vs the same 256 through ``search`` one at a time,
- the category filter: our per-category exact search vs the alternatives the libraries offer
  (faiss ``IDSelectorBatch`` over the full index; one ``bm25s.retrieve`` with a ``weight_mask``
  per category group).
Quality (numbers in %, toolgym.retrieval.metrics): StableToolBench pooled and Seal-Tools dev
for bm25 / dense / hybrid, plus dual-boundary dynamic top-K over the top 20.

Every quality number is the mean of per-query rows kept in ``benchmarks/results/retrieval_queries.json``
(one row per query: task id and each metric), so the table can be recomputed from them.

Run: ``python -m benchmarks.retrieval [--quick | --quality-only]`` (``--quick`` skips the quality
section; ``--quality-only`` re-measures quality and keeps the speed numbers of the last run).
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks._report import RESULTS, markdown_table, write_report  # noqa: E402

from toolgym.data import load_dataset  # noqa: E402
from toolgym.retrieval import build_index, dual_boundary_dynamic_top_k  # noqa: E402
from toolgym.retrieval.metrics import completeness_at_k, ndcg_at_k, recall_at_k  # noqa: E402

N_QUERIES = 256
QUERY_ROWS = RESULTS / "retrieval_queries.json"
QUALITY_METRICS = ("N@1", "N@5", "N@10", "R@10", "C@10", "dynamic_K", "C@dynamic_K")


def timed(fn, repeat: int = 1) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def speed(cache_root: Path) -> dict:
    seal = load_dataset("seal_tools")
    corpus = seal.corpus
    queries = [t.query for t in seal.tasks[:N_QUERIES]]
    rng = np.random.default_rng(0)
    categories = [corpus.categories[i] for i in rng.integers(0, len(corpus.categories), N_QUERIES)]
    cache = cache_root / "emb"
    res: dict = {"corpus_tools": len(corpus), "queries": len(queries), "build": {}, "search": {}}

    cold: dict[str, float] = {}
    for method in ("bm25", "dense"):
        cold[method], index = timed(lambda: build_index(corpus, method, cache_dir=cache, cache_size=0, show_progress=True))
        res["build"][f"{method}_cold_s"] = cold[method]
    warm_dense, warm = timed(lambda: build_index(corpus, "dense", cache_dir=cache, cache_size=0), repeat=3)
    warm_hybrid, _ = timed(lambda: build_index(corpus, "hybrid", cache_dir=cache, cache_size=0), repeat=3)
    first_query, _ = timed(lambda: warm.search(queries[0]))  # pays the lazy encoder load
    res["build"].update(dense_warm_s=warm_dense, hybrid_warm_s=warm_hybrid, dense_first_query_after_warm_s=first_query)

    indexes = {m: build_index(corpus, m, cache_dir=cache, cache_size=0) for m in ("bm25", "dense", "hybrid")}
    for idx in indexes.values():
        idx.search("warm up the encoder and faiss")
    for method, idx in indexes.items():
        for label, cats in (("no filter", None), ("category filter", categories)):
            one_cats = cats or [None] * len(queries)
            t_batch, batch = timed(lambda: idx.search_batch(queries, cats, k=10), repeat=3)
            t_one, one = timed(lambda: [idx.search(q, c, k=10) for q, c in zip(queries, one_cats)])
            # Dense: a query encoded alone or padded in a batch differs in the last float bits,
            # which can swap near-ties; report agreement rather than assert it.
            same = float(np.mean([a.ids == b.ids for a, b in zip(batch, one)]))
            ratio = t_one / t_batch
            res["search"][f"{method}/{label}"] = {
                "same_ranking_share": same,
                "batch_ms_per_query": 1e3 * t_batch / len(queries),
                "one_by_one_ms_per_query": 1e3 * t_one / len(queries),
                "speedup": ratio,
            }

    # Category filter alternatives, same queries, same categories.
    import bm25s
    import faiss

    dense = indexes["dense"]
    qv = dense.embed(queries)
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(categories):
        groups.setdefault(c, []).append(i)

    def ours_dense():
        return dense.search_vectors(qv, categories, 10)

    def faiss_selector():
        out = []
        for c, rows_ in groups.items():
            sel = faiss.IDSelectorBatch(dense.category_rows(c))
            out.append(dense.faiss_index.search(qv[rows_], 10, params=faiss.SearchParameters(sel=sel)))
        return out

    bm = indexes["bm25"].bm25_scorer

    def ours_bm25():
        return indexes["bm25"].search_batch(queries, categories, 10)  # LRU cache off (cache_size=0)

    def bm25s_weight_mask():
        out = []
        for c, rows_ in groups.items():
            mask = np.zeros(len(corpus), dtype=np.float32)
            mask[indexes["bm25"].category_rows(c)] = 1.0
            tok = bm25s.tokenize([queries[i] for i in rows_], stopwords="en", stemmer=bm.stemmer, show_progress=False)
            out.append(bm.retriever.retrieve(tok, k=10, weight_mask=mask, show_progress=False))
        return out

    def bm25s_plain():
        tok = bm25s.tokenize(queries, stopwords="en", stemmer=bm.stemmer, show_progress=False)
        return bm.retriever.retrieve(tok, k=10, show_progress=False)

    alt = {
        "dense category: one matmul + per-category column top-k (ours)": timed(ours_dense, 3)[0],
        "dense category: faiss IDSelectorBatch on the full index": timed(faiss_selector, 3)[0],
        "bm25 category: one sparse product + per-category column top-k (ours)": timed(ours_bm25, 3)[0],
        "bm25 category: bm25s.retrieve + weight_mask per group": timed(bm25s_weight_mask, 3)[0],
        "bm25 no filter: bm25s.retrieve on the batch": timed(bm25s_plain, 3)[0],
        "bm25 no filter: sparse matmul (ours)": timed(lambda: indexes["bm25"].search_batch(queries, None, 10), 3)[0],
    }
    res["category_alternatives_ms_per_query"] = {k: 1e3 * v / len(queries) for k, v in alt.items()}
    return res


def speed_markdown(res: dict) -> str:
    """The speed tables, from the payload alone (re-rendered by --quality-only and by the docs check)."""
    b = res["build"]
    rows = [[key.split("/")[0], key.split("/")[1], r["batch_ms_per_query"], r["one_by_one_ms_per_query"],
             f"{r['speedup']:.1f}x", r["same_ranking_share"]] for key, r in res["search"].items()]
    when = f" Speed measured {res['speed_measured']}." if res.get("speed_measured") else ""
    md = [
        f"Seal-Tools corpus ({res['corpus_tools']} tools), {res['queries']} dev queries, k = 10, LRU cache off.{when}\n",
        markdown_table(
            ["step", "seconds"],
            [
                ["bm25 build (cold)", b["bm25_cold_s"]],
                ["dense build (cold: encoder load + encode corpus)", b["dense_cold_s"]],
                ["dense warm load (embeddings from disk cache)", b["dense_warm_s"]],
                ["hybrid warm load", b["hybrid_warm_s"]],
                ["first dense query after warm load (lazy encoder load)", b["dense_first_query_after_warm_s"]],
            ],
        ),
        "",
        markdown_table(["method", "queries", "batched ms/query", "one-by-one ms/query", "speedup", "same ranking"], rows),
        "",
        f"Category-filter implementations (ms/query, same {res['queries']} queries over random categories):\n",
        markdown_table(["implementation", "ms/query"], [[k, v] for k, v in res["category_alternatives_ms_per_query"].items()]),
    ]
    return "\n".join(md)


def quality(cache_root: Path) -> tuple[dict, dict]:
    """Mean metrics per dataset / method, and the per-query rows they are the means of."""
    res: dict = {}
    per_query: dict = {}
    cache = cache_root / "emb"
    for name in ("stabletoolbench", "seal_tools"):
        data = load_dataset(name)
        queries = [t.query for t in data.tasks]
        # "bm25 (old text)": identifiers as one token, no parameters - what the published anchors measure.
        for label, method, opts in (("bm25 (old text)", "bm25", {"identifiers": "whole", "parameters": False}),
                                    ("bm25", "bm25", {}), ("dense", "dense", {}), ("hybrid", "hybrid", {})):
            idx = build_index(data.corpus, method, cache_dir=cache, cache_size=0, show_progress=True, **opts)
            ranked = idx.search_batch(queries, k=20)
            emb = idx.tool_embeddings()
            rows = []  # metrics in %, rounded to 4 decimals (the table prints 1); the means are of these rows
            for task, r in zip(data.tasks, ranked):
                k = dual_boundary_dynamic_top_k(r.scores, emb[[data.corpus.index_of(i) for i in r.ids]])
                row = {"N@1": ndcg_at_k(r.ids, task.gold, 1), "N@5": ndcg_at_k(r.ids, task.gold, 5),
                       "N@10": ndcg_at_k(r.ids, task.gold, 10), "R@10": recall_at_k(r.ids, task.gold, 10),
                       "C@10": completeness_at_k(r.ids, task.gold, 10), "C@dynamic_K": completeness_at_k(r.ids, task.gold, k)}
                rows.append({"task_id": task.id, **{m: round(100 * v, 4) for m, v in row.items()}, "dynamic_K": int(k)})
            per_query[f"{name}/{label}"] = rows
            res[f"{name}/{label}"] = {"tools": len(data.corpus), "queries": len(queries),
                                      **quality_means(rows)}
    return res, per_query


def quality_means(rows: list[dict]) -> dict[str, float]:
    """Each quality metric's mean over per-query rows (the table's numbers)."""
    return {m: float(np.mean([r[m] for r in rows])) for m in QUALITY_METRICS}


def quality_markdown(res: dict) -> str:
    rows = [[key.split("/")[0], key.split("/")[1], m["tools"], m["queries"]]
            + [round(m[k], 1) for k in QUALITY_METRICS] for key, m in res.items()]
    md = markdown_table(
        ["dataset", "method", "tools", "queries", "N@1", "N@5", "N@10", "R@10", "C@10", "mean dyn. K", "C@dyn. K"],
        rows,
    )
    return "Quality (%, top 20 retrieved; dynamic K from Algorithm 2 on the retriever's own scores):\n\n" + md


def report_markdown(payload: dict) -> str:
    md = speed_markdown(payload)
    if "quality" in payload:
        md += "\n\n" + quality_markdown(payload["quality"])
    return md


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="speed only, skip the quality section")
    mode.add_argument("--quality-only", action="store_true",
                      help="re-measure quality; keep the speed numbers of benchmarks/results/retrieval.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="toolgym-bench-") as tmp:
        if args.quality_only:
            previous = json.loads((RESULTS / "retrieval.json").read_text())
            payload = {k: previous[k] for k in ("corpus_tools", "queries", "build", "search",
                                                "category_alternatives_ms_per_query")}
            payload["speed_measured"] = previous.get("speed_measured", previous["date"])
        else:
            payload = speed(Path(tmp))
        print(speed_markdown(payload), flush=True)
        if not args.quick:
            payload["quality"], per_query = quality(Path(tmp))
            # compact: one line per dataset / method (thousands of rows)
            QUERY_ROWS.write_text("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in per_query.items())
                                  + "\n}\n")
            print(quality_markdown(payload["quality"]))
    write_report("retrieval", payload, "Retrieval", report_markdown(payload))


if __name__ == "__main__":
    main()
