"""Does the reranker beat the list it reorders? Each stage against its input, per dataset.

Runs ``toolgym fit-reranker configs/fit_reranker_mixture.yaml`` (the progressive point-wise ->
list-wise -> self-distilled cross-encoder on the five-source training mixture, reordering the top
20 of the mixture bi-encoder's hybrid list), then reads every held-out query's N@5 and C@10 for
the input list, each stage alone (w = 0) and each stage interpolated with the first-stage score
at the weight tuned on set-aside training queries. The result file keeps those per-query rows;
the table gives each stage's mean and its paired difference from the input (± the standard
error of the per-query differences). A gain counts above two standard errors.

A finished run is not trained again: when ``benchmarks/results/reranker_mixture.json`` holds a
run of the same config (and model fingerprint of the first stage), ``--report`` rebuilds the table
from it alone. Not run in CI (about 35 min on 2 cores).

    python -m benchmarks.reranker_mixture            # train (budget from the config), write the table
    python -m benchmarks.reranker_mixture --report   # the table from the result file
    python -m benchmarks.reranker_mixture --from-run # the result file from a finished run folder (no training)
    python -m benchmarks.reranker_mixture --config configs/fit_reranker_mixture_warm.yaml \
        --out runs/fit_reranker_mixture_warm --name reranker_mixture_warm   # another recipe, its own file and section
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: shared CPUs collapse with spinning threads

from benchmarks._report import RESULTS, ROOT, markdown_table, weights_fingerprint, write_report  # noqa: E402

NAME = "reranker_mixture"
METRICS = ("N@5", "C@10")


def paired(rows: list[dict[str, Any]], base: list[dict[str, Any]], key: str) -> tuple[float, float]:
    """Mean and standard error of the per-query difference ``rows - base`` (in points of %;
    ``toolgym.evaluation.evaluate.paired_gain``)."""
    from toolgym.evaluation.evaluate import paired_gain

    if not rows:
        return 0.0, 0.0
    by_id = {r["task_id"]: r[key] for r in base}
    gain = paired_gain([100.0 * by_id[r["task_id"]] for r in rows], [100.0 * r[key] for r in rows])
    return gain["gain"], gain["se"]


def report(result: dict[str, Any]) -> str:
    """Rows: input, then each stage alone and interpolated; columns: per source N@5 / C@10 and the
    paired change of C@10 against the input. Then how many sources each stage beats its input on."""
    per_query = result["per_query"]
    sources = list(per_query)
    stages = list(result["summary"]["stages"])
    labels = ["input"] + [x for s in stages for x in (s, f"{s}+first_stage")]
    table, wins = [], {}
    for label in labels:
        cells = []
        beats = 0
        for src in sources:
            rows, base = per_query[src][label], per_query[src]["input"]
            means = [100.0 * sum(r[m] for r in rows) / len(rows) for m in METRICS]
            cell = " / ".join(f"{v:.1f}" for v in means)
            if label != "input":
                deltas = [paired(rows, base, m) for m in METRICS]
                cell += " (" + ", ".join(f"{d:+.1f} ± {se:.1f}" for d, se in deltas) + ")"
                beats += all(d > 0 for d, _ in deltas)
            cells.append(cell)
        if label != "input":
            wins[label] = beats
        name = label.replace("+first_stage", " + first stage")
        if label.endswith("+first_stage"):
            name += f" (w = {result['summary']['stages'][label.split('+')[0]]['first_stage_weight']:g})"
        table.append([name, *cells, "" if label == "input" else f"{wins[label]} / {len(sources)}"])
    s = result["summary"]
    legend = (
        f"N@5 / C@10 on each source's held-out part (first {s['config']['sources'][0]['eval_limit'] or 'all'} queries "
        f"per source at most), after reordering the top {s['candidates']} of the `{s['retriever']}` index on "
        f"`{s['retriever_model']}`; in brackets the paired change against the input list (± se over queries). "
        f"`+ first stage`: the stage's cross-encoder score interpolated with the input's score, "
        f"w · z(first stage) + (1 − w) · z(cross-encoder), w tuned on {s['dev_tasks']} set-aside training queries. "
        f"Last column: sources where both N@5 and C@10 rise. Training: {s['steps']} steps in "
        f"{s['training_s'] / 60:.1f} min of training (budget {s['budget_minutes']:g} min; "
        f"{s['elapsed_s'] / 60:.0f} min with the scoring between stages) on {s['train_tasks']} training queries."
    )
    return legend + "\n\n" + markdown_table(["rows", *sources, "beats its input on"], table)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/fit_reranker_mixture.yaml")
    ap.add_argument("--out", default="runs/fit_reranker_mixture", help="the training run folder")
    ap.add_argument("--report", action="store_true", help="only rebuild the table from the result file")
    ap.add_argument("--from-run", action="store_true", help="read a finished --out run folder instead of training")
    ap.add_argument("--no-report", action="store_true", help="print the table; leave docs/benchmarks.md alone")
    ap.add_argument("--name", default=NAME, help="result file and docs/benchmarks.md section (another recipe: another name)")
    args = ap.parse_args(argv)
    path = RESULTS / f"{args.name}.json"
    if not args.report:
        run = ROOT / args.out
        if not args.from_run:
            cmd = [sys.executable, "-m", "toolgym.cli.main", "fit-reranker", args.config, f"output_dir={args.out}"]
            print("$", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True, cwd=ROOT)
        summary = json.loads((run / "summary.json").read_text())
        result = {"config": args.config, "summary": summary,
                  "first_stage_sha256": weights_fingerprint(ROOT / summary["retriever_model"]) if summary["retriever_model"] else None,
                  "reranker_sha256": {st: weights_fingerprint(ROOT / info["model_dir"]) for st, info in summary["stages"].items()},
                  "per_query": json.loads((run / "heldout_per_query.json").read_text())}
    else:
        result = json.loads(path.read_text())
    body = report(result)
    if args.no_report:
        print(body)
        return 0
    title = "Reranker: each stage against the list it reorders" + ("" if args.name == NAME else f" (`{result['config']}`)")
    script = None if args.name == NAME else f"reranker_mixture.py --config {result['config']} --name {args.name}"
    write_report(args.name, result, title, body, script=script)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
