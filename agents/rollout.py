"""Rollouts with exact token ids (docs/decisions.md#token-credit-and-loss-masking).

Every slot is one environment running one episode; all live slots generate their next turn in
one batched call. The token sequence of a rollout is built incrementally and never
re-tokenised: prompt ids (chat template, tokenised once), then per turn the ids the policy
sampled (loss mask 1) followed by the environment's turn — template glue + tool text, tokenised
once per turn (loss mask 0). ``turn_spans[t]`` is the ``[start, end)`` range of the policy's
tokens in turn ``t``, so a turn's advantage lands exactly on the tokens it produced.

A constrained policy (``policy.needs_episode``, :mod:`toolgym.agents.constrained`) is also given
what each episode showed (:class:`~toolgym.agents.constrained.EpisodeView`: the env's own chat —
the reset ``info["messages"]`` plus every step's ``info["new_messages"]``, roles as the env wrote
them — and the reset ``info["tool_schemas"]``); its forced tokens get loss mask 0, and the allowed set of each
restricted sample is kept in ``Rollout.allowed`` (position -> token ids) for the trainer.

With a lean decoder (``policy.decode_engine``, :mod:`toolgym.agents.decoding`) the episodes are
rows of one decode engine and go on turn after turn without waiting for each other (continuous
batching); a finished episode's row and env take the next waiting task. Otherwise a policy whose
``generate_batch`` takes ``turn_cache`` (``HFChatPolicy`` on ``generate``) gets one
:class:`~toolgym.agents.hf_policy.TurnCache` per call: each turn feeds the model only the
environment's new tokens. Either way the token ids, masks and spans are built by the same
:func:`_apply_turn`.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import gymnasium as gym

from toolgym.agents.policy import ChatPolicy
from toolgym.data.records import Trajectory


@dataclass
class Rollout:
    """One finished episode: the trajectory (with token fields filled) and rollout statistics."""

    trajectory: Trajectory
    env_return: float
    generated_tokens: int
    finish_reasons: list[str] = field(default_factory=list)
    prompt_tokens: int = 0
    # Constrained policies only: position -> the token ids that sample was restricted to, and
    # position -> log π_T of the sampled token under that restriction (as sampled).
    allowed: dict[int, tuple[int, ...]] | None = None
    sampling_logprobs: dict[int, float] | None = None


@dataclass(eq=False)
class _Slot:
    env: Any
    task_ref: Any
    seed: int | None
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    env_return: float = 0.0
    finish_reasons: list[str] = field(default_factory=list)
    messages: list[dict[str, str]] = field(default_factory=list)  # the env's chat: reset + every step's new_messages
    trajectory: Trajectory | None = None
    prompt_tokens: int = 0
    tool_schemas: Any = None
    protocol: str = "hermes"
    allowed: dict[int, tuple[int, ...]] = field(default_factory=dict)
    sampling_logprobs: dict[int, float] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.trajectory is not None


def _cut_trajectory(slot: _Slot, terminated_by: str) -> Trajectory:
    """The trajectory of an episode the rollout stopped (context full) before the env ended it:
    the env's own record so far (:meth:`~toolgym.envs.base.ToolEnv.trajectory`), so its searches
    still count for ESM/TCA."""
    return replace(slot.env.unwrapped.trajectory(), terminated_by=terminated_by)


def _parameters(fn: Any) -> set[str]:
    import inspect

    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


def _start_slot(policy: ChatPolicy, env: Any, ref: Any, seed: int | None, reset_options: dict[str, Any] | None) -> _Slot:
    """Reset ``env`` on task ``ref`` and tokenise its prompt (once)."""
    _, info = env.reset(seed=seed, options={**(reset_options or {}), "task": ref})
    slot = _Slot(env=env, task_ref=ref, seed=seed, messages=list(info["messages"]))
    # The env's system prompt already lists the tool schemas; passing info["tools"] to the
    # template as well would describe them twice (Qwen-style templates render `tools`).
    slot.token_ids = list(policy.encode_prompt(info["messages"]))
    slot.loss_mask = [0] * len(slot.token_ids)
    slot.prompt_tokens = len(slot.token_ids)
    slot.tool_schemas = info.get("tool_schemas", ())  # an env without schemas is no ToolSearch env
    slot.protocol = str(info.get("protocol", "hermes"))
    return slot


def _apply_turn(policy: ChatPolicy, slot: _Slot, gen: Any) -> list[int] | None:
    """Record one policy turn, step the env with it; the env's turn as token ids, or None at episode end."""
    start = len(slot.token_ids)
    slot.token_ids.extend(gen.token_ids)
    slot.loss_mask.extend(gen.loss_mask if gen.loss_mask is not None else [1] * len(gen.token_ids))
    for j, allowed in enumerate(gen.allowed or ()):
        if allowed is not None:
            slot.allowed[start + j] = allowed
    for j, logprob in enumerate(gen.logprobs or ()):
        if logprob is not None:
            slot.sampling_logprobs[start + j] = float(logprob)
    slot.turn_spans.append((start, len(slot.token_ids)))
    slot.finish_reasons.append(gen.finish_reason)
    obs, reward, terminated, truncated, info = slot.env.step(gen.text)
    slot.env_return += float(reward)
    new_messages = info.get("new_messages")
    if not isinstance(new_messages, list):
        raise TypeError("the env must put the messages its step added in info['new_messages'] (ToolEnv's contract)")
    slot.messages.extend(new_messages)  # the env's roles: "tool" for Hermes, "user" for search_r1
    if terminated or truncated:
        traj = info.get("trajectory")
        if not isinstance(traj, Trajectory):
            raise TypeError("the env must put a Trajectory in info['trajectory'] at episode end")
        slot.trajectory = traj
        return None
    generated_end = bool(gen.token_ids) and gen.token_ids[-1] in policy.end_ids
    glue = list(policy.encode_tool_turn(str(obs), generated_end))
    slot.token_ids.extend(glue)
    slot.loss_mask.extend([0] * len(glue))
    return glue


