"""MagicSelector's state-machine dialogue generator (MTDTool construction, §3.1 of the paper).

A dialogue is a stochastic process over the tools in context. Each tool carries one of 11
interaction states (:data:`STATES`); at turn 0 a tool's state is drawn from ``P_init(s | t)``,
at turn ``r >= 1`` in two stages, a user intent ``d ~ P_todo(d | s)`` then an outcome
``s' ~ P_task(s' | d)``, both restricted to the states the tool can take
(:func:`compatible_states`). A tool that reaches the null state leaves the context. Each turn
first decides inherit or switch (:func:`p_switch`), composes the new tasks (single tool,
multi-tool collaboration, multi-intent parallelism) from scene-guided or random tool samples,
then writes the user turn, the atomic subtasks (context -> tasks -> tools) and the assistant
reply. Every turn becomes one :class:`~toolgym.data.records.Task`; its scenario label (one of
the paper's Table 7, :data:`SCENARIO_LABELS`) is a function of the state trace
(:func:`scenario_label`).

Text comes from a writer: :class:`TemplateWriter` (default; built from the tools' own
descriptions and parameters, deterministic for a seed) or :class:`ChatPolicyWriter`, which asks
any object with ``act(messages) -> str`` (``HFChatPolicy``, ``OpenAICompatPolicy``) to rephrase
the template turn. This module imports no torch. See docs/datasets.md, "Generated dialogues".
"""
from __future__ import annotations

import json
import math
import random
import re
from collections import Counter
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol, Sequence

from toolgym.data.records import Task
from toolgym.retrieval.corpus import Tool, ToolCorpus

# ---------------------------------------------------------------------------------------
# State space, intents, transition matrices
# ---------------------------------------------------------------------------------------
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
_ACTION_VERBS = frozenset(
    "add book buy cancel change charge close create delete disable donate enable install order pay place "
    "post publish register remove rename reserve reset schedule send set share start stop submit subscribe "
    "transfer turn update upload write assign allocate apply deploy launch modify move register".split()
)
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


