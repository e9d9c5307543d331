"""The one shape every loader returns (:class:`Dataset`) and the checks every loader shares.

Loaders collect tasks through :class:`TaskCollector`, which knows where each task came from
(``file:line`` or ``file: record n``), so every later error - a duplicate id, a gold id missing
from the corpus, a task the :class:`~toolgym.data.records.Task` checks refuse - names it.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable

from toolgym.data.readers import DatasetFormatError
from toolgym.data.records import Task
from toolgym.retrieval.corpus import Tool, ToolCorpus

__all__ = ["Dataset", "TaskCollector", "require_field", "object_schema", "make_tool", "make_corpus", "MISSING_GOLD_MODES",
           "opaque_task_id"]

MISSING_GOLD_MODES = ("error", "drop")


@dataclass
class Dataset:
    """A benchmark as loaded: its corpus, its tasks, and what was dropped while loading (counts)."""

    name: str
    corpus: ToolCorpus
    tasks: list[Task]
    split: str | None = None
    dropped: dict[str, int] = field(default_factory=dict)

    def groups(self) -> dict[str, list[Task]]:
        """Tasks by ``Task.group`` (in first-seen order; ungrouped tasks under ``""``)."""
        out: dict[str, list[Task]] = {}
        for task in self.tasks:
            out.setdefault(task.group or "", []).append(task)
        return out

    def task(self, task_id: str) -> Task:
        """The task with id ``task_id``, or else with that benchmark id (``Task.source_id``)."""
        for t in self.tasks:
            if t.id == task_id:
                return t
        for t in self.tasks:
            if t.source_id == task_id:
                return t
        raise KeyError(f"no task {task_id!r} in dataset {self.name!r}")

    def __len__(self) -> int:
        return len(self.tasks)

    def __repr__(self) -> str:
        return f"Dataset({self.name!r}, {len(self.corpus)} tools, {len(self.tasks)} tasks, split={self.split!r})"


def require_field(record: Any, key: str, where: str, kind: type | tuple[type, ...] = object) -> Any:
    """``record[key]`` with a format error naming ``where`` when missing or of the wrong type.

    ``bool`` is never accepted for ``int`` (JSON ``true`` is not an id).
    """
    if not isinstance(record, dict) or key not in record:
        raise DatasetFormatError(f"{where}: missing field {key!r}")
    value = record[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds and object not in kinds):
        names = "/".join(k.__name__ for k in kinds)
        raise DatasetFormatError(f"{where}: field {key!r} should be {names}, got {type(value).__name__}")
    return value


def object_schema(properties: dict[str, dict[str, Any]], required: list[str]) -> dict[str, Any]:
    """Parameters as an OpenAI/JSON-schema object (what the env's tool schemas speak)."""
    return {"type": "object", "properties": properties, "required": list(required)}


def make_tool(where: str, **fields: Any) -> Tool:
    """``Tool(**fields)``, a refused field (e.g. a list as category) reported at ``where``."""
    try:
        return Tool(**fields)
    except (TypeError, ValueError) as exc:
        raise DatasetFormatError(f"{where}: bad tool ({exc})") from None


def make_corpus(tools: Iterable[Tool], name: str, where: str, text_template: str | None = None) -> ToolCorpus:
    """``ToolCorpus(...)``; an empty corpus or a duplicate id is reported at ``where`` (the file)."""
    try:
        return ToolCorpus(tools, name=name, text_template=text_template)
    except ValueError as exc:
        raise DatasetFormatError(f"{where}: {exc}") from None


def opaque_task_id(dataset: str, source_id: str) -> str:
    """``<dataset>-<12 hex digits>``: a SHA-256 of the benchmark's own id, stable across rebuilds
    and load orders, and carrying no label information (no tool name, no position in a file
    sorted by tool)."""
    digest = hashlib.sha256(f"{dataset}\0{source_id}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"{dataset}-{digest[:12]}"


class TaskCollector:
    """Tasks in load order with where each came from; refuses duplicate ids, naming both places.

    ``opaque_ids=<dataset name>`` (what the benchmark loaders pass): the ``id`` given to
    :meth:`add` is the benchmark's own id; it is kept as ``Task.source_id`` and the task's ``id``
    becomes :func:`opaque_task_id` of it (an agent sees ``info["task_id"]``).
    """

    def __init__(self, opaque_ids: str | None = None) -> None:
        self.tasks: list[Task] = []
        self.where: dict[str, str] = {}
        self.opaque_ids = opaque_ids

    def add(self, where: str, make: Callable[[], Task] | None = None, /, **fields: Any) -> Task:
        """Build ``Task(**fields)`` (or call ``make``); a refused task or a repeated id raises
        ``DatasetFormatError`` naming ``where``."""
        try:
            task = make() if make is not None else Task(**fields)
            if self.opaque_ids is not None and task.source_id is None:
                task = replace(task, id=opaque_task_id(self.opaque_ids, task.id), source_id=task.id)
        except (KeyError, TypeError, ValueError) as exc:
            raise DatasetFormatError(f"{where}: bad task ({exc})") from None
        if task.id in self.where:
            shown = task.source_id or task.id
            raise DatasetFormatError(f"{where}: duplicate task id {shown!r} (first at {self.where[task.id]})")
        self.tasks.append(task)
        self.where[task.id] = where
        return task

    def checked(self, corpus: ToolCorpus, missing_gold: str, dropped: dict[str, int]) -> list[Task]:
        """The tasks, with gold ids absent from ``corpus`` an error (``missing_gold="error"``)
        or dropped and counted in ``dropped`` (``"drop"``; a task left without gold goes too)."""
        if missing_gold not in MISSING_GOLD_MODES:
            raise ValueError(f"missing_gold must be 'error' or 'drop', got {missing_gold!r}")
        out = []
        for task in self.tasks:
            missing = sorted(g for g in task.gold if g not in corpus)
            if not missing:
                out.append(task)
                continue
            if missing_gold == "error":
                raise DatasetFormatError(
                    f"{self.where[task.id]}: gold tool id(s) {missing} of task {task.id!r} are not in "
                    f"corpus {corpus.name!r} (pass missing_gold='drop' to drop them)"
                )
            dropped["missing_gold_ids"] = dropped.get("missing_gold_ids", 0) + len(missing)
            kept = task.gold - set(missing)
            if not kept:
                dropped["tasks_without_gold"] = dropped.get("tasks_without_gold", 0) + 1
                continue
            out.append(replace(task, gold=kept))
        return out
