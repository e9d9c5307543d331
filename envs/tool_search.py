"""``ToolSearchEnv``: multi-turn tool search (ToolSearcher), a text-in text-out gymnasium env.

Each turn the policy writes one call (see :mod:`toolgym.envs.protocol`): ``search`` returns
the top-``top_k`` tools rendered as text, ``submit`` ends the episode. Errors never raise;
they come back as an observation and are counted in ``info``. Gold ids are only used for the
records in ``info`` (``first_found``, the final trajectory) and the reward, never in ``obs``.
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import numpy as np

from toolgym.data.records import SearchEvent, Task, Trajectory, first_found
from toolgym.envs.curriculum import CategoryCurriculum
from toolgym.envs.protocol import (
    CATEGORY_MODES,
    DEFAULT_MAX_QUERY_TOKENS,
    DEFAULT_TOKEN_BUDGET,
    PROTOCOLS,
    Action,
    Invalid,
    Search,
    Submit,
    check_action,
    make_counter,
    parse_action,
    render_error,
    render_results,
    system_prompt,
    tool_schemas,
)
from toolgym.envs.spaces import UnicodeText
from toolgym.retrieval.corpus import ToolCorpus
from toolgym.retrieval.metrics import selection_match, selection_prf

ACTION_MAX_CHARS = 32_768
OBS_MAX_CHARS = 1_048_576


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


def check_tasks(corpus: ToolCorpus, tasks: Sequence[Task]) -> list[Task]:
    """Tasks as a list, after checking ids are unique and every gold id is in the corpus."""
    tasks = list(tasks)
    if not tasks:
        raise ValueError("an environment needs at least one task")
    seen: set[str] = set()
    for task in tasks:
        if not isinstance(task, Task):
            raise ValueError(f"tasks must be toolgym.data.records.Task, got {type(task).__name__}")
        if task.id in seen:
            raise ValueError(f"duplicate task id {task.id!r}")
        seen.add(task.id)
        missing = [g for g in task.gold if g not in corpus]
        if missing:
            raise ValueError(f"task {task.id!r}: gold tool(s) {missing[:3]} are not in corpus {corpus.name!r}")
    return tasks


class TaskPicker:
    """Chooses the episode's task: by id or index from ``options``, else at random (seeded)."""

    def __init__(self, tasks: list[Task], default_split: str | None = None):
        self.tasks = tasks
        self.by_id = {t.id: i for i, t in enumerate(tasks)}
        self.default_split = default_split
        self._pools: dict[str | None, list[int]] = {None: list(range(len(tasks)))}

    def pool(self, split: str | None) -> list[int]:
        if split not in self._pools:
            rows = [i for i, t in enumerate(self.tasks) if t.split == split]
            if not rows:
                splits = sorted({t.split for t in self.tasks})
                raise ValueError(f"no task in split {split!r}; splits here: {splits}")
            self._pools[split] = rows
        return self._pools[split]

    def pick(self, options: dict[str, Any], rng: np.random.Generator) -> Task:
        choice = options.get("task", options.get("task_id"))
        if choice is None:
            rows = self.pool(options.get("split", self.default_split))
            return self.tasks[rows[int(rng.integers(len(rows)))]]
        if isinstance(choice, Task):
            return choice
        if isinstance(choice, str):
            if choice not in self.by_id:
                raise ValueError(f"unknown task id {choice!r}")
            return self.tasks[self.by_id[choice]]
        if isinstance(choice, (int, np.integer)) and not isinstance(choice, bool):
            if not -len(self.tasks) <= choice < len(self.tasks):
                raise ValueError(f"task index {choice} out of range for {len(self.tasks)} tasks")
            return self.tasks[int(choice)]
        raise ValueError(f"options['task'] must be a task id, an index or a Task, got {type(choice).__name__}")


