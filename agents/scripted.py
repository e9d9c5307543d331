"""Scripted baseline agents for the tool-search environments.

An :class:`Agent` sees what a policy sees — the observation text and ``info`` — and answers
with text in the environment's protocol (``info["protocol"]``). The baselines:

- :class:`RawQueryAgent`: searches the user's request verbatim, submits the top ``k`` results.
- :class:`OracleAgent`: searches each gold tool's own name and description, then submits the
  gold tools it saw. It reads gold only from the :class:`~toolgym.data.records.Task` objects it
  is given explicitly, never from the observation: an upper bound on what the retriever allows.
- :class:`RandomAgent`: seeded random searches (words of the request), submissions (ids seen so
  far) and, sometimes, malformed text; a floor, and a fuzzer for the environments.
- :class:`ClauseSplitAgent`: for the decomposition envs, the request split into clauses.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

from toolgym.data.records import Task
from toolgym.envs.actions import Search, Submit
from toolgym.envs.syntax import render_call
from toolgym.retrieval.corpus import ToolCorpus


@runtime_checkable
class Agent(Protocol):
    """A policy for the text environments: ``reset`` once per episode, then ``act`` each turn."""

    def reset(self, obs: str, info: dict[str, Any]) -> None: ...

    def act(self, obs: str, info: dict[str, Any]) -> str: ...


def format_search(query: str, category: str | None = None, protocol: str = "hermes") -> str:
    """A ``search`` call in ``protocol`` (``hermes`` function call or ``search_r1`` tag)."""
    return render_call(Search(query, category or None), protocol)


def format_submit(tool_ids: Iterable[str], protocol: str = "hermes") -> str:
    """A ``submit`` call in ``protocol``."""
    return render_call(Submit(tuple(tool_ids)), protocol)


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def guess_category(query: str, categories: Iterable[str]) -> str | None:
    """The category whose name shares the most words with ``query`` (first one on ties)."""
    words = set(_words(query))
    best, best_score = None, -1
    for category in categories:
        score = len(words & set(_words(category)))
        if score > best_score:
            best, best_score = category, score
    return best


def _categories_from_info(info: dict[str, Any]) -> list[str]:
    """Category enum of the search schema the environment announced (``info["tool_schemas"]``)."""
    for schema in info.get("tool_schemas") or ():
        fn = schema.get("function", {})
        if fn.get("name") == "search":
            return list(fn.get("parameters", {}).get("properties", {}).get("category", {}).get("enum", []))
    return []


class RawQueryAgent:
    """Search the user request as is, then submit the top ``k`` results.

    In ``required`` category mode it searches the category whose name overlaps the request most.
    """

    name = "raw"

    def __init__(self, k: int = 3):
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.k = k

    def reset(self, obs: str, info: dict[str, Any]) -> None:
        self.query = str(info["query"])
        self.protocol = info.get("protocol", "hermes")
        self.category = None
        if info.get("category_mode") == "required":
            self.category = guess_category(self.query, _categories_from_info(info))
        self.searched = False

    def act(self, obs: str, info: dict[str, Any]) -> str:
        if not self.searched:
            self.searched = True
            return format_search(_shorten(self.query), self.category, self.protocol)
        event = info.get("event")
        results = list(event.results) if event is not None else list(info.get("seen") or [])
        return format_submit(results[: self.k], self.protocol)


def _shorten(text: str, max_words: int = 150) -> str:
    # Stay under the env's default query limit (256 tokens) even for very long requests.
    words = text.split()
    return " ".join(words[:max_words])


class OracleAgent:
    """Search each gold tool's name and description, submit the gold tools found.

    ``tasks``: the Task objects (or a mapping id -> Task) it may read gold from; ``corpus``: the
    tool library, for the descriptions. With fewer turns than gold tools, it submits on the
    last turn.
    """

    name = "oracle"

    def __init__(self, corpus: ToolCorpus | None = None, tasks: Iterable[Task] | Mapping[str, Task] | None = None):
        self.corpus = corpus
        self.tasks: dict[str, Task] = {}
        if tasks is not None:
            self.tasks = dict(tasks) if isinstance(tasks, Mapping) else {t.id: t for t in tasks}

    def bind_env(self, env: Any) -> None:
        """Take the corpus and the tasks (with their gold) from an environment object: the
        explicit hand-over ``evaluate_agent`` does, so ``make_agent("oracle")`` needs nothing else."""
        self.corpus = env.corpus
        self.tasks.update({t.id: t for t in env.tasks})

    def reset(self, obs: str, info: dict[str, Any]) -> None:
        task_id = info["task_id"]
        if self.corpus is None or task_id not in self.tasks:
            raise ValueError(f"OracleAgent was not given task {task_id!r}: pass corpus and tasks, or bind_env(env)")
        self.gold = sorted(self.tasks[task_id].gold)
        self.protocol = info.get("protocol", "hermes")
        self.use_category = info.get("category_mode", "off") != "off"
        self.max_turns = int(info.get("max_turns", 8))
        self.pending = list(self.gold)

    def act(self, obs: str, info: dict[str, Any]) -> str:
        seen = set(info.get("seen") or ())
        self.pending = [g for g in self.pending if g not in seen]
        last_turn = int(info.get("turn", 0)) >= self.max_turns - 1
        if self.pending and not last_turn:
            tool = self.corpus[self.pending.pop(0)]
            query = " ".join(f"{tool.name} {tool.description}".split()[:60])
            return format_search(query, tool.category if self.use_category else None, self.protocol)
        found = [g for g in self.gold if g in seen]
        return format_submit(found or self.gold, self.protocol)


class RandomAgent:
    """Seeded random actions: search (p_search), submit (p_submit) or malformed text (the rest)."""

    name = "random"
    GARBAGE = ("", "hello", "{", "<tool_call>{}</tool_call>", '<tool_call>{"name": "dance"}</tool_call>', "<search></search>")

    def __init__(self, seed: int = 0, p_search: float = 0.6, p_submit: float = 0.3, max_submit: int = 5):
        if p_search < 0 or p_submit < 0 or p_search + p_submit > 1:
            raise ValueError("need p_search, p_submit >= 0 and p_search + p_submit <= 1")
        self.rng = np.random.default_rng(seed)
        self.p_search, self.p_submit, self.max_submit = p_search, p_submit, max_submit

    def reset(self, obs: str, info: dict[str, Any]) -> None:
        self.words = str(info["query"]).split() or ["tool"]
        self.protocol = info.get("protocol", "hermes")
        self.categories = _categories_from_info(info) if info.get("category_mode") == "required" else []

    def act(self, obs: str, info: dict[str, Any]) -> str:
        u = self.rng.random()
        seen = list(info.get("seen") or ())
        if u < self.p_search or (u < self.p_search + self.p_submit and not seen):
            n = int(self.rng.integers(1, min(8, len(self.words)) + 1))
            query = " ".join(self.rng.choice(self.words, size=n, replace=False))
            category = str(self.rng.choice(self.categories)) if self.categories else None
            return format_search(query, category, self.protocol)
        if u < self.p_search + self.p_submit:
            n = int(self.rng.integers(1, min(self.max_submit, len(seen)) + 1))
            return format_submit([str(t) for t in self.rng.choice(seen, size=n, replace=False)], self.protocol)
        return str(self.GARBAGE[int(self.rng.integers(len(self.GARBAGE)))])


class ClauseSplitAgent:
    """For the decomposition envs: the request cut into clauses by the rule-based splitter
    (:func:`toolgym.retrieval.decompose.split_into_clauses`), one subtask per line. The
    no-model baseline a learned decomposer has to beat."""

    name = "clauses"

    def reset(self, obs: str, info: dict[str, Any]) -> None:
        self.query = str(info["query"])

    def act(self, obs: str, info: dict[str, Any]) -> str:
        from toolgym.retrieval.decompose import split_into_clauses

        return "\n".join(split_into_clauses(self.query))


SCRIPTED_AGENTS = ("raw", "oracle", "random", "clauses")


def make_scripted_agent(
    name: str,
    *,
    corpus: ToolCorpus | None = None,
    tasks: Iterable[Task] | None = None,
    seed: int = 0,
    **kwargs: Any,
) -> Agent:
    """``raw``, ``oracle``, ``random`` (tool search) or ``clauses`` (decomposition) by name.

    The oracle reads gold from ``tasks`` (with ``corpus``), or from the env ``evaluate_agent``
    binds it to when they are not given.
    """
    if name == "raw":
        return RawQueryAgent(**kwargs)
    if name == "oracle":
        return OracleAgent(corpus, tasks)
    if name == "random":
        return RandomAgent(seed=seed, **kwargs)
    if name == "clauses":
        return ClauseSplitAgent()
    raise ValueError(f"unknown agent {name!r}; choose one of {SCRIPTED_AGENTS}")


make_agent = make_scripted_agent  # the name ``toolgym eval --agent`` imports
