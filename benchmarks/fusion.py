"""Hybrid fusion: does the hybrid keep up with the better of BM25 and dense, before and after BM25's new text?

Every bundled dataset is cut into a train part and a held-out part: Seal-Tools by its own
``train`` / ``heldout`` splits (toolgym.data.seal_tools_split), the others by
``toolgym.data.training_data.split_tasks(tasks, 0.5, seed=0)`` (MetaTool first takes a seeded
sample of 1,500 of its 20,532 queries). The z-score fusion's one weight is chosen on the train
parts only: the largest worst-case margin of hybrid C@10 over max(BM25, dense) across the
datasets, then the largest mean C@10. Every table below the grid is the held-out parts, each
capped at a seeded sample of ``--cap`` queries.

Systems (all through ``build_index``; query embeddings are computed once per dataset and
shared by the indexes, which is the only thing patched):

- ``bm25 (old text)``: identifiers ``whole``, no parameter text - BM25 before commit 30633e4;
- ``bm25``: the default text (split identifiers + parameters);
- ``dense``: the packaged MiniLM;
- ``hybrid rrf (old text)``: equal-weight RRF (c = 60, 100 deep) of the old-text BM25 and dense
  = the default hybrid before the BM25 text change;
- ``hybrid rrf``: the same RRF over the new-text BM25 = the default hybrid up to this fix;
- ``hybrid``: the default now, ``hybrid_fusion="zscore"``.

Run: ``nice -n 19 python -m benchmarks.fusion [--cap 300]``. Per-query rows (task id, C@10,
N@5, N@1 per system) are kept in the JSON, and every mean in the tables is recomputed from them.
"""
from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np

from benchmarks._report import markdown_table, write_report  # noqa: E402

from toolgym.data import load_dataset  # noqa: E402
from toolgym.data.records import Task  # noqa: E402
from toolgym.data.training_data import split_tasks  # noqa: E402
from toolgym.retrieval import build_index  # noqa: E402
from toolgym.retrieval.fusion import fuse_standardised  # noqa: E402
from toolgym.retrieval.index import HYBRID_BM25_WEIGHT, ToolIndex, top_k_rows  # noqa: E402
from toolgym.retrieval.metrics import completeness_at_k, ndcg_at_k  # noqa: E402

BUNDLED = ("seal_tools", "stabletoolbench", "metatool", "metatool_multi", "api_bank")
METATOOL_SAMPLE = 1500
SEED = 0
WEIGHT_GRID = tuple(round(0.30 + 0.02 * i, 2) for i in range(16))  # 0.30 .. 0.60
SYSTEMS = {
    "bm25 (old text)": dict(method="bm25", identifiers="whole", parameters=False),
    "bm25": dict(method="bm25"),
    "dense": dict(method="dense"),
    "hybrid rrf (old text)": dict(method="hybrid", hybrid_fusion="rrf", identifiers="whole", parameters=False),
    "hybrid rrf": dict(method="hybrid", hybrid_fusion="rrf"),
    "hybrid": dict(method="hybrid"),
}
METRICS = ("C@10", "N@5", "N@1")


def seeded_sample(tasks: Sequence[Task], cap: int | None, seed: int = SEED) -> list[Task]:
    """At most ``cap`` tasks, a seeded sample kept in input order (all of them when fewer)."""
    from toolgym.data.training_data import seeded_sample as sample

    return sample(tasks, cap, seed)


def dataset_parts(name: str):
    """(corpus, train tasks, held-out tasks) of one bundled dataset (see the module docstring)."""
    if name == "seal_tools":
        train = load_dataset(name, split="train")
        return train.corpus, list(train.tasks), list(load_dataset(name, split="heldout").tasks)
    ds = load_dataset(name)
    tasks = seeded_sample(ds.tasks, METATOOL_SAMPLE) if name == "metatool" else list(ds.tasks)
    train, held = split_tasks(tasks, 0.5, seed=SEED)
    return ds.corpus, train, held


def task_metrics(ids: Sequence[str], gold) -> dict[str, float]:
    return {"C@10": 100 * completeness_at_k(ids, gold, 10), "N@5": 100 * ndcg_at_k(ids, gold, 5),
            "N@1": 100 * ndcg_at_k(ids, gold, 1)}


def means(rows: list[dict], system: str) -> dict[str, float]:
    return {m: float(np.mean([r[system][m] for r in rows])) for m in METRICS}


class SharedQueryVectors:
    """Query embeddings computed once per dataset and handed to every index's ``embed``."""

    def __init__(self, encoder_index: ToolIndex, texts: Sequence[str]):
        unique = list(dict.fromkeys(texts))
        vecs = encoder_index.embed(unique)
        self.row = {t: vecs[i] for i, t in enumerate(unique)}

    def attach(self, index: ToolIndex) -> ToolIndex:
        index.embed = lambda texts: np.stack([self.row[t] for t in texts]).astype(np.float32)  # type: ignore[method-assign]
        return index


