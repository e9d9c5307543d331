"""``toolgym demos ENV_ID --agent NAME --out FILE``: demonstration episodes for the warm start.

Scripted demonstrators (:mod:`toolgym.agents.demonstrators`) play the real environment; for
each task the best of the named agents' episodes is kept when its reward reaches
``--min-reward`` (rejection sampling: good but imperfect demos) and none of its actions names a
gold tool id the episode had not shown in an observation (:func:`gold_leaks`). The kept episodes
are written with :func:`toolgym.data.records.write_rollouts` (one group of one trajectory per
task, ``env_reward`` set); the reward distribution of what was kept goes to ``FILE.stats.json``.
"""
from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np

from toolgym.data.records import Task, Trajectory


def gold_leaks(trajectory: Trajectory, task: Task) -> list[str]:
    """Gold ids an assistant message names before any earlier non-assistant message showed them.

    A demo may submit a gold id only after a search result (or the request itself) contained it;
    anything else would teach the policy to produce what it cannot see.
    """
    shown = ""
    leaks: list[str] = []
    patterns = {g: re.compile(r"(?<![\w.-])" + re.escape(g) + r"(?![\w-])") for g in task.gold}
    for message in trajectory.messages:
        content = str(message.get("content", ""))
        if message.get("role") == "assistant":
            for gold, pat in patterns.items():
                if gold not in leaks and pat.search(content) and not pat.search(shown):
                    leaks.append(gold)
        else:
            shown += "\n" + content
    return leaks


def _quantiles(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    arr = np.asarray(values, dtype=float)
    return {"mean": float(arr.mean()), "min": float(arr.min()), "p25": float(np.quantile(arr, 0.25)),
            "median": float(np.median(arr)), "p75": float(np.quantile(arr, 0.75)), "max": float(arr.max())}


def kept_reward_stats(kept: Sequence[float]) -> tuple[dict[str, float], dict[str, int]]:
    """Quantiles of the kept episodes' rewards and a 5-bin histogram (bin's lower edge -> count)."""
    histogram: dict[str, int] = {}
    if len(kept):
        counts, edges = np.histogram(kept, bins=5)
        histogram = {f"{lo:.2f}": int(c) for lo, c in zip(edges[:-1], counts)}
    return _quantiles(kept), histogram


def collect_demos(env_id: str, agents: Sequence[str], *, split: str | None = "train", min_reward: float = 0.0,
                  limit: int | None = None, env_kwargs: dict[str, Any] | None = None, seed: int = 0,
                  progress: bool = True) -> tuple[list[tuple[Task, list[Trajectory]]], dict[str, Any]]:
    """Run every agent on every task of ``env_id`` and keep the best episode per task.

    Returns ``(groups, stats)``: ``groups`` as ``write_rollouts`` takes them, ``stats`` the
    reward distribution of all episodes and of the kept ones, per-agent counts and drops.
    """
    import gymnasium

    import toolgym.envs  # noqa: F401  (registers the ids)
    from toolgym.agents.demonstrators import make_demonstrator
    from toolgym.evaluation.evaluate import run_episode

    if env_id not in gymnasium.registry:
        raise KeyError(f"unknown env id {env_id!r}; see `toolgym envs`")
    if not agents:
        raise ValueError("name at least one demonstrator with --agent")
    kwargs = dict(env_kwargs or {})
    if split is not None:
        kwargs["split"] = split
    env = gymnasium.make(env_id, **kwargs)
    demonstrators = [make_demonstrator(a) for a in agents]
    for d in demonstrators:
        if hasattr(d, "bind_env"):
            d.bind_env(env.unwrapped)
    tasks = list(env.unwrapped.tasks)[: limit or None]
    groups: list[tuple[Task, list[Trajectory]]] = []
    all_rewards: list[float] = []
    kept_by_agent: dict[str, int] = {}
    dropped = {"below_min_reward": 0, "gold_leak": 0}
    per_task: list[dict[str, Any]] = []  # one row per task: its best reward, which agent, kept or why not
    iterator: Any = enumerate(tasks)
    if progress:
        from tqdm import tqdm

        iterator = tqdm(iterator, total=len(tasks), desc=f"demos {env_id}", unit="task", leave=False, disable=False)
    for j, task in iterator:
        best: tuple[float, Trajectory, str] | None = None
        for demo in demonstrators:
            traj, ret = run_episode(env, demo, task, seed=seed + j)
            all_rewards.append(ret)
            if gold_leaks(traj, task):
                dropped["gold_leak"] += 1
                continue
            if best is None or ret > best[0]:
                best = (ret, traj, getattr(demo, "name", type(demo).__name__))
        if best is None:
            per_task.append({"task_id": task.id, "reward": None, "agent": None, "kept": False, "why": "gold_leak"})
            continue
        if best[0] < min_reward:
            dropped["below_min_reward"] += 1
            per_task.append({"task_id": task.id, "reward": float(best[0]), "agent": best[2], "kept": False,
                             "why": "below_min_reward"})
            continue
        per_task.append({"task_id": task.id, "reward": float(best[0]), "agent": best[2], "kept": True, "why": None})
        best[1].env_reward = float(best[0])
        groups.append((task, [best[1]]))
        kept_by_agent[best[2]] = kept_by_agent.get(best[2], 0) + 1
    env.close()
    kept = [g[1][0].env_reward for g in groups]
    kept_quantiles, histogram = kept_reward_stats(kept)
    stats = {"env_id": env_id, "agents": list(agents), "split": split, "min_reward": min_reward,
             "env_kwargs": env_kwargs or {}, "tasks": len(tasks), "kept": len(groups), "dropped_tasks": dropped,
             "kept_by_agent": kept_by_agent, "reward_all_episodes": _quantiles(all_rewards), "reward_kept": kept_quantiles,
             "reward_kept_histogram": histogram, "per_task": per_task}
    return groups, stats