def _finish(slot: _Slot, keep_allowed: bool) -> Rollout:
    traj = slot.trajectory
    assert traj is not None
    traj.token_ids = list(slot.token_ids)
    traj.loss_mask = list(slot.loss_mask)
    traj.turn_spans = [tuple(span) for span in slot.turn_spans]
    return Rollout(traj, slot.env_return, sum(slot.loss_mask), slot.finish_reasons, slot.prompt_tokens,
                   allowed=dict(slot.allowed) if keep_allowed else None,
                   sampling_logprobs=dict(slot.sampling_logprobs) if slot.sampling_logprobs else None)


def _no_room(slots: Sequence[_Slot], max_new: int, max_context_tokens: int) -> ValueError:
    shortest = min(s.prompt_tokens for s in slots)
    return ValueError(f"max_context_tokens={max_context_tokens} leaves no room for a first turn: the shortest prompt "
                      f"has {shortest} tokens and a turn up to max_new_tokens={max_new}")


def collect_rollouts(policy: ChatPolicy, envs: Sequence[gym.Env], task_refs: Sequence[Any],
                     seeds: Sequence[int | None] | None = None, max_context_tokens: int = 8192,
                     reset_options: dict[str, Any] | None = None,
                     on_episode: Callable[[int], None] | None = None) -> list[Rollout]:
    """Run one episode per ``task_refs[i]`` (env seed ``seeds[i]``), at most ``len(envs)`` at a time.

    ``policy`` is a :class:`~toolgym.agents.policy.ChatPolicy` (``HFChatPolicy``). Tasks are
    picked with ``reset(options={**reset_options, "task": ref})``; an env whose episode ended
    takes the next waiting task. With the lean decoder (``policy.decode_engine``) every row
    decodes in one engine and a row whose turn ends has its env stepped and goes on at the next
    position, so no row waits for the slowest; other policies generate turn by turn, all live
    episodes in one batched call per turn. An episode whose context would exceed
    ``max_context_tokens`` is cut and its trajectory (the env's record so far) marked
    ``terminated_by="context"``. When no prompt at all leaves room for one turn, that is a
    ``ValueError``: ``max_context_tokens`` is too small for the task. ``on_episode(n)`` is called
    as episodes finish (``n`` of them). Results are in the order of ``task_refs``.
    """
    if not envs and task_refs:
        raise ValueError(f"no envs for {len(task_refs)} tasks")
    seeds = list(seeds) if seeds is not None else [None] * len(task_refs)
    if len(seeds) != len(task_refs):
        raise ValueError(f"{len(seeds)} seeds for {len(task_refs)} tasks")
    constrained = bool(getattr(policy, "needs_episode", False))
    engine_for = None if constrained else getattr(policy, "decode_engine", None)
    engine = engine_for(min(len(envs), len(task_refs))) if engine_for and task_refs else None
    if engine is not None:
        return _collect_continuous(policy, engine, envs, task_refs, seeds, max_context_tokens, reset_options, on_episode)
    out: list[Rollout] = []
    width = len(envs)
    for lo in range(0, len(task_refs), width):
        chunk = _collect_turns(policy, envs[: len(task_refs[lo:lo + width])], task_refs[lo:lo + width],
                               seeds[lo:lo + width], max_context_tokens, reset_options, constrained)
        out += chunk
        if on_episode is not None:
            on_episode(len(chunk))
    return out


