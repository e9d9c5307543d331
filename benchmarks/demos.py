"""Demonstrations kept by rejection sampling: the three `toolgym demos` commands of the warm start.

The commands are those of ``configs/sft_warmstart.yaml`` (the warm start's demos): for every task
the best scripted demonstrator's episode is kept when its reward reaches ``--min-reward``. Every
task's row (best reward, agent, kept or why not) goes to ``benchmarks/results/demos.json``; the
table's numbers are computed from those rows. Nothing is written under ``runs/``.

Run: ``nice -n 19 python -m benchmarks.demos`` (about a minute on 2 cores; BM25 only, no model).
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from benchmarks._report import markdown_table, write_report  # noqa: E402

from toolgym.trainers.demos import collect_demos  # noqa: E402

# name -> the `toolgym demos` arguments (configs/sft_warmstart.yaml's header)
COMMANDS: dict[str, dict[str, Any]] = {
    "toolsearch": {"env_id": "toolgym/ToolSearch-v0", "agents": ["clauses_top1", "clauses_top2", "request_top3"],
                   "split": "train", "min_reward": 0.5, "env_kwargs": {"max_turns": 4}, "limit": None},
    "decompose": {"env_id": "toolgym/Decompose-v0", "agents": ["clauses"], "split": "train", "min_reward": 0.01,
                  "env_kwargs": {}, "limit": None},
    "ultratool_reference": {"env_id": "toolgym/Decompose-UltraTool-v0", "agents": ["reference"], "split": None,
                            "min_reward": 0.01, "env_kwargs": {}, "limit": 200},
}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Kept count and the kept rewards' mean / median / min, from the per-task rows."""
    kept = [r["reward"] for r in rows if r["kept"]]
    return {"tasks": len(rows), "kept": len(kept),
            "kept_mean": float(np.mean(kept)) if kept else None,
            "kept_median": float(np.median(kept)) if kept else None,
            "kept_min": float(np.min(kept)) if kept else None}


def table_rows(runs: dict[str, Any]) -> list[list[object]]:
    out: list[list[object]] = []
    for name, run in runs.items():
        s = summarise(run["per_task"])
        cmd = run["command"]
        out.append([name, cmd["env_id"], ",".join(cmd["agents"]), cmd["split"] or "none", f"{cmd['min_reward']:g}",
                    f"{s['kept']} / {s['tasks']}",
                    "-" if s["kept_mean"] is None else f"{s['kept_mean']:.3f}",
                    "-" if s["kept_median"] is None else f"{s['kept_median']:.3f}",
                    "-" if s["kept_min"] is None else f"{s['kept_min']:.3f}"])
    return out


HEADERS = ["demos", "env", "agents", "split", "min reward", "kept / tasks", "kept mean", "kept median", "kept min"]


def main() -> None:
    runs: dict[str, Any] = {}
    start = time.perf_counter()
    for name, cmd in COMMANDS.items():
        t0 = time.perf_counter()
        try:
            _, stats = collect_demos(cmd["env_id"], cmd["agents"], split=cmd["split"], min_reward=cmd["min_reward"],
                                     limit=cmd["limit"], env_kwargs=cmd["env_kwargs"], progress=False)
        except FileNotFoundError as exc:  # UltraTool reads ../shared/data, which a fresh clone lacks
            print(f"skip {name}: {exc}", flush=True)
            continue
        runs[name] = {"command": cmd, "per_task": stats["per_task"], "kept_by_agent": stats["kept_by_agent"],
                      "seconds": time.perf_counter() - t0}
        print(f"{name}: {summarise(stats['per_task'])} in {runs[name]['seconds']:.0f} s", flush=True)
    body = ("Best scripted episode per task, kept when its reward reaches the minimum (`toolgym demos`, the "
            "commands in `configs/sft_warmstart.yaml`; ToolSearch with `max_turns: 4`, reward = F1; Decompose "
            "reward = R_cf). Kept mean / median / min are over the kept tasks.\n\n"
            + markdown_table(HEADERS, table_rows(runs)))
    write_report("demos", {"runs": runs, "wall_s": time.perf_counter() - start},
                 "Demonstrations: what rejection sampling keeps", body)
    print(body)


if __name__ == "__main__":
    main()