# ---------------------------------------------------------------------------------------
# Trace records and the scenario label
# ---------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------
@dataclass
class GeneratorConfig:
    """Every knob of the generator; :meth:`from_dict` checks each value and names a bad one."""

    seed: int = 0
    dialogues: dict[str, int] = field(default_factory=lambda: {"train": 300, "test": 60, "ood": 60})
    min_turns: int = 1
    max_turns: int = 4
    ood_fraction: float = 0.2  # share of categories (tool verticals) held out for the ood split
    composition: dict[str, float] = field(default_factory=lambda: {"single": 0.4, "collaboration": 0.3, "parallel": 0.3})
    max_tools_per_turn: int = 3  # new tools one multi-tool task brings (>= 2)
    max_active_tools: int = 4  # tools in context at once
    sampling: str = "scene"  # "scene": tools of one scene (category or configured list); "random": global
    scenes: dict[str, list[str]] | None = None  # scene name -> tool ids; None = one scene per category
    p0: float = 0.10
    alpha: float = 0.85
    p_min: float = 0.01
    p_inject: float = 0.35  # chance to inject new tasks into an inherited turn
    p_init: dict[str, float] | None = None  # overrides P_INIT
    p_todo: dict[str, dict[str, float]] | None = None  # overrides rows of P_TODO
    p_task: dict[str, dict[str, float]] | None = None  # overrides rows of P_TASK
    id_prefix: str = "dlg"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "GeneratorConfig":
        d = dict(d or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"generate config: unknown key(s) {unknown}; known: {sorted(known)}")
        config = cls(**d)
        config.validate()
        return config

    # -- validation: the first bad value raises one ValueError naming it -------------------
    def validate(self) -> None:
        def bad(key: str, value: Any, want: str) -> None:
            raise ValueError(f"generate config: {key} must be {want}, got {value!r}")

        def integer(key: str, value: Any, lo: int) -> None:
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                bad(key, value, f"an integer >= {lo}")

        def prob(key: str, value: Any) -> None:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                bad(key, value, "a number in [0, 1]")

        integer("seed", self.seed, 0)
        if not isinstance(self.dialogues, Mapping) or not self.dialogues:
            bad("dialogues", self.dialogues, f"a mapping from split ({', '.join(SPLITS)}) to a count")
        for split, n in self.dialogues.items():
            if split not in SPLITS:
                bad("dialogues", split, f"one of the splits {list(SPLITS)}")
            integer(f"dialogues.{split}", n, 0)
        integer("min_turns", self.min_turns, 1)
        integer("max_turns", self.max_turns, 1)
        if self.max_turns < self.min_turns:
            bad("max_turns", self.max_turns, f">= min_turns ({self.min_turns})")
        prob("ood_fraction", self.ood_fraction)
        if self.dialogues.get("ood", 0) and self.ood_fraction <= 0:
            bad("ood_fraction", self.ood_fraction, "> 0 when dialogues.ood > 0")
        self._check_dist("composition", self.composition, COMPOSITION_MODES)
        integer("max_tools_per_turn", self.max_tools_per_turn, 2)
        integer("max_active_tools", self.max_active_tools, 1)
        if self.sampling not in SAMPLING_MODES:
            bad("sampling", self.sampling, f"one of {list(SAMPLING_MODES)}")
        if self.scenes is not None:
            if not isinstance(self.scenes, Mapping) or not self.scenes:
                bad("scenes", self.scenes, "a non-empty mapping scene name -> list of tool ids, or null")
            for name, ids in self.scenes.items():
                if not isinstance(ids, (list, tuple)) or not ids or not all(isinstance(i, str) for i in ids):
                    bad(f"scenes.{name}", ids, "a non-empty list of tool ids")
        for key in ("p0", "alpha", "p_min", "p_inject"):
            prob(key, getattr(self, key))
        if self.p_init is not None:
            self._check_dist("p_init", self.p_init, STATES)
            if any(self.p_init.get(s, 0) > 0 for s in ("null", "cancelled", "modified")):
                bad("p_init", dict(self.p_init), "zero on null, cancelled and modified (they need an earlier request)")
        for key, rows, row_keys, col_keys in (("p_todo", self.p_todo, STATES, INTENTS),
                                              ("p_task", self.p_task, INTENTS, STATES)):
            if rows is None:
                continue
            if not isinstance(rows, Mapping):
                bad(key, rows, "a mapping of rows")
            for row, dist in rows.items():
                if row not in row_keys:
                    bad(key, row, f"a row among {list(row_keys)}")
                self._check_dist(f"{key}.{row}", dist, col_keys)
        if self.p_task is not None and "drop" in self.p_task and dict(self.p_task["drop"]) != {NULL: 1.0}:
            bad("p_task.drop", dict(self.p_task["drop"]), "{null: 1.0} (a dropped tool leaves through the null state)")
        if self.p_task is not None and any(self.p_task.get("new", {}).get(s, 0) > 0 for s in ("null", "cancelled", "modified")):
            bad("p_task.new", dict(self.p_task["new"]), "zero on null, cancelled and modified")
        if not isinstance(self.id_prefix, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,40}", self.id_prefix):
            bad("id_prefix", self.id_prefix, "1-40 letters, digits, '_', '.' or '-'")

    @staticmethod
    def _check_dist(key: str, dist: Any, names: Sequence[str]) -> None:
        if not isinstance(dist, Mapping) or not dist:
            raise ValueError(f"generate config: {key} must be a mapping name -> probability, got {dist!r}")
        for name, p in dist.items():
            if name not in names:
                raise ValueError(f"generate config: {key} has unknown entry {name!r}; known: {list(names)}")
            if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or p < 0:
                raise ValueError(f"generate config: {key}.{name} must be a non-negative number, got {p!r}")
        total = float(sum(dist.values()))
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"generate config: {key} must sum to 1, sums to {total:.6g}")

    # -- the effective matrices -----------------------------------------------------------
    def init_prior(self) -> dict[str, float]:
        return dict(self.p_init) if self.p_init is not None else dict(P_INIT)

    def todo_matrix(self) -> dict[str, dict[str, float]]:
        return {**{k: dict(v) for k, v in P_TODO.items()}, **{k: dict(v) for k, v in (self.p_todo or {}).items()}}

    def task_matrix(self) -> dict[str, dict[str, float]]:
        rows = {k: dict(v) for k, v in P_TASK.items()}
        rows["new"] = self.init_prior()  # a task injected later starts like a first-turn one
        rows.update({k: dict(v) for k, v in (self.p_task or {}).items()})
        return rows

    def switch_probability(self, turn: int) -> float:
        return p_switch(turn, self.p0, self.alpha, self.p_min)


# ---------------------------------------------------------------------------------------
# Tool text: requests, slots and values read off the tool record
# ---------------------------------------------------------------------------------------
_MAX_TEXT = 600  # characters of a description read; a tool record is user data, keep parsing bounded
_EXAMPLES = re.compile(r"\((?:e\.g\.|eg\.|for example|such as)[,:]?\s*([^()]{1,300})\)", re.IGNORECASE)
_KNOWN_VERBS = frozenset(
    "add analyze analyse assess book buy calculate cancel change check compare compute convert create "
    "delete detect download estimate evaluate fetch find generate get identify list locate log look manage "
    "measure monitor open optimize order plan play predict provide query rate read recommend record register "
    "remove request reserve retrieve schedule search send set share simulate start stop submit subscribe "
    "summarize track transfer translate turn update upload validate verify view perform run initiate make "
    "report control train conduct enroll determine execute count classify command adjust process scan "
    "calibrate toggle establish recognize restore design mark join enhance sign resolve solve activate "
    "configure authenticate block test authorize interpret scale redeem organize select collect clean "
    "transcribe lock render encrypt drop compress compile invite end save build upgrade reduce decrypt "
    "receive explore enter use show give discover access ask talk interact connect export scrape boost see "
    "return display extract parse load lookup".split()
) | _ACTION_VERBS
_ARTICLES = frozenset("a an the some any this these that".split())
_TRAILING = frozenset("a an the of for with to and in on by from about or at into".split())
_FALLBACK_VALUES = {
    "city": ["Beijing", "Paris", "Chicago", "Nairobi"],
    "location": ["downtown Seattle", "Berlin", "the office"],
    "country": ["Japan", "Brazil", "Canada"],
    "date": ["tomorrow", "next Monday", "2024-05-17"],
    "time": ["at 3 pm", "this evening", "at 9:30"],
    "name": ["Alex Chen", "Maria Lopez", "the Johnson project"],
    "email": ["alex@example.com", "team@example.org"],
    "language": ["French", "Spanish", "German"],
    "id": ["A-1024", "7781", "X93"],
    "query": ["electric cars", "jazz festivals", "budget hotels"],
}


