"""Where a policy-gated decomposer's GRPO groups carry signal, and what R_cf's clip hides.

With ``split_rule="request_clauses"`` (``credit_schemes --decompose-split-rule``) a rollout's answer only
decides whether to split, so a group of rollouts for one task has at most two outcomes: the whole
request, or the rule's split. GRPO learns from the group only where those outcomes score differently.
For each run folder this reads the logged training rollouts (``<run>/rollouts/step_*.jsonl``) and counts
the groups whose rollouts disagree on splitting (*mixed*), and among them those where

- R_cf differs (the paper's clipped reward, ``max(0, N_atom − N_raw)`` plus the completeness term,
  as the env logged it),
- the signed reward differs (``N_atom − N_raw`` plus the completeness term, the ``ndcg_gain="signed"``
  variant), and
- R_cf is level but the split ranks the gold tools lower: a loss the clip hides. (A split that ranks
  them higher always raises R_cf, so the clip never hides a gain.)

It also gives each source's share of rollouts that split. The counts come from the logged rollouts
alone, so they describe exactly the groups the runs trained on.

    python -m benchmarks.gate_groups --runs runs/credit_gated/mixture/counterfactual_seed{0,1,2} --name gate_groups

Writes ``benchmarks/results/<name>.json`` and its docs/benchmarks.md section. Not run in CI.
"""
from __future__ import annotations

import argparse
import json
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._report import markdown_table, write_report
from toolgym.retrieval.metrics import completeness_at_k, ndcg_at_k

K = 10  # the env's k in every run of credit_schemes' mixture


def source_of(task_id: str) -> str:
    """The mixture source of a bundled task id (``seal_tools-1a2b…`` -> ``seal_tools``)."""
    return task_id.rsplit("-", 1)[0]


def group_signal(gold: Sequence[str], trajectories: Sequence[dict[str, Any]], k: int = K) -> dict[str, Any]:
    """One group's split decisions and which rewards tell its outcomes apart.

    A rollout splits when it searched more than one sub-query. ``clipped`` is the env's logged R_cf;
    ``signed`` is NDCG@k of the fused list plus its completeness (the raw request's terms are the
    same for every rollout of the group, so they drop out of the comparison)."""
    splits = [len(t.get("subtasks") or []) > 1 for t in trajectories]
    clipped = [round(float(t["env_reward"]), 9) for t in trajectories]
    signed = [round(ndcg_at_k(t["selection"], gold, k) + completeness_at_k(t["selection"], gold, k), 9)
              for t in trajectories]
    mixed = 0 < sum(splits) < len(splits)
    hidden = None
    if mixed and len(set(clipped)) == 1 and len(set(signed)) > 1:
        split_value = next(v for v, s in zip(signed, splits) if s)
        whole_value = next(v for v, s in zip(signed, splits) if not s)
        hidden = "loss" if split_value < whole_value else "gain"
    return {"rollouts": len(splits), "split": sum(splits), "mixed": mixed,
            "clipped_differs": len(set(clipped)) > 1, "signed_differs": len(set(signed)) > 1, "hidden": hidden}


def read_groups(run_dir: Path) -> list[dict[str, Any]]:
    """Every logged group of one GRPO run, in step order, with :func:`group_signal`'s fields."""
    files = sorted(Path(run_dir).glob("rollouts/step_*.jsonl"))
    if not files:
        raise SystemExit(f"{run_dir}: no rollouts/step_*.jsonl (a GRPO run folder of credit_schemes)")
    groups = []
    for step, path in enumerate(files):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            task = record["task"]
            groups.append({"step": step, "task_id": task["id"], "source": source_of(task["id"]),
                           **group_signal(task["gold"], record["trajectories"])})
    return groups


def summarise(groups: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Counts over groups, and each source's share of rollouts that split."""
    count = Counter()
    for g in groups:
        count["groups"] += 1
        count["mixed"] += g["mixed"]
        count["clipped_differs"] += g["clipped_differs"]
        count["signed_differs"] += g["signed_differs"]
        count["hidden_loss"] += g["hidden"] == "loss"
        count["hidden_gain"] += g["hidden"] == "gain"
    by_source: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for g in groups:
        by_source[g["source"]][0] += g["split"]
        by_source[g["source"]][1] += g["rollouts"]
    return {**count, "split_share": {s: split / total for s, (split, total) in sorted(by_source.items())}}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", nargs="+", required=True, help="GRPO run folders (credit_schemes --out .../mixture/<scheme>_seed<k>)")
    ap.add_argument("--name", default="gate_groups", help="results/<name>.json and its docs/benchmarks.md section")
    args = ap.parse_args(argv)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", args.name):
        ap.error(f"--name must be a plain file name (letters, digits, _ . -), got {args.name!r}")
    groups = {str(run): read_groups(Path(run)) for run in args.runs}
    per_run = {run: summarise(gs) for run, gs in groups.items()}
    total = summarise([g for gs in groups.values() for g in gs])
    heads = ["run", "groups", "mixed (rollouts disagree on splitting)", "R_cf differs", "signed reward differs",
             "R_cf level, split ranks gold lower (hidden loss)", "share of rollouts that split, by source"]

    def row(name: str, s: dict[str, Any]) -> list[Any]:
        shares = ", ".join(f"{src} {share:.2f}" for src, share in s["split_share"].items())
        return [name, s["groups"], s["mixed"], s["clipped_differs"], s["signed_differs"], s["hidden_loss"], shares]

    rows = [row(f"`{run}`", s) for run, s in per_run.items()] + [row("all", total)]
    body = (markdown_table(heads, rows) + "\n\nA group is the rollouts of one task at one step. Where they disagree on "
            "splitting, the whole request and the rule's split are the group's two outcomes; R_cf's clip "
            f"(`max(0, N_atom − N_raw)`) scores a split that ranks the gold tools lower like no split, so of "
            f"{total['mixed']} mixed groups R_cf tells apart {total['clipped_differs']}, the signed reward "
            f"{total['signed_differs']}; a hidden gain is impossible (seen: {total['hidden_gain']}).")
    write_report(args.name, {"runs": per_run, "all": total}, "Policy-gated decomposer: which GRPO groups carry signal",
                 body, script=f"gate_groups.py --name {args.name}" if args.name != "gate_groups" else None)
    print(body)


if __name__ == "__main__":
    main()
