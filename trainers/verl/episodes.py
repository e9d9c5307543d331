"""One toolgym env per verl trajectory, shared by the ``search`` and ``submit`` tools.

verl's ``ToolAgentLoop`` creates, executes and releases a tool instance for *every call*, so a
tool instance cannot hold an episode. Episodes are kept here instead, keyed by the agent loop's
``request_id`` (one per trajectory), in a bounded LRU: with verl's stock ``tool_agent`` loop,
which never tells a tool that the trajectory ended, old episodes are evicted instead of leaking;
``toolgym_agent`` (:mod:`.agent_loop`) releases each one when its trajectory ends.

Every step's records go into the agent loop's ``extra_fields`` (plain JSON types, since verl
turns them into ``non_tensor_batch`` columns): ``toolgym_events`` (the ``SearchEvent`` dicts
so far), ``toolgym_env_return`` and, once the env ends the episode, ``toolgym_trajectory``.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from cachetools import LRUCache

MAX_EPISODES = 4096  # concurrent trajectories one agent-loop worker may hold

EVENTS_KEY = "toolgym_events"
TRAJECTORY_KEY = "toolgym_trajectory"
RETURN_KEY = "toolgym_env_return"
SPANS_KEY = "toolgym_turn_spans"
PROGRESS_KEY = "toolgym_progress"  # the batch column ToolgymAgentLoopManager writes: training progress in [0, 1]


@dataclass
class Episode:
    """A running toolgym episode: its env, the task id and the env's return so far."""

    env: Any
    task_id: str
    env_return: float = 0.0
    done: bool = False
    trajectory: Any = None
    events: list[dict[str, Any]] = field(default_factory=list)
    env_key: tuple = ()  # (env_id, kwargs) of the idle pool the env returns to
    prompt: list[dict[str, str]] = field(default_factory=list)  # the reset's info["messages"]
    curriculum: bool = False  # the env picks each episode's category mode from the training progress


_LOCK = threading.RLock()
_EPISODES: LRUCache = LRUCache(maxsize=MAX_EPISODES)
_ENVS: dict[tuple, list[Any]] = {}  # idle envs per (env_id, kwargs), reused across episodes


def _env_key(env_id: str, env_kwargs: dict[str, Any]) -> tuple:
    return (env_id, json.dumps(env_kwargs, sort_keys=True, default=repr))


def _make_env(env_id: str, env_kwargs: dict[str, Any]) -> Any:
    import gymnasium

    from toolgym.envs.registry import require_env_id  # (importing it registers the ids)

    require_env_id(env_id)
    with _LOCK:
        idle = _ENVS.get(_env_key(env_id, env_kwargs))
        if idle:
            return idle.pop()
    return gymnasium.make(env_id, **env_kwargs)


def task_id_from(kwargs: dict[str, Any]) -> str | None:
    """The toolgym task id carried by a verl sample: ``create_kwargs`` or ``extra_info``."""
    for source in (kwargs.get("create_kwargs"), kwargs.get("extra_info"), kwargs):
        if isinstance(source, dict) and source.get("task_id") is not None:
            return str(source["task_id"])
    return None


def progress_from(value: Any) -> float | None:
    """The training progress a sample carries (``PROGRESS_KEY``), or None when it carries none usable."""
    try:
        progress = float(value)
    except (TypeError, ValueError):
        return None
    return progress if 0.0 <= progress <= 1.0 else None  # NaN fails both comparisons


def start(key: str, env_id: str, env_kwargs: dict[str, Any], task_id: str, seed: int | None = None,
          progress: float | None = None) -> Episode:
    """The episode of trajectory ``key``, reset on ``task_id`` the first time it is asked for.

    ``progress`` (training step / total steps) goes to an env with a category curriculum as
    ``options["progress"]``, as ``toolgym train`` passes it: every pooled env is then in the
    trainer's phase, not in one its own episode counter gives.
    """
    from toolgym.envs.curriculum import curriculum_reset_options

    with _LOCK:
        episode = _EPISODES.get(key)
        if episode is not None:
            return episode
    env = _make_env(env_id, env_kwargs)
    _, info = env.reset(seed=seed, options={"task": task_id, **curriculum_reset_options(env, progress)})
    episode = Episode(env=env, task_id=task_id, env_key=_env_key(env_id, env_kwargs),
                      prompt=[dict(m) for m in info.get("messages") or ()],
                      curriculum=getattr(env.unwrapped, "curriculum", None) is not None)
    with _LOCK:
        _EPISODES[key] = episode
    return episode


def get(key: str) -> Episode | None:
    with _LOCK:
        return _EPISODES.get(key)


def step(episode: Episode, action: str) -> tuple[str, bool]:
    """One env step with the action text; returns ``(observation, episode over)``."""
    if episode.done:
        return "The episode is over: no more calls are accepted.", True
    obs, reward, terminated, truncated, info = episode.env.step(action)
    episode.env_return += float(reward)
    if info.get("event") is not None:
        episode.events.append(info["event"].to_dict())
    if terminated or truncated:
        episode.done = True
        episode.trajectory = info["trajectory"]
    return str(obs), episode.done


def takes_text(episode: Episode) -> bool:
    """True for an env whose action is free text, not a tool call (``DecompositionEnv``)."""
    return getattr(episode.env.unwrapped, "protocol", None) is None


def record(episode: Episode, extra_fields: dict[str, Any]) -> None:
    """Write the episode's records into an agent loop's ``extra_fields`` (JSON types only)."""
    extra_fields[EVENTS_KEY] = [dict(e) for e in episode.events]
    extra_fields[RETURN_KEY] = float(episode.env_return)
    traj = episode.trajectory if episode.trajectory is not None else episode.env.unwrapped.trajectory()
    extra_fields[TRAJECTORY_KEY] = traj.to_dict()


def release(key: str) -> Episode | None:
    """Forget trajectory ``key``'s episode and return its env to the idle pool."""
    with _LOCK:
        episode = _EPISODES.pop(key, None)
        if episode is not None:
            _ENVS.setdefault(episode.env_key, []).append(episode.env)
    return episode


def live_count() -> int:
    with _LOCK:
        return len(_EPISODES)