def _words(identifier: str) -> str:
    """``team_name`` / ``teamName`` -> ``team name``."""
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", identifier[:80])
    return " ".join(re.split(r"[\s_\-.:|]+", text)).strip().lower()


def tool_parameters(tool: Tool) -> dict[str, dict[str, Any]]:
    """The tool's parameters as ``name -> spec`` (JSON-schema ``properties`` or a flat mapping)."""
    params = tool.parameters or {}
    props = params.get("properties") if isinstance(params.get("properties"), dict) else None
    if props is None:
        return {}
    return {str(k): (v if isinstance(v, dict) else {}) for k, v in list(props.items())[:20]}


def _slot_values(name: str, spec: Mapping[str, Any], rng: random.Random) -> list[str]:
    """Candidate values for a slot: the description's "(e.g., A, B)" list, the default, else a pool."""
    desc = str(spec.get("description") or "")[:_MAX_TEXT]
    values: list[str] = []
    m = _EXAMPLES.search(desc)
    if m:
        values = [v.strip(" .'\"") for v in m.group(1).split(",")]
        values = [v for v in values if 0 < len(v) <= 40][:4]
    default = spec.get("default")
    if not values and isinstance(default, (str, int, float)) and not isinstance(default, bool) and len(str(default)) <= 40:
        values = [str(default)]
    if len(values) < 2:
        words = _words(name)
        pool = next((v for k, v in _FALLBACK_VALUES.items() if k in words.split()), None)
        if pool is None and str(spec.get("type", "")).lower() in ("int", "integer", "float", "number"):
            pool = [str(rng.randint(2, 60)), str(rng.randint(61, 500)), str(rng.randint(501, 5000))]
        if pool is None:
            pool = [f"the usual {words}", f"my {words}", f"a new {words}"]
        values += [v for v in pool if v not in values]
    return values[:4]


def request_clause(tool: Tool) -> str:
    """The tool's job as an imperative clause, from its description: "retrieve the score of a game".

    Third-person verbs lose their "s" ("Returns ..." -> "return ..."); a description that does
    not start with a verb becomes "help with <description>".
    """
    desc = " ".join(tool.description[:_MAX_TEXT].split())
    desc = re.sub(r"^(?:this|the)\s+(?:api|tool|endpoint|method|service|resource|route|function|call)\s+(?:will\s+|can\s+|is\s+used\s+to\s+|allows\s+you\s+to\s+|lets\s+you\s+)?"
                  r"|^(?:api|endpoint|method|used)\s+to\s+|^allows?\s+(?:users?\s+|you\s+)?to\s+",
                  "", desc, count=1, flags=re.IGNORECASE)
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", desc) if s.strip()]
    chosen = None
    for sentence in sentences[:4]:
        first = sentence.split()[0].lower().strip(",:;")
        base = first[:-2] if first.endswith("es") and first[:-2] in _KNOWN_VERBS else first.rstrip("s") if first.endswith("s") else first
        if first in _KNOWN_VERBS or base in _KNOWN_VERBS:
            chosen = (base if base in _KNOWN_VERBS else first) + sentence[len(first):]
            break
    if chosen is None:
        head = sentences[0] if sentences else _words(tool.name)
        chosen = "help with " + (head[:1].lower() + head[1:] if not head[:2].isupper() else head)
    chosen = chosen.rstrip(" .!?;:")
    if len(chosen) > 140:
        chosen = chosen[:140].rsplit(" ", 1)[0]
    return chosen[:1].lower() + chosen[1:]


def scrub(text: str, names: Iterable[str]) -> str:
    """``text`` with every tool id / name in ``names`` replaced by "the service" (no tool leakage)."""
    names = sorted({n for n in names if n and len(n) >= 3}, key=len, reverse=True)
    if not names:
        return text
    pattern = re.compile(r"(?<![\w])(?:" + "|".join(re.escape(n) for n in names) + r")(?![\w])", re.IGNORECASE)
    return pattern.sub("the service", text)


# ---------------------------------------------------------------------------------------
# Per-dialogue tool state
# ---------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------
# Writers: templates (default) and any chat policy
# ---------------------------------------------------------------------------------------
class ChatPolicy(Protocol):
    def act(self, messages: Sequence[dict[str, str]]) -> str: ...


_OPENERS = ("Can you {x}?", "Please {x}.", "I need you to {x}.", "Could you {x}?", "Help me {x}.")
_JOIN_PARALLEL = ("Also, ", "Oh, and ", "By the way, ", "And ")
_JOIN_COLLAB = ("Then ", "After that, ", "Once that's done, ")
_ORDINALS = ("first", "second", "third", "fourth")


