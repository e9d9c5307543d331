"""``toolgym eval --agent``'s entry points; they live in :mod:`toolgym.trainers.evaluate` (one
evaluator for scripted agents and token policies) and are re-exported here for older imports.

``trajectory_metrics`` is the old name of :func:`~toolgym.trainers.evaluate.episode_metrics`.
"""
from __future__ import annotations

import toolgym.envs  # noqa: F401  (registers the toolgym/ ids)
from toolgym.trainers.evaluate import (PERCENT_KEYS, agent_view, episode_metrics, evaluate, evaluate_agent,
                                       run_episode)

trajectory_metrics = episode_metrics

__all__ = ["PERCENT_KEYS", "agent_view", "episode_metrics", "evaluate", "evaluate_agent", "run_episode",
           "trajectory_metrics"]
