"""Tool records and the ordered tool corpus every index and environment shares."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from toolgym.retrieval.text import parameter_text, split_identifiers


def record_id(value: Any, what: str = "id") -> str:
    """A record's id as text: a string as given, an integer in decimal; anything else is refused.

    ``str()`` of any JSON number used to pass: ``1e999`` became ``"inf"``, ``NaN`` ``"nan"`` and
    ``1e20`` ``"1e+20"`` (an id that is not the one in the file)."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    got = "null" if value is None else f"{type(value).__name__} {value!r}"
    raise ValueError(f"{what} must be a string or an integer, got {got}")


@dataclass(frozen=True)
class Tool:
    """One callable tool (an API). ``id`` is unique within its corpus."""

    id: str
    name: str
    description: str
    category: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        # Categories are dictionary keys and filter values: a list or number here would fail
        # far away (or silently never match), so refuse it at construction.
        if not isinstance(self.id, str) or not self.id.strip():
            # a blank id could never be submitted (a submit of " " is refused as empty)
            raise ValueError(f"tool id must be a non-blank string, got {self.id!r}")
        if self.category is not None and not isinstance(self.category, str):
            raise ValueError(f"tool {self.id!r}: category must be a string or null, got {type(self.category).__name__}")
        if not isinstance(self.parameters, dict):
            raise ValueError(f"tool {self.id!r}: parameters must be an object, got {type(self.parameters).__name__}")
        for key in ("id", "name", "description", "category"):
            value = getattr(self, key)
            if isinstance(value, str) and not value.isascii():
                try:  # JSON "\ud800" decodes to a lone surrogate: no text encoding, index or hash takes it
                    value.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise ValueError(f"tool {self.id!r}: {key} is not valid Unicode text (a lone surrogate at "
                                     f"character {exc.start})") from None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> "Tool":
        tool_id = record_id(record["id"], "tool id")
        return cls(
            id=tool_id,
            name=str(record.get("name", tool_id)),
            description=str(record.get("description") or ""),
            category=record.get("category"),
            parameters=record.get("parameters") or {},
        )


class ToolCorpus:
    """An ordered, immutable collection of tools with id -> index lookup and categories.

    ``text(tool)`` is the one document text every retriever indexes, so BM25 and dense
    retrieval always see the same words. The default template is
    ``"{category} | {name}: {description}"`` (StableToolBench uses ``"category | tool | api: ..."``
    by setting ``name`` to ``"tool | api"``). Templates may also use ``{id}`` and
    ``{parameters}`` (``toolgym.retrieval.text.parameter_text``: parameter names and
    descriptions, capped). ``split_identifiers=True`` cuts compound words of the name and id
    (``getWeatherForecast`` -> ``get Weather Forecast``) in the text itself, so dense retrieval
    and rerankers see the parts too; BM25 has its own switch (``build_index(identifiers=...)``).
    :meth:`with_text` gives the same tools under another text.
    """

    def __init__(
        self,
        tools: Iterable[Tool],
        name: str = "corpus",
        text_template: str | None = None,
        split_identifiers: bool = False,
    ):
        self.name = name
        self.tools: tuple[Tool, ...] = tuple(tools)
        if not self.tools:
            raise ValueError(f"corpus {name!r} is empty: an index needs at least one tool")
        self._index: dict[str, int] = {}
        for i, tool in enumerate(self.tools):
            if tool.id in self._index:
                raise ValueError(f"corpus {name!r}: duplicate tool id {tool.id!r}")
            self._index[tool.id] = i
        self.text_template = text_template or "{category} | {name}: {description}"
        self.split_identifiers = bool(split_identifiers)
        self.categories: tuple[str, ...] = tuple(sorted({t.category for t in self.tools if t.category}))
        self._hash: str | None = None
        self._ids_hash: str | None = None

    # -- container protocol -------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self.tools)

    def __getitem__(self, key: int | str) -> Tool:
        if isinstance(key, str):
            return self.tools[self.index_of(key)]
        return self.tools[key]

    def __contains__(self, tool_id: object) -> bool:
        return tool_id in self._index

    def index_of(self, tool_id: str) -> int:
        try:
            return self._index[tool_id]
        except KeyError:
            raise KeyError(f"unknown tool id {tool_id!r} in corpus {self.name!r}") from None

    @property
    def ids(self) -> list[str]:
        return [t.id for t in self.tools]

    def text(self, tool: Tool) -> str:
        """The document text indexed for ``tool``."""
        name, tool_id = tool.name, tool.id
        if self.split_identifiers:
            name, tool_id = split_identifiers(name), split_identifiers(tool_id)
        params = parameter_text(tool.parameters) if "{parameters}" in self.text_template else ""
        return self.text_template.format(
            category=tool.category or "", name=name, description=tool.description, id=tool_id, parameters=params
        ).strip(" |")

    def with_text(self, text_template: str | None = None, split_identifiers: bool | None = None) -> "ToolCorpus":
        """The same tools (and name) under another text template / identifier splitting;
        ``None`` keeps this corpus's setting."""
        return ToolCorpus(
            self.tools,
            name=self.name,
            text_template=self.text_template if text_template is None else text_template,
            split_identifiers=self.split_identifiers if split_identifiers is None else split_identifiers,
        )

    def texts(self) -> list[str]:
        return [self.text(t) for t in self.tools]

    def check_category(self, category: str | None) -> None:
        """Raise ``ValueError`` for a category this corpus does not have (``None`` is fine)."""
        if category is not None and category not in self.categories:
            raise ValueError(
                f"unknown category {category!r} for corpus {self.name!r} "
                f"({len(self.categories)} categories, e.g. {list(self.categories[:3])})"
            )

    @property
    def content_hash(self) -> str:
        """Stable hash of the indexed texts and ids: the key for on-disk embedding caches."""
        if self._hash is None:
            h = hashlib.sha256()
            for tool in self.tools:
                h.update(tool.id.encode())
                h.update(b"\0")
                h.update(self.text(tool).encode())
                h.update(b"\1")
            self._hash = h.hexdigest()[:16]
        return self._hash

    @property
    def ids_hash(self) -> str:
        """Stable hash of the tool ids alone, in sorted order: which library this is, whatever its
        text template or tool order (``toolgym fit-retriever`` records it for every corpus it trains on)."""
        if self._ids_hash is None:
            h = hashlib.sha256()
            for tool_id in sorted(t.id for t in self.tools):
                h.update(tool_id.encode())
                h.update(b"\0")
            self._ids_hash = h.hexdigest()[:16]
        return self._ids_hash

    # -- persistence ----------------------------------------------------------------------
    def save_jsonl(self, path: str | Path) -> None:
        """One ``Tool.to_dict()`` per line; ``toolgym.data.load_corpus`` reads it back."""
        with open(path, "w", encoding="utf-8") as f:
            for tool in self.tools:
                f.write(json.dumps(tool.to_dict(), ensure_ascii=False) + "\n")

    def __repr__(self) -> str:
        return f"ToolCorpus({self.name!r}, {len(self)} tools, {len(self.categories)} categories)"
