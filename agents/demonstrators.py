"""Scripted demonstrators: the strategies whose episodes become supervised warm-start data.

A 135M chat model never writes a valid tool call on its own, so GRPO has no signal to start
from. These agents play the environments through their normal text interface (they see what a
policy sees: the observation and ``info``) and produce episodes in the exact action format; the
``toolgym demos`` command keeps the ones whose reward clears a threshold (rejection sampling).

Tool search (``ToolSearch-*``):

- :class:`ClauseSearchDemonstrator`: searches each clause of the request
  (:func:`~toolgym.retrieval.decompose.split_into_clauses`; the whole request when it does not
  split), optionally with a category (bound to an env: the category of the library's best BM25
  match for the clause, right for 86 % of the clauses of Seal-Tools' first 200 multi-tool training
  tasks, where the category whose name shares the most words with the clause is right for 17 %),
  then submits the top ``per_search`` ids of every search. Everything it submits appeared in a search result.
  Its variants (name flags) vary the *queries* the same task gets: ``rev`` searches the clauses
  last first, ``kw`` sends each clause's content words only (:func:`keyword_query`). Recorded
  side by side (``toolgym demos --per-task K``), they give a warm start several ways to search
  one request, so GRPO's sampled rollouts of a task do not all send the same queries.
- :class:`RequestSearchDemonstrator`: one search with the request, submit its top ``k`` ids.

Decomposition (``Decompose-*``): the clause splitter (:class:`~toolgym.agents.scripted.ClauseSplitAgent`),
:class:`ReferenceSubtaskDemonstrator`, which answers with the dataset's reference subtasks
(UltraTool's plan steps with the tool names stripped by the loader), read from the
:class:`~toolgym.data.records.Task` objects it is handed explicitly, like the oracle, and
:class:`WholeRequestDemonstrator`, the null decomposition (the raw request, history included, as its one subtask): listed
beside the others, it is what a single-intent request keeps where splitting it loses.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from toolgym.agents.scripted import _categories_from_info, _shorten, format_search, format_submit, guess_category
from toolgym.data.records import Task


class ClauseSearchDemonstrator:
    """Search every clause of the request (at most ``max_turns - 1`` searches), then submit the
    top ``per_search`` ids of each search, in order, without duplicates.

    ``use_category``: add a category when the env's schema offers one (``category_mode`` optional or
    required; required always gets one). Bound to an env (:meth:`bind_env`, as ``toolgym demos``
    does), it is the category of the env's own top search result for the clause (what a searcher
    that looked at the library first would narrow to; no gold is read); unbound, the category whose
    name shares the most words with the clause (:func:`~toolgym.agents.scripted.guess_category`). ``with_request``: search
    the whole request first. ``reverse``: the clauses last first. ``keywords``: each clause's
    content words only (:func:`keyword_query`).
    """

    def __init__(self, per_search: int = 1, use_category: bool = False, with_request: bool = False,
                 reverse: bool = False, keywords: bool = False):
        if per_search < 1:
            raise ValueError(f"per_search must be >= 1, got {per_search}")
        self.per_search = per_search
        self.use_category = use_category
        self.with_request = with_request
        self.reverse = reverse
        self.keywords = keywords
        flags = [f for f, on in (("cat", use_category), ("req", with_request), ("rev", reverse), ("kw", keywords)) if on]
        self.name = "_".join([f"clauses_top{per_search}", *flags])
        self.env: Any = None

    def bind_env(self, env: Any) -> None:
        """Guess categories from ``env``'s own index (its top result's category) instead of by name."""
        self.env = env

    def category_for(self, query: str) -> str | None:
        """The category this clause is searched in (``None`` when the schema offers none)."""
        if not self.categories:
            return None
        if self.env is not None:
            top = self.env.index.search(query, None, 1).ids
            category = self.env.corpus[top[0]].category if top else None
            if category in self.categories:
                return category
        return guess_category(query, self.categories)

    def reset(self, obs: str, info: dict[str, Any]) -> None:
        from toolgym.retrieval.decompose import split_into_clauses

        query = str(info["query"])
        self.protocol = info.get("protocol", "hermes")
        mode = info.get("category_mode", "off")
        self.categories = _categories_from_info(info) if mode != "off" and (self.use_category or mode == "required") else []
        budget = max(1, int(info.get("max_turns", 8)) - 1)  # keep the last turn for the submit
        clauses = split_into_clauses(query)
        if self.reverse:
            clauses = clauses[::-1]
        if self.keywords:
            clauses = [keyword_query(c) for c in clauses]
        queries = ([query] if self.with_request else []) + clauses
        self.queries = [_shorten(q) for q in queries if q.strip()][:budget] or [_shorten(query)]
        self.results: list[list[str]] = []

    def act(self, obs: str, info: dict[str, Any]) -> str:
        event = info.get("event")
        if event is not None:
            self.results.append(list(event.results))
        if len(self.results) < len(self.queries) and not info.get("invalid"):
            q = self.queries[len(self.results)]
            return format_search(q, self.category_for(q), self.protocol)
        chosen: list[str] = []
        for ranking in self.results:
            for tool_id in ranking[: self.per_search]:
                if tool_id not in chosen:
                    chosen.append(tool_id)
        return format_submit(chosen, self.protocol)


# Function words a search engine gains nothing from; kept short on purpose (the clause's own
# content words carry the intent, and BM25 already down-weights frequent words).
_FUNCTION_WORDS = frozenset(
    "a an the and or but if then so to of in on at by for from with about into over after before as is are was were "
    "be been being do does did can could would should will shall may might must i me my we our you your he she it "
    "its they them their this that these those there here what which who whom whose when where why how please "
    "just some any all also too very need want like help let know tell give get find show".split())


def keyword_query(text: str, max_chars: int = 4096) -> str:
    """``text`` without function words (its content words, in order); ``text`` itself when nothing is left.

    Linear in ``text`` (capped at ``max_chars`` first): one split, one set look-up per word.
    """
    words = text[:max_chars].split()
    kept = [w for w in words if w.strip(".,;:!?\"'()").lower() not in _FUNCTION_WORDS]
    return " ".join(kept) if kept else " ".join(words)


class RequestSearchDemonstrator:
    """One search with the whole request, then submit its top ``k`` ids."""

    def __init__(self, k: int = 3):
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.k = k
        self.name = f"request_top{k}"

    def reset(self, obs: str, info: dict[str, Any]) -> None:
        self.query = _shorten(str(info["query"]))
        self.protocol = info.get("protocol", "hermes")
        self.searched = False

    def act(self, obs: str, info: dict[str, Any]) -> str:
        if not self.searched:
            self.searched = True
            return format_search(self.query, None, self.protocol)
        event = info.get("event")
        return format_submit(list(event.results)[: self.k] if event is not None else [], self.protocol)


class ReferenceSubtaskDemonstrator:
    """For the decomposition envs: the task's reference subtasks (``Task.subtasks``), one per line.

    The reference comes from the Task objects given (or bound from the env, as ``evaluate_agent``
    does for the oracle); a task without reference subtasks gets the clause split instead.
    """

    name = "reference"

    def __init__(self, tasks: Iterable[Task] | Mapping[str, Task] | None = None):
        self.tasks: dict[str, Task] = {}
        if tasks is not None:
            self.tasks = dict(tasks) if isinstance(tasks, Mapping) else {t.id: t for t in tasks}

    def bind_env(self, env: Any) -> None:
        self.tasks.update({t.id: t for t in env.tasks})

    def reset(self, obs: str, info: dict[str, Any]) -> None:
        from toolgym.retrieval.decompose import split_into_clauses

        task = self.tasks.get(str(info["task_id"]))
        if task is None:
            raise ValueError(f"ReferenceSubtaskDemonstrator was not given task {info['task_id']!r}")
        self.subtasks = list(task.subtasks) if task.subtasks else split_into_clauses(task.query)

    def act(self, obs: str, info: dict[str, Any]) -> str:
        return "\n".join(" ".join(s.split()) for s in self.subtasks)


class WholeRequestDemonstrator:
    """For the decomposition envs: the null decomposition, the raw request as the one subtask.

    The raw request is :meth:`Task.context_text` (earlier turns, then the request, one line): the
    words the env retrieves with for the reward's baseline, so this episode's reward is exactly 0.
    Listed first in ``toolgym demos --agent request,reference,clauses`` it wins every tie, so a split
    is kept only where it beats not splitting, and a policy warm-started on the episodes sees when
    to leave a request whole. The latest request alone would not do: in a dialogue it drops the
    history the raw retrieval has. The tasks come bound from the env, as for the reference
    demonstrator; without them the latest request (``info["query"]``) is the answer.
    """

    name = "request"

    def __init__(self) -> None:
        self.tasks: dict[str, Task] = {}

    def bind_env(self, env: Any) -> None:
        self.tasks.update({t.id: t for t in env.tasks})

    def reset(self, obs: str, info: dict[str, Any]) -> None:
        task = self.tasks.get(str(info.get("task_id")))
        self.answer = task.context_text() if task is not None else " ".join(str(info["query"]).split())

    def act(self, obs: str, info: dict[str, Any]) -> str:
        return self.answer


class RequestAndClausesDemonstrator(WholeRequestDemonstrator):
    """For the decomposition envs: the raw request (history included) as the first subtask, then
    the latest request's clauses, one per line (:func:`toolgym.retrieval.decompose.request_then_clauses`,
    which says why). On Seal-Tools' training queries the encoder never saw, this raised C@10 by 5
    and N@5 by 1 over the raw request, where the clauses alone lost 4 N@5. A request of one clause
    gives the raw request alone (the ``request`` episode, which wins the tie)."""

    name = "request_clauses"

    def reset(self, obs: str, info: dict[str, Any]) -> None:
        from toolgym.retrieval.decompose import request_then_clauses

        super().reset(obs, info)
        self.answer = "\n".join(request_then_clauses(self.answer, str(info["query"])))


DEMONSTRATORS = ("clauses_top1", "clauses_top2", "clauses_top1_cat", "clauses_top1_req", "clauses_top1_rev",
                 "clauses_top1_kw", "request_top3", "clauses", "reference", "request", "request_clauses")
CLAUSE_FLAGS = ("cat", "req", "rev", "kw")  # clauses_top<k>[_flag...], any subset, each once


def make_demonstrator(name: str) -> Any:
    """A demonstrator by name (see ``DEMONSTRATORS``)."""
    if name.startswith("clauses_top"):
        rest = name[len("clauses_top"):]
        digits = rest.split("_", 1)[0]
        parts = rest.split("_")[1:]
        flags = set(parts)
        if not digits.isdigit() or int(digits) < 1 or flags - set(CLAUSE_FLAGS) or len(flags) != len(parts):
            raise ValueError(f"unknown demonstrator {name!r}; choose one of {DEMONSTRATORS} "
                             f"(clauses_top<k> takes the flags {CLAUSE_FLAGS}, each once)")
        return ClauseSearchDemonstrator(per_search=int(digits), use_category="cat" in flags, with_request="req" in flags,
                                        reverse="rev" in flags, keywords="kw" in flags)
    if name.startswith("request_top") and name[len("request_top"):].isdigit():
        return RequestSearchDemonstrator(k=int(name[len("request_top"):]))
    if name == "clauses":
        from toolgym.agents.scripted import ClauseSplitAgent

        return ClauseSplitAgent()
    if name == "reference":
        return ReferenceSubtaskDemonstrator()
    if name == "request":
        return WholeRequestDemonstrator()
    if name == "request_clauses":
        return RequestAndClausesDemonstrator()
    raise ValueError(f"unknown demonstrator {name!r}; choose one of {DEMONSTRATORS}")
