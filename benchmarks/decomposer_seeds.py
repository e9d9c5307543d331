"""A trained decomposer across seeds against the two fixed rules, per source: does it split only where
splitting pays?

Reads the ladder results of one decomposition policy per training seed (``python -m benchmarks.ladder
--heldout-of configs/fit_retriever_mixture.yaml --decomposer RUN --name NAME_seedK``, one file per
seed, all on the same queries and retriever) and, per source and metric (C@10, N@5, in points):

- the two fixed rules on those queries: the raw request (the hybrid first stage) and the clause
  splitter, and their better one; the per-query best of the two (the ceiling of a decomposer that
  splits exactly when it helps);
- each seed's policy, its difference from the better rule with the task-paired se (that model only),
  and the difference with the **seed as the unit** (mean ± seed-level se, t, df;
  :func:`benchmarks.credit_schemes.seed_level`);
- the two bars: the seed mean is **≥ the better rule − 1** (on both metrics), and **above both
  rules** (on both metrics ≥ the better − 1 and above the better on at least one: on UltraTool the
  per-query best equals the raw request's C@10, so no policy can be above it there).

The verdict holds when every source meets the first bar, at least two meet the second, and at least
three seeds stand behind it. An optional ``--warm LADDER`` adds the warm start's row.

    python -m benchmarks.decomposer_seeds --ladders benchmarks/results/ladder_mixture_decomposer_grpo_seed{0,1,2}.json \
        --warm benchmarks/results/ladder_mixture_decomposer.json
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._report import ROOT, markdown_table, write_report

RAW, CLAUSES, POLICY = "hybrid (BM25 + fine-tuned)", "+ decomposition (clause splitter)", "+ decomposition (trained policy)"
REQUEST_CLAUSES, GATED = "+ decomposition (request + clauses)", "+ decomposition (policy-gated request + clauses)"
POLICY_RUNGS = {"policy": POLICY, "gated": GATED}  # --policy-rung: the policy's own subtasks, or its decisions
METRICS = ("C@10", "N@5")
MARGIN = 1.0  # points: "at or above the better fixed rule - 1"
MIN_SEEDS, MIN_ABOVE = 3, 2


def per_query(ladder_path: str | Path) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """``{source: {rung: rows}}`` from a ladder results file's per-query file."""
    path = Path(ladder_path)
    payload = json.loads(path.read_text())
    rows_path = ROOT / payload["per_query_file"]  # an absolute path stays itself
    if not rows_path.exists():  # a ladder written elsewhere: its per-query file sits beside it
        rows_path = path.with_name(Path(payload["per_query_file"]).name)
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for key, rows in json.loads(rows_path.read_text()).items():
        source, _, rung = key.partition("/")
        out.setdefault(source, {})[rung] = rows
    return out


def _mean(rows: Sequence[dict[str, Any]], metric: str) -> float:
    return 100.0 * sum(float(r[metric]) for r in rows) / len(rows)


def _aligned(base: Sequence[dict[str, Any]], other: Sequence[dict[str, Any]], what: str) -> None:
    if [r["task_id"] for r in base] != [r["task_id"] for r in other]:
        raise ValueError(f"{what}: not the same queries in the same order")


def compare(seeds: dict[int, dict[str, dict[str, list[dict[str, Any]]]]],
            warm: dict[str, dict[str, list[dict[str, Any]]]] | None = None, policy: str = POLICY) -> dict[str, Any]:
    """Per source and metric: the fixed rules, each seed's ``policy`` rung and the seed-level
    difference from the better rule; the bars and the verdict (see the module docstring). The third
    rule, the request then its clauses, is shown where the ladder has it (the bars stay raw and clauses)."""
    from benchmarks.credit_schemes import seed_level
    from toolgym.evaluation.evaluate import paired_gain

    if not seeds:
        raise ValueError("no ladder file of a trained policy")
    first = seeds[min(seeds)]
    sources: dict[str, Any] = {}
    for source, rungs in first.items():
        if policy not in rungs:
            raise ValueError(f"{source}: the ladder has no trained-policy rung (run it with --decomposer)")
        raw, clauses = rungs[RAW], rungs[CLAUSES]
        _aligned(raw, clauses, f"{source} clauses")
        entry: dict[str, Any] = {"queries": len(raw), "metrics": {}}
        for metric in METRICS:
            fixed = {"raw": _mean(raw, metric), "clauses": _mean(clauses, metric)}
            better = max(fixed, key=lambda k: (fixed[k], k == "raw"))  # a tie goes to not splitting
            better_rows = raw if better == "raw" else clauses
            ceiling = 100.0 * sum(max(float(a[metric]), float(b[metric])) for a, b in zip(raw, clauses)) / len(raw)
            per_seed = {}
            for seed, ladder in sorted(seeds.items()):
                if source not in ladder or policy not in ladder[source]:
                    raise ValueError(f"seed {seed}: no trained-policy rung for {source}")
                other = ladder[source]
                for rung in (RAW, CLAUSES):  # every seed's ladder must be the same queries and retriever
                    if [r[metric] for r in other[rung]] != [r[metric] for r in rungs[rung]]:
                        raise ValueError(f"seed {seed}, {source}: the {rung} rung differs from seed {min(seeds)}'s "
                                         "(another query sample or retriever): not comparable")
                rows = other[policy]
                _aligned(better_rows, rows, f"seed {seed}, {source} policy")
                g = paired_gain([r[metric] for r in better_rows], [r[metric] for r in rows])
                per_seed[seed] = {"policy": _mean(rows, metric), "gain": 100 * g["gain"], "se": 100 * g["se"]}
            level = seed_level([v["gain"] for v in per_seed.values()])
            mean_policy = sum(v["policy"] for v in per_seed.values()) / len(per_seed)
            m = {**fixed, "better": better, "better_value": fixed[better], "ceiling": ceiling, "per_seed": per_seed,
                 "policy_mean": mean_policy, "seed_level": level,
                 "holds": mean_policy >= fixed[better] - MARGIN, "above": mean_policy > fixed[better]}
            if REQUEST_CLAUSES in rungs:  # the third rule, shown beside the two the bars use
                m["request_clauses"] = _mean(rungs[REQUEST_CLAUSES], metric)
            if warm is not None and source in warm and policy in warm[source]:
                m["warm"] = _mean(warm[source][policy], metric)
            entry["metrics"][metric] = m
        ms = entry["metrics"].values()
        entry["holds"] = all(m["holds"] for m in ms)
        entry["above_both"] = entry["holds"] and any(m["above"] for m in ms)
        sources[source] = entry
    above = [s for s, e in sources.items() if e["above_both"]]
    failing = [s for s, e in sources.items() if not e["holds"]]
    n = len(seeds)
    return {"seeds": sorted(seeds), "policy_rung": policy, "sources": sources, "above_both": above, "below_bar": failing,
            "verdict": not failing and len(above) >= MIN_ABOVE and n >= MIN_SEEDS,
            "bars": {"margin": MARGIN, "min_above": MIN_ABOVE, "min_seeds": MIN_SEEDS}}