class TemplateWriter:
    """User turns, subtasks and assistant replies from templates over the tools' own texts."""

    name = "templates"

    def user(self, plan: TurnPlan, history: Sequence[dict[str, str]], rng: random.Random) -> str:
        pieces = []
        several = len(plan.tools) > 1
        mode = plan.trace.mode
        new_seen = 0
        for step, active in plan.tools:
            detail = plan.detail.get(step.tool, {})
            if step.intent == "new":
                demand = rng.choice(_OPENERS).format(x=self._new_request(active)).replace("Help me help with", "Help me with")
                if new_seen:
                    joiner = rng.choice(_JOIN_COLLAB if mode == "collaboration" else _JOIN_PARALLEL)
                    demand = joiner + (demand if demand.startswith("I ") else demand[:1].lower() + demand[1:])
                new_seen += 1
            else:
                demand = self._follow_up(step.intent, active, detail, several, rng)
            pieces.append(demand[:1].upper() + demand[1:])
        return " ".join(pieces)

    @staticmethod
    def _new_request(active: ActiveTool) -> str:
        request = active.request()
        return request[:1].lower() + request[1:]

    @staticmethod
    def _follow_up(intent: str, active: ActiveTool, detail: Mapping[str, Any], several: bool, rng: random.Random) -> str:
        about = f" for the {active.topic}" if several or rng.random() < 0.5 else ""
        if intent == "supplement":
            value = detail["value"]
            return rng.choice([f"{value}.", f"The {_words(detail['slot'])} is {value}.", f"Use {value}{about}."])
        if intent == "choose":
            index = detail["index"]
            return rng.choice([f"The {_ORDINALS[index]} one{about}.", f"{detail['value']}, please."])
        if intent == "confirm":
            return rng.choice([f"Yes, go ahead{about}.", f"Sure, do it{about}."])
        if intent == "follow_up":
            return rng.choice([f"Is the {active.topic} done yet?", f"Any update on the {active.topic}?"])
        if intent == "retry":
            return rng.choice([f"Please try the {active.topic} again.", f"Give the {active.topic} another try."])
        if intent == "modify":
            return f"Actually, make the {_words(detail['slot'])} {detail['value']} instead{about}."
        if intent == "cancel":
            return rng.choice([f"Forget about the {active.topic}.", f"Cancel the {active.topic}, please."])
        raise ValueError(f"no user template for intent {intent!r}")

    def subtask(self, step: ToolStep, active: ActiveTool) -> str:
        if step.intent == "cancel":
            request = active.request()
            return "Cancel the request to " + request[:1].lower() + request[1:]
        return active.request()

    def assistant(self, plan: TurnPlan, history: Sequence[dict[str, str]], user_text: str, rng: random.Random) -> str:
        parts = [self._reply(step.state, active) for step, active in plan.tools]
        text = " ".join(p for p in parts if p)
        return text or "Noted."  # every tool silent: one neutral word, no summary

    @staticmethod
    def _reply(state: str, active: ActiveTool) -> str:
        topic = active.topic
        if state == "success":
            return f"Done: I took care of the {topic}."
        if state == "executing":
            return f"I'm working on the {topic}; it may take a moment."
        if state == "failure":
            return f"Sorry, something went wrong with the {topic}."
        if state == "ask_detail":
            return f"Which {_words(active.missing or 'detail')} should I use for the {topic}?"
        if state == "select":
            opts = ", ".join(active.options[:-1]) + " or " + active.options[-1]
            return f"For the {topic} I found several {_words(active.option_slot or 'option')} options: {opts}. Which one?"
        if state == "confirm":
            return f"Before I {active.clause}, shall I go ahead?"
        if state == "modified":
            return f"Updated: the {topic} now uses the new value."
        if state == "cancelled":
            return f"Okay, I cancelled the {topic}."
        if state == "deferred":
            return f"I'll get to the {topic} once the rest is done."
        return ""  # silent (and null, never rendered)


_MAX_REPLY = 2000  # characters kept of a policy's reply before cleaning


