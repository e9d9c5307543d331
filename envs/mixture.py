"""``MixtureDecompositionEnv``: one Decompose env over several tool libraries, each task searched
in its own library (MagicSelector trains its decomposer on a mixture of sources).

A decomposer must learn *when* splitting pays: on multi-intent sources (Seal-Tools, UltraTool,
StableToolBench) it usually does, on single-intent ones (MetaTool, API-Bank's dialogues) the raw
request usually retrieves better. One env that draws tasks from every source shows the policy
both kinds in one GRPO run. Each task keeps its own corpus and index: the counterfactual reward
R_cf compares raw and decomposed retrieval *in the library the request belongs to*, as the
retrieval ladder evaluates it per source.

It is a thin router: one :class:`~toolgym.envs.decomposition.DecompositionEnv` per source, all
built with the same settings; ``reset`` picks a task from the interleaved list of every source's
tasks and hands the episode to that source's env, so observations, rewards, ``info`` and
trajectories are exactly the single-source env's. :attr:`index` is a :class:`MixtureIndex` whose
``retriever()`` searches the library of the task it is given: reward modules that search
(``counterfactual``, ``magicselector``) use it like any index.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium

from toolgym.data.records import Task
from toolgym.envs.actions import check_count
from toolgym.envs.base import TaskPicker
from toolgym.envs.decomposition import DecompositionEnv
from toolgym.envs.resources import shared_mixture

__all__ = ["MixtureDecompositionEnv", "MixtureIndex", "interleave"]


def interleave(parts: Sequence[Sequence[Task]]) -> list[Task]:
    """Round robin over ``parts``: first task of each, then the second of each...; a part that runs
    out is skipped. Any prefix of the result (an evaluation's first N tasks) draws every part evenly."""
    out: list[Task] = []
    for i in range(max((len(p) for p in parts), default=0)):
        out += [p[i] for p in parts if i < len(p)]
    return out


class MixtureIndex:
    """The indexes of a mixture's sources, routed by task: ``retriever()`` returns
    ``retrieve(queries, k, task)`` that searches the library ``task`` belongs to. Reward modules
    that search pass the group's task when the function says it takes one (``takes_task``)."""

    def __init__(self, indexes: Mapping[str, Any], source_of: Mapping[str, str]):
        self.indexes = dict(indexes)
        self.source_of = source_of  # task id -> source name

    def source_for(self, task: Task | str) -> str:
        task_id = task.id if isinstance(task, Task) else str(task)
        source = self.source_of.get(task_id)
        if source is None:
            raise ValueError(f"task {task_id[:200]!r} is in no source of this mixture")
        return source

    def index_for(self, task: Task | str) -> Any:
        return self.indexes[self.source_for(task)]

    def retriever(self) -> Any:
        by_source = {name: index.retriever() for name, index in self.indexes.items()}

        def retrieve(queries: Sequence[str], k: int, task: Task | str | None = None) -> list[list[tuple[str, float]]]:
            if task is None:
                raise ValueError("a mixture's retrieve needs the task (each source searches its own library)")
            return by_source[self.source_for(task)](queries, k)

        retrieve.takes_task = True  # type: ignore[attr-defined]
        return retrieve


class MixtureDecompositionEnv(gymnasium.Env[str, str]):
    """One-step decomposition over several ``(name, corpus, tasks)`` sources.

    Args:
        sources: the sources, in order; their task ids must be unique across sources (the bundled
            datasets prefix theirs with the dataset name).
        split: restrict random task choice to this split (``options["split"]`` overrides).
        render_mode: ``None`` or ``"ansi"``.
        env_kwargs: the :class:`DecompositionEnv` settings every source's env gets (``k``,
            ``fusion``, ``lambda_ndcg``, ``lambda_full``, ``max_subtasks``, ``split_rule``, ``retriever``,
            ``retriever_options``).

    ``tasks`` interleaves the sources (:func:`interleave`), so a trainer's seeded task order and an
    evaluation's first N tasks both draw every source. ``reset`` takes the single env's options.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}
    reset_options = DecompositionEnv.reset_options

    def __init__(self, sources: Sequence[tuple[str, Any, Sequence[Task]]], *, split: str | None = None,
                 render_mode: str | None = None, **env_kwargs: Any):
        if not sources:
            raise ValueError("a mixture needs at least one source")
        self.envs: dict[str, DecompositionEnv] = {}
        self.source_of: dict[str, str] = {}
        for name, corpus, tasks in sources:
            if name in self.envs:
                raise ValueError(f"two sources are named {name!r}")
            env = DecompositionEnv(corpus, tasks, split=split, render_mode=render_mode, **env_kwargs)
            for task in env.tasks:
                if task.id in self.source_of:
                    raise ValueError(f"task id {task.id!r} is in sources {self.source_of[task.id]!r} and {name!r}: "
                                     "task ids must be unique across a mixture")
                self.source_of[task.id] = name
            self.envs[name] = env
        self.tasks = interleave([env.tasks for env in self.envs.values()])
        self.picker = TaskPicker(self.tasks, split)
        self.index = MixtureIndex({n: e.index for n, e in self.envs.items()}, self.source_of)
        first = next(iter(self.envs.values()))
        self.observation_space, self.action_space = first.observation_space, first.action_space
        self.render_mode = render_mode
        self.current: DecompositionEnv | None = None

    @property
    def sources(self) -> list[str]:
        return list(self.envs)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        if options is not None and not isinstance(options, Mapping):
            raise ValueError(f"reset options must be a dict (or None), got {type(options).__name__}")
        super().reset(seed=seed)
        options = dict(options or {})
        task = self.picker.pick(options, self.np_random)  # by id, index or Task; else a seeded draw
        if task.id not in self.source_of:
            raise ValueError(f"task {task.id[:200]!r} is in no source of this mixture")
        env = self.envs[self.source_of[task.id]]
        rest = {k: v for k, v in options.items() if k not in ("task", "task_id", "split")}
        # the source env checks the remaining options (unknown keys, progress) and owns the episode
        obs, info = env.reset(seed=seed, options={**rest, "task": task.id})
        self.current = env
        return obs, {**info, "source": self.source_of[task.id]}

    def _env(self) -> DecompositionEnv:
        if self.current is None:
            raise RuntimeError("no episode yet: call reset() first")
        return self.current

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return self._env().step(action)

    def trajectory(self) -> Any:
        """The episode's record, as the source env's :meth:`~DecompositionEnv.trajectory`."""
        return self._env().trajectory()

    @property
    def task(self) -> Task | None:
        return self.current.task if self.current is not None else None

    @property
    def messages(self) -> list[dict[str, str]]:
        return self.current.messages if self.current is not None else []

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return self.current.render() if self.current is not None else ""


def mixture_sources(sources: Any, part: str, seed: int, limit: int | None,
                    keep: Callable[[Task], bool] | None = None) -> list[tuple[str, Any, list[Task]]]:
    """``(name, corpus, tasks)`` per source of a mixture (:func:`~toolgym.envs.resources.shared_mixture`):
    its ``part`` (``train`` or ``heldout``), the tasks ``keep`` accepts (all when ``None``), at most
    ``limit`` of them each (a ``seed``-ed sample, in input order)."""
    from toolgym.data.training_data import seeded_sample

    if part not in ("train", "heldout"):
        raise ValueError(f"a mixture's split must be 'train' or 'heldout' (its parts), got {part!r}")
    limit = None if limit is None else check_count("limit", limit, 1)
    return [(s.name, s.corpus, seeded_sample([t for t in getattr(s, part) if keep is None or keep(t)], limit, seed))
            for s in shared_mixture(sources, seed)]
