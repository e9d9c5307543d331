"""A trained decomposition policy as a retrieval-pipeline step: requests in, subtasks out.

``toolgym eval retrieval --decompose policy:PATH`` (and :func:`~toolgym.evaluation.retrieval.evaluate_retrieval`
with ``decompose=PolicyDecomposer(...)``) asks the policy for each request's subtasks exactly as
``toolgym/Decompose-v0`` would (the same system instruction, the same chat, the same parser), greedy,
then retrieves per subtask and fuses the lists like the clause splitter. A policy that writes no
subtask for a request leaves it whole: a retrieval pipeline must still return a list, where the env
would score the empty answer 0.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from toolgym.agents.policy import ChatPolicy
from toolgym.data.records import Task
from toolgym.envs.decomposition import INSTRUCTION, DecompositionEnv, parse_subtasks
from toolgym.retrieval.decompose import split_where


class PolicyDecomposer:
    """``decomposer(tasks) -> [[subtask, ...], ...]`` with a :class:`ChatPolicy`, greedy.

    Args:
        policy: the decomposition policy (e.g. ``load_policy("runs/decomposer/checkpoints/step_000010")``).
        batch_size: requests decoded together.
        max_subtasks: subtasks kept per request (the env's default cap, 16).
        max_new_tokens: the decoding budget per request (``None``: the policy's own).
    """

    def __init__(self, policy: ChatPolicy, batch_size: int = 16, max_subtasks: int = 16,
                 max_new_tokens: int | None = None):
        for name, value in (("batch_size", batch_size), ("max_subtasks", max_subtasks)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.policy, self.batch_size, self.max_subtasks = policy, batch_size, max_subtasks
        self.max_new_tokens = max_new_tokens
        self.texts: list[str] = []  # the policy's raw answers of the last call, for inspection
        self.seconds = 0.0  # decoding time of the last call (the pipeline's added cost per request)

    def __call__(self, tasks: Sequence[Task]) -> list[list[str]]:
        saved = self.policy.sampling
        self.policy.sampling = dataclasses.replace(saved, temperature=0.0)
        started = time.perf_counter()
        try:
            self.texts = []
            for start in range(0, len(tasks), self.batch_size):
                chunk = tasks[start:start + self.batch_size]
                prompts = [self.policy.encode_prompt(DecompositionEnv.prompt_messages(INSTRUCTION, t)) for t in chunk]
                self.texts += [g.text for g in self.policy.generate_batch(prompts, self.max_new_tokens)]
        finally:
            self.policy.sampling = saved
            self.seconds = time.perf_counter() - started
        return [parse_subtasks(text)[: self.max_subtasks] or [task.context_text()]
                for task, text in zip(tasks, self.texts)]

    def __repr__(self) -> str:
        return f"PolicyDecomposer({type(self.policy).__name__})"


class GatedClauseDecomposer:
    """``decomposer(tasks) -> [[subtask, ...], ...]``: a trained policy decides *whether* to split,
    the rule writes the split (:func:`~toolgym.retrieval.decompose.request_then_clauses`).

    The policy (a :class:`PolicyDecomposer`, greedy) splits a request when it writes more than one
    subtask; the request is then retrieved as the raw request followed by its clauses, else as the
    raw request. Why: SmolLM2-135M, trained on the mixture with R_cf, learnt where splitting pays
    (its warm start writes 3.4 subtasks on held-out Seal-Tools and StableToolBench requests, 1.0–1.4
    on the others) but not to write a clause reliably (of its extra lines in GRPO rollouts, 48 % are
    one of the rule's clauses, 29 % a prefix or other span of the request, 21 % text not in it).
    """

    def __init__(self, policy_decomposer: PolicyDecomposer):
        self.policy_decomposer = policy_decomposer
        self.split: list[bool] = []  # the policy's decision per task of the last call

    @property
    def seconds(self) -> float:  # the decoding time of the last call (the pipeline's added cost)
        return self.policy_decomposer.seconds

    def __call__(self, tasks: Sequence[Task]) -> list[list[str]]:
        self.split = [len(subtasks) > 1 for subtasks in self.policy_decomposer(tasks)]
        return split_where(tasks, self.split)

    def __repr__(self) -> str:
        return f"GatedClauseDecomposer({self.policy_decomposer!r})"
