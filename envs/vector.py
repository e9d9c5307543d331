"""A vector env that sends every search of one step to the retriever as one batch.

``gymnasium.make_vec(id, num_envs)`` uses it (``vector_entry_point``); ``vectorization_mode=
"sync"`` gives gymnasium's ``SyncVectorEnv`` instead, where each sub-env searches on its own.
Per step: every sub-env parses and checks its action (:meth:`ToolSearchEnv.plan_step`), the
searches are grouped by (index, top_k) and run with one ``search_batch`` call per group, then
each sub-env applies its result (:meth:`ToolSearchEnv.finish_step`). A dense index embeds the
whole batch in one encoder call, which is where the speed-up comes from.

Autoreset follows gymnasium's default (``NEXT_STEP``): the step after a sub-env finishes resets
it and ignores its action; it draws a new task with the other options of the last ``reset``
(``progress``, ``split``, ``category_mode``).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from toolgym.envs.actions import Search
from toolgym.envs.tool_search import ToolSearchEnv

# The most sub-envs one vector env holds (``train.group_size`` x ``tasks_per_step`` has the same
# cap): each keeps its own episode, and 10**5 of them used 7 GB before the first step.
MAX_NUM_ENVS = 16384


class BatchedToolSearchVectorEnv(VectorEnv):
    """``num_envs`` :class:`ToolSearchEnv` copies stepped together with batched retrieval.

    ``reset(options=...)`` passes the same options to every sub-env, except
    ``options["tasks"]``: a sequence with one task (id, index or Task) per sub-env, so a GRPO
    group can run one task G times. ``options["reset_mask"]`` resets only the marked sub-envs.
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, envs: Sequence[ToolSearchEnv]):
        envs = list(envs)
        if not envs:
            raise ValueError("need at least one environment")
        if len(envs) > MAX_NUM_ENVS:
            raise ValueError(f"{len(envs)} sub-envs: at most {MAX_NUM_ENVS} in one vector env")
        for env in envs:
            if not isinstance(env, ToolSearchEnv):
                raise ValueError(f"every sub-env must be a ToolSearchEnv, got {type(env).__name__}")
        self.envs = envs
        self.num_envs = len(envs)
        self.single_observation_space = envs[0].observation_space
        self.single_action_space = envs[0].action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.render_mode = None
        self._autoreset = np.zeros(self.num_envs, dtype=bool)
        # An autoreset keeps the episode settings of the last reset (the trainer's progress, the
        # split, the category mode) and only draws a new task.
        self._carried_options: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        self._obs: list[str] = [""] * self.num_envs
        self.search_calls = 0  # batched retriever calls made (for benchmarks and tests)

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[tuple[str, ...], dict[str, Any]]:
        if options is not None and not isinstance(options, Mapping):
            raise ValueError(f"reset options must be a dict (or None), got {type(options).__name__}")
        options = dict(options or {})
        mask = self._reset_mask(options.pop("reset_mask", None))
        tasks = options.pop("tasks", None)
        if tasks is not None:
            if isinstance(tasks, (str, bytes, dict)) or not hasattr(tasks, "__len__"):
                raise ValueError(f"options['tasks'] must be a list with one task per sub-env, got {type(tasks).__name__}")
            if len(tasks) != self.num_envs:
                raise ValueError(f"options['tasks'] needs one task per sub-env ({self.num_envs}), got {len(tasks)}")
        if seed is None or isinstance(seed, (int, np.integer)):
            seeds = [None if seed is None else int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"need {self.num_envs} seeds, got {len(seeds)}")
        infos: dict[str, Any] = {}
        for i, env in enumerate(self.envs):
            if not mask[i]:
                continue
            env_options = dict(options)
            if tasks is not None:
                env_options["task"] = tasks[i]
            self._obs[i], info = env.reset(seed=seeds[i], options=env_options)
            self._carried_options[i] = {k: v for k, v in options.items() if k not in ("task", "task_id")}
            infos = self._add_info(infos, info, i)
            self._autoreset[i] = False
        return tuple(self._obs), infos

    def step(self, actions: Sequence[str]) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if isinstance(actions, (str, bytes)) or not isinstance(actions, Iterable):
            raise ValueError(f"step takes a sequence of actions, one per sub-env ({self.num_envs}), "
                             f"not a single {type(actions).__name__}")
        actions = list(actions)
        if len(actions) != self.num_envs:
            raise ValueError(f"need {self.num_envs} actions, got {len(actions)}")
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminations = np.zeros(self.num_envs, dtype=bool)
        truncations = np.zeros(self.num_envs, dtype=bool)
        infos: dict[str, Any] = {}
        plans: dict[int, Any] = {}
        groups: dict[tuple[int, int], list[int]] = {}
        for i, env in enumerate(self.envs):
            if self._autoreset[i]:
                continue
            plans[i] = plan = env.plan_step(actions[i])
            if isinstance(plan, Search):
                groups.setdefault((id(env.index), env.top_k), []).append(i)
        results: dict[int, Any] = {}
        for (_, top_k), rows in groups.items():
            index = self.envs[rows[0]].index
            # A GRPO group often repeats a query (the raw request): search each distinct one once.
            distinct = list(dict.fromkeys((plans[i].query, plans[i].category) for i in rows))
            batch = index.search_batch([q for q, _ in distinct], [c for _, c in distinct], top_k)
            self.search_calls += 1
            by_key = dict(zip(distinct, batch))
            results.update((i, by_key[(plans[i].query, plans[i].category)]) for i in rows)
        for i, env in enumerate(self.envs):
            if self._autoreset[i]:
                self._obs[i], info = env.reset(options=self._carried_options[i])
                self._autoreset[i] = False
            else:
                self._obs[i], rewards[i], terminations[i], truncations[i], info = env.finish_step(
                    actions[i], plans[i], results.get(i)
                )
                self._autoreset[i] = terminations[i] or truncations[i]
            infos = self._add_info(infos, info, i)
        return tuple(self._obs), rewards, terminations, truncations, infos

    def _reset_mask(self, mask: Any) -> np.ndarray:
        """``options["reset_mask"]`` as a bool array of one entry per sub-env (all when absent)."""
        if mask is None:
            return np.ones(self.num_envs, dtype=bool)
        if isinstance(mask, (str, bytes)):
            raise ValueError(f"options['reset_mask'] must be {self.num_envs} booleans, got a {type(mask).__name__}")
        array = np.asarray(mask)
        if array.shape != (self.num_envs,) or array.dtype.kind not in "bi":
            raise ValueError(f"options['reset_mask'] must be {self.num_envs} booleans (one per sub-env), got shape {array.shape} of {array.dtype}")
        return array.astype(bool)

    def close_extras(self, **kwargs: Any) -> None:
        for env in self.envs:
            env.close()