class ChatPolicyWriter(TemplateWriter):
    """User turns and assistant replies rephrased by a chat policy (``act(messages) -> str``).

    The template turn is the draft, with the state guidance of the paper's prompts (keep every
    value, one request per tool, leave silent tools out, never name a tool). Subtasks stay the
    state machine's own, so the annotation does not depend on the model. A reply that is empty
    or names a tool falls back to the draft (counted in ``fallbacks``).
    """

    name = "policy"

    def __init__(self, policy: ChatPolicy, max_chars: int = 600):
        if not callable(getattr(policy, "act", None)):
            raise ValueError(f"a chat policy needs an act(messages) -> str method, got {type(policy).__name__}")
        self.policy = policy
        self.max_chars = max_chars
        self.fallbacks = 0
        self.calls = 0

    def user(self, plan: TurnPlan, history: Sequence[dict[str, str]], rng: random.Random) -> str:
        draft = super().user(plan, history, rng)
        guidance = [f"- {active.topic}: {step.intent.replace('_', ' ')}" for step, active in plan.tools]
        system = ("You are a real person talking to a phone voice assistant. Rewrite the draft as one natural "
                  "spoken turn. Keep every value and every request, one request per item, in the same order; "
                  "do not add requests; never name an app, API or tool; no greetings or thanks. "
                  "Answer with the turn only.")
        prompt = ("Conversation so far:\n" + _render(history) + "\n\nWhat this turn does:\n" + "\n".join(guidance)
                  + f"\n\nDraft: {draft}\n\nYour turn:")
        return self._ask(system, prompt, draft, plan)

    def assistant(self, plan: TurnPlan, history: Sequence[dict[str, str]], user_text: str, rng: random.Random) -> str:
        draft = super().assistant(plan, history, user_text, rng)
        states = [f"- {active.topic}: {step.state}" for step, active in plan.tools]
        system = ("You are a phone voice assistant. Rewrite the draft reply as one fluent reply driven by the "
                  "backend states: success confirms, executing says it is in progress, failure explains, "
                  "ask_detail asks for the missing detail, select lists the options, silent is never mentioned. "
                  "Never name an app, API or tool. Answer with the reply only.")
        prompt = (f"User: {user_text}\n\nBackend states:\n" + "\n".join(states) + f"\n\nDraft: {draft}\n\nReply:")
        return self._ask(system, prompt, draft, plan)

    def _ask(self, system: str, prompt: str, draft: str, plan: TurnPlan) -> str:
        self.calls += 1
        raw = self.policy.act([{"role": "system", "content": system}, {"role": "user", "content": prompt}])
        text = clean_policy_text(raw, self.max_chars)
        names = {a.tool.id for _, a in plan.tools} | {a.tool.name for _, a in plan.tools}
        if not text or scrub(text, names) != text:
            self.fallbacks += 1
            return draft
        return text


def clean_policy_text(raw: Any, max_chars: int = 600) -> str:
    """A model's reply as one utterance: capped first (bounded work on hostile output), then the
    first paragraph, label prefixes and wrapping quotes removed, whitespace collapsed."""
    if not isinstance(raw, str):
        return ""
    text = raw[:_MAX_REPLY].strip()
    text = text.split("\n\n", 1)[0]
    text = re.sub(r"^(?:user|assistant|reply|your turn|turn)\s*:\s*", "", text, flags=re.IGNORECASE)
    text = " ".join(text.split()).strip("\"'“” ")
    if len(text) > max_chars:
        text = text[:max_chars].rsplit(" ", 1)[0]
    return text


def _render(history: Sequence[dict[str, str]]) -> str:
    return "\n".join(f"{m['role']}: {m['content']}" for m in history) or "(none)"


# ---------------------------------------------------------------------------------------
# The generator
# ---------------------------------------------------------------------------------------
@dataclass
class GeneratedDialogue:
    """One dialogue: its id, split, full message list and per-turn trace, and its tasks."""

    id: str
    split: str
    messages: list[dict[str, str]]
    traces: list[TurnTrace]
    tasks: list[Task]


def split_categories(corpus: ToolCorpus, ood_fraction: float, seed: int) -> tuple[frozenset[str], frozenset[str]]:
    """(in-domain, out-of-domain) categories: ``round(ood_fraction * n)`` of the corpus's
    categories, drawn with ``random.Random(seed)`` from the sorted list, are held out (at least one
    when the fraction is positive, at most ``n - 1``). Uncategorised tools are in-domain."""
    cats = sorted(corpus.categories)
    if ood_fraction <= 0:
        return frozenset(cats), frozenset()
    if len(cats) < 2:
        raise ValueError(
            f"corpus {corpus.name!r} has {len(cats)} categories: an out-of-domain split needs at least 2 "
            "(set ood_fraction: 0 and dialogues.ood: 0)")
    n_ood = min(len(cats) - 1, max(1, round(ood_fraction * len(cats))))
    ood = frozenset(random.Random(seed).sample(cats, n_ood))
    return frozenset(cats) - ood, ood


