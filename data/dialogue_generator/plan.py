"""Per-dialogue tool state: the tools in context and what one turn does with each."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from toolgym.retrieval.corpus import Tool
from toolgym.data.dialogue_generator.tool_text import _ARTICLES, _TRAILING, _words, request_clause
from toolgym.data.dialogue_generator.trace import ToolStep, TurnTrace


@dataclass
class ActiveTool:
    """A tool in context: its request (slot values), the slot left out, the options offered."""

    tool: Tool
    state: str
    slots: dict[str, str]
    missing: str | None = None  # slot omitted by the user (state ask_detail)
    options: tuple[str, ...] = ()  # values offered by the assistant (state select)
    option_slot: str | None = None

    @property
    def clause(self) -> str:
        return request_clause(self.tool)

    @property
    def topic(self) -> str:
        """A short reference to the request ("the <topic>"): the clause less its verb and article,
        at most six words, without a dangling "of" / "for"..."""
        words = self.clause.split()[1:]
        if words and words[0].lower() == "with":  # "help with X"
            words = words[1:]
        if words and words[0].lower() in _ARTICLES:
            words = words[1:]
        words = words[:6]
        while words and words[-1].lower() in _TRAILING:
            words.pop()
        return " ".join(words) or "request"

    def request(self) -> str:
        """The self-contained atomic subtask: the clause with every known slot value."""
        parts = [f"{_words(k)} {v}" for k, v in self.slots.items() if k != self.missing]
        text = self.clause
        if len(parts) == 1:
            text += " with " + parts[0]
        elif parts:
            text += " with " + ", ".join(parts[:-1]) + " and " + parts[-1]
        return text[:1].upper() + text[1:]


@dataclass
class TurnPlan:
    """What one turn says: the steps (intent, state) and each active tool's request."""

    trace: TurnTrace
    tools: list[tuple[ToolStep, ActiveTool]]  # requested steps only, in utterance order
    detail: dict[str, Any] = field(default_factory=dict)  # per tool id: chosen option, new value...
