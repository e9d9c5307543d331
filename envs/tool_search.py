"""``ToolSearchEnv``: multi-turn tool search (ToolSearcher), a text-in text-out gymnasium env.

Each turn the policy writes one call (see :mod:`toolgym.envs.syntax`): ``search`` returns
the top-``top_k`` tools rendered as text, ``submit`` ends the episode. Errors never raise;
they come back as an observation and are counted in ``info``. Gold ids are only used for the
records in ``info`` (``first_found``, the final trajectory) and the reward, never in ``obs``.
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from toolgym.data.records import SearchEvent, Task, Trajectory
from toolgym.envs.actions import (
    DEFAULT_MAX_QUERY_TOKENS,
    DEFAULT_TOKEN_BUDGET,
    Action,
    CategoryMode,
    Invalid,
    ProtocolName,
    Search,
    Submit,
    check_category_mode,
    check_protocol,
)
from toolgym.envs.base import Episode, ToolEnv, action_text
from toolgym.envs.actions import check_count
from toolgym.envs.checks import check_action
from toolgym.envs.curriculum import CategoryCurriculum
from toolgym.envs.prompts import system_prompt, tool_schemas
from toolgym.envs.rendering import render_error, render_results
from toolgym.envs.syntax import parse_action
from toolgym.envs.tokens import make_counter
from toolgym.retrieval.corpus import ToolCorpus
from toolgym.retrieval.metrics import selection_match, selection_prf

__all__ = ["SearchEpisode", "ToolSearchEnv", "format_context", "selection_f1_reward", "selection_match_reward"]


def selection_f1_reward(trajectory: Trajectory, task: Task) -> float:
    """F1 of the submitted set against the gold set; 0 when nothing was submitted."""
    return selection_prf(trajectory.selection, task.gold)[2]


def selection_match_reward(trajectory: Trajectory, task: Task) -> float:
    """1 if the submitted set equals the gold set, else 0."""
    return selection_match(trajectory.selection, task.gold)


FINAL_REWARDS: dict[str, Callable[[Trajectory, Task], float]] = {
    "f1": selection_f1_reward,
    "match": selection_match_reward,
}


def format_context(task: Task) -> str:
    """The prior dialogue and the current request as plain text (for text-only policies)."""
    return task.dialogue_text()


@dataclass
class SearchEpisode(Episode):
    """A tool-search episode: :class:`Episode` plus the turn count, the category mode and the
    curriculum phase of this episode, and how it ended."""

    mode: CategoryMode = "off"
    phase: str | None = None  # the curriculum's phase, "override" when options set the mode
    turn: int = 0
    invalid: int = 0
    selection: list[str] | None = None
    terminated_by: str = "max_turns"
    env_reward: float | None = None  # the final reward, once the episode is over


class ToolSearchEnv(ToolEnv):
    """Multi-turn tool search over ``corpus`` for ``tasks``.

    Args:
        corpus, tasks, index, split, retriever, retriever_options, render_mode: see
            :class:`~toolgym.envs.base.ToolEnv`.
        max_turns: turn budget; the episode is truncated after this many steps.
        top_k: documents returned per search.
        category_mode: ``off`` (no category argument), ``optional`` or ``required``.
        protocol: ``hermes`` (function calls) or ``search_r1`` (tags).
        token_budget: tokens for all the descriptions of one search result together.
        tokenizer: the policy's tokenizer, to count the budget in its tokens (else words).
        max_query_tokens: longer queries are rejected.
        final_reward: ``"f1"`` (default), ``"match"`` or ``callable(trajectory, task) -> float``,
            paid at the end of the episode (and stored as ``Trajectory.env_reward``); every
            other step pays 0.
        curriculum: a :class:`CategoryCurriculum` (or its fields as a dict) choosing the category
            mode per episode, by ``options["progress"]`` when given.
    """

    reset_options = ToolEnv.reset_options | {"category_mode"}

    def __init__(
        self,
        corpus: ToolCorpus,
        tasks: Sequence[Task],
        index: Any = None,
        *,
        max_turns: int = 8,
        top_k: int = 5,
        category_mode: CategoryMode = "off",
        protocol: ProtocolName = "hermes",
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        tokenizer: Any = None,
        max_query_tokens: int = DEFAULT_MAX_QUERY_TOKENS,
        final_reward: str | Callable[[Trajectory, Task], float] = "f1",
        curriculum: CategoryCurriculum | dict[str, Any] | None = None,
        split: str | None = None,
        retriever: str = "bm25",
        retriever_options: dict[str, Any] | None = None,
        render_mode: str | None = None,
    ):
        max_turns, top_k = check_count("max_turns", max_turns, 1), check_count("top_k", top_k, 1)
        token_budget = check_count("token_budget", token_budget, 0)
        max_query_tokens = check_count("max_query_tokens", max_query_tokens, 1)
        check_category_mode(category_mode)
        check_protocol(protocol)
        if isinstance(final_reward, str):
            if final_reward not in FINAL_REWARDS:
                raise ValueError(f"unknown final_reward {final_reward!r}; choose one of {sorted(FINAL_REWARDS)} or pass a function")
            final_reward = FINAL_REWARDS[final_reward]
        curriculum = CategoryCurriculum.from_config(curriculum)
        super().__init__(corpus, tasks, index, split=split, retriever=retriever,
                         retriever_options=retriever_options, render_mode=render_mode)
        for mode in [category_mode] + ([curriculum.constrained_mode, curriculum.after_mode] if curriculum else []):
            if mode != "off" and not corpus.categories:
                raise ValueError(f"category mode {mode!r} needs a corpus with categories; {corpus.name!r} has none")
        self.curriculum = curriculum
        self.max_turns = int(max_turns)
        self.top_k = int(top_k)
        self.category_mode = category_mode
        self.protocol = protocol
        self.token_budget = int(token_budget)
        self.counter = make_counter(tokenizer)
        self.max_query_tokens = int(max_query_tokens)
        self.final_reward = final_reward
        self._prompts: dict[str, str] = {}
        self._episodes = 0  # the curriculum's fallback clock, when no progress is passed
        self.episode: SearchEpisode | None = None

    # -- gymnasium API -----------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        task, options = self._start(seed, options)
        progress = options.get("progress")
        mode, phase = options.get("category_mode"), None
        if mode is None and self.curriculum is not None:
            if progress is None:
                progress = self.curriculum.progress(self._episodes)
            mode = phase = self.curriculum.mode_at(progress)
        elif self.curriculum is not None:
            phase = "override"
        mode = check_category_mode(mode or self.category_mode)
        if mode != "off" and not self.corpus.categories:
            raise ValueError(f"category mode {mode!r} needs a corpus with categories")
        self._episodes += 1
        prompt = self.system_prompt(mode)
        self.episode = SearchEpisode(task=task, messages=self.prompt_messages(prompt, task),
                                     progress=progress, mode=mode, phase=phase)
        info = self._info(None, None, "reset")
        info["messages"] = self.messages
        info["tool_schemas"] = tool_schemas(self.corpus.categories, mode, self.top_k)
        return f"{prompt}\n\n{format_context(task)}", info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        plan = self.plan_step(action)
        result = None
        if isinstance(plan, Search):
            result = self.index.search(plan.query, plan.category, self.top_k)
        return self.finish_step(action, plan, result)

    # -- the two halves of a step (the batched vector env runs the searches in between) --------
    def plan_step(self, action: Any) -> Action:
        """Parse and check ``action``; a :class:`Search` still has to be run by the caller."""
        episode = self._running()
        parsed = parse_action(action, self.protocol)
        return check_action(parsed, self.corpus, episode.mode, max_query_tokens=self.max_query_tokens, counter=self.counter)

    def finish_step(self, action: Any, plan: Action, result: Any = None) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Apply a planned action (with its search result, for a search) and advance one turn."""
        episode = self._running()
        turn = episode.turn
        episode.turn += 1
        new_messages = [episode.add_message("assistant", action_text(action))]
        event = error = None
        terminated = False
        if isinstance(plan, Search):
            ids = [str(i) for i in result.ids[: self.top_k]]
            event = episode.record_search(turn, plan.query, plan.category, ids)
            obs = render_results([self.corpus[i] for i in ids], query=plan.query, category=plan.category,
                                 protocol=self.protocol, budget=self.token_budget, counter=self.counter)
            kind = "search"
        elif isinstance(plan, Submit):
            episode.selection = list(plan.tool_ids)
            episode.terminated_by = "submit"
            terminated = True
            obs = f"Submitted {len(plan.tool_ids)} tool(s): {', '.join(plan.tool_ids)}. The episode is over."
            if self.protocol == "search_r1":
                obs = f"<information>{obs}</information>"
            kind = "submit"
        else:
            episode.invalid += 1
            error = plan.reason if isinstance(plan, Invalid) else "unrecognised action"
            obs = render_error(error, self.protocol)
            kind = "invalid"
        new_messages.append(episode.add_message("tool" if self.protocol == "hermes" else "user", obs))
        truncated = not terminated and episode.turn >= self.max_turns
        episode.done = terminated or truncated
        reward = 0.0
        info = self._info(event, error, kind)
        info["new_messages"] = new_messages
        if episode.done:
            trajectory = self.trajectory()
            reward = float(self.final_reward(trajectory, episode.task))
            trajectory.env_reward = episode.env_reward = reward
            info["trajectory"] = trajectory
        return obs, reward, terminated, truncated, info

    # -- records -------------------------------------------------------------------------------
    def trajectory(self) -> Trajectory:
        """The episode so far as a :class:`Trajectory` (a fresh copy)."""
        episode = self._started()
        assert isinstance(episode, SearchEpisode)
        return Trajectory(
            task_id=episode.task.id,
            events=copy.deepcopy(episode.events),
            selection=list(episode.selection) if episode.selection is not None else None,
            terminated_by=episode.terminated_by if episode.done else "running",
            invalid_actions=episode.invalid,
            messages=self.messages,
            num_turns=episode.turn,
            env_reward=episode.env_reward,
        )

    def system_prompt(self, category_mode: str | None = None) -> str:
        mode = category_mode or self.category_mode
        if mode not in self._prompts:
            self._prompts[mode] = system_prompt(
                self.corpus, protocol=self.protocol, category_mode=mode, max_turns=self.max_turns, top_k=self.top_k
            )
        return self._prompts[mode]

    def _info(self, event: SearchEvent | None, error: str | None, kind: str) -> dict[str, Any]:
        episode = self.episode
        assert episode is not None
        info: dict[str, Any] = {
            "task_id": episode.task.id,
            "query": episode.task.query,
            "action": kind,
            "event": copy.deepcopy(event),
            "error": error,
            "invalid": kind == "invalid",
            "invalid_actions": episode.invalid,
            "seen": list(episode.seen),
            "turn": episode.turn,
            "max_turns": self.max_turns,
            "category_mode": episode.mode,
            "protocol": self.protocol,
        }
        if self.curriculum is not None:
            info["curriculum_phase"] = episode.phase
            info["curriculum_progress"] = episode.progress
        return info