def _collect_turns(policy: ChatPolicy, envs: Sequence[gym.Env], task_refs: Sequence[Any], seeds: Sequence[int | None],
                   max_context_tokens: int, reset_options: dict[str, Any] | None, constrained: bool) -> list[Rollout]:
    """One episode per env; every live episode's next turn in one ``generate_batch`` call."""
    slots = [_start_slot(policy, env, ref, seed, reset_options) for env, ref, seed in zip(envs, task_refs, seeds)]
    max_new = int(policy.sampling.max_new_tokens)
    # Carry the KV cache between turns (HFChatPolicy): each turn feeds only the env's new tokens.
    turn_cache = None
    if not constrained and "turn_cache" in _parameters(policy.generate_batch):
        from toolgym.agents.hf_policy import TurnCache

        turn_cache = TurnCache()
    if slots and all(s.prompt_tokens + max_new > max_context_tokens for s in slots):
        raise _no_room(slots, max_new, max_context_tokens)
    while True:
        live = [s for s in slots if not s.done]
        if not live:
            break
        room = []
        for s in live:
            if len(s.token_ids) + max_new <= max_context_tokens:
                room.append(s)
            else:
                s.trajectory = _cut_trajectory(s, "context")
        if not room:
            break
        if constrained:
            from toolgym.agents.constrained import EpisodeView

            gens = policy.generate_batch([s.token_ids for s in room],
                                         episodes=[EpisodeView(s.messages, s.tool_schemas, s.protocol) for s in room])
        else:
            gens = policy.generate_batch([s.token_ids for s in room], **({"turn_cache": turn_cache} if turn_cache is not None else {}))
        for slot, gen in zip(room, gens):
            _apply_turn(policy, slot, gen)
    if turn_cache is not None:
        turn_cache.clear()
    return [_finish(s, constrained) for s in slots]


def _collect_continuous(policy: ChatPolicy, engine: Any, envs: Sequence[gym.Env], task_refs: Sequence[Any],
                        seeds: Sequence[int | None], max_context_tokens: int, reset_options: dict[str, Any] | None,
                        on_episode: Callable[[int], None] | None) -> list[Rollout]:
    """Episodes as rows of one :class:`~toolgym.agents.decoding.DecodeEngine`; a finished episode's
    env and row go to the next waiting task."""
    max_new = int(policy.sampling.max_new_tokens)
    waiting = deque(range(len(task_refs)))
    free = list(envs)
    slots: list[_Slot | None] = [None] * len(task_refs)
    running: dict[int, _Slot] = {}
    started_any = False

    def done(i: int) -> None:
        free.append(slots[i].env)  # type: ignore[union-attr]
        if on_episode is not None:
            on_episode(1)

    def admit() -> None:
        nonlocal started_any
        batch = []
        while waiting and free and engine.free:
            i = waiting.popleft()
            slot = slots[i] = _start_slot(policy, free.pop(0), task_refs[i], seeds[i], reset_options)
            if slot.prompt_tokens + max_new > max_context_tokens:
                slot.trajectory = _cut_trajectory(slot, "context")
                done(i)
                continue
            started_any = True
            running[i] = slot
            batch.append((i, slot.token_ids))
        if batch:
            engine.add(batch)

    admit()
    if not started_any and not waiting:
        raise _no_room([s for s in slots if s is not None], max_new, max_context_tokens)
    while running:
        for i, gen in engine.step():
            slot = running[i]
            glue = _apply_turn(policy, slot, gen)
            if glue is not None and len(slot.token_ids) + max_new > max_context_tokens:
                slot.trajectory = _cut_trajectory(slot, "context")
                glue = None
            if glue is None:
                engine.remove(i)
                del running[i]
                done(i)
            else:
                engine.extend(i, glue)
        admit()
    return [_finish(s, False) for s in slots if s is not None]


def rollout_groups(policy: ChatPolicy, envs: Sequence[gym.Env], task_refs: Sequence[Any], group_size: int,
                   seed: int = 0, **kwargs: Any) -> list[list[Rollout]]:
    """``group_size`` rollouts of each task, all generated together; ``envs`` needs one env per rollout.

    Returns one list of rollouts per task, in the order of ``task_refs``.
    """
    need = len(task_refs) * group_size
    if len(envs) < need:
        raise ValueError(f"need {need} envs for {len(task_refs)} tasks x {group_size} rollouts, got {len(envs)}")
    flat_refs = [ref for ref in task_refs for _ in range(group_size)]
    seeds = [seed + i for i in range(need)]
    flat = collect_rollouts(policy, envs[:need], flat_refs, seeds, **kwargs)
    return [flat[i * group_size:(i + 1) * group_size] for i in range(len(task_refs))]