class DialogueGenerator:
    """Generate MTDTool-style multi-turn dialogues over ``corpus``; see the module docstring."""

    def __init__(self, corpus: ToolCorpus, config: GeneratorConfig | Mapping[str, Any] | None = None,
                 writer: TemplateWriter | None = None):
        self.corpus = corpus
        self.config = config if isinstance(config, GeneratorConfig) else GeneratorConfig.from_dict(config)
        self.config.validate()
        self.writer = writer or TemplateWriter()
        self.todo = self.config.todo_matrix()
        self.task_rows = self.config.task_matrix()
        in_cats, ood_cats = split_categories(corpus, self.config.ood_fraction if self.config.dialogues.get("ood") else 0.0,
                                             self.config.seed)
        self.ood_categories = ood_cats
        pools = {
            "train": [t for t in corpus if t.category not in ood_cats],
            "test": [t for t in corpus if t.category not in ood_cats],
            "ood": [t for t in corpus if t.category in ood_cats],
        }
        self.scenes = {split: self._scenes(pool) for split, pool in pools.items()}
        for split, n in self.config.dialogues.items():
            if n and not self.scenes[split]:
                raise ValueError(f"no tools left for split {split!r} in corpus {corpus.name!r}")

    def _scenes(self, pool: list[Tool]) -> dict[str, list[Tool]]:
        if self.config.scenes is None:
            by_cat: dict[str, list[Tool]] = {}
            for tool in pool:
                by_cat.setdefault(tool.category or "general", []).append(tool)
            return by_cat
        in_pool = {t.id for t in pool}
        scenes = {}
        for name, ids in self.config.scenes.items():
            unknown = [i for i in ids if i not in self.corpus]
            if unknown:
                raise ValueError(f"generate config: scenes.{name} names tool id(s) not in corpus {self.corpus.name!r}: {unknown[:5]}")
            tools = [self.corpus[i] for i in ids if i in in_pool]
            if tools:
                scenes[name] = tools
        return scenes

    # -- public ---------------------------------------------------------------------------
    def generate(self) -> list[GeneratedDialogue]:
        """Every split's dialogues, deterministic for ``config.seed``."""
        out = []
        for split in SPLITS:
            for i in range(self.config.dialogues.get(split, 0)):
                out.append(self.dialogue(split, i))
        return out

    def dialogue(self, split: str, index: int) -> GeneratedDialogue:
        """Dialogue ``index`` of ``split``; it depends only on (seed, split, index)."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; splits: {list(SPLITS)}")
        rng = random.Random(f"{self.config.seed}/{split}/{index}")
        scenes = self.scenes[split]
        n_turns = rng.randint(self.config.min_turns, self.config.max_turns)
        dialogue_id = f"{self.config.id_prefix}-{split}-{index:05d}"
        active: list[ActiveTool] = []
        messages: list[dict[str, str]] = []
        traces: list[TurnTrace] = []
        tasks: list[Task] = []
        scene = rng.choice(sorted(scenes))
        for turn in range(n_turns):
            plan, active, scene = self._turn(rng, turn, active, scene, scenes)
            traces.append(plan.trace)
            history = list(messages)
            user_text = scrub(self.writer.user(plan, history, rng), self._names(plan))
            subtasks = [scrub(self.writer.subtask(step, tool), self._names(plan)) for step, tool in plan.tools]
            reply = scrub(self.writer.assistant(plan, history, user_text, rng), self._names(plan))
            gold = frozenset(step.tool for step, _ in plan.tools)
            cats = {self.corpus[t].category for t in gold}
            tasks.append(Task(
                id=f"{dialogue_id}#{turn}", query=user_text, gold=gold, messages=tuple(history),
                category=cats.pop() if len(cats) == 1 else None, subtasks=tuple(subtasks), split=split,
                group=scenario_label(traces),
            ))
            messages += [{"role": "user", "content": user_text}, {"role": "assistant", "content": reply}]
        return GeneratedDialogue(dialogue_id, split, messages, traces, tasks)

    @staticmethod
    def _names(plan: TurnPlan) -> set[str]:
        return {a.tool.id for _, a in plan.tools} | {a.tool.name for _, a in plan.tools}

    # -- one turn of the state machine ------------------------------------------------------
    def _turn(self, rng: random.Random, turn: int, active: list[ActiveTool], scene: str,
              scenes: Mapping[str, list[Tool]]) -> tuple[TurnPlan, list[ActiveTool], str]:
        cfg = self.config
        steps: list[tuple[ToolStep, ActiveTool | None]] = []
        detail: dict[str, Any] = {}
        if turn == 0:
            context = "init"
        else:
            context = "switch" if rng.random() < cfg.switch_probability(turn) else "inherit"
        kept: list[ActiveTool] = []
        if context == "switch":
            for a in active:  # the old topic leaves
                steps.append((ToolStep(a.tool.id, a.tool.category, "drop", NULL, a.state), None))
            others = [s for s in sorted(scenes) if s != scene]
            scene = rng.choice(others) if others else scene
        elif context == "inherit":
            for a in active:
                prev = a.state
                intent = _draw(rng, p_todo(a.tool, prev, self.todo))
                state = _draw(rng, p_task(a.tool, intent, self.task_rows))
                if intent != "drop":
                    detail[a.tool.id] = self._apply_intent(rng, a, intent)
                self._enter_state(rng, a, state)
                steps.append((ToolStep(a.tool.id, a.tool.category, intent, state, prev), a if intent != "drop" else None))
                if state != NULL:
                    kept.append(a)
        # New tasks: always on init and switch; on inherit with p_inject when there is room, and
        # always when the user would otherwise ask for nothing (the continuation constraint).
        asked = any(s.requested for s, _ in steps)
        room = cfg.max_active_tools - len(kept)
        inject = context != "inherit" or not asked or (room > 0 and rng.random() < cfg.p_inject)
        mode = None
        if inject:
            mode = _draw(rng, cfg.composition)
            taken = {s.tool for s, _ in steps}  # not even a tool dropped this turn comes back as new
            new_tools = self._sample_tools(rng, mode, scene, scenes, taken, max(1, room))
            if not new_tools and not asked:  # a tiny library: a dropped tool may come back after all
                new_tools = self._sample_tools(rng, mode, scene, scenes, {a.tool.id for a in kept}, max(1, room))
            for tool in new_tools:
                a = ActiveTool(tool, state="new", slots=self._initial_slots(rng, tool))
                state = _draw(rng, restrict(self.task_rows["new"], compatible_states(tool), "success"))
                self._enter_state(rng, a, state)
                steps.append((ToolStep(tool.id, tool.category, "new", state, None), a))
                kept.append(a)
        trace = TurnTrace(turn, context, mode, scene, tuple(s for s, _ in steps))
        plan = TurnPlan(trace, [(s, a) for s, a in steps if a is not None and s.requested], detail)
        return plan, kept, scene

    def _sample_tools(self, rng: random.Random, mode: str, scene: str, scenes: Mapping[str, list[Tool]],
                      taken: set[str], room: int) -> list[Tool]:
        k = 1 if mode == "single" else rng.randint(2, self.config.max_tools_per_turn)
        k = max(1, min(k, room))
        if self.config.sampling == "random":
            pool = [t for s in sorted(scenes) for t in scenes[s] if t.id not in taken]
            return rng.sample(pool, min(k, len(pool)))
        if mode == "parallel":  # independent intents: the first from this scene, the rest from others
            order = [scene] + rng.sample([s for s in sorted(scenes) if s != scene], min(k, len(scenes) - 1))
            chosen: list[Tool] = []
            for s in order:
                free = [t for t in scenes[s] if t.id not in taken and t not in chosen]
                if free and len(chosen) < k:
                    chosen.append(rng.choice(free))
            if len(chosen) < k:  # fewer scenes than intents: fill from the whole pool
                rest = [t for s in sorted(scenes) for t in scenes[s] if t.id not in taken and t not in chosen]
                chosen += rng.sample(rest, min(k - len(chosen), len(rest)))
            return chosen
        free = [t for t in scenes[scene] if t.id not in taken]
        if not free:  # the scene is used up: any other tool
            free = [t for s in sorted(scenes) for t in scenes[s] if t.id not in taken]
        return rng.sample(free, min(k, len(free)))

    @staticmethod
    def _initial_slots(rng: random.Random, tool: Tool) -> dict[str, str]:
        params = tool_parameters(tool)
        required = (tool.parameters or {}).get("required")
        required = [str(r) for r in required[:20] if str(r) in params] if isinstance(required, list) else []
        names = (required or list(params))[:3]
        return {n: rng.choice(_slot_values(n, params[n], rng)) for n in names}

    def _enter_state(self, rng: random.Random, a: ActiveTool, state: str) -> None:
        """Set the per-state details the texts need (which slot is missing, which options offered)."""
        a.state, a.missing, a.options, a.option_slot = state, None, (), None
        params = tool_parameters(a.tool)
        if state == "ask_detail":
            names = list(a.slots) or list(params)[:1]
            if names:
                a.missing = rng.choice(names)
                a.slots.setdefault(a.missing, rng.choice(_slot_values(a.missing, params.get(a.missing, {}), rng)))
        elif state == "select":
            names = list(a.slots) or list(params)[:1]
            if names:
                a.option_slot = rng.choice(names)
                values = _slot_values(a.option_slot, params.get(a.option_slot, {}), rng)
                a.options = tuple(values[:3]) if len(values) >= 2 else (values[0], f"another {_words(a.option_slot)}")

    def _apply_intent(self, rng: random.Random, a: ActiveTool, intent: str) -> dict[str, Any]:
        """Update the request for the user's intent; returns what the user turn needs to say."""
        params = tool_parameters(a.tool)
        if intent == "supplement" and a.missing:
            slot, value = a.missing, a.slots[a.missing]
            a.missing = None
            return {"slot": slot, "value": value}
        if intent == "supplement":  # nothing was missing (a custom matrix): restate
            return {"slot": next(iter(a.slots), "detail"), "value": next(iter(a.slots.values()), "that")}
        if intent == "choose" and a.options:
            index = rng.randrange(len(a.options))
            a.slots[a.option_slot or "option"] = a.options[index]
            return {"index": index, "value": a.options[index]}
        if intent == "choose":
            return {"index": 0, "value": next(iter(a.slots.values()), "the first option")}
        if intent == "modify":
            names = list(a.slots) or list(params)[:1]
            if not names:
                return {"slot": "detail", "value": "something else"}
            slot = rng.choice(names)
            values = [v for v in _slot_values(slot, params.get(slot, {}), rng) if v != a.slots.get(slot)]
            a.slots[slot] = rng.choice(values) if values else f"another {_words(slot)}"
            return {"slot": slot, "value": a.slots[slot]}
        return {}


