"""The environment's own episode return as an outcome reward.

``DecompositionEnv`` already computes R_cf with its own k, fusion and λs and stores it in
``Trajectory.env_reward``; this module lets a scheme use that value instead of computing the
same reward a second time with separately configured options.
"""
from __future__ import annotations

import numpy as np

from toolgym.data.records import Task, Trajectory
from toolgym.rewards.base import GroupCredit, check_group, outcome_credit, register_reward


@register_reward("env_return")
class EnvReturn:
    """R_i = ``Trajectory.env_reward`` (set by the env at episode end); a rollout without one is an error."""

    name = "env_return"
    kind = "outcome"
    needs: frozenset[str] = frozenset()

    def score_group(self, trajectories: list[Trajectory], task: Task) -> GroupCredit:
        check_group(trajectories, task)
        missing = [i for i, t in enumerate(trajectories) if t.env_reward is None]
        if missing:
            raise ValueError(f"task {task.id!r}: rollout(s) {missing} have no env_reward (the env sets it at episode "
                             "end; a rollout cut before the end, or a file written without it, cannot use env_return)")
        r = np.array([float(t.env_reward) for t in trajectories], dtype=np.float64)
        return outcome_credit(r, {"mean": float(np.mean(r[np.isfinite(r)])) if np.isfinite(r).any() else 0.0})
