"""What both environments share: corpus and task checks, the process-wide index, the task
picker, the text spaces, ``reset`` option checking, the per-episode record, render and close.

:class:`ToolEnv` is the base of :class:`~toolgym.envs.tool_search.ToolSearchEnv` and
:class:`~toolgym.envs.decomposition.DecompositionEnv`. Each episode's state is one
:class:`Episode` (or a subclass) made in ``reset``; nothing of an episode lives elsewhere.

``info`` contract (both envs): ``reset`` hands out the prompt chat as ``info["messages"]`` (a
fresh copy, once per episode); each ``step`` hands out only what it added, as
``info["new_messages"]`` (with the env's own roles: a search_r1 env answers as ``user``), so a
step costs the same on turn 1 and turn 30; the step that ends the episode puts its
:class:`~toolgym.data.records.Trajectory` in ``info["trajectory"]``. The whole chat is
``env.messages`` (a copy made on demand); the record so far is :meth:`ToolEnv.trajectory`, which
every env provides (rollouts cut for context, the TRL / verifiers / verl integrations read it).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium
import numpy as np

from toolgym.data.records import SearchEvent, Task, Trajectory, first_found
from toolgym.envs.actions import ACTION_MAX_CHARS, OBS_MAX_CHARS, clip
from toolgym.envs.curriculum import check_progress
from toolgym.envs.spaces import UnicodeText
from toolgym.retrieval.corpus import ToolCorpus


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
                splits = sorted({t.split for t in self.tasks}, key=str)
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
                raise ValueError(f"unknown task id {clip(choice)!r}")
            return self.tasks[self.by_id[choice]]
        if isinstance(choice, (int, np.integer)) and not isinstance(choice, bool):
            if not -len(self.tasks) <= choice < len(self.tasks):
                raise ValueError(f"task index {choice} out of range for {len(self.tasks)} tasks")
            return self.tasks[int(choice)]
        raise ValueError(f"options['task'] must be a task id, an index or a Task, got {type(choice).__name__}")


@dataclass
class Episode:
    """One episode's state: the task, the chat so far, the search log, whether it is over."""

    task: Task
    messages: list[dict[str, str]]
    progress: float | None = None  # options["progress"], when the trainer passed it
    done: bool = False
    events: list[SearchEvent] = field(default_factory=list)
    seen: dict[str, None] = field(default_factory=dict)  # every id shown so far (an ordered set)

    def record_search(self, turn: int, query: str, category: str | None, results: Sequence[str]) -> SearchEvent:
        """Log one ranked list: its :class:`SearchEvent`, ``first_found`` against every earlier list."""
        results = [str(r) for r in results]
        event = SearchEvent(turn=turn, query=query, category=category, results=results,
                            first_found=first_found(results, self.task.gold, set(self.seen)))
        self.events.append(event)
        self.seen.update(dict.fromkeys(results))
        return event

    def add_message(self, role: str, content: str) -> dict[str, str]:
        message = {"role": role, "content": content}
        self.messages.append(message)
        return dict(message)


def action_text(action: Any) -> str:
    """The policy's turn as it goes into the chat (a non-text action as a bounded ``repr``)."""
    return action if isinstance(action, str) else clip(repr(action), ACTION_MAX_CHARS)


