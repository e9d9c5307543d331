"""Trace records of a generated turn and its Table 7 scenario label."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from toolgym.data.dialogue_generator.states import _INTENT_FEATURE


@dataclass(frozen=True)
class ToolStep:
    """One tool in one turn: the user's intent about it and the state it ends in."""

    tool: str
    category: str | None
    intent: str
    state: str
    prev_state: str | None = None  # None for a tool new in this turn

    @property
    def requested(self) -> bool:
        """Whether the user's turn asks for this tool (everything but a silent drop)."""
        return self.intent != "drop"


@dataclass(frozen=True)
class TurnTrace:
    """One turn of the state machine: context decision, composition mode, scene, tool steps."""

    turn: int
    context: str  # "init" (turn 0), "inherit" or "switch"
    mode: str | None  # composition mode of the tasks new in this turn, None if none
    scene: str | None
    steps: tuple[ToolStep, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "turn": self.turn, "context": self.context, "mode": self.mode, "scene": self.scene,
            "steps": [vars(s).copy() for s in self.steps],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TurnTrace":
        return cls(turn=int(d["turn"]), context=str(d["context"]), mode=d.get("mode"), scene=d.get("scene"),
                   steps=tuple(ToolStep(**s) for s in d["steps"]))


def scenario_label(trace: Sequence[TurnTrace]) -> str:
    """The Table 7 scenario label of the latest turn of ``trace`` (a pure function of the trace).

    Turn 0 (no history): "Single Tool" for one requested tool, "Same-category Multi-tool" when
    all share a category, else "Cross-category Multi-tool". Later turns: "Domain Switch" on a
    switch; on inherit, each requested step shows one behaviour: a new tool -> "User Adds New
    Task"; an inherited tool whose previous state was a failure -> "Abnormal Scenario";
    otherwise by intent: supplement / modify / cancel -> "Multi-turn Continuation", choose /
    confirm -> "Intent Selection", follow_up -> "Unfinished Task Continuation". One behaviour
    gives its label, two or more give "State Hybrid".
    """
    if not trace:
        raise ValueError("scenario_label needs at least one turn")
    last = trace[-1]
    requested = [s for s in last.steps if s.requested]
    if last.context == "init":
        if len(requested) <= 1:
            return "Single Tool"
        return "Same-category Multi-tool" if len({s.category for s in requested}) == 1 else "Cross-category Multi-tool"
    if last.context == "switch":
        return "Domain Switch"
    features = set()
    for step in requested:
        if step.prev_state is None:
            features.add("User Adds New Task")
        elif step.prev_state == "failure":
            features.add("Abnormal Scenario")
        else:
            features.add(_INTENT_FEATURE.get(step.intent, "Multi-turn Continuation"))
    if len(features) > 1:
        return "State Hybrid"
    return features.pop() if features else "Multi-turn Continuation"
