"""``DecompositionEnv``: one-step query decomposition (MagicSelector), a gymnasium env.

The observation is the dialogue history and the current request; the action is the list of
atomic subtasks (one per line, or separated by ``<br>``). Every subtask retrieves its top-``k``
tools, the lists are fused (round robin by default), and the reward is the counterfactual gain
over retrieving with the raw context (:func:`~toolgym.retrieval.metrics.counterfactual_decomposition_reward`).

The raw context and all subtasks go to the index in one ``search_batch`` call. Empty or
duplicate-only output is a valid action that scores badly, never an error.
"""
from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from toolgym.data.records import Task, Trajectory
from toolgym.envs.actions import ACTION_MAX_CHARS, check_count
from toolgym.envs.base import Episode, ToolEnv, action_text
from toolgym.envs.syntax import strip_thinking
from toolgym.retrieval.corpus import ToolCorpus
from toolgym.retrieval.decompose import split_where
from toolgym.retrieval.fusion import FUSION_METHODS, fuse
from toolgym.retrieval.metrics import check_counterfactual_weights, counterfactual_decomposition_reward, ndcg_at_k

_SURROGATE = re.compile("[\ud800-\udfff]")  # half a UTF-16 pair: no text encoding (or encoder) takes it
_SEPARATOR = re.compile(r"<br\s*/?>|\n", re.I)
# "1.", "2)", "-", "*", "•", "Step 3:", "Subtask 2 -" at the start of a line
_MARKER = re.compile(r"^\s*(?:(?:step|subtask|task)\s*\d+\s*[:.)-]?|\d+\s*[.)]|[-*•])\s*", re.I)
MAX_SUBTASK_CHARS = 1000
# split_rule -> what the answer's split decision retrieves (None: the answer's own lines)
SPLIT_RULES = ("request_clauses",)

INSTRUCTION = (
    "Rewrite the user's latest request as a list of atomic subtasks, one per line. Each subtask "
    "asks for exactly one tool-sized action, is self-contained (resolve pronouns and references "
    "to the earlier conversation), and keeps the user's constraints. Output only the subtasks."
)


def parse_subtasks(text: Any, max_chars: int = ACTION_MAX_CHARS) -> list[str]:
    """Subtasks from policy text: split on newlines and ``<br>``, list markers and
    ``<think>`` blocks removed, blanks dropped, duplicates kept (they are the reward-hacking
    signal reward modules log). Only the first ``max_chars`` characters are read. Never raises;
    non-text gives ``[]``; linear time."""
    if not isinstance(text, str):
        return []
    text = strip_thinking(text[:max_chars], "\n")
    out = []
    for line in _SEPARATOR.split(text):
        line = " ".join(_MARKER.sub("", line, count=1).split())
        if line:
            out.append(line[:MAX_SUBTASK_CHARS])
    return out


@dataclass
class DecompositionEpisode(Episode):
    """A decomposition episode: :class:`Episode` plus its record once the one step ended it."""

    result: Trajectory | None = None