class ToolSearchEnv(gymnasium.Env[str, str]):
    """Multi-turn tool search over ``corpus`` for ``tasks``.

    Args:
        corpus: the tool library.
        tasks: the requests, each with its gold tool ids.
        index: a :class:`~toolgym.retrieval.index.ToolIndex` over ``corpus``; ``None`` builds (or
            reuses, process-wide) one with ``retriever``.
        max_turns: turn budget; the episode is truncated after this many steps.
        top_k: documents returned per search.
        category_mode: ``off`` (no category argument), ``optional`` or ``required``.
        protocol: ``hermes`` (function calls) or ``search_r1`` (tags).
        token_budget: tokens for all the descriptions of one search result together.
        tokenizer: the policy's tokenizer, to count the budget in its tokens (else words).
        max_query_tokens: longer queries are rejected.
        final_reward: ``"f1"`` (default), ``"match"`` or ``callable(trajectory, task) -> float``,
            paid at the end of the episode; every other step pays 0.
        curriculum: a :class:`CategoryCurriculum` (or its fields as a dict) choosing the category
            mode per episode.
        split: restrict random task choice to this split (``options["split"]`` overrides).
        retriever: index method used when ``index`` is None (``bm25``, ``dense``, ``hybrid``).
        retriever_options: keyword arguments for ``build_index`` when ``index`` is None.
        render_mode: ``None`` or ``"ansi"`` (render returns the transcript).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        corpus: ToolCorpus,
        tasks: Sequence[Task],
        index: Any = None,
        *,
        max_turns: int = 8,
        top_k: int = 5,
        category_mode: str = "off",
        protocol: str = "hermes",
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
        if not isinstance(corpus, ToolCorpus):
            raise ValueError(f"corpus must be a ToolCorpus, got {type(corpus).__name__}")
        if max_turns < 1 or top_k < 1 or token_budget < 0 or max_query_tokens < 1:
            raise ValueError("max_turns, top_k and max_query_tokens must be >= 1 and token_budget >= 0")
        if category_mode not in CATEGORY_MODES:
            raise ValueError(f"unknown category mode {category_mode!r}; choose one of {CATEGORY_MODES}")
        if protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {protocol!r}; choose one of {PROTOCOLS}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"unsupported render_mode {render_mode!r}; use None or 'ansi'")
        if isinstance(final_reward, str):
            if final_reward not in FINAL_REWARDS:
                raise ValueError(f"unknown final_reward {final_reward!r}; choose one of {sorted(FINAL_REWARDS)} or pass a function")
            final_reward = FINAL_REWARDS[final_reward]
        self.corpus = corpus
        self.tasks = check_tasks(corpus, tasks)
        self.curriculum = CategoryCurriculum.from_config(curriculum)
        for mode in [category_mode] + ([self.curriculum.constrained_mode] if self.curriculum else []):
            if mode != "off" and not corpus.categories:
                raise ValueError(f"category mode {mode!r} needs a corpus with categories; {corpus.name!r} has none")
        if index is None:
            from toolgym.envs.resources import shared_index

            index = shared_index(corpus, retriever, **(retriever_options or {}))
        self.index = index
        self.max_turns = int(max_turns)
        self.top_k = int(top_k)
        self.category_mode = category_mode
        self.protocol = protocol
        self.token_budget = int(token_budget)
        self.counter = make_counter(tokenizer)
        self.max_query_tokens = int(max_query_tokens)
        self.final_reward = final_reward
        self.split = split
        self.render_mode = render_mode
        self.picker = TaskPicker(self.tasks, split)
        self.observation_space = UnicodeText(OBS_MAX_CHARS)
        self.action_space = UnicodeText(ACTION_MAX_CHARS)
        self._prompts: dict[str, str] = {}
        self._episodes = 0
        self._task: Task | None = None
        self._done = True
        self._closed = False

    # -- gymnasium API -----------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = set(options) - {"task", "task_id", "category_mode", "split", "progress"}
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; use task, category_mode, split, progress")
        self._task = self.picker.pick(options, self.np_random)
        self._phase: str | None = None
        self._progress: float | None = None
        mode = options.get("category_mode")
        if mode is None and self.curriculum is not None:
            self._progress = float(options["progress"]) if "progress" in options else self.curriculum.progress(self._episodes)
            mode = self._phase = self.curriculum.mode_at(self._progress)
        mode = mode or self.category_mode
        if mode not in CATEGORY_MODES:
            raise ValueError(f"unknown category mode {mode!r}; choose one of {CATEGORY_MODES}")
        if mode != "off" and not self.corpus.categories:
            raise ValueError(f"category mode {mode!r} needs a corpus with categories")
        self._mode = mode
        self._episodes += 1
        self._turn = 0
        self._invalid = 0
        self._events: list[SearchEvent] = []
        self._seen: dict[str, None] = {}  # insertion-ordered set
        self._selection: list[str] | None = None
        self._terminated_by = "max_turns"
        self._done = False
        prompt = self.system_prompt(mode)
        context = format_context(self._task)
        self._messages: list[dict[str, str]] = [{"role": "system", "content": prompt}]
        self._messages += [dict(m) for m in self._task.messages]
        self._messages.append({"role": "user", "content": self._task.query})
        self._last_obs = f"{prompt}\n\n{context}"
        info = self._info(None, None, "reset")
        info["tool_schemas"] = tool_schemas(self.corpus.categories, mode, self.top_k)
        return self._last_obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        plan = self.plan_step(action)
        result = None
        if isinstance(plan, Search):
            result = self.index.search(plan.query, plan.category, self.top_k)
        return self.finish_step(action, plan, result)

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        if self._task is None:
            return ""
        return "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in self._messages)

    def close(self) -> None:
        # The index is shared process-wide; closing an env must not tear it down.
        self._closed = True

    # -- the two halves of a step (the batched vector env runs the searches in between) --------
    def plan_step(self, action: Any) -> Action:
        """Parse and check ``action``; a :class:`Search` still has to be run by the caller."""
        if self._task is None or self._done:
            raise RuntimeError("the episode is over or was never started: call reset() first")
        parsed = parse_action(action, self.protocol)
        return check_action(
            parsed, self.corpus, self._mode, max_query_tokens=self.max_query_tokens, counter=self.counter
        )

    def finish_step(self, action: Any, plan: Action, result: Any = None) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Apply a planned action (with its search result, for a search) and advance one turn."""
        assert self._task is not None
        turn = self._turn
        self._turn += 1
        self._messages.append({"role": "assistant", "content": action if isinstance(action, str) else repr(action)})
        event = None
        error = None
        terminated = False
        if isinstance(plan, Search):
            ids = [str(i) for i in result.ids[: self.top_k]]
            found = first_found(ids, self._task.gold, set(self._seen))
            self._seen.update(dict.fromkeys(ids))
            event = SearchEvent(turn=turn, query=plan.query, category=plan.category, results=ids, first_found=found)
            self._events.append(event)
            obs = render_results(
                [self.corpus[i] for i in ids],
                query=plan.query,
                category=plan.category,
                protocol=self.protocol,
                budget=self.token_budget,
                counter=self.counter,
            )
            kind = "search"
        elif isinstance(plan, Submit):
            self._selection = list(plan.tool_ids)
            self._terminated_by = "submit"
            terminated = True
            obs = f"Submitted {len(plan.tool_ids)} tool(s): {', '.join(plan.tool_ids)}. The episode is over."
            if self.protocol == "search_r1":
                obs = f"<information>{obs}</information>"
            kind = "submit"
        else:
            self._invalid += 1
            error = plan.reason if isinstance(plan, Invalid) else "unrecognised action"
            obs = render_error(error, self.protocol)
            kind = "invalid"
        self._messages.append({"role": "tool" if self.protocol == "hermes" else "user", "content": obs})
        truncated = not terminated and self._turn >= self.max_turns
        self._done = terminated or truncated
        self._last_obs = obs
        reward = 0.0
        info = self._info(event, error, kind)
        if self._done:
            trajectory = self.trajectory()
            reward = float(self.final_reward(trajectory, self._task))
            info["trajectory"] = trajectory
        return obs, reward, terminated, truncated, info

    # -- records -------------------------------------------------------------------------------
    @property
    def task(self) -> Task | None:
        """The current episode's task (gold included: for agents and evaluators, never in obs)."""
        return self._task

    def trajectory(self) -> Trajectory:
        """The episode so far as a :class:`Trajectory` (a fresh copy)."""
        assert self._task is not None
        return Trajectory(
            task_id=self._task.id,
            events=copy.deepcopy(self._events),
            selection=list(self._selection) if self._selection is not None else None,
            terminated_by=self._terminated_by if self._done else "running",
            invalid_actions=self._invalid,
            messages=[dict(m) for m in self._messages],
            num_turns=self._turn,
        )

    def system_prompt(self, category_mode: str | None = None) -> str:
        mode = category_mode or self.category_mode
        if mode not in self._prompts:
            self._prompts[mode] = system_prompt(
                self.corpus, protocol=self.protocol, category_mode=mode, max_turns=self.max_turns, top_k=self.top_k
            )
        return self._prompts[mode]

    def _info(self, event: SearchEvent | None, error: str | None, kind: str) -> dict[str, Any]:
        assert self._task is not None
        info: dict[str, Any] = {
            "task_id": self._task.id,
            "query": self._task.query,
            "action": kind,
            "event": copy.deepcopy(event),
            "error": error,
            "invalid": kind == "invalid",
            "invalid_actions": self._invalid,
            "seen": list(self._seen),
            "turn": self._turn,
            "max_turns": self.max_turns,
            "category_mode": self._mode,
            "protocol": self.protocol,
            "messages": [dict(m) for m in self._messages],
        }
        if self.curriculum is not None:
            info["curriculum_phase"] = self._phase if self._phase is not None else "override"
            info["curriculum_progress"] = self._progress
        return info
