"""The generator: inherit or switch, compose the new tasks, write the turn, one Task per turn."""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Mapping

from toolgym.data.records import Task
from toolgym.retrieval.corpus import Tool, ToolCorpus
from toolgym.data.dialogue_generator.config import GeneratorConfig
from toolgym.data.dialogue_generator.plan import ActiveTool, TurnPlan
from toolgym.data.dialogue_generator.states import NULL, SPLITS, _draw, compatible_states, p_task, p_todo, restrict
from toolgym.data.dialogue_generator.tool_text import _slot_values, _words, scrub, tool_parameters
from toolgym.data.dialogue_generator.trace import ToolStep, TurnTrace, scenario_label
from toolgym.data.dialogue_generator.writers import TemplateWriter


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