class DecompositionEnv(ToolEnv):
    """One-step decomposition over ``corpus`` for ``tasks``.

    Args:
        corpus, tasks, index, split, retriever, retriever_options, render_mode: see
            :class:`~toolgym.envs.base.ToolEnv`.
        k: depth of every ranking and of the NDCG / completeness cut-off (default 10).
        fusion: ``round_robin`` (default), ``rrf`` or ``max_score``.
        lambda_ndcg, lambda_full: the weights of the counterfactual reward (default 1, 1).
        max_subtasks: subtasks beyond this many are dropped (reported in ``info``).
        split_rule: ``None`` (default): the answer's lines are the subtasks (MagicSelector).
            ``"request_clauses"``: the answer only decides *whether* to split, and a rule writes the
            split. More than one line splits: the raw request, then its latest request's clauses
            (:func:`~toolgym.retrieval.decompose.split_where`); one line or none leaves the request
            whole. The reward then scores exactly what the policy-gated retrieval pipeline
            (``toolgym eval retrieval --decompose gated:PATH``) searches, and ``info["split"]`` holds
            the decision.

    A turn that is not text, or longer than ``ACTION_MAX_CHARS``, counts as invalid and yields
    no subtasks. ``options["progress"]`` is accepted (and checked) so a trainer can pass the
    same reset options to every env; it changes nothing here.
    """

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
        split_rule: str | None = None,
        split: str | None = None,
        retriever: str = "bm25",
        retriever_options: dict[str, Any] | None = None,
        render_mode: str | None = None,
    ):
        k, max_subtasks = check_count("k", k, 1), check_count("max_subtasks", max_subtasks, 1)
        if fusion not in FUSION_METHODS:
            raise ValueError(f"unknown fusion {fusion!r}; choose one of {FUSION_METHODS}")
        lambda_ndcg, lambda_full = check_counterfactual_weights(lambda_ndcg, lambda_full)
        if split_rule is not None and split_rule not in SPLIT_RULES:
            raise ValueError(f"unknown split_rule {split_rule!r}; choose None or one of {SPLIT_RULES}")
        super().__init__(corpus, tasks, index, split=split, retriever=retriever,
                         retriever_options=retriever_options, render_mode=render_mode)
        self.k = int(k)
        self.fusion = fusion
        self.lambda_ndcg, self.lambda_full = lambda_ndcg, lambda_full
        self.max_subtasks = int(max_subtasks)
        self.split_rule = split_rule

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        task, options = self._start(seed, options)
        self.episode = DecompositionEpisode(task=task, messages=self.prompt_messages(INSTRUCTION, task),
                                            progress=options.get("progress"))
        obs = f"{INSTRUCTION}\n\n{task.dialogue_text(request_label='Current request')}"
        return obs, {"task_id": task.id, "query": task.query, "messages": self.messages, "k": self.k, "fusion": self.fusion}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        episode = self._running()
        task = episode.task
        invalid = 0 if isinstance(action, str) and len(action) <= ACTION_MAX_CHARS else 1
        # A JSON "\ud800" decodes to half a character: no retriever can search it (a dense
        # tokenizer raised TypeError), so the whole answer is invalid, with an error observation.
        unencodable = not invalid and not action.isascii() and _SURROGATE.search(action) is not None
        invalid = invalid or int(unencodable)
        all_subtasks = parse_subtasks(action) if not invalid else []
        split = len(all_subtasks) > 1
        if self.split_rule is not None and not invalid:
            all_subtasks = split_where([task], [split])[0]
        subtasks = all_subtasks[: self.max_subtasks]
        # One batch: the raw context first, then every subtask.
        results = self.index.search_batch([task.context_text()] + subtasks, None, self.k)
        raw = list(results[0].ids)
        rankings = [list(r.ids) for r in results[1:]]
        scores = [list(r.scores) for r in results[1:]]
        fused = fuse(rankings, self.fusion, self.k, scores=scores) if rankings else []
        reward = float(counterfactual_decomposition_reward(
            raw, fused, task.gold, self.k, lambda_ndcg=self.lambda_ndcg, lambda_full=self.lambda_full
        ))
        for subtask, ranking in zip(subtasks, rankings):
            episode.record_search(0, subtask, None, ranking)
        obs = (
            f"Retrieved tools for {len(subtasks)} subtask(s); fused list of {len(fused)} tools. The episode is over."
            if subtasks else "Invalid answer: it contains an invalid Unicode escape (a lone surrogate); no subtasks "
            "were searched. The episode is over." if unencodable else "No subtasks found in the answer. The episode is over."
        )
        new_messages = [episode.add_message("assistant", action_text(action))]
        episode.done = True
        trajectory = Trajectory(
            task_id=task.id,
            events=list(episode.events),
            selection=list(fused),
            terminated_by="submit",
            invalid_actions=invalid,
            messages=self.messages,
            num_turns=1,
            subtasks=list(subtasks),
            env_reward=reward,
        )
        episode.result = copy.deepcopy(trajectory)
        info = {
            "task_id": task.id,
            "subtasks": list(subtasks),
            "split": split,
            "subtasks_dropped": len(all_subtasks) - len(subtasks),
            "duplicate_subtasks": len(subtasks) - len(set(s.lower() for s in subtasks)),
            "raw_ranking": raw,
            "fused_ranking": list(fused),
            "rankings": [list(r) for r in rankings],
            "ndcg_raw": ndcg_at_k(raw, task.gold, self.k),
            "ndcg_atom": ndcg_at_k(fused, task.gold, self.k) if fused else 0.0,
            "invalid_actions": invalid,
            "new_messages": new_messages,
            "trajectory": trajectory,
        }
        return obs, reward, True, False, info

    def trajectory(self) -> Trajectory:
        """The episode as a fresh :class:`Trajectory`: before its one step, the prompt with no
        subtasks (``terminated_by="running"``); after it, the step's ``info["trajectory"]``."""
        episode = self._started()
        if isinstance(episode, DecompositionEpisode) and episode.result is not None:
            return copy.deepcopy(episode.result)
        return Trajectory(task_id=episode.task.id, terminated_by="running", messages=self.messages, num_turns=0)