# ---------------------------------------------------------------------------------------
# Tool libraries
# ---------------------------------------------------------------------------------------
def read_tool_corpus(path: str | Path, name: str | None = None) -> ToolCorpus:
    """A user's tool library: a (gzipped) JSONL file of ``Tool.to_dict()`` records (``id`` required).

    A bad line raises ``DatasetFormatError`` naming the file and line; a duplicate id names both.
    """
    from toolgym.data.readers import DatasetFormatError, iter_jsonl_numbered

    tools, seen = [], {}
    for lineno, rec in iter_jsonl_numbered(path):
        where = f"{path}:{lineno}"
        if not isinstance(rec.get("id"), (str, int)) or isinstance(rec.get("id"), bool):
            raise DatasetFormatError(f"{where}: a tool record needs an 'id' (string)")
        if not isinstance(rec.get("parameters") or {}, dict):
            raise DatasetFormatError(f"{where}: field 'parameters' should be an object")
        try:
            tool = Tool.from_dict(rec)
        except (TypeError, ValueError) as exc:
            raise DatasetFormatError(f"{where}: bad tool record ({exc})") from None
        if tool.id in seen:
            raise DatasetFormatError(f"{where}: duplicate tool id {tool.id!r} (first at line {seen[tool.id]})")
        seen[tool.id] = lineno
        tools.append(tool)
    if not tools:
        raise DatasetFormatError(f"{path}: no tools")
    return ToolCorpus(tools, name=name or Path(path).name.split(".")[0])


