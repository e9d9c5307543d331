"""A first retrieval ladder (MagicSelector §4): every rung on the same queries, N@5 and C@10 in %.

Rungs: BM25, dense (packaged MiniLM), hybrid (RRF), fine-tuned dense (``toolgym fit-retriever``),
hybrid with the fine-tuned encoder (the first stage that the reranker reorders, top 20), then
+ point-wise rerank, + list-wise, + self-distilled negatives (the three stages of
``toolgym fit-reranker``, reordering the top 20 of the retriever the reranker was trained on), + dual-boundary dynamic top-K (Algorithm 2) on the last reranker's
scores, reported as mean K and C@K.

Data: Seal-Tools — train on the ``train`` split (dev minus 100 held-out multi-tool tasks),
evaluate on ``heldout`` (checked disjoint; ``--seal-rerank-sample`` reranks a seeded sample of
it when the CPU budget is short); StableToolBench — zero-shot (never trained on), every
retriever rung on all 765 queries and, because a CPU cross-encoder over 765 x 20 pairs per stage
does not fit this box's budget, the reranker rungs on a seeded sample (``--stb-sample``) with the
retriever rungs repeated on that same sample for comparison.

Training runs are reused when their folders exist (``--retriever-run``, ``--reranker-run``),
else trained here with ``--budget-minutes`` each.

Run: ``python benchmarks/ladder.py [--stb-sample 100] [--budget-minutes 6]``.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import ROOT, markdown_table, write_report  # noqa: E402

from toolgym.data import load_dataset  # noqa: E402
from toolgym.retrieval import build_index, dual_boundary_dynamic_top_k  # noqa: E402
from toolgym.retrieval.metrics import completeness_at_k, ndcg_at_k  # noqa: E402
from toolgym.data.training_data import check_disjoint  # noqa: E402

DEPTH = 20  # the candidate list reranked and cut by dynamic top-K (`toolgym eval --candidates`)


def metrics(rankings, tasks) -> dict[str, float]:
    return {
        "N@5": 100 * float(np.mean([ndcg_at_k(r, t.gold, 5) for r, t in zip(rankings, tasks)])),
        "C@10": 100 * float(np.mean([completeness_at_k(r, t.gold, 10) for r, t in zip(rankings, tasks)])),
        "C@20": 100 * float(np.mean([completeness_at_k(r, t.gold, 20) for r, t in zip(rankings, tasks)])),
    }


def dynamic_cut(results, tasks, index) -> dict[str, float]:
    """Algorithm 2 on each reranked list (scores descending) with the index's tool embeddings."""
    emb = index.tool_embeddings()
    ks, comp = [], []
    for res, task in zip(results, tasks):
        rows = [index.corpus.index_of(i) for i in res.ids]
        k = dual_boundary_dynamic_top_k(np.asarray(res.scores), emb[rows])
        ks.append(k)
        comp.append(completeness_at_k(res.ids, task.gold, k))
    return {"mean_K": float(np.mean(ks)), "C@K": 100 * float(np.mean(comp))}


def ensure_runs(args) -> tuple[Path, Path]:
    """Reuse the training runs, or train them with the repository configs and ``--budget-minutes``."""
    from toolgym.trainers.fit_common import load_fit_config

    retr, rerank = Path(args.retriever_run), Path(args.reranker_run)
    if not (retr / "model").is_dir():
        from toolgym.trainers.fit_retriever import DEFAULTS, fit_retriever

        cfg = load_fit_config(ROOT / "configs" / "fit_retriever.yaml", DEFAULTS)
        cfg.output_dir, cfg.budget_minutes = str(retr), args.budget_minutes
        fit_retriever(cfg)
    if not (rerank / "summary.json").exists():
        from toolgym.trainers.fit_reranker import DEFAULTS, fit_reranker

        cfg = load_fit_config(ROOT / "configs" / "fit_reranker.yaml", DEFAULTS)
        cfg.output_dir, cfg.budget_minutes = str(rerank), args.budget_minutes
        cfg.retriever, cfg.retriever_model = "hybrid", str(retr / "model")
        fit_reranker(cfg)
    return retr, rerank


