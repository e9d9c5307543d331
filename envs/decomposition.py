"""``DecompositionEnv``: one-step query decomposition (MagicSelector), a gymnasium env.

The observation is the dialogue history and the current request; the action is the list of
atomic subtasks (one per line, or separated by ``<br>``). Every subtask retrieves its top-``k``
tools, the lists are fused (round robin by default), and the reward is the counterfactual gain
over retrieving with the raw context (:func:`~toolgym.retrieval.metrics.counterfactual_decomposition_reward`).

The raw context and all subtasks go to the index in one ``search_batch`` call. Empty or
duplicate-only output is a valid action that scores badly, never an error.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import gymnasium

from toolgym.data.records import SearchEvent, Task, Trajectory, first_found
from toolgym.envs.spaces import UnicodeText
from toolgym.envs.tool_search import ACTION_MAX_CHARS, OBS_MAX_CHARS, TaskPicker, check_tasks
from toolgym.retrieval.corpus import ToolCorpus
from toolgym.retrieval.fusion import FUSION_METHODS, fuse
from toolgym.retrieval.metrics import counterfactual_decomposition_reward, ndcg_at_k

_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_SEPARATOR = re.compile(r"<br\s*/?>|\n", re.I)
# "1.", "2)", "-", "*", "•", "Step 3:", "Subtask 2 -" at the start of a line
_MARKER = re.compile(r"^\s*(?:(?:step|subtask|task)\s*\d+\s*[:.)-]?|\d+\s*[.)]|[-*•])\s*", re.I)
MAX_SUBTASK_CHARS = 1000

INSTRUCTION = (
    "Rewrite the user's latest request as a list of atomic subtasks, one per line. Each subtask "
    "asks for exactly one tool-sized action, is self-contained (resolve pronouns and references "
    "to the earlier conversation), and keeps the user's constraints. Output only the subtasks."
)


def parse_subtasks(text: Any) -> list[str]:
    """Subtasks from policy text: split on newlines and ``<br>``, list markers and
    ``<think>`` blocks removed, blanks dropped, duplicates kept (they are the reward-hacking
    signal reward modules log). Never raises; non-text gives ``[]``."""
    if not isinstance(text, str):
        return []
    text = _THINK.sub("\n", text)
    out = []
    for line in _SEPARATOR.split(text):
        line = " ".join(_MARKER.sub("", line, count=1).split())
        if line:
            out.append(line[:MAX_SUBTASK_CHARS])
    return out


class DecompositionEnv(gymnasium.Env[str, str]):
    """One-step decomposition over ``corpus`` for ``tasks``.

    Args:
        corpus, tasks, index: as for :class:`~toolgym.envs.tool_search.ToolSearchEnv`.
        k: depth of every ranking and of the NDCG / completeness cut-off (default 10).
        fusion: ``round_robin`` (default), ``rrf`` or ``max_score``.
        lambda_ndcg, lambda_full: the weights of the counterfactual reward (default 1, 1).
        max_subtasks: subtasks beyond this many are dropped (reported in ``info``).
        split, retriever, retriever_options, render_mode: as for ``ToolSearchEnv``.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        corpus: ToolCorpus,
        tasks: Sequence[Task],
        index: Any = None,
        *,
        k: int = 10,
        fusion: str = "round_robin",
        lambda_ndcg: float = 1.0,
        lambda_full: float = 1.0,
        max_subtasks: int = 16,
        split: str | None = None,
        retriever: str = "bm25",
        retriever_options: dict[str, Any] | None = None,
        render_mode: str | None = None,
    ):
        if not isinstance(corpus, ToolCorpus):
            raise ValueError(f"corpus must be a ToolCorpus, got {type(corpus).__name__}")
        if k < 1 or max_subtasks < 1:
            raise ValueError("k and max_subtasks must be >= 1")
        if fusion not in FUSION_METHODS:
            raise ValueError(f"unknown fusion {fusion!r}; choose one of {FUSION_METHODS}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"unsupported render_mode {render_mode!r}; use None or 'ansi'")
        self.corpus = corpus
        self.tasks = check_tasks(corpus, tasks)
        if index is None:
            from toolgym.envs.resources import shared_index

            index = shared_index(corpus, retriever, **(retriever_options or {}))
        self.index = index
        self.k = int(k)
        self.fusion = fusion
        self.lambda_ndcg = float(lambda_ndcg)
        self.lambda_full = float(lambda_full)
        self.max_subtasks = int(max_subtasks)
        self.split = split
        self.render_mode = render_mode
        self.picker = TaskPicker(self.tasks, split)
        self.observation_space = UnicodeText(OBS_MAX_CHARS)
        self.action_space = UnicodeText(ACTION_MAX_CHARS)
        self._task: Task | None = None
        self._done = True
        self._last = ""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = set(options) - {"task", "task_id", "split"}
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; use task, split")
        self._task = task = self.picker.pick(options, self.np_random)
        self._done = False
        history = "\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in task.messages)
        context = (f"Conversation so far:\n{history}\n\n" if history else "") + f"Current request: {task.query}"
        self._messages = [{"role": "system", "content": INSTRUCTION}]
        self._messages += [dict(m) for m in task.messages]
        self._messages.append({"role": "user", "content": task.query})
        self._last = f"{INSTRUCTION}\n\n{context}"
        return self._last, {
            "task_id": task.id,
            "query": task.query,
            "messages": [dict(m) for m in self._messages],
            "k": self.k,
            "fusion": self.fusion,
        }

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._task is None or self._done:
            raise RuntimeError("the episode is over or was never started: call reset() first")
        task = self._task
        invalid = 0 if isinstance(action, str) else 1
        all_subtasks = parse_subtasks(action)
        subtasks = all_subtasks[: self.max_subtasks]
        # One batch: the raw context first, then every subtask.
        results = self.index.search_batch([task.context_text()] + subtasks, None, self.k)
        raw = list(results[0].ids)
        rankings = [list(r.ids) for r in results[1:]]
        scores = [list(r.scores) for r in results[1:]]
        fused = fuse(rankings, self.fusion, self.k, scores=scores) if rankings else []
        reward = counterfactual_decomposition_reward(
            raw, fused, task.gold, self.k, lambda_ndcg=self.lambda_ndcg, lambda_full=self.lambda_full
        )
        events = []
        seen: set[str] = set()
        for subtask, ranking in zip(subtasks, rankings):
            events.append(SearchEvent(turn=0, query=subtask, category=None, results=list(ranking),
                                      first_found=first_found(ranking, task.gold, seen)))
            seen.update(ranking)
        obs = (
            f"Retrieved tools for {len(subtasks)} subtask(s); fused list of {len(fused)} tools. The episode is over."
            if subtasks else "No subtasks found in the answer. The episode is over."
        )
        content = action if isinstance(action, str) else repr(action)
        self._messages.append({"role": "assistant", "content": content})
        self._done = True
        self._last = obs
        trajectory = Trajectory(
            task_id=task.id,
            events=events,
            selection=list(fused),
            terminated_by="submit",
            invalid_actions=invalid,
            messages=[dict(m) for m in self._messages],
            num_turns=1,
            subtasks=list(subtasks),
        )
        info = {
            "task_id": task.id,
            "subtasks": list(subtasks),
            "subtasks_dropped": len(all_subtasks) - len(subtasks),
            "duplicate_subtasks": len(subtasks) - len(set(s.lower() for s in subtasks)),
            "raw_ranking": raw,
            "fused_ranking": list(fused),
            "rankings": [list(r) for r in rankings],
            "ndcg_raw": ndcg_at_k(raw, task.gold, self.k),
            "ndcg_atom": ndcg_at_k(fused, task.gold, self.k) if fused else 0.0,
            "invalid_actions": invalid,
            "messages": [dict(m) for m in self._messages],
            "trajectory": trajectory,
        }
        return obs, float(reward), True, False, info

    def render(self) -> str | None:
        return self._last if self.render_mode == "ansi" else None

    def close(self) -> None:
        pass

    @property
    def task(self) -> Task | None:
        return self._task