def build_systems(corpus, vectors: SharedQueryVectors) -> dict[str, ToolIndex]:
    out = {}
    for label, spec in SYSTEMS.items():
        spec = dict(spec)
        out[label] = vectors.attach(build_index(corpus, spec.pop("method"), cache_size=0, **spec))
    return out


def rows_for(indexes: dict[str, ToolIndex], tasks: Sequence[Task], batch: int = 256) -> list[dict]:
    queries = [t.context_text() for t in tasks]
    ranked = {label: [] for label in indexes}
    for label, index in indexes.items():
        for i in range(0, len(queries), batch):
            ranked[label] += [r.ids for r in index.search_batch(queries[i : i + batch], k=10)]
    return [{"task": t.id, **{label: task_metrics(ranked[label][j], t.gold) for label in indexes}}
            for j, t in enumerate(tasks)]


def weight_grid(indexes: dict[str, ToolIndex], tasks: Sequence[Task]) -> dict[str, float]:
    """C@10 (%) of the z-score fusion for each BM25 weight in WEIGHT_GRID (whole corpus, no category)."""
    queries = [t.context_text() for t in tasks]
    lexical = indexes["bm25"].bm25_scorer.scores(queries)
    dense = indexes["hybrid"].embed(queries) @ indexes["hybrid"].tool_embeddings().T
    ids = indexes["hybrid"].corpus.ids
    out = {}
    for w in WEIGHT_GRID:
        top, _ = top_k_rows(fuse_standardised([lexical, dense], [w, 1 - w]), 10)
        out[f"{w:.2f}"] = 100 * float(np.mean([completeness_at_k([ids[j] for j in row], t.gold, 10)
                                                for row, t in zip(top.tolist(), tasks)]))
    return out


def rrf_displacement(indexes: dict[str, ToolIndex], tasks: Sequence[Task], bm25: str) -> dict[str, float]:
    """Why RRF loses the better list's answers: the queries whose better single list (BM25 or
    dense, whichever has the higher C@10 here) holds every gold tool in its top 10 while RRF's
    top 10 does not, and the median ranks (100 deep; 101 = not in the list) of the gold tools RRF
    pushed out and of the tools that took their places."""
    from toolgym.retrieval.fusion import fuse_rrf
    from toolgym.retrieval.index import HYBRID_DEPTH, RRF_C

    queries = [t.context_text() for t in tasks]
    lists = {s: [r.ids for r in indexes[s].search_batch(queries, k=HYBRID_DEPTH)] for s in (bm25, "dense")}
    c10 = {s: np.mean([completeness_at_k(r, t.gold, 10) for r, t in zip(lists[s], tasks)]) for s in lists}
    strong, weak = (bm25, "dense") if c10[bm25] >= c10["dense"] else ("dense", bm25)
    lost, gold_ranks, intruder_ranks = 0, {strong: [], weak: []}, {strong: [], weak: []}
    for j, task in enumerate(tasks):
        top = set(lists[strong][j][:10])
        fused = fuse_rrf([lists[bm25][j], lists["dense"][j]], k=10, c=RRF_C)
        if not (set(task.gold) <= top) or set(task.gold) <= set(fused):
            continue
        lost += 1
        rank = {s: {t: r for r, t in enumerate(lists[s][j], start=1)} for s in lists}
        for s in (strong, weak):
            gold_ranks[s] += [rank[s].get(t, HYBRID_DEPTH + 1) for t in set(task.gold) - set(fused)]
            intruder_ranks[s] += [rank[s].get(t, HYBRID_DEPTH + 1) for t in fused if t not in top]
    pushed = gold_ranks[weak]
    return {"strong": strong, "queries": len(tasks), "lost": lost, "gold_pushed_out": len(pushed),
            "gold_missing_from_weak": int(sum(r > HYBRID_DEPTH for r in pushed)),
            "gold_median_rank_strong": float(np.median(gold_ranks[strong])) if pushed else None,
            "gold_median_rank_weak": float(np.median(pushed)) if pushed else None,
            "intruder_median_rank_strong": float(np.median(intruder_ranks[strong])) if pushed else None,
            "intruder_median_rank_weak": float(np.median(intruder_ranks[weak])) if pushed else None}


def choose_weight(grid: dict[str, dict[str, float]], best_single: dict[str, float]) -> str:
    """The weight with the largest worst-case margin over the better single retriever, then mean C@10."""
    weights = list(next(iter(grid.values())))

    def key(w: str) -> tuple[float, float]:
        margins = [grid[d][w] - best_single[d] for d in grid]
        return (round(min(margins), 6), round(float(np.mean([grid[d][w] for d in grid])), 6))

    return max(weights, key=key)


