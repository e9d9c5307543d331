"""Per-task evaluation and the paired comparison of two policies on the same tasks.

``evaluate_per_task`` runs one greedy episode per task (the rollout code GRPO uses) and keeps
every task's numbers, so two evaluations on the same tasks can be compared pairwise with
:func:`paired_gain`, whose standard error is far smaller than the unpaired one when the tasks
vary more than the policies do.
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np

from toolgym.evaluation.evaluate import env_tasks, evaluate, make_envs, paired_gain  # paired_gain re-exported


def evaluate_per_task(policy: Any, env_id: str, env_kwargs: dict[str, Any], num_tasks: int | None = None,
                      batch_size: int = 8, max_new_tokens: int | None = None, max_context_tokens: int = 4096,
                      progress: bool = True) -> dict[str, Any]:
    """One greedy episode per task (the first ``num_tasks`` of the env); per-task rows and means.

    A view of :func:`toolgym.evaluation.evaluate.evaluate` (the one evaluator) in row form: rows
    hold ``task_id``, ``reward`` (the env return), ``invalid_rate``, ``search_turns``,
    ``submitted``; tool-search rows add ``f1``, ``srecall`` and ``match``; decomposition rows add ``ndcg5``, ``c10`` of the
    fused subtask retrieval and ``subtasks`` (their number).
    """
    saved = policy.sampling
    policy.sampling = replace(saved, temperature=0.0, max_new_tokens=int(max_new_tokens or saved.max_new_tokens))
    probe = make_envs(env_id, env_kwargs, 1)[0]
    tasks = env_tasks(probe)[: num_tasks or None]
    envs = [probe] + make_envs(env_id, env_kwargs, max(0, min(batch_size, len(tasks)) - 1))
    started = time.time()
    try:
        result = evaluate(policy, envs, tasks, max_context_tokens=max_context_tokens, progress=progress)
    finally:
        policy.sampling = saved
    names = {"reward": "reward", "invalid": "invalid_rate", "search_turns": "search_turns", "submitted": "submitted",
             "N@5": "ndcg5", "C@10": "c10", "subtasks": "subtasks", "SRecall": "srecall", "Match": "match"}
    rows: list[dict[str, Any]] = []
    for task in tasks:
        m = result["per_task"][task.id]
        row: dict[str, Any] = {"task_id": task.id, **{new: float(m[old]) for old, new in names.items() if old in m}}
        if "subtasks" not in m:  # tool search: the selection F1
            row["f1"] = float(m["F1"])
        rows.append(row)
    means = {k: float(np.mean([r[k] for r in rows])) for k in rows[0] if k != "task_id"} if rows else {}
    return {"env_id": env_id, "env_kwargs": env_kwargs, "num_tasks": len(rows), "rows": rows, "mean": means,
            "seconds": time.time() - started}


def compare(before: dict[str, Any], after: dict[str, Any], key: str = "reward") -> dict[str, float]:
    """:func:`paired_gain` of two :func:`evaluate_per_task` results (checked to cover the same tasks)."""
    ids_b = [r["task_id"] for r in before["rows"]]
    ids_a = [r["task_id"] for r in after["rows"]]
    if ids_b != ids_a:
        raise ValueError("the two evaluations cover different tasks; a paired comparison needs the same ones")
    return paired_gain([r[key] for r in before["rows"]], [r[key] for r in after["rows"]])


def paired_summary(evals: dict[str, Any], key: str = "reward") -> str | None:
    """One line: the paired gain after − before of ``key`` over the tasks both evaluations of
    ``eval.json`` scored (:func:`~toolgym.evaluation.paired.paired_gain`), and whether it
    clears 2 standard errors; ``None`` unless both exist with their per-task rows."""
    from toolgym.evaluation.paired import paired_gain

    before, after = evals.get("before"), evals.get("after")
    if not (isinstance(before, dict) and isinstance(after, dict)):
        return None
    rows_b, rows_a = before.get("per_task"), after.get("per_task")
    if not (isinstance(rows_b, dict) and isinstance(rows_a, dict)):
        return None
    shared = [t for t in rows_b if t in rows_a]
    if not shared:
        return None
    g = paired_gain([rows_b[t][key] for t in shared], [rows_a[t][key] for t in shared])
    if g["exceeds_2se"]:
        verdict = "a gain: above 2 se"
    elif g["gain"] < -2 * g["se"]:
        verdict = "a loss: below -2 se"
    else:
        verdict = "within 2 se: no change shown"
    return (f"held-out {key}, after - before, paired over {g['n']} tasks: {g['gain']:+.3f} ± {g['se']:.3f} "
            f"({g['before']:.3f} -> {g['after']:.3f}; {verdict})")

