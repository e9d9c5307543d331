"""The retrieval ladder (MagicSelector §4) on every ladder dataset: one table per dataset.

The rungs and datasets are :mod:`toolgym.evaluation.ladder`'s (``toolgym eval ladder`` prints the
same table for one dataset). Trained rungs use ``--retriever-run`` / ``--reranker-run`` (a
``toolgym fit-*`` run folder) and ``--decomposer``; a run that is not there is a ``not trained``
row. Nothing is trained here: the fit commands are the lead's to run when the CPU allows.

Run: ``nice -n 15 python benchmarks/ladder.py [--datasets seal_tools,api_bank] [--limit 300]``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import RESULTS, ROOT, write_report  # noqa: E402

from toolgym.evaluation.ladder import DEFAULT_LIMIT, ladder_markdown, ladder_names, load_ladder_data, run_ladder  # noqa: E402


def dataset_markdown(name: str, res: dict) -> str:
    """One dataset's heading and table, from its entry in the payload (re-rendered by the docs check)."""
    return (f"**{name}** ({res['queries']} of {res['of']} queries; {res['note']}; {res['wall_s']:.0f} s)\n\n"
            + ladder_markdown(res))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default=",".join(ladder_names()), help="comma-separated ladder datasets")
    parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help="queries per dataset (a seeded sample)")
    parser.add_argument("--retriever-run", default=str(ROOT / "runs" / "fit_retriever"))
    parser.add_argument("--reranker-run", default=str(ROOT / "runs" / "fit_reranker"))
    parser.add_argument("--decomposer", default=None, help="trained decomposition policy (optional)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default="ladder", help="results/<name>.json and its docs/benchmarks.md section")
    args = parser.parse_args()
    start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - start:6.0f} s] {msg}", flush=True)

    retriever = str(Path(args.retriever_run) / "model") if (Path(args.retriever_run) / "model").is_dir() else None
    reranker = args.reranker_run if (Path(args.reranker_run) / "summary.json").is_file() else None
    results, skipped = {}, {}
    for name in [n.strip() for n in args.datasets.split(",") if n.strip()]:
        try:
            data = load_ladder_data(name, args.limit, args.seed)
        except FileNotFoundError as exc:  # UltraTool reads the shared data, which a fresh clone lacks
            skipped[name] = str(exc)
            log(f"skip {name}: {exc}")
            continue
        t0 = time.perf_counter()
        results[name] = run_ladder(data, retriever_model=retriever, reranker_model=reranker,
                                   decomposer=args.decomposer, log=log)
        results[name]["wall_s"] = time.perf_counter() - t0

    md = [f"Every rung on the same queries per dataset (a seeded sample of at most {args.limit}); N@5, C@10, C@20 "
          "in %; the dynamic top-K row gives the mean K and C@K of its cut. Rerank and decomposition rungs stack on "
          "the hybrid first stage (with the fine-tuned encoder when there is one; a reranker run reorders the list of "
          "the retriever it was trained on); dynamic top-K cuts the clause rung's list (top 20). BM25 uses the default "
          "text (split identifiers + parameters). "
          f"Trained models: retriever `{retriever or 'none'}`, reranker `{reranker or 'none'}`, "
          f"decomposer `{args.decomposer or 'none'}`. Training never sees an evaluated query (Seal-Tools: `heldout`, "
          "checked disjoint from `train`; every other set is zero-shot).\n"]
    for name, res in results.items():
        md += [dataset_markdown(name, res), ""]
    for name, why in skipped.items():
        md.append(f"**{name}**: skipped ({why})\n")
    # per-query rows (thousands) go to their own compact file: one line per dataset / rung
    per_query = {f"{name}/{label}": rows for name, res in results.items() for label, rows in res.pop("per_query").items()}
    (RESULTS / f"{args.name}_queries.json").write_text(
        "{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in per_query.items()) + "\n}\n")
    payload = {"limit": args.limit, "results": results, "skipped": skipped, "wall_s": time.perf_counter() - start,
               "per_query_file": f"benchmarks/results/{args.name}_queries.json"}
    title = "Retrieval ladder" if args.name == "ladder" else f"Retrieval ladder (`--name {args.name}`: {', '.join(results)})"
    write_report(args.name, payload, title, "\n".join(md),
                 script="ladder.py" if args.name == "ladder" else f"ladder.py --name {args.name}")
    print("\n".join(md))


if __name__ == "__main__":
    main()
