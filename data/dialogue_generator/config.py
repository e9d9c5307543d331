"""Every knob of the generator (:class:`GeneratorConfig`), each value checked."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Sequence

from toolgym.data.config_keys import UnknownConfigKeyError
from toolgym.data.dialogue_generator.states import COMPOSITION_MODES, INTENTS, NULL, P_INIT, P_TASK, P_TODO, SAMPLING_MODES, SPLITS, STATES, p_switch


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

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "GeneratorConfig":
        """The config of a mapping of its fields (checked at construction); an unknown key is an
        :class:`~toolgym.data.config_keys.UnknownConfigKeyError` listing the valid ones."""
        d = dict(d or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(map(str, set(d) - known))
        if unknown:
            raise UnknownConfigKeyError(f"generate config: unknown key(s) {unknown}", unknown[0], known)
        return cls(**d)

    # -- validation: the first bad value raises one ValueError naming it -------------------
    def validate(self) -> None:
        """Every value's type and range (run at construction, and again by ``DialogueGenerator``:
        a field may be set after construction)."""
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