class ToolEnv(gymnasium.Env[str, str]):
    """Base of the text environments over one tool corpus (see the module docstring).

    Args:
        corpus: the tool library.
        tasks: the requests, each with its gold tool ids.
        index: a :class:`~toolgym.retrieval.index.ToolIndex` over ``corpus``; ``None`` builds (or
            reuses, process-wide) one with ``retriever``.
        split: restrict random task choice to this split (``options["split"]`` overrides).
        retriever: index method used when ``index`` is None (``bm25``, ``dense``, ``hybrid``).
        retriever_options: keyword arguments for ``build_index`` when ``index`` is None.
        render_mode: ``None`` or ``"ansi"`` (render returns the transcript).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}
    reset_options: ClassVar[frozenset[str]] = frozenset({"task", "task_id", "split", "progress"})

    def __init__(
        self,
        corpus: ToolCorpus,
        tasks: Sequence[Task],
        index: Any = None,
        *,
        split: str | None = None,
        retriever: str = "bm25",
        retriever_options: dict[str, Any] | None = None,
        render_mode: str | None = None,
    ):
        if not isinstance(corpus, ToolCorpus):
            raise ValueError(f"corpus must be a ToolCorpus, got {type(corpus).__name__}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"unsupported render_mode {render_mode!r}; use None or 'ansi'")
        self.corpus = corpus
        self.tasks = check_tasks(corpus, tasks)
        if index is None:
            from toolgym.envs.resources import check_index_options, shared_index

            options = {} if retriever_options is None else retriever_options
            check_index_options(options)  # a list or an unknown key: one ValueError naming it
            index = shared_index(corpus, retriever, **options)
        self.index = index
        self.split = split
        self.render_mode = render_mode
        self.picker = TaskPicker(self.tasks, split)
        self.observation_space = UnicodeText(OBS_MAX_CHARS)
        self.action_space = UnicodeText(ACTION_MAX_CHARS)
        self.episode: Episode | None = None
        self._closed = False

    def _start(self, seed: int | None, options: dict[str, Any] | None) -> tuple[Task, dict[str, Any]]:
        """Seed, check ``options`` (a mapping; unknown keys, ``progress``) and pick the task."""
        if options is not None and not isinstance(options, Mapping):
            raise ValueError(f"reset options must be a dict (or None), got {type(options).__name__}")
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = set(options) - self.reset_options
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(map(str, unknown))}; use {', '.join(sorted(self.reset_options))}")
        if "progress" in options:
            options["progress"] = check_progress(options["progress"])
        split = options.get("split")
        if split is not None and not isinstance(split, str):
            raise ValueError(f"options['split'] must be a split name (a string) or None, got {type(split).__name__} "
                             f"{clip(repr(split))}")
        return self.picker.pick(options, self.np_random), options

    def _running(self) -> Episode:
        """The current episode; ``RuntimeError`` if it is over or was never started."""
        if self.episode is None or self.episode.done:
            raise RuntimeError("the episode is over or was never started: call reset() first")
        return self.episode

    @staticmethod
    def prompt_messages(system: str, task: Task) -> list[dict[str, str]]:
        """The chat a policy starts from: the system prompt, the task's prior turns, the request."""
        return [{"role": "system", "content": system}, *(dict(m) for m in task.messages),
                {"role": "user", "content": task.query}]

    def trajectory(self) -> Trajectory:
        """The current episode so far as a fresh :class:`Trajectory` (``terminated_by="running"``
        until it ends, then equal to the final ``info["trajectory"]``); ``RuntimeError`` before
        the first reset. Every env implements it: it is how a caller reads an unfinished episode."""
        raise NotImplementedError(f"{type(self).__name__} must implement trajectory()")

    def _started(self) -> Episode:
        """The current (running or finished) episode; ``RuntimeError`` if there is none yet."""
        if self.episode is None:
            raise RuntimeError("no episode yet: call reset() first")
        return self.episode

    @property
    def task(self) -> Task | None:
        """The current episode's task (gold included: for agents and evaluators, never in obs)."""
        return self.episode.task if self.episode is not None else None

    @property
    def messages(self) -> list[dict[str, str]]:
        """The whole chat of the current episode (a fresh copy; ``[]`` before the first reset)."""
        return [dict(m) for m in self.episode.messages] if self.episode is not None else []

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        if self.episode is None:
            return ""
        return "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in self.episode.messages)

    def close(self) -> None:
        # The index is shared process-wide; closing an env must not tear it down.
        self._closed = True
