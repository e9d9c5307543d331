"""Core records (docs/decisions.md#records): plain dataclasses that round-trip through JSON.

``Trajectory`` is the unit every reward module consumes and what ``toolgym replay`` re-scores.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Collection, Iterable, Sequence


def _check_unicode(task_id: str, what: str, text: Any) -> None:
    """A lone surrogate (JSON ``"\\ud800"`` decodes to one) has no UTF-8 form: a dense or hybrid
    retriever's tokenizer raised ``TypeError`` on it mid-evaluation. Refused at load, naming the task."""
    if isinstance(text, str) and not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"task {task_id!r}: {what} is not valid Unicode text (a lone surrogate at character "
                             f"{exc.start})") from None


@dataclass(frozen=True)
class Task:
    """One request: prior dialogue turns, the current query and the gold tool ids."""

    id: str
    query: str
    gold: frozenset[str]
    messages: tuple[dict[str, str], ...] = ()
    category: str | None = None
    subtasks: tuple[str, ...] | None = None
    split: str = "test"
    group: str | None = None  # benchmark-specific label, e.g. StableToolBench "G1_instruction"
    # The benchmark's own id (metadata, never shown to an agent): bundled loaders make ``id`` an
    # opaque hash of it, because source ids can name the gold tools (API-Bank file names) or
    # follow the label order (MetaTool rows sorted by tool).
    source_id: str | None = None

    def __post_init__(self) -> None:
        # A task that can never be solved (no gold) or whose query is not text (JSON null would
        # be searched as "None") is a data error: refuse it here, where every loader passes.
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"task id must be a non-empty string, got {self.id!r}")
        if not isinstance(self.query, str):
            raise ValueError(f"task {self.id!r}: query must be a string, got {type(self.query).__name__}")
        if not self.query.strip():
            raise ValueError(f"task {self.id!r}: query is empty")
        if isinstance(self.gold, (str, bytes)) or not isinstance(self.gold, (set, frozenset, list, tuple)):
            raise ValueError(f"task {self.id!r}: gold must be a collection of tool ids, got {type(self.gold).__name__}")
        if not all(isinstance(g, str) and g for g in self.gold):
            raise ValueError(f"task {self.id!r}: gold tool ids must be non-empty strings, got {sorted(map(repr, self.gold))}")
        if not self.gold:
            raise ValueError(f"task {self.id!r}: gold is empty (a task needs at least one gold tool)")
        if self.category is not None and not isinstance(self.category, str):
            raise ValueError(f"task {self.id!r}: category must be a string or null, got {type(self.category).__name__}")
        if self.source_id is not None and not isinstance(self.source_id, str):
            raise ValueError(f"task {self.id!r}: source_id must be a string or null, got {type(self.source_id).__name__}")
        object.__setattr__(self, "gold", frozenset(self.gold))
        object.__setattr__(self, "messages", tuple(dict(m) for m in self.messages))
        _check_unicode(self.id, "query", self.query)  # searched as given: a dense encoder cannot take it
        for i, message in enumerate(self.messages):
            _check_unicode(self.id, f"messages[{i}] content", message.get("content"))
        if self.subtasks is not None:
            object.__setattr__(self, "subtasks", tuple(self.subtasks))

    def context_text(self) -> str:
        """``x = (history, query)`` as one retrieval query: every earlier turn's text, then the request.

        The one definition of "the raw request" shared by ``toolgym eval``, ``DecompositionEnv``
        and the counterfactual reward, so they retrieve with exactly the same words.
        """
        parts = [str(m.get("content", "")) for m in self.messages if m.get("content")]
        return " ".join(" ".join(parts + [self.query]).split())

    def dialogue_text(self, request_label: str = "User request") -> str:
        """``x = (history, query)`` for a reader (the policy's prompt, a judge, a reward model).

        The prior turns one per line as ``role: content`` under "Conversation so far:", then the
        request. Retrieval uses :meth:`context_text` (one line, no labels) instead.
        """
        lines = []
        if self.messages:
            lines.append("Conversation so far:")
            lines += [f"{m.get('role', 'user')}: {m.get('content', '')}" for m in self.messages]
            lines.append("")
        lines.append(f"{request_label}: {self.query}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["gold"] = sorted(self.gold)
        d["messages"] = [dict(m) for m in self.messages]
        d["subtasks"] = list(self.subtasks) if self.subtasks is not None else None
        if self.source_id is None:
            del d["source_id"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Task":
        from toolgym.retrieval.corpus import record_id  # not str(): 1e999 became "inf", NaN "nan"

        return cls(
            id=record_id(d["id"], "task id"),
            query=d["query"],  # not str(): a null query must be refused, not searched as "None"
            gold=d["gold"],
            messages=tuple(d.get("messages") or ()),
            category=d.get("category"),
            subtasks=tuple(d["subtasks"]) if d.get("subtasks") is not None else None,
            split=d.get("split", "test"),
            group=d.get("group"),
            source_id=d.get("source_id"),
        )


@dataclass
class SearchEvent:
    """One ``search`` call: ranked result ids and the gold ids seen for the first time in it.

    ``first_found`` is what the environment recorded (:func:`first_found`), or None when the
    writer recorded nothing. Reward modules recompute it from ``results`` (a file may come from
    elsewhere) and count disagreements with a recorded value.
    """

    turn: int
    query: str
    category: str | None
    results: list[str]
    first_found: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SearchEvent":
        recorded = d.get("first_found")
        return cls(
            turn=int(d["turn"]),
            query=str(d["query"]),
            category=d.get("category"),
            results=_id_list(d["results"], "results"),
            first_found=_id_list(recorded, "first_found") if recorded is not None else None,
        )


def _id_list(value: Any, name: str) -> list[str]:
    """``value`` (ids, subtasks) as a list of strings; a string or a mapping is an error, not a list of its characters/keys."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{name!r} must be a list of strings, got {type(value).__name__} {repr(value)[:60]}")
    return [str(v) for v in value]


@dataclass
class Trajectory:
    """One rollout of one task.

    ``terminated_by`` is ``"submit"``, ``"max_turns"`` or ``"error"``. For decomposition
    rollouts ``subtasks`` holds the policy's subtask list. ``token_ids``/``loss_mask``/
    ``turn_spans`` are filled by the trainers' rollout code: ``turn_spans[t] = (start, end)``
    are the token positions the policy generated in turn ``t``.
    """

    task_id: str
    events: list[SearchEvent] = field(default_factory=list)
    selection: list[str] | None = None
    terminated_by: str = "max_turns"
    invalid_actions: int = 0
    messages: list[dict[str, str]] = field(default_factory=list)
    num_turns: int = 0
    subtasks: list[str] | None = None
    token_ids: list[int] | None = None
    loss_mask: list[int] | None = None
    turn_spans: list[tuple[int, int]] | None = None
    env_reward: float | None = None  # the env's own episode return (e.g. DecompositionEnv's R_cf), if it sets one

    @property
    def seen(self) -> set[str]:
        """Every tool id that appeared in any search result of this rollout."""
        out: set[str] = set()
        for event in self.events:
            out.update(event.results)
        return out

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.turn_spans is not None:
            d["turn_spans"] = [list(s) for s in self.turn_spans]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Trajectory":
        return cls(
            task_id=str(d["task_id"]),
            events=[SearchEvent.from_dict(e) for e in d.get("events") or ()],
            selection=_id_list(d["selection"], "selection") if d.get("selection") is not None else None,
            terminated_by=d.get("terminated_by", "max_turns"),
            invalid_actions=int(d.get("invalid_actions", 0)),
            messages=list(d.get("messages") or ()),
            num_turns=int(d.get("num_turns", 0)),
            subtasks=_id_list(d["subtasks"], "subtasks") if d.get("subtasks") is not None else None,
            token_ids=d.get("token_ids"),
            loss_mask=d.get("loss_mask"),
            turn_spans=[tuple(s) for s in d["turn_spans"]] if d.get("turn_spans") is not None else None,
            env_reward=float(d["env_reward"]) if d.get("env_reward") is not None else None,
        )


def first_found(results: Iterable[str], gold: Collection[str], seen_before: Collection[str] = ()) -> list[str]:
    """The first-discovery set of one search: F = results ∩ (G \\ seen_before), in rank order, each id once.

    The one definition of "found for the first time" (ESM's F_e, the env's ``SearchEvent.first_found``).
    """
    return [t for t in dict.fromkeys(results) if t in gold and t not in seen_before]


def first_found_per_search(result_lists: Iterable[Sequence[str]], gold: Collection[str]) -> list[list[str]]:
    """:func:`first_found` of every search of an episode in order, ``seen_before`` = all earlier results."""
    seen: set[str] = set()
    out = []
    for results in result_lists:
        out.append(first_found(results, gold, seen))
        seen.update(results)
    return out


def write_rollouts(path: str | Path, groups: Iterable[tuple[Task, list[Trajectory]]]) -> int:
    """Write rollout groups as JSONL, one line per task: ``{"task": ..., "trajectories": [...]}``.

    This is the file ``toolgym replay`` re-scores. Returns the number of groups written. The
    file is written atomically (:func:`toolgym.data.atomic.atomic_open`): readers see the old
    file or the new one, never a partial one.
    """
    import json

    from toolgym.data.atomic import atomic_open

    n = 0
    with atomic_open(path, "w") as f:  # a full disk or a kill keeps the old file whole
        for task, trajs in groups:
            f.write(json.dumps({"task": task.to_dict(), "trajectories": [t.to_dict() for t in trajs]}) + "\n")
            n += 1
    return n


def read_rollouts(path: str | Path) -> list[tuple[Task, list[Trajectory]]]:
    """Read a file written by :func:`write_rollouts`; a bad line names the file and line."""
    from toolgym.data.readers import DatasetFormatError, iter_jsonl

    groups = []
    for i, rec in enumerate(iter_jsonl(path), start=1):
        try:
            groups.append((Task.from_dict(rec["task"]), [Trajectory.from_dict(t) for t in rec["trajectories"]]))
        except (KeyError, TypeError, ValueError) as exc:
            raise DatasetFormatError(f"{path}: rollout group {i}: missing or bad field ({exc})") from None
    return groups
