"""Per-task evaluation and the paired comparison of two policies on the same tasks.

``evaluate_per_task`` runs one greedy episode per task (the rollout code GRPO uses) and keeps
every task's numbers, so two evaluations on the same tasks can be compared pairwise with
:func:`paired_gain`, whose standard error is far smaller than the unpaired one when the tasks
vary more than the policies do.
"""
from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any, Sequence

import numpy as np


def paired_gain(before: Sequence[float], after: Sequence[float]) -> dict[str, float]:
    """Mean paired difference and its standard error.

    With ``d_i = after_i - before_i`` over the same ``n`` tasks:
    ``gain = (1/n) Σ d_i``,  ``se = sqrt( Σ (d_i - gain)² / (n - 1) ) / sqrt(n)``  (0 when n < 2).
    ``z = gain / se`` (inf when se is 0 and gain is not, 0 when both are 0).
    """
    b, a = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    if b.shape != a.shape or b.ndim != 1:
        raise ValueError(f"paired_gain needs two equal-length lists, got {b.shape} and {a.shape}")
    if len(b) == 0:
        raise ValueError("paired_gain needs at least one task")
    d = a - b
    gain = float(d.mean())
    se = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else 0.0
    z = gain / se if se > 0 else (math.inf if gain else 0.0) * (1 if gain >= 0 else -1)
    return {"gain": gain, "se": se, "z": float(z), "n": len(d), "before": float(b.mean()), "after": float(a.mean()),
            "exceeds_2se": bool(gain > 2 * se)}


def evaluate_per_task(policy: Any, env_id: str, env_kwargs: dict[str, Any], num_tasks: int | None = None,
                      batch_size: int = 8, max_new_tokens: int | None = None, max_context_tokens: int = 4096,
                      progress: bool = True) -> dict[str, Any]:
    """One greedy episode per task (the first ``num_tasks`` of the env); per-task rows and means.

    A view of :func:`toolgym.trainers.evaluate.evaluate` (the one evaluator) in row form: rows
    hold ``task_id``, ``reward`` (the env return), ``invalid_rate``, ``search_turns``,
    ``submitted``; tool-search rows add ``f1``; decomposition rows add ``ndcg5``, ``c10`` of the
    fused subtask retrieval and ``subtasks`` (their number).
    """
    from toolgym.trainers.evaluate import env_tasks, evaluate, make_envs

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
             "N@5": "ndcg5", "C@10": "c10", "subtasks": "subtasks"}
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
