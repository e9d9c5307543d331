"""Does the hybrid hold on a library its encoder saw only part of?

A fine-tuned encoder keys its hybrid BM25 weight on the library: each training library's own weight
(tuned on its set-aside queries), the zero-shot weight for a library it never saw, and for a
library that shares some of its tools with the training libraries ``w = Σ_L f_L · w_L + (1 − Σ_L f_L)
· w_zero`` by the share ``f_L`` of its tools from each training library L
(``retrieval.models.overlap_bm25_weight``). This measures that rule where it applies.

For each leave-one-out model ``minus_B`` of ``benchmarks/retriever_mixture.py`` (trained on every
source of the mixture but B) and each other source A, the library is A ∪ B: tools A's model saw
(A's whole library was in its training) and tools it never saw (B's). Queries: a seeded sample of
``--queries`` from each of the two held-out parts (no model trained on any of them), gold ids
mapped into the union (every id is prefixed ``<source>/``; the tools' texts are unchanged, so the
seen share is what the model folder's tool hashes say). Per library, C@10 and N@5 per query of BM25,
the model's dense index, the hybrid at the weight ``build_index`` picks, and for comparison the
hybrid at the two rules before: the pooled in-domain weight mixed by the seen share
(``f · w_pooled + (1 − f) · w_zero``) and the zero-shot weight alone. The bar, per metric: hybrid −
its better part (by mean, paired per query) ≥ −1 point.

Not run in CI: it needs the trained leave-one-out models (``python -m benchmarks.retriever_mixture
--runs minus_seal_tools minus_ultratool ... --budget-minutes 12``).

    python -m benchmarks.partly_seen [--runs runs/retriever_mixture] [--queries 100]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from benchmarks._report import ROOT, markdown_table, weights_fingerprint, write_report  # noqa: E402

METRICS = ("C@10", "N@5")
MARGIN = 1.0  # points


def union_library(parts: Sequence[tuple[str, Any, Sequence[Any]]]) -> tuple[Any, list[Any]]:
    """``(corpus, tasks)``: the tools of every ``(name, corpus, tasks)`` part under ids ``<name>/<id>``
    (libraries may share an id), texts unchanged, and the tasks with ids and gold mapped the same way."""
    from toolgym.retrieval.corpus import ToolCorpus

    tools, tasks = [], []
    for name, corpus, part_tasks in parts:
        tools += [dataclasses.replace(t, id=f"{name}/{t.id}") for t in corpus.tools]
        tasks += [dataclasses.replace(t, id=f"{name}/{t.id}", gold=type(t.gold)(f"{name}/{g}" for g in t.gold))
                  for t in part_tasks]
    first = parts[0][1]
    corpus = ToolCorpus(tools, name="+".join(p[0] for p in parts), text_template=first.text_template,
                        split_identifiers=first.split_identifiers)
    return corpus, tasks


def query_rows(index: Any, tasks: Sequence[Any]) -> list[dict[str, Any]]:
    from toolgym.retrieval.metrics import completeness_at_k, ndcg_at_k

    ranked = index.search_batch([t.context_text() for t in tasks], k=10)
    return [{"task_id": t.id, "C@10": 100.0 * completeness_at_k(r.ids, t.gold, 10),
             "N@5": 100.0 * ndcg_at_k(r.ids, t.gold, 5)} for t, r in zip(tasks, ranked)]


def margin(parts: dict[str, list[dict[str, Any]]], fused: list[dict[str, Any]], metric: str) -> dict[str, Any]:
    """The fused rows against the better (by mean) of ``parts``: paired gain and se in points."""
    from toolgym.evaluation.evaluate import paired_gain

    means = {k: sum(r[metric] for r in rows) / len(rows) for k, rows in parts.items()}
    better = max(means, key=lambda k: (means[k], k))
    g = paired_gain([r[metric] for r in parts[better]], [r[metric] for r in fused])
    return {"better": better, "gain": g["gain"], "se": g["se"], "holds": g["gain"] >= -MARGIN}


def library_cell(model: str, parts: Sequence[tuple[str, Any, Sequence[Any]]]) -> dict[str, Any]:
    """Every method on one union library: rows, means, the weights used, the margins."""
    from toolgym.retrieval import build_index
    from toolgym.retrieval.models import (HYBRID_SETTINGS_FILE, LIBRARY_WEIGHTS_KEY, overlap_bm25_weight,
                                          read_model_settings, seen_share)

    corpus, tasks = union_library(parts)
    settings = read_model_settings(model, HYBRID_SETTINGS_FILE, "bm25_weight") or {}
    zero_weight = settings.get("zero_shot_bm25_weight")
    rows = {"bm25": query_rows(build_index(corpus, "bm25"), tasks),
            "dense": query_rows(build_index(corpus, "dense", model=model), tasks)}
    hybrid = build_index(corpus, "hybrid", model=model)
    rows["hybrid"] = query_rows(hybrid, tasks)
    if zero_weight is not None:
        rows["hybrid at the zero-shot weight"] = query_rows(
            build_index(corpus, "hybrid", model=model, bm25_weight=zero_weight), tasks)
    libraries = settings.get(LIBRARY_WEIGHTS_KEY)
    if libraries and zero_weight is not None:  # the rule before a weight per library: one pooled in-domain weight
        share = seen_share(" ".join(e["tool_hashes"] for e in libraries.values()), corpus.texts())
        pooled = overlap_bm25_weight([(share, float(settings["bm25_weight"]))], float(zero_weight))
        rows["hybrid at the pooled weight"] = query_rows(build_index(corpus, "hybrid", model=model, bm25_weight=pooled), tasks)
    means = {k: {m: sum(r[m] for r in v) / len(v) for m in METRICS} for k, v in rows.items()}
    base = {"bm25": rows["bm25"], "dense": rows["dense"]}
    margins = {k: {m: margin(base, rows[k], m) for m in METRICS} for k in rows if k.startswith("hybrid")}
    return {"library": corpus.name, "tools": len(corpus), "queries": len(tasks), "weight": hybrid.bm25_weight,
            "weight_from": hybrid.bm25_weight_source, "zero_shot_weight": zero_weight,
            "means": means, "margins": margins, "holds": all(v["holds"] for v in margins["hybrid"].values()),
            "rows": rows}


def markdown(cells: list[dict[str, Any]]) -> str:
    table = []
    for c in cells:
        def cell_margin(key: str) -> str:
            if key not in c["margins"]:
                return "-"
            return " / ".join(f"{c['margins'][key][m]['gain']:+.1f} ± {c['margins'][key][m]['se']:.1f}" for m in METRICS)

        table.append([c["model"], c["library"], c["tools"], c["queries"], c["weight_from"], f"{c['weight']:.3f}",
                      *(" / ".join(f"{c['means'][k][m]:.1f}" for m in METRICS) for k in ("bm25", "dense", "hybrid")),
                      cell_margin("hybrid"), cell_margin("hybrid at the pooled weight"),
                      cell_margin("hybrid at the zero-shot weight"), "✔" if c["holds"] else "✘"])
    held = sum(c["holds"] for c in cells)

    def holding(key: str) -> int:
        return sum(all(v["holds"] for v in c["margins"][key].values()) for c in cells if key in c["margins"])

    before = [f"{holding(k)} at {k.removeprefix('hybrid at ')}" for k in ("hybrid at the pooled weight",
              "hybrid at the zero-shot weight") if any(k in c["margins"] for c in cells)]
    return (markdown_table(["model", "library (seen + unseen)", "tools", "queries", "weight from", "w",
                            "BM25 C@10 / N@5", "dense", "hybrid", "hybrid − better part (C@10 / N@5, ± paired se)",
                            "same at the pooled weight", "same at the zero-shot weight", f"≥ −{MARGIN:g} on both"], table)
            + f"\n\nThe hybrid holds within {MARGIN:g} point of its better part on both metrics on {held} of "
            f"{len(cells)} partly-seen libraries" + (f" ({', '.join(before)})." if before else "."))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "fit_retriever_mixture.yaml"))
    ap.add_argument("--runs", default="runs/retriever_mixture", help="folder of the minus_<source> training runs")
    ap.add_argument("--queries", type=int, default=100, help="held-out queries per source of each library")
    ap.add_argument("--no-report", action="store_true", help="print only")
    args = ap.parse_args(argv)
    from benchmarks.retriever_mixture import leave_one_out_models, load_mixture

    _, sources = load_mixture(Path(args.config), None)
    cells, models = [], []
    for unseen, model in leave_one_out_models(Path(args.runs), sources):
        models.append({"model": str(model), "weights_sha256": weights_fingerprint(model)})
        for seen in sources:
            if seen.name == unseen.name:
                continue
            parts = [(s.name, s.corpus, random.Random(0).sample(list(s.heldout), min(args.queries, len(s.heldout))))
                     for s in (seen, unseen)]
            cell = library_cell(str(model), parts)
            cell["model"] = f"minus_{unseen.name}"
            cells.append(cell)
            print(f"minus_{unseen.name} on {cell['library']}: w {cell['weight']:.3f} ({cell['weight_from']}), "
                  f"holds {cell['holds']}", flush=True)
    if not cells:
        raise SystemExit(f"no leave-one-out model under {args.runs}; run benchmarks/retriever_mixture.py first")
    md = markdown(cells)
    if not args.no_report:
        write_report("partly_seen", {"models": models, "queries_per_source": args.queries,
                                     "cells": [{k: v for k, v in c.items() if k != "rows"} for c in cells],
                                     "rows": {f"{c['model']}/{c['library']}": c["rows"] for c in cells}},
                     "Hybrid on libraries partly seen in training", md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
