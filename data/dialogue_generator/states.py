"""The state space, user intents and transition matrices of the generator (P_init, P_todo, P_task)."""
from __future__ import annotations

import random
import re
from typing import Iterable, Mapping

from toolgym.retrieval.corpus import Tool
from toolgym.data.dialogue_generator.tool_text import _ACTION_VERBS, tool_parameters


# s1..s11 in the paper's numbering. The paper groups s1-s3 (execution), s4-s5 (clarification)
# and s6, s7, s8, s10, s11 (intent management) and leaves s9 out of every group: we read s9 as
# the null state, the one a tool leaves the context through.
STATES: tuple[str, ...] = (
    "success",      # s1  executed; the assistant confirms
    "executing",    # s2  running; the assistant says it is being processed
    "failure",      # s3  failed; the assistant explains (abnormal flow)
    "ask_detail",   # s4  the user left out a slot; the assistant asks for it
    "select",       # s5  the assistant offers options; the user must pick one
    "silent",       # s6  the assistant stays silent about it; the demand stays pending
    "confirm",      # s7  the assistant asks for a yes before acting
    "modified",     # s8  the user changed a slot; the assistant re-runs with the new value
    "null",         # s9  the tool leaves the context
    "cancelled",    # s10 the user cancelled it; the assistant acknowledges
    "deferred",     # s11 the assistant postpones it until the rest is done
)
STATE_GROUPS: dict[str, tuple[str, ...]] = {
    "execution": ("success", "executing", "failure"),
    "clarification": ("ask_detail", "select"),
    "intent_management": ("silent", "confirm", "modified", "cancelled", "deferred"),
    "null": ("null",),
}
NULL = "null"

# What the user does about a tool in context at the next turn.
INTENTS: tuple[str, ...] = (
    "new", "supplement", "choose", "confirm", "follow_up", "retry", "modify", "cancel", "drop",
)

P_INIT: dict[str, float] = {
    "success": 0.35, "executing": 0.10, "failure": 0.05, "ask_detail": 0.15, "select": 0.10,
    "silent": 0.05, "confirm": 0.10, "deferred": 0.10,
}
P_TODO: dict[str, dict[str, float]] = {
    "success": {"drop": 0.70, "modify": 0.20, "cancel": 0.10},
    "executing": {"follow_up": 0.45, "cancel": 0.15, "drop": 0.40},
    "failure": {"retry": 0.55, "modify": 0.15, "drop": 0.30},
    "ask_detail": {"supplement": 0.85, "cancel": 0.10, "drop": 0.05},
    "select": {"choose": 0.85, "cancel": 0.10, "drop": 0.05},
    "silent": {"follow_up": 0.60, "cancel": 0.10, "drop": 0.30},
    "confirm": {"confirm": 0.80, "cancel": 0.15, "modify": 0.05},
    "modified": {"drop": 0.75, "modify": 0.15, "cancel": 0.10},
    "null": {"drop": 1.0},
    "cancelled": {"drop": 1.0},
    "deferred": {"follow_up": 0.70, "cancel": 0.10, "drop": 0.20},
}
P_TASK: dict[str, dict[str, float]] = {
    "new": dict(P_INIT),
    "supplement": {"success": 0.60, "executing": 0.10, "failure": 0.10, "select": 0.10, "confirm": 0.10},
    "choose": {"success": 0.65, "executing": 0.10, "failure": 0.10, "confirm": 0.15},
    "confirm": {"success": 0.75, "executing": 0.10, "failure": 0.15},
    "follow_up": {"success": 0.70, "executing": 0.15, "failure": 0.15},
    "retry": {"success": 0.70, "executing": 0.10, "failure": 0.20},
    "modify": {"modified": 0.80, "failure": 0.10, "confirm": 0.10},
    "cancel": {"cancelled": 1.0},
    "drop": {"null": 1.0},
}

# Table 7 of the paper: three single-turn and seven multi-turn scenario labels.
SINGLE_TURN_LABELS = ("Single Tool", "Same-category Multi-tool", "Cross-category Multi-tool")
MULTI_TURN_LABELS = (
    "Domain Switch", "Multi-turn Continuation", "Intent Selection", "User Adds New Task",
    "Unfinished Task Continuation", "Abnormal Scenario", "State Hybrid",
)
SCENARIO_LABELS: tuple[str, ...] = SINGLE_TURN_LABELS + MULTI_TURN_LABELS