def markdown(result: dict[str, Any]) -> str:
    seeds = result["seeds"]
    rows = []
    for source, entry in result["sources"].items():
        for metric, m in entry["metrics"].items():
            lvl = m["seed_level"]
            level = (f"{lvl['mean']:+.1f} ± {lvl['se']:.1f} (t {lvl['t']:.2f}, df {lvl['df']})"
                     if lvl.get("se") and lvl.get("t") is not None else f"{lvl['mean']:+.1f} (n {lvl['n']})")
            rows.append([source, metric, f"{m['raw']:.1f}", f"{m['clauses']:.1f}",
                         f"{m['request_clauses']:.1f}" if "request_clauses" in m else "-", f"{m['ceiling']:.1f}",
                         f"{m['warm']:.1f}" if "warm" in m else "-",
                         " / ".join(f"{v['policy']:.1f} ({v['gain']:+.1f} ± {v['se']:.1f})" for v in m["per_seed"].values()),
                         level, ("✔" if m["holds"] else "✘") + (" above" if m["above"] else "")])
    table = markdown_table(["source", "metric", "raw", "clauses", "request + clauses", "per-query best of raw and clauses",
                            "warm start",
                            f"`{result.get('policy_rung', POLICY)}`, seeds {', '.join(map(str, seeds))} "
                            "(vs better rule ± task-paired se)",
                            "vs better rule, seed level", f"≥ better − {MARGIN:g}"], rows)
    verdict = ("**Holds**" if result["verdict"] else "**Does not hold**") + (
        f": {len(result['seeds'])} seed(s); every source at or above the better fixed rule − {MARGIN:g}: "
        f"{'yes' if not result['below_bar'] else 'no (' + ', '.join(result['below_bar']) + ')'}; above both rules on "
        f"{len(result['above_both'])} source(s) ({', '.join(result['above_both']) or 'none'}; {MIN_ABOVE} needed); "
        f"{MIN_SEEDS} seeds needed.")
    return (table + "\n\nThe bars use the seed mean of the policy's value; the seed-level column is the mean ± se of "
            "the per-seed differences from the better rule (the seed is the unit), the per-seed ± is task-paired "
            "(that model only).\n\n" + verdict)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ladders", nargs="+", required=True, help="one ladder results file per seed (seedK in the name)")
    ap.add_argument("--warm", default=None, help="the warm start's ladder results file (optional row)")
    ap.add_argument("--name", default="decomposer_seeds", help="results/<name>.json and its docs/benchmarks.md section")
    ap.add_argument("--policy-rung", choices=sorted(POLICY_RUNGS), default="policy",
                    help="judge the policy's own subtasks (policy) or its split decisions with the rule's words (gated)")
    ap.add_argument("--no-report", action="store_true", help="print only")
    args = ap.parse_args(argv)
    seeds = {}
    for i, path in enumerate(args.ladders):
        found = re.search(r"seed(\d+)", Path(path).stem)
        seed = int(found.group(1)) if found else i
        if seed in seeds:
            ap.error(f"two ladder files for seed {seed}")
        seeds[seed] = per_query(path)
    result = compare(seeds, per_query(args.warm) if args.warm else None, POLICY_RUNGS[args.policy_rung])
    md = markdown(result)
    if not args.no_report:
        write_report(args.name, {**result, "ladders": list(args.ladders), "warm": args.warm},
                     "A trained decomposer across seeds against the fixed rules", md,
                     script=f"decomposer_seeds.py --name {args.name}" if args.name != "decomposer_seeds" else None)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