def tool_library(spec: Mapping[str, Any]) -> ToolCorpus:
    """The corpus named by a config's ``library``: ``{dataset: NAME}`` (any ``toolgym.data``
    dataset, e.g. ``seal_tools``) or ``{corpus: PATH}`` (a JSONL of Tool records)."""
    spec = dict(spec or {})
    unknown = sorted(set(spec) - {"dataset", "corpus", "name"})
    if unknown or ("dataset" in spec) == ("corpus" in spec):
        raise ValueError(f"generate config: library must give exactly one of 'dataset' or 'corpus' (and optionally "
                         f"'name'), got {spec!r}")
    if "corpus" in spec:
        return read_tool_corpus(spec["corpus"], spec.get("name"))
    from toolgym.data import load_dataset

    return load_dataset(str(spec["dataset"])).corpus


# ---------------------------------------------------------------------------------------
# Output and statistics
# ---------------------------------------------------------------------------------------
def dialogue_tasks(dialogues: Iterable[GeneratedDialogue]) -> list[Task]:
    return [t for d in dialogues for t in d.tasks]


def trace_records(dialogues: Iterable[GeneratedDialogue]) -> list[dict[str, Any]]:
    """One sidecar record per task: its label, the state trace up to its turn and the reply."""
    out = []
    for d in dialogues:
        for turn, task in enumerate(d.tasks):
            out.append({
                "task_id": task.id, "dialogue_id": d.id, "turn": turn, "split": d.split, "label": task.group,
                "trace": [t.to_dict() for t in d.traces[: turn + 1]],
                "reply": d.messages[2 * turn + 1]["content"],
            })
    return out


def generation_stats(dialogues: Sequence[GeneratedDialogue]) -> dict[str, Any]:
    """Counts: dialogues and tasks per split, turns per dialogue, tools per turn, labels, states."""
    tasks = dialogue_tasks(dialogues)
    turns = [len(d.traces) for d in dialogues]
    tools = [len(t.gold) for t in tasks]
    states = Counter(s.state for d in dialogues for tr in d.traces for s in tr.steps)
    contexts = Counter(tr.context for d in dialogues for tr in d.traces)
    return {
        "dialogues": dict(Counter(d.split for d in dialogues)),
        "tasks": dict(Counter(t.split for t in tasks)),
        "turns_per_dialogue": {"mean": round(sum(turns) / max(1, len(turns)), 3), "max": max(turns, default=0),
                               "histogram": dict(sorted(Counter(turns).items()))},
        "tools_per_turn": {"mean": round(sum(tools) / max(1, len(tools)), 3), "max": max(tools, default=0),
                           "histogram": dict(sorted(Counter(tools).items()))},
        "labels": {label: sum(1 for t in tasks if t.group == label) for label in SCENARIO_LABELS},
        "states": {s: states.get(s, 0) for s in STATES},
        "contexts": dict(contexts),
    }


def write_generated(out_dir: str | Path, corpus: ToolCorpus, dialogues: Sequence[GeneratedDialogue]) -> dict[str, Path]:
    """Write ``corpus.jsonl``, ``tasks.jsonl`` (read back by ``load_corpus_and_tasks``),
    ``traces.jsonl`` (label, state trace, reply per task) and ``stats.json`` into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {name: out / name for name in ("corpus.jsonl", "tasks.jsonl", "traces.jsonl", "stats.json")}
    corpus.save_jsonl(paths["corpus.jsonl"])
    for name, records in (("tasks.jsonl", [t.to_dict() for t in dialogue_tasks(dialogues)]),
                          ("traces.jsonl", trace_records(dialogues))):
        with open(paths[name], "w", encoding="utf-8") as f:
            for rec in records:
                f.write(json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n")
    paths["stats.json"].write_text(json.dumps(generation_stats(dialogues), indent=2) + "\n", encoding="utf-8")
    return paths


def generate_dialogues(corpus: ToolCorpus, config: GeneratorConfig | Mapping[str, Any] | None = None,
                       policy: ChatPolicy | None = None) -> list[GeneratedDialogue]:
    """Generate with templates, or with ``policy`` (anything with ``act(messages) -> str``) rephrasing."""
    writer = ChatPolicyWriter(policy) if policy is not None else TemplateWriter()
    return DialogueGenerator(corpus, config, writer).generate()
