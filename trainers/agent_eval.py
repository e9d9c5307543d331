"""Run an agent for whole episodes in an environment and report selection metrics.

``toolgym eval --env ID --agent NAME`` calls :func:`evaluate_agent`. Metrics use the key style
of the retrieval evaluation (percent, mean over rollouts): ``F1``, ``P``, ``R``, ``Match``,
``SRecall``, ``invalid`` (share of turns that were invalid actions), plus ``turns`` (mean turns
per episode), ``reward`` (mean episode return), ``n`` (rollouts), ``tasks`` and, where tasks
carry a benchmark group, the same per ``groups[name]``.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np

import toolgym.envs  # noqa: F401  (registers the toolgym/ ids)
from toolgym.data.records import Task, Trajectory, write_rollouts
from toolgym.retrieval.metrics import search_recall, selection_match, selection_prf

PERCENT_KEYS = ("F1", "P", "R", "Match", "SRecall", "invalid")


def trajectory_metrics(trajectory: Trajectory, task: Task) -> dict[str, float]:
    """Per-rollout metrics as fractions (``turns`` as a count)."""
    p, r, f1 = selection_prf(trajectory.selection, task.gold)
    turns = max(trajectory.num_turns, 1)
    return {
        "F1": f1,
        "P": p,
        "R": r,
        "Match": selection_match(trajectory.selection, task.gold),
        "SRecall": search_recall(trajectory.seen, task.gold),
        "invalid": trajectory.invalid_actions / turns,
        "turns": float(trajectory.num_turns),
    }


def _mean(rows: list[dict[str, float]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in rows[0]:
        value = float(np.mean([row[key] for row in rows]))
        out[key] = 100.0 * value if key in PERCENT_KEYS else value
    out["n"] = len(rows)
    return out


def _resolve_tasks(env: Any, tasks: Sequence[Task | str] | None, limit: int | None) -> list[Task]:
    base = env.unwrapped
    if tasks is None:
        chosen = list(base.tasks)
    else:
        by_id = {t.id: t for t in base.tasks}
        chosen = []
        for t in tasks:
            if isinstance(t, Task):
                chosen.append(t)
            elif t in by_id:
                chosen.append(by_id[t])
            else:
                raise ValueError(f"unknown task id {t!r} for this environment")
    if limit is not None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        chosen = chosen[:limit]
    if not chosen:
        raise ValueError("no task to evaluate")
    return chosen


def run_episode(env: Any, agent: Any, task: Task, seed: int | None = None) -> tuple[Trajectory, float]:
    """One episode of ``agent`` on ``task``; returns the env's final trajectory and the return."""
    obs, info = env.reset(seed=seed, options={"task": task})
    agent.reset(obs, info)
    total = 0.0
    while True:
        obs, reward, terminated, truncated, info = env.step(agent.act(obs, info))
        total += float(reward)
        if terminated or truncated:
            return info["trajectory"], total


def evaluate_agent(
    env_id_or_env: str | gymnasium.Env,
    agent: Any,
    *,
    dataset: str | None = None,
    split: str | None = None,
    tasks: Sequence[Task | str] | None = None,
    limit: int | None = None,
    group_size: int = 1,
    save_rollouts: str | None = None,
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Run ``agent`` for ``group_size`` episodes on each task and average the metrics.

    Args:
        env_id_or_env: a registered id (``toolgym envs``) or an environment object.
        agent: anything with ``reset(obs, info)`` and ``act(obs, info) -> str``; an agent with a
            ``bind_env(env)`` method (the oracle) is bound to the unwrapped env first.
        dataset, split, env_kwargs: passed to ``gymnasium.make`` when an id is given.
        tasks: Task objects or task ids (default: every task of the env); ``limit``: the first N.
        group_size: rollouts per task (G of GRPO); rollout g of task j resets with seed
            ``seed + j * group_size + g``.
        save_rollouts: write the groups as JSONL with ``write_rollouts`` (for ``toolgym replay``).

    Returns metrics (see the module docstring) plus ``config``.
    """
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    own_env = isinstance(env_id_or_env, str)
    if own_env:
        kwargs = dict(env_kwargs or {})
        if dataset is not None:
            kwargs["dataset"] = dataset
        if split is not None:
            kwargs["split"] = split
        env = gymnasium.make(env_id_or_env, **kwargs)
    else:
        if dataset is not None or split is not None or env_kwargs:
            raise ValueError("dataset, split and env_kwargs apply to an env id, not to an env object")
        env = env_id_or_env
    try:
        if hasattr(agent, "bind_env"):
            agent.bind_env(env.unwrapped)
        chosen = _resolve_tasks(env, tasks, limit)
        groups: list[tuple[Task, list[Trajectory]]] = []
        rows: list[dict[str, float]] = []
        by_group: dict[str, list[dict[str, float]]] = defaultdict(list)
        iterator: Any = enumerate(chosen)
        if progress:
            from tqdm import tqdm

            iterator = tqdm(iterator, total=len(chosen), desc="episodes", unit="task", leave=False)
        for j, task in iterator:
            trajs = []
            for g in range(group_size):
                trajectory, ret = run_episode(env, agent, task, seed=seed + j * group_size + g)
                row = trajectory_metrics(trajectory, task)
                row["reward"] = ret
                rows.append(row)
                if task.group:
                    by_group[task.group].append(row)
                trajs.append(trajectory)
            groups.append((task, trajs))
    finally:
        if own_env:
            env.close()
    result = _mean(rows)
    result["tasks"] = len(chosen)
    if by_group:
        result["groups"] = {name: _mean(group_rows) for name, group_rows in sorted(by_group.items())}
    if save_rollouts:
        write_rollouts(save_rollouts, groups)
    env_name = env_id_or_env if own_env else getattr(getattr(env, "spec", None), "id", type(env.unwrapped).__name__)
    result["config"] = {"env": env_name, "agent": getattr(agent, "name", type(agent).__name__), "dataset": dataset,
                        "split": split, "group_size": group_size, "seed": seed, "limit": limit}
    return result
