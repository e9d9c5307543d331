"""Tool libraries in, generated files and statistics out."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from toolgym.data.records import Task
from toolgym.retrieval.corpus import Tool, ToolCorpus
from toolgym.data.dialogue_generator.config import GeneratorConfig
from toolgym.data.dialogue_generator.generator import DialogueGenerator, GeneratedDialogue
from toolgym.data.dialogue_generator.states import SCENARIO_LABELS, STATES
from toolgym.data.dialogue_generator.writers import TemplateWriter


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
                       writer: TemplateWriter | None = None) -> list[GeneratedDialogue]:
    """Generate with ``writer`` (default :class:`TemplateWriter`; a chat model rephrases the template
    turns with :class:`toolgym.agents.dialogue_writer.ChatPolicyWriter`)."""
    return DialogueGenerator(corpus, config, writer or TemplateWriter()).generate()
