"""Tool-text choices per retriever and dataset: C@10 and N@5 (%) for each way of building the text.

BM25: identifier handling (``whole`` = the old single token, ``split``, ``both``) x template
(the dataset's default ``category | name: description``, without the category path, with the
parameter names and descriptions appended). Dense (packaged MiniLM): the same templates, with
and without the name split into words in the text itself (``ToolCorpus(split_identifiers=True)``).
Hybrid: RRF (c = 60, 100 deep) of the chosen BM25 and dense variants.

Tuning set: Seal-Tools ``train`` (the 600 dev tasks the ladder never evaluates on). Checks:
StableToolBench, MetaTool, API-Bank, UltraTool (when the shared data is there), each on a seeded
sample of at most ``--cap`` queries; the Seal-Tools ``heldout`` split is reported, not tuned on.

Run: ``nice -n 15 python -m benchmarks.tool_text [--cap 300] [--no-dense]``.
"""
from __future__ import annotations

import argparse
import random
import time

import numpy as np

from benchmarks._report import markdown_table, write_report  # noqa: E402

from toolgym.retrieval import build_index  # noqa: E402
from toolgym.retrieval.fusion import fuse_rrf  # noqa: E402
from toolgym.retrieval.metrics import completeness_at_k, ndcg_at_k  # noqa: E402

TEMPLATES = {
    "default": "{category} | {name}: {description}",
    "no category": "{name}: {description}",
    "+ parameters": "{category} | {name}: {description} | {parameters}",
}
DATASETS = [("seal_tools", "train"), ("seal_tools", "heldout"), ("stabletoolbench", None), ("metatool", None),
             ("api_bank", None), ("ultratool", None)]


def scores_of(rankings: list, tasks: list) -> dict[str, float]:
    return {"C@10": 100 * float(np.mean([completeness_at_k(r, t.gold, 10) for r, t in zip(rankings, tasks)])),
            "N@5": 100 * float(np.mean([ndcg_at_k(r, t.gold, 5) for r, t in zip(rankings, tasks)]))}


def load(name: str, split: str | None, cap: int, seed: int):
    from toolgym.data import load_dataset

    ds = load_dataset(name, split=split)
    tasks = list(ds.tasks)
    if len(tasks) > cap:
        tasks = [tasks[i] for i in sorted(random.Random(seed).sample(range(len(tasks)), cap))]
    return ds.corpus, tasks


def dense_rankings(corpus, qvecs: np.ndarray, k: int = 100) -> list[list[str]]:
    index = build_index(corpus, "dense", cache_size=0)
    scores = qvecs @ index.tool_embeddings().T
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    ids = corpus.ids
    return [[ids[j] for j in row] for row in top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap", type=int, default=300, help="queries per dataset (seeded sample; Seal-Tools train: 600)")
    parser.add_argument("--no-dense", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    start = time.perf_counter()
    results: dict = {}
    for name, split in DATASETS:
        label = name + (f" {split}" if split else "")
        try:
            corpus, tasks = load(name, split, 600 if split == "train" else args.cap, args.seed)
        except FileNotFoundError as exc:  # UltraTool is read from the shared data only
            print(f"skip {label}: {exc}", flush=True)
            continue
        queries = [t.context_text() for t in tasks]
        res: dict = {"queries": len(tasks), "tools": len(corpus), "bm25": {}, "dense": {}, "hybrid": {}}
        lists: dict = {}
        for tname, template in TEMPLATES.items():
            variant = corpus.with_text(template, split_identifiers=False)
            for mode in ("whole", "split", "both"):
                # parameters=False: the template alone says whether they are in the text.
                index = build_index(variant, "bm25", cache_size=0, identifiers=mode, parameters=False)
                ranked = [list(r.ids) for r in index.search_batch(queries, k=100)]
                lists[("bm25", tname, mode)] = ranked
                res["bm25"][f"{tname} / {mode}"] = scores_of(ranked, tasks)
        if not args.no_dense:
            qvecs = build_index(corpus, "bm25", cache_size=0).embed(queries)
            for tname, template in TEMPLATES.items():
                for split_names in (False, True):
                    variant = corpus.with_text(template, split_identifiers=split_names)
                    ranked = dense_rankings(variant, qvecs)
                    key = f"{tname} / {'split' if split_names else 'whole'}"
                    lists[("dense", tname, "split" if split_names else "whole")] = ranked
                    res["dense"][key] = scores_of(ranked, tasks)
            for bkey, dkey in ((("bm25", "default", "whole"), ("dense", "default", "whole")),
                               (("bm25", "default", "split"), ("dense", "default", "whole")),
                               (("bm25", "default", "split"), ("dense", "default", "split")),
                               (("bm25", "+ parameters", "split"), ("dense", "default", "whole")),
                               (("bm25", "+ parameters", "split"), ("dense", "+ parameters", "split"))):
                fused = [fuse_rrf([b, d], k=20, c=60.0) for b, d in zip(lists[bkey], lists[dkey])]
                res["hybrid"][f"BM25 {bkey[1]} / {bkey[2]} + dense {dkey[1]} / {dkey[2]}"] = scores_of(fused, tasks)
        results[label] = res
        print(f"[{time.perf_counter() - start:5.0f} s] {label}: {res}", flush=True)

    md = ["C@10 / N@5 in %, per text choice. BM25 `whole` = the old tokenisation (an identifier is one token), "
          "`split` = its parts, `both` = the word and its parts; dense `split` = the name split in the text itself. "
          "Tuned on Seal-Tools train (600 dev tasks the ladder never evaluates on); the rest are checks, "
          f"each a seeded sample of at most {args.cap} queries.\n"]
    labels = list(results)
    for retriever in ("bm25", "dense", "hybrid"):
        keys = list(dict.fromkeys(k for r in results.values() for k in r[retriever]))
        if not keys:
            continue
        rows = [[key] + [f"{results[lb][retriever][key]['C@10']:.1f} / {results[lb][retriever][key]['N@5']:.1f}"
                         if key in results[lb][retriever] else "—" for lb in labels] for key in keys]
        md += [f"**{retriever}**\n", markdown_table(["text / identifiers"] + [f"{lb} ({results[lb]['queries']})" for lb in labels], rows), ""]
    write_report("tool_text", {"results": results, "cap": args.cap, "wall_s": time.perf_counter() - start},
                 "Tool text: identifier splitting, category path, parameters", "\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
