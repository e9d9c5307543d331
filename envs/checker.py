"""``check_tool_env(env)``: the contract every toolgym trainer and evaluator relies on, checked on a
live env. Gymnasium's ``check_env`` (spaces, seeding, signatures) cannot see it; run both.

What it checks, each failure an ``AssertionError`` that names the broken rule:

- **the chat**: ``reset`` returns ``info["messages"]`` (a non-empty list of ``{"role", "content"}``
  string dicts, a copy the caller may change) and ``info["task_id"]``; every ``step`` returns
  ``info["new_messages"]`` (the assistant turn first, with the action's text, then any env
  reply) and ``info["task_id"]``; the reset chat plus every step's new messages is the env's
  own record of the chat (``trajectory().messages``).
- **the record**: ``trajectory()`` is a :class:`~toolgym.data.records.Trajectory` of the episode's
  task, ``terminated_by="running"`` until the end; the step that ends the episode puts the final
  one in ``info["trajectory"]`` (equal to ``trajectory()`` afterwards), with ``num_turns`` the
  steps taken and ``env_reward`` (when set) the episode's return.
- **the action protocol**: a valid episode ends within ``max_steps``; hostile actions — not text,
  empty, huge, malformed / unclosed / deeply nested JSON, an unknown tool, a lone surrogate — give
  an observation, never an exception, with a finite reward and the contract above intact. An env
  that speaks toolgym's tool-call protocol (``env.unwrapped.protocol``, as ``ToolSearchEnv``) must
  also answer each hostile action with an error observation: ``invalid_actions`` grows by one,
  and a valid search does not count as invalid.

The checker runs a handful of short episodes (resets with ``seed``); it never changes the env's
settings.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from toolgym.data.records import Trajectory
from toolgym.envs.actions import ACTION_MAX_CHARS, PROTOCOLS, Search, Submit
from toolgym.envs.syntax import render_call

__all__ = ["check_tool_env", "hostile_actions"]

Action = Any
ValidAction = Callable[[str, dict[str, Any]], Action]


def hostile_actions() -> dict[str, Any]:
    """Actions a policy (or an attacker) can produce that no env may raise on, by description."""
    call = '{"name": "search", "arguments": {"query": "weather"}}'
    return {
        "None": None,
        "an int": 42,
        "a dict": {"name": "search", "arguments": {"query": "weather"}},
        "an empty string": "",
        "whitespace": " \n\t ",
        "plain prose": "I think I should look for a weather tool.",
        "malformed JSON": '<tool_call>{"name": "search", "arguments": {"query": }</tool_call>',
        "an unclosed call": '<tool_call>{"name": "search", "arguments": {"query": "weather"',
        "an unknown tool": '<tool_call>{"name": "delete_everything", "arguments": {}}</tool_call>',
        "arguments of the wrong type": '<tool_call>{"name": "search", "arguments": {"query": ["a", 1]}}</tool_call>',
        "deeply nested JSON": "<tool_call>" + "[" * 16_000 + "]" * 16_000 + "</tool_call>",
        "a huge integer": '<tool_call>{"name": "submit", "arguments": {"tools": [' + "9" * 5000 + "]}}</tool_call>",
        "a lone surrogate": '<tool_call>{"name": "search", "arguments": {"query": "\\ud800"}}</tool_call>',
        "a huge turn": "<tool_call>" + call * (ACTION_MAX_CHARS // len(call) + 1) + "</tool_call>",
        "many calls": ("<tool_call>" + call + "</tool_call>") * 300,
        "an empty search": "<search></search>",
        "an empty answer": "<answer></answer>",
        "tags in a loop": "<tool_call></tool_call>" * 1000,
    }


def _describe(action: Any) -> str:
    text = repr(action)
    return text if len(text) <= 60 else f"{text[:57]}... ({len(text)} chars)"


def _check_messages(messages: Any, where: str, *, non_empty: bool = True) -> list[dict[str, str]]:
    assert isinstance(messages, list), f"{where} must be a list of chat messages, got {type(messages).__name__}"
    assert messages or not non_empty, f"{where} is empty"
    for i, message in enumerate(messages):
        assert isinstance(message, dict), f"{where}[{i}] must be a dict, got {type(message).__name__}"
        assert isinstance(message.get("role"), str) and message["role"], f"{where}[{i}] needs a string 'role'"
        assert isinstance(message.get("content"), str), f"{where}[{i}] needs a string 'content'"
    return [dict(m) for m in messages]


def _check_trajectory(trajectory: Any, where: str, task_id: Any) -> Trajectory:
    assert isinstance(trajectory, Trajectory), (
        f"{where} must be a toolgym.data.records.Trajectory, got {type(trajectory).__name__}")
    assert trajectory.task_id == task_id, f"{where}.task_id is {trajectory.task_id!r}, the episode's task is {task_id!r}"
    assert isinstance(trajectory.invalid_actions, int) and trajectory.invalid_actions >= 0, (
        f"{where}.invalid_actions must be a count, got {trajectory.invalid_actions!r}")
    _check_messages(trajectory.messages, f"{where}.messages")
    return trajectory


class _Episode:
    """One checked episode: the chat as a trainer rebuilds it, the steps, the return."""

    def __init__(self, env: Any, seed: int | None):
        self.env, self.unwrapped = env, env.unwrapped
        obs, info = env.reset(seed=seed)
        assert isinstance(obs, str), f"reset must return a text observation, got {type(obs).__name__}"
        assert isinstance(info, dict), f"reset must return an info dict, got {type(info).__name__}"
        assert "task_id" in info, 'reset: info["task_id"] is missing'
        assert "messages" in info, 'reset: info["messages"] is missing (the prompt chat the policy starts from)'
        self.task_id = info["task_id"]
        self.info = info
        self.chat = _check_messages(info["messages"], 'reset: info["messages"]')
        info["messages"].append({"role": "user", "content": "changed by the caller"})  # a copy: must not leak
        record = _check_trajectory(self.unwrapped.trajectory(), "trajectory() after reset", self.task_id)
        info["messages"].pop()
        assert record.terminated_by == "running", (
            f'trajectory() after reset must say terminated_by="running", got {record.terminated_by!r}')
        assert record.messages == self.chat, (
            'reset: info["messages"] must be a copy of the chat: changing it changed trajectory().messages'
            if len(record.messages) == len(self.chat) + 1 else
            'reset: info["messages"] differs from trajectory().messages')
        self.obs, self.steps, self.total, self.done = obs, 0, 0.0, False

    def step(self, action: Any, what: str) -> dict[str, Any]:
        before = self.unwrapped.trajectory().invalid_actions
        try:
            result = self.env.step(action)
        except Exception as err:  # the whole point: a policy's turn must never raise
            raise AssertionError(f"step({what}: {_describe(action)}) raised {type(err).__name__}: {err}; a bad "
                                 "action must be an error observation, never an exception") from err
        assert isinstance(result, tuple) and len(result) == 5, f"step({what}) must return (obs, reward, terminated, truncated, info)"
        obs, reward, terminated, truncated, info = result
        assert isinstance(obs, str), f"step({what}) must return a text observation, got {type(obs).__name__}"
        assert isinstance(reward, (int, float)) and not isinstance(reward, bool) and math.isfinite(reward), (
            f"step({what}) must return a finite float reward, got {reward!r}")
        assert isinstance(terminated, bool) and isinstance(truncated, bool), (
            f"step({what}): terminated and truncated must be bools, got {terminated!r}, {truncated!r}")
        assert isinstance(info, dict), f"step({what}) must return an info dict"
        assert info.get("task_id") == self.task_id, f'step({what}): info["task_id"] must be the episode\'s task {self.task_id!r}'
        assert "new_messages" in info, f'step({what}): info["new_messages"] is missing (the messages this step added)'
        new = _check_messages(info["new_messages"], f'step({what}): info["new_messages"]')
        assert new[0]["role"] == "assistant", f'step({what}): info["new_messages"] must start with the assistant turn, got role {new[0]["role"]!r}'
        if isinstance(action, str) and len(action) <= ACTION_MAX_CHARS:
            assert new[0]["content"] == action, f'step({what}): the assistant message must hold the action\'s text'
        self.chat += new
        self.steps += 1
        self.total += float(reward)
        self.done = terminated or truncated
        record = _check_trajectory(self.unwrapped.trajectory(), f"trajectory() after step({what})", self.task_id)
        assert record.messages == self.chat, (
            f'step({what}): info["messages"] at reset plus every info["new_messages"] must be the chat '
            f"(trajectory().messages): {len(self.chat)} messages vs {len(record.messages)}")
        assert record.invalid_actions >= before, f"step({what}): invalid_actions went down"
        self.invalid_delta = record.invalid_actions - before
        if self.done:
            self._check_end(info, record, what)
        else:
            assert record.terminated_by == "running", (
                f'step({what}): trajectory() must say terminated_by="running" until the episode ends')
            assert "trajectory" not in info or isinstance(info["trajectory"], Trajectory), (
                f'step({what}): info["trajectory"] must be a Trajectory when present')
        return info

    def _check_end(self, info: dict[str, Any], record: Trajectory, what: str) -> None:
        assert "trajectory" in info, f'step({what}) ended the episode without info["trajectory"] (the final record)'
        final = _check_trajectory(info["trajectory"], f'step({what}): info["trajectory"]', self.task_id)
        assert final.terminated_by != "running", f'step({what}): the final trajectory says terminated_by="running"'
        assert final.to_dict() == record.to_dict(), (
            f'step({what}): trajectory() after the last step must equal info["trajectory"]')
        assert final.num_turns == self.steps, (
            f"the final trajectory says num_turns={final.num_turns}, the episode took {self.steps} step(s)")
        if final.env_reward is not None:
            assert math.isclose(float(final.env_reward), self.total, rel_tol=1e-6, abs_tol=1e-9), (
                f"trajectory.env_reward {final.env_reward!r} is not the episode's return {self.total!r}")


def _default_valid_action(protocol: str | None) -> ValidAction:
    def act(obs: str, info: dict[str, Any]) -> Action:
        query = info.get("query") if isinstance(info.get("query"), str) else None
        if query is None:
            users = [m["content"] for m in info.get("messages", []) if m.get("role") == "user"]
            query = users[-1] if users else obs
        if protocol is None:
            return query
        seen = info.get("seen") or []
        if info.get("event") is not None or seen:  # searched once: submit what it showed
            return render_call(Submit(tool_ids=tuple(str(i) for i in list(seen)[:1])), protocol)
        return render_call(Search(query=query[:500] or "tool"), protocol)

    return act


def check_tool_env(env: Any, *, seed: int | None = 0, valid_action: ValidAction | None = None,
                   max_steps: int = 64, hostile: bool = True) -> None:
    """Check ``env`` (a gymnasium env, wrapped or not) against toolgym's env contract.

    Args:
        env: the environment, e.g. ``gymnasium.make(id)``; its ``unwrapped`` must have ``trajectory()``.
        seed: the seed of every ``reset``.
        valid_action: ``(obs, info) -> action`` for a valid turn; default: a ``search`` for the
            request (then a ``submit``) for an env with a tool-call ``protocol``, the request's
            text otherwise.
        max_steps: a valid episode must end within this many steps.
        hostile: also step each of :func:`hostile_actions` (one fresh episode each).

    Raises:
        AssertionError naming the first broken rule (see the module docstring).
    """
    unwrapped = env.unwrapped
    assert callable(getattr(unwrapped, "trajectory", None)), (
        f"{type(unwrapped).__name__} needs a trajectory() method: the record of the episode so far")
    protocol = getattr(unwrapped, "protocol", None)
    protocol = protocol if protocol in PROTOCOLS else None
    act = valid_action or _default_valid_action(protocol)

    episode = _Episode(env, seed)
    obs, info = episode.obs, episode.info
    while not episode.done:
        assert episode.steps < max_steps, f"a valid episode did not end within {max_steps} steps"
        action = act(obs, info)
        info = episode.step(action, f"valid action {episode.steps + 1}")
        if protocol is not None and episode.steps == 1:
            assert episode.invalid_delta == 0, (
                f"a valid search {_describe(action)} counted as invalid: {info.get('error')!r}")

    if not hostile:
        return
    for what, action in hostile_actions().items():
        episode = _Episode(env, seed)
        info = episode.step(action, what)
        if protocol is not None:
            assert episode.invalid_delta == 1, (
                f"step({what}) must answer with an error observation and count one invalid action "
                f"(trajectory().invalid_actions grew by {episode.invalid_delta})")
