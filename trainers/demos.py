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


def assistant_actions(trajectory: Trajectory) -> tuple[str, ...]:
    """The assistant messages of an episode, whitespace-normalised: two episodes that act alike."""
    return tuple(" ".join(str(m.get("content", "")).split()) for m in trajectory.messages if m.get("role") == "assistant")


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
                  progress: bool = True, per_task: int = 1) -> tuple[list[tuple[Task, list[Trajectory]]], dict[str, Any]]:
    """Run every agent on every task of ``env_id`` and keep the best episode per task.

    ``per_task`` > 1 keeps up to that many episodes of one task, best reward first (the first
    agent wins a tie), each clearing ``min_reward`` and each acting differently (an episode whose
    assistant messages repeat a kept one's is skipped): a warm start that sees several ways to
    search one request samples varied rollouts for GRPO. Each is its own group of one.

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
    if isinstance(per_task, bool) or not isinstance(per_task, int) or per_task < 1:
        raise ValueError(f"per_task must be an integer >= 1, got {per_task!r}")
    keep = per_task
    per_task_rows: list[dict[str, Any]] = []  # one row per task: its best reward, which agent, kept or why not
    iterator: Any = enumerate(tasks)
    if progress:
        from tqdm import tqdm

        iterator = tqdm(iterator, total=len(tasks), desc=f"demos {env_id}", unit="task", leave=False, disable=False)
    for j, task in iterator:
        episodes: list[tuple[float, int, Trajectory, str]] = []
        for order, demo in enumerate(demonstrators):
            traj, ret = run_episode(env, demo, task, seed=seed + j)
            all_rewards.append(ret)
            if gold_leaks(traj, task):
                dropped["gold_leak"] += 1
                continue
            episodes.append((float(ret), order, traj, getattr(demo, "name", type(demo).__name__)))
        if not episodes:
            per_task_rows.append({"task_id": task.id, "reward": None, "agent": None, "kept": False, "why": "gold_leak"})
            continue
        episodes.sort(key=lambda e: (-e[0], e[1]))
        best = episodes[0]
        if best[0] < min_reward:
            dropped["below_min_reward"] += 1
            per_task_rows.append({"task_id": task.id, "reward": best[0], "agent": best[3], "kept": False,
                                  "why": "below_min_reward"})
            continue
        kept_actions: list[tuple[str, ...]] = []
        for ret, _, traj, name in episodes:
            actions = assistant_actions(traj)
            if ret < min_reward or len(kept_actions) >= keep or actions in kept_actions:
                continue
            kept_actions.append(actions)
            traj.env_reward = ret
            groups.append((task, [traj]))
            kept_by_agent[name] = kept_by_agent.get(name, 0) + 1
        per_task_rows.append({"task_id": task.id, "reward": best[0], "agent": best[3], "kept": True, "why": None,
                              "episodes": len(kept_actions)})
    env.close()
    kept = [g[1][0].env_reward for g in groups]
    kept_quantiles, histogram = kept_reward_stats(kept)
    stats = {"env_id": env_id, "agents": list(agents), "split": split, "min_reward": min_reward,
             "env_kwargs": env_kwargs or {}, "tasks": len(tasks), "kept": len(groups), "dropped_tasks": dropped,
             "kept_by_agent": kept_by_agent, "reward_all_episodes": _quantiles(all_rewards), "reward_kept": kept_quantiles,
             "reward_kept_histogram": histogram, "episodes_per_task": keep, "per_task": per_task_rows}
    return groups, stats