def report_markdown(data: dict) -> str:
    md = [f"z-score fusion weight chosen on the train parts: **w_BM25 = {data['chosen_weight']}** "
          f"(the index default is {data['index_weight']}). Train-part C@10 (%) per weight; "
          "margin = hybrid − max(BM25, dense):\n"]
    grid, best = data["grid"], data["train_best_single"]
    rows = [[w] + [f"{grid[d][w]:.1f}" for d in grid] + [f"{min(grid[d][w] - best[d] for d in grid):+.1f}"]
            for w in next(iter(grid.values()))]
    md += [markdown_table(["w_BM25"] + [f"{d} ({data['parts'][d]['train']})" for d in grid] + ["worst margin"], rows), ""]
    md.append("Held-out parts, C@10 / N@5 (%), means of the per-query rows; Δ = hybrid C@10 − max(BM25, dense):\n")
    head = ["dataset (queries)"] + list(SYSTEMS) + ["Δ rrf", "Δ new"]
    body = []
    for d, rows in data["heldout_rows"].items():
        m = {s: means(rows, s) for s in SYSTEMS}
        best_single = max(m["bm25"]["C@10"], m["dense"]["C@10"])
        body.append([f"{d} ({len(rows)})"] + [f"{m[s]['C@10']:.1f} / {m[s]['N@5']:.1f}" for s in SYSTEMS]
                    + [f"{m['hybrid rrf']['C@10'] - best_single:+.1f}", f"{m['hybrid']['C@10'] - best_single:+.1f}"])
    md += [markdown_table(head, body), ""]
    md.append("Before / after the BM25 text change with the old fusion (held-out C@10): "
              "Δ old text = hybrid rrf (old text) − max(bm25 (old text), dense).\n")
    body = []
    for d, rows in data["heldout_rows"].items():
        m = {s: means(rows, s)["C@10"] for s in SYSTEMS}
        body.append([d, f"{m['hybrid rrf (old text)'] - max(m['bm25 (old text)'], m['dense']):+.1f}",
                     f"{m['hybrid rrf'] - max(m['bm25'], m['dense']):+.1f}"])
    md.append(markdown_table(["dataset", "Δ old text (RRF)", "Δ new text (RRF)"], body))
    md.append("\nWhat RRF throws away (train parts): queries whose better single list has every gold tool in its "
              "top 10 while RRF's top 10 does not; median ranks (100 deep, 101 = absent) of the gold tools RRF "
              "pushed out and of the tools that took their places, in the better (strong) and the other (weak) list.\n")
    body = []
    for d, per_text in data["rrf_displacement"].items():
        for text, x in per_text.items():
            body.append([d, text, x["strong"], f"{x['lost']} / {x['queries']}",
                         f"{x['gold_missing_from_weak']} / {x['gold_pushed_out']}",
                         f"{x['gold_median_rank_strong']} / {x['gold_median_rank_weak']}",
                         f"{x['intruder_median_rank_strong']} / {x['intruder_median_rank_weak']}"])
    md.append(markdown_table(["dataset", "BM25 text", "strong list", "queries lost", "pushed-out gold absent from weak",
                              "pushed-out gold rank strong / weak", "intruder rank strong / weak"], body))
    return "\n".join(md)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap", type=int, default=300, help="held-out queries per dataset (seeded sample)")
    args = parser.parse_args()
    start = time.perf_counter()
    grid, train_best, heldout_rows, parts, displacement = {}, {}, {}, {}, {}
    for name in BUNDLED:
        corpus, train, held = dataset_parts(name)
        held = seeded_sample(held, args.cap)
        parts[name] = {"train": len(train), "heldout": len(held), "tools": len(corpus)}
        encoder = build_index(corpus, "dense", cache_size=0)
        vectors = SharedQueryVectors(encoder, [t.context_text() for t in train + held])
        indexes = build_systems(corpus, vectors)
        grid[name] = weight_grid(indexes, train)
        train_single = rows_for({s: indexes[s] for s in ("bm25", "dense")}, train)
        train_best[name] = max(means(train_single, "bm25")["C@10"], means(train_single, "dense")["C@10"])
        heldout_rows[name] = rows_for(indexes, held)
        displacement[name] = {"old": rrf_displacement(indexes, train, "bm25 (old text)"),
                              "new": rrf_displacement(indexes, train, "bm25")}
        m = {s: round(means(heldout_rows[name], s)["C@10"], 1) for s in SYSTEMS}
        print(f"[{time.perf_counter() - start:5.0f} s] {name}: held-out C@10 {m}", flush=True)
    chosen = choose_weight(grid, train_best)
    data = {"seed": SEED, "cap": args.cap, "parts": parts, "weight_grid": list(WEIGHT_GRID), "grid": grid,
            "train_best_single": train_best, "chosen_weight": chosen, "index_weight": f"{HYBRID_BM25_WEIGHT:.2f}",
            "heldout": {d: {s: means(rows, s) for s in SYSTEMS} for d, rows in heldout_rows.items()},
            "heldout_rows": heldout_rows, "rrf_displacement": displacement, "wall_s": round(time.perf_counter() - start, 1)}
    write_report("fusion", data, "Hybrid fusion (BM25 + MiniLM)", report_markdown(data))
    print(report_markdown(data))
    if chosen != data["index_weight"]:
        print(f"note: the train parts choose w = {chosen}, the index default is {data['index_weight']}")


if __name__ == "__main__":
    main()