COMPOSITION_MODES = ("single", "collaboration", "parallel")
SAMPLING_MODES = ("scene", "random")
SPLITS = ("train", "test", "ood")

# The user-side behaviour each inherited intent shows, for the label (see scenario_label).
_INTENT_FEATURE = {
    "supplement": "Multi-turn Continuation",
    "modify": "Multi-turn Continuation",
    "cancel": "Multi-turn Continuation",
    "choose": "Intent Selection",
    "confirm": "Intent Selection",
    "follow_up": "Unfinished Task Continuation",
}
_PARAM_STATES = frozenset({"ask_detail", "select", "modified"})
_PARAM_INTENTS = frozenset({"supplement", "choose", "modify"})


def p_switch(turn: int, p0: float = 0.10, alpha: float = 0.85, p_min: float = 0.01) -> float:
    """Topic-switch probability at turn ``r`` (paper Eq. 2).

    ``P_switch(r) = max(p_min, p0 * alpha ** (r - 1))`` for ``r >= 1``, with the paper's
    ``p0 = 0.10``, ``alpha = 0.85``, ``p_min = 0.01``.
    """
    if turn < 1:
        raise ValueError(f"P_switch is defined for turns r >= 1, got {turn}")
    return max(p_min, p0 * alpha ** (turn - 1))


def action_tool(tool: Tool) -> bool:
    """Whether ``tool`` changes something (its description's first word is an action verb)."""
    words = re.findall(r"[A-Za-z]+", tool.description[:200].lower())
    first = words[0] if words else ""
    return first in _ACTION_VERBS or first.rstrip("s") in _ACTION_VERBS


def compatible_states(tool: Tool) -> frozenset[str]:
    """``S_t``: the states ``tool`` can take.

    Asking for a missing slot, offering options and modifying need a parameter; asking the user
    to confirm needs an action tool (:func:`action_tool`: "create", "send", "delete"...). Every
    other state, null included, is open to every tool.
    """
    allowed = set(STATES)
    if not tool_parameters(tool):
        allowed -= _PARAM_STATES
    if not action_tool(tool):
        allowed.discard("confirm")
    return frozenset(allowed)


def compatible_intents(tool: Tool) -> frozenset[str]:
    """The intents ``tool`` can receive (supplying, choosing or changing a slot needs a parameter)."""
    return frozenset(INTENTS) - (_PARAM_INTENTS if not tool_parameters(tool) else frozenset())


def restrict(dist: Mapping[str, float], allowed: Iterable[str], fallback: str) -> dict[str, float]:
    """``dist`` restricted to ``allowed`` and renormalised; all mass on ``fallback`` if none is left."""
    allowed = set(allowed)
    kept = {k: v for k, v in dist.items() if k in allowed and v > 0}
    total = sum(kept.values())
    if total <= 0:
        return {fallback: 1.0}
    return {k: v / total for k, v in kept.items()}


def p_init(tool: Tool, prior: Mapping[str, float] = P_INIT) -> dict[str, float]:
    """``P_init(s | t)`` (paper Eq. 1): the prior restricted to ``S_t``."""
    return restrict(prior, compatible_states(tool), "success")


def p_todo(tool: Tool, state: str, matrix: Mapping[str, Mapping[str, float]] = P_TODO) -> dict[str, float]:
    """``P_todo(d | s)`` for ``tool``: the intent row of ``state`` restricted to the tool's intents."""
    return restrict(matrix[state], compatible_intents(tool), "drop")


def p_task(tool: Tool, intent: str, matrix: Mapping[str, Mapping[str, float]] = P_TASK) -> dict[str, float]:
    """``P_task(s | d)`` for ``tool``: the outcome row of ``intent`` restricted to ``S_t``."""
    fallback = {"cancel": "cancelled", "drop": NULL}.get(intent, "success")
    return restrict(matrix[intent], compatible_states(tool), fallback)


def _draw(rng: random.Random, dist: Mapping[str, float]) -> str:
    keys = sorted(dist)  # fixed order: the same seed draws the same key whatever the dict order
    return rng.choices(keys, weights=[dist[k] for k in keys], k=1)[0]