def ladder_on(name, corpus, tasks, tuned_model, stages, rerank_tasks, log, first_stage_rung="BM25") -> dict:
    """Every rung on ``tasks`` (retrievers) and ``rerank_tasks`` (the rerank rungs and, again, the retrievers)."""
    from toolgym.retrieval.rerank import CrossEncoderReranker

    out: dict = {"queries": len(tasks), "rerank_queries": len(rerank_tasks), "rungs": {}}
    sampled = rerank_tasks is not tasks
    indexes = {
        "BM25": build_index(corpus, "bm25", cache_size=0),
        "dense (MiniLM)": build_index(corpus, "dense", cache_size=0, show_progress=True),
        "hybrid (BM25 + MiniLM)": build_index(corpus, "hybrid", cache_size=0),
        "fine-tuned dense": build_index(corpus, "dense", model=tuned_model, cache_size=0, show_progress=True),
        "hybrid (BM25 + fine-tuned)": build_index(corpus, "hybrid", model=tuned_model, cache_size=0),
    }
    queries = [t.context_text() for t in tasks]
    rq = [t.context_text() for t in rerank_tasks]
    for rung, index in indexes.items():
        t0 = time.perf_counter()
        m = metrics([r.ids for r in index.search_batch(queries, k=DEPTH)], tasks)
        if sampled:
            found = index.search_batch(rq, k=DEPTH)
            m["on_rerank_sample"] = metrics([r.ids for r in found], rerank_tasks)
        out["rungs"][rung] = m
        log(f"{name} {rung}: {m} ({time.perf_counter() - t0:.0f} s)")
    first_index = indexes[first_stage_rung]
    first_stage = first_index.search_batch(rq, k=DEPTH)
    last = None
    for label, folder in stages:
        t0 = time.perf_counter()
        reranker = CrossEncoderReranker(folder, max_length=128, corpus=corpus)
        last = reranker.rerank_batch(rq, first_stage, k=DEPTH)
        m = metrics([r.ids for r in last], rerank_tasks)
        out["rungs"][label] = m
        log(f"{name} {label}: {m} ({time.perf_counter() - t0:.0f} s)")
    if last is not None:
        out["rungs"]["+ dynamic top-K"] = dynamic_cut(last, rerank_tasks, first_index)
        log(f"{name} + dynamic top-K: {out['rungs']['+ dynamic top-K']}")
    return out


