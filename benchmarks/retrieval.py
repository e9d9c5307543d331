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

Run: ``python benchmarks/retrieval.py [--quick]`` (``--quick`` skips the quality section).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import markdown_table, write_report  # noqa: E402

from toolgym.data import load_dataset  # noqa: E402
from toolgym.retrieval import build_index, dual_boundary_dynamic_top_k  # noqa: E402
from toolgym.retrieval.metrics import completeness_at_k, ndcg_at_k, recall_at_k  # noqa: E402

N_QUERIES = 256


def timed(fn, repeat: int = 1) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def speed(cache_root: Path) -> tuple[dict, str]:
    seal = load_dataset("seal_tools")
    corpus = seal.corpus
    queries = [t.query for t in seal.tasks[:N_QUERIES]]
    rng = np.random.default_rng(0)
    categories = [corpus.categories[i] for i in rng.integers(0, len(corpus.categories), N_QUERIES)]
    cache = cache_root / "emb"
    res: dict = {"corpus_tools": len(corpus), "queries": len(queries), "build": {}, "search": {}}

    cold = {}
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
    rows = []
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
            rows.append([method, label, 1e3 * t_batch / len(queries), 1e3 * t_one / len(queries), f"{ratio:.1f}x", same])

    # Category filter alternatives, same queries, same categories.
    import bm25s
    import faiss

    dense = indexes["dense"]
    qv = dense.embed(queries)
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(categories):
        groups.setdefault(c, []).append(i)

    def ours_dense():
        return dense._dense_topk(qv, groups, 10)

    def faiss_selector():
        out = []
        for c, rows_ in groups.items():
            sel = faiss.IDSelectorBatch(dense._category_rows[c])
            out.append(dense._faiss.search(qv[rows_], 10, params=faiss.SearchParameters(sel=sel)))
        return out

    bm = indexes["bm25"]._bm25

    def ours_bm25():
        return indexes["bm25"]._bm25_topk(queries, groups, 10)

    def bm25s_weight_mask():
        out = []
        for c, rows_ in groups.items():
            mask = np.zeros(len(corpus), dtype=np.float32)
            mask[indexes["bm25"]._category_rows[c]] = 1.0
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
        "bm25 no filter: sparse matmul (ours)": timed(lambda: indexes["bm25"]._bm25_topk(queries, {None: list(range(len(queries)))}, 10), 3)[0],
    }
    res["category_alternatives_ms_per_query"] = {k: 1e3 * v / len(queries) for k, v in alt.items()}

    md = [
        f"Seal-Tools corpus ({len(corpus)} tools), {len(queries)} dev queries, k = 10, LRU cache off.\n",
        markdown_table(
            ["step", "seconds"],
            [
                ["bm25 build (cold)", cold["bm25"]],
                ["dense build (cold: encoder load + encode corpus)", cold["dense"]],
                ["dense warm load (embeddings from disk cache)", warm_dense],
                ["hybrid warm load", warm_hybrid],
                ["first dense query after warm load (lazy encoder load)", first_query],
            ],
        ),
        "",
        markdown_table(["method", "queries", "batched ms/query", "one-by-one ms/query", "speedup", "same ranking"], rows),
        "",
        "Category-filter implementations (ms/query, same 256 queries over random categories):\n",
        markdown_table(["implementation", "ms/query"], [[k, 1e3 * v / len(queries)] for k, v in alt.items()]),
    ]
    return res, "\n".join(md)


def quality(cache_root: Path) -> tuple[dict, str]:
    res, rows = {}, []
    cache = cache_root / "emb"
    for name in ("stabletoolbench", "seal_tools"):
        data = load_dataset(name)
        queries = [t.query for t in data.tasks]
        # "bm25 (old text)": identifiers as one token, no parameters - what the published anchors measure.
        for label, method, opts in (("bm25 (old text)", "bm25", {"identifiers": "whole", "parameters": False}),
                                    ("bm25", "bm25", {}), ("dense", "dense", {}), ("hybrid", "hybrid", {})):
            idx = build_index(data.corpus, method, cache_dir=cache, cache_size=0, show_progress=True, **opts)
            ranked = idx.search_batch(queries, k=20)
            golds = [t.gold for t in data.tasks]

            def mean(fn, k, ranked=ranked):
                return 100 * float(np.mean([fn(r.ids, g, k) for r, g in zip(ranked, golds)]))

            emb = idx.tool_embeddings()
            ks = [
                dual_boundary_dynamic_top_k(r.scores, emb[[data.corpus.index_of(i) for i in r.ids]]) for r in ranked
            ]
            dyn_c = 100 * float(np.mean([completeness_at_k(r.ids, g, k) for r, g, k in zip(ranked, golds, ks)]))
            m = {
                "N@1": mean(ndcg_at_k, 1), "N@5": mean(ndcg_at_k, 5), "N@10": mean(ndcg_at_k, 10),
                "R@10": mean(recall_at_k, 10), "C@10": mean(completeness_at_k, 10),
                "dynamic_K_mean": float(np.mean(ks)), "C@dynamic_K": dyn_c,
            }
            res[f"{name}/{label}"] = m
            rows.append([name, label, len(data.corpus), len(queries)] + [round(v, 1) for v in m.values()])
    md = markdown_table(
        ["dataset", "method", "tools", "queries", "N@1", "N@5", "N@10", "R@10", "C@10", "mean dyn. K", "C@dyn. K"],
        rows,
    )
    return res, "Quality (%, top 20 retrieved; dynamic K from Algorithm 2 on the retriever's own scores):\n\n" + md


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="speed only, skip the quality section")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="toolgym-bench-") as tmp:
        payload, md = speed(Path(tmp))
        print(md, flush=True)
        if not args.quick:
            q, qmd = quality(Path(tmp))
            payload["quality"] = q
            md += "\n\n" + qmd
            print(qmd)
    write_report("retrieval", payload, "Retrieval", md)


if __name__ == "__main__":
    main()
