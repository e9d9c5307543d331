"""Reward-hacking monitors, logged as components (weight 0: they never change the credit).

- duplicate-subtask rate: the signal MagicSelector reports surging when α = 0;
- repeated-search rate: a policy farming search turns re-issues the same query;
- invalid-action rate: share of turns whose action the environment rejected.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from toolgym.data.records import Task, Trajectory
from toolgym.rewards.base import GroupCredit, check_group, register_reward

_NON_WORD = re.compile(r"[^\w\s]+")


def normalise_text(text: str) -> str:
    """Lower case, punctuation dropped, whitespace collapsed: "Book a taxi!" == "book a  taxi"."""
    return " ".join(_NON_WORD.sub(" ", text.lower()).split())


def duplicate_count(items: Sequence[str]) -> int:
    """How many items repeat an earlier item after :func:`normalise_text`."""
    seen: set[str] = set()
    dup = 0
    for item in items:
        key = normalise_text(item)
        dup += key in seen
        seen.add(key)
    return dup


def duplicate_subtask_rate(trajectories: Sequence[Trajectory]) -> float:
    """Σ_i dup(subtasks_i) / Σ_i |subtasks_i| over the rollouts that decomposed (0 if none)."""
    lists = [t.subtasks for t in trajectories if t.subtasks]
    total = sum(len(s) for s in lists)
    return sum(duplicate_count(s) for s in lists) / total if total else 0.0


def repeated_search_rate(trajectories: Sequence[Trajectory]) -> float:
    """Σ_i #(events repeating an earlier (query, category) of rollout i) / Σ_i #events."""
    total = sum(len(t.events) for t in trajectories)
    repeats = sum(
        duplicate_count([f"{e.category or ''}\x00{e.query}" for e in t.events]) for t in trajectories
    )
    return repeats / total if total else 0.0


def invalid_action_rate(trajectories: Sequence[Trajectory]) -> float:
    """Σ_i invalid_actions_i / Σ_i num_turns_i (0 if no turns)."""
    turns = sum(max(t.num_turns, 0) for t in trajectories)
    return sum(t.invalid_actions for t in trajectories) / turns if turns else 0.0


@register_reward("monitors")
class HackingMonitors:
    """Logs the three hacking rates for a group; reward 0, advantage 0."""

    name = "monitors"
    kind = "outcome"

    def score_group(self, trajectories: list[Trajectory], task: Task) -> GroupCredit:
        check_group(trajectories, task)
        g = len(trajectories)
        return GroupCredit(
            rewards=np.zeros(g),
            advantages=np.zeros(g),
            components={
                "duplicate_subtask_rate": duplicate_subtask_rate(trajectories),
                "repeated_search_rate": repeated_search_rate(trajectories),
                "invalid_action_rate": invalid_action_rate(trajectories),
            },
        )