def table(res: dict, sample_note: str) -> str:
    rows = []
    for rung, m in res["rungs"].items():
        if "mean_K" in m:
            rows.append([rung, "—", "—", "—", f"K = {m['mean_K']:.1f}, C@K = {m['C@K']:.1f}"])
            continue
        s = m.get("on_rerank_sample", m)
        rows.append([rung, round(m["N@5"], 1), round(m["C@10"], 1), round(m["C@20"], 1),
                     f"N@5 {s['N@5']:.1f} / C@10 {s['C@10']:.1f}" if "on_rerank_sample" in m else sample_note])
    return markdown_table(["rung", "N@5", "C@10", "C@20", "same rung on the rerank queries / note"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--retriever-run", default=str(ROOT / "runs" / "fit_retriever"))
    parser.add_argument("--reranker-run", default=str(ROOT / "runs" / "fit_reranker"))
    parser.add_argument("--budget-minutes", type=float, default=6.0, help="training budget of each missing run")
    parser.add_argument("--stb-sample", type=int, default=100, help="StableToolBench queries for the rerank rungs")
    parser.add_argument("--seal-rerank-sample", type=int, default=0,
                        help="Seal-Tools held-out queries for the rerank rungs (0 = all 100)")
    parser.add_argument("--skip-stb", action="store_true", help="Seal-Tools only (when the CPU budget is short)")
    parser.add_argument("--only-stb", action="store_true",
                        help="StableToolBench only, written as its own section (results/ladder_stb.json)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - start:6.0f} s] {msg}", flush=True)

    retr, rerank = ensure_runs(args)
    tuned = str(retr / "model")
    rsum = json.loads((rerank / "summary.json").read_text())
    labels = {"pointwise": "+ point-wise rerank (eq. 16)", "listwise": "+ list-wise (eq. 17-19)",
              "distilled": "+ self-distilled negatives (Alg. 1, eq. 20)"}
    stages = [(labels[s], info["model_dir"]) for s, info in rsum["stages"].items()]
    # The rerank rungs reorder the list of the retriever the reranker was trained on.
    first = {"bm25": "BM25", "dense": "fine-tuned dense", "hybrid": "hybrid (BM25 + fine-tuned)"}[rsum["retriever"]]
    if rsum["retriever"] != "bm25" and not rsum.get("retriever_model"):
        first = {"dense": "dense (MiniLM)", "hybrid": "hybrid (BM25 + MiniLM)"}[rsum["retriever"]]
    warnings.simplefilter("ignore", UserWarning)

    train, held = load_dataset("seal_tools", split="train"), load_dataset("seal_tools", split="heldout")
    check_disjoint(train.tasks, held.tasks)
    seal_rerank = held.tasks
    if 0 < args.seal_rerank_sample < len(held.tasks):
        pick = sorted(random.Random(args.seed).sample(range(len(held.tasks)), args.seal_rerank_sample))
        seal_rerank = [held.tasks[i] for i in pick]
    seal = None if args.only_stb else ladder_on("seal_tools", held.corpus, held.tasks, tuned, stages, seal_rerank, log, first)
    stb = load_dataset("stabletoolbench")
    sample = sorted(random.Random(args.seed).sample(range(len(stb.tasks)), min(args.stb_sample, len(stb.tasks))))
    stb_res = None
    if not args.skip_stb:
        stb_res = ladder_on("stabletoolbench", stb.corpus, stb.tasks, tuned, stages, [stb.tasks[i] for i in sample], log, first)

    rsummary = json.loads((retr / "summary.json").read_text()) if (retr / "summary.json").exists() else {}
    payload = {
        "depth": DEPTH, "seal_tools_heldout": seal, "stabletoolbench_zero_shot": stb_res,
        "retriever_run": {k: rsummary.get(k) for k in ("steps", "training_s", "elapsed_s", "budget_minutes", "rounds")},
        "reranker_run": {"steps": rsum.get("steps"), "elapsed_s": rsum.get("elapsed_s"),
                         "budget_minutes": rsum.get("budget_minutes"), "retriever": rsum.get("retriever"),
                         "stages": {s: {"steps": v["steps"], "examples": v["examples"]} for s, v in rsum["stages"].items()}},
        "targets": {"seal_tools_heldout": {"C@10": 80, "N@5": 85}, "stabletoolbench_zero_shot": {"C@10": 70}},
        "wall_s": time.perf_counter() - start,
    }
    seal_md = [] if seal is None else [
        f"**Seal-Tools held-out** ({len(held.tasks)} queries; targets C@10 >= 80, N@5 >= 85; BM25 on all of dev: 59.4 / 73.0)\n",
        (f"Rerank rungs on a seeded sample of {len(seal_rerank)} of them.\n" if seal_rerank is not held.tasks else ""),
        table(seal, "—" if seal_rerank is held.tasks else f"on the {len(seal_rerank)}-query sample"),
        "",
    ]
    md = [
        "Seal-Tools: trained on `train` (600 dev tasks), evaluated on `heldout` (100 multi-tool dev tasks, never trained on). "
        f"StableToolBench: zero-shot. Rerank rungs reorder the top 20 of the {first} list. "
        f"Training budgets: retriever {rsummary.get('budget_minutes')} min ({rsummary.get('steps')} steps), "
        f"reranker {rsum.get('budget_minutes')} min ({rsum.get('steps')} steps in all, trained on the top {rsum.get('candidates')} "
        f"of `{rsum.get('retriever')}` for the training queries), niced, on a shared 2-core CPU.\n",
        *seal_md,
    ]
    if stb_res is None:
        md.append("**StableToolBench zero-shot**: not in this run (`--skip-stb`; `--only-stb` writes its own section); "
                  "target C@10 >= 70 (BM25 57.9, hybrid 61.7).")
    else:
        md += [
            f"**StableToolBench zero-shot** ({len(stb.tasks)} queries for retriever rungs; rerank rungs on a seeded sample "
            f"of {len(sample)}; target C@10 >= 70)\n",
            table(stb_res, f"on the {len(sample)}-query sample"),
        ]
    name = "ladder_stb" if args.only_stb else "ladder"
    write_report(name, payload, "Retrieval ladder" + (": StableToolBench" if args.only_stb else ""), "\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
