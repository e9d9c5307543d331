"""The hybrid's BM25 weight for a library the encoder never trained on, tuned leave-one-library-out.

``toolgym fit-retriever`` tunes the hybrid weight on set-aside queries of the encoder's own training
libraries, where the encoder is at its strongest; on any other corpus ``build_index`` uses
``zero_shot_bm25_weight`` instead. This tunes that weight on the only zero-shot data the project has
without touching a held-out part: each leave-one-out model of ``benchmarks/retriever_mixture.py``
(``runs/retriever_mixture/minus_<source>/model``) on the *training* queries of the library it left
out (a seeded sample of ``--queries``; the model never trained on any of them), with the rule
``fit-retriever`` uses in-domain (``fitting.retriever.tune_hybrid_bm25_weight``: least shortfall
below the better of BM25 and dense beyond max(1, 2 paired se) on any library, then the largest mean
of (N@5 + C@10) / 2). Writes ``benchmarks/results/zero_shot_weight.json`` (every grid point's margins
per library) and a section of docs/benchmarks.md. Not run in CI: it needs the trained leave-one-out
models (about 4 minutes on 2 cores once they exist).

    python -m benchmarks.zero_shot_weight [--queries 300]
"""
from __future__ import annotations

import argparse
import os
import random
import sys
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from benchmarks._report import ROOT, markdown_table, weights_fingerprint, write_report  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "fit_retriever_mixture.yaml"))
    ap.add_argument("--runs", default="runs/retriever_mixture", help="folder of the minus_<source> training runs")
    ap.add_argument("--queries", type=int, default=300)
    args = ap.parse_args(argv)
    from benchmarks.retriever_mixture import leave_one_out_models, load_mixture

    from toolgym.fitting.retriever import tune_hybrid_bm25_weight
    from toolgym.retrieval import build_index

    _, sources = load_mixture(Path(args.config), None)
    dev, used = [], []
    for s, model in leave_one_out_models(Path(args.runs), sources):
        tasks = random.Random(0).sample(list(s.train), min(args.queries, len(s.train)))
        lex, cos = build_index(s.corpus, "hybrid", model=str(model), bm25_weight=0.5).hybrid_score_rows(
            [t.context_text() for t in tasks])
        dev.append((tasks, s.corpus.ids, lex, cos))
        used.append({"source": s.name, "model": str(model), "weights_sha256": weights_fingerprint(model),
                     "queries": len(tasks)})
        print(f"{s.name}: {len(tasks)} training queries scored by {model}", flush=True)
    if not dev:
        raise SystemExit(f"no leave-one-out model under {args.runs}; run benchmarks/retriever_mixture.py first")
    grid = [i / 20 for i in range(21)]
    w, table = tune_hybrid_bm25_weight(dev, grid)
    names = [u["source"] for u in used]
    rows = [[f"**{key}**" if float(key) == w else key, *(f"{m:+.1f} ± {se:.1f}" for m, se in zip(t["margins"], t["margin_se"])),
             f"{t['shortfall']:.1f}", f"{t['objective']:.1f}"] for key, t in table.items()]
    sizes = ", ".join(f"{u['source']} {u['queries']}" for u in used)
    body = (f"Each leave-one-out model on a seeded sample of the training queries of the library it left out "
            f"({sizes}; never trained on, never a held-out query). "
            f"Hybrid C@10 − the better of BM25 and that model's dense index, ± paired se, per weight; shortfall beyond "
            f"max(1, 2 se), and the mean of (N@5 + C@10) / 2. Chosen (bold): **w = {w:g}**.\n\n"
            + markdown_table(["w", *names, "shortfall", "objective"], rows))
    write_report("zero_shot_weight", {"chosen": w, "sources": used, "grid": table}, "Hybrid weight on a library the encoder never saw",
                 body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
