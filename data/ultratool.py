"""UltraTool plans in TaskBench format (GNN4TaskPlan): ``tool_desc.json`` + ``data.jsonl``."""
from __future__ import annotations

import re
from pathlib import Path

from toolgym.data.dataset import Dataset, TaskCollector, make_corpus, make_tool, require_field
from toolgym.data.readers import DatasetFormatError, iter_jsonl_numbered, read_json, require_file
from toolgym.retrieval.corpus import ToolCorpus

__all__ = ["load_ultratool", "ultratool_subtask"]

_STEP_PREFIX = re.compile(r"^\s*(?:Step\s*\d+(?:\.\d+)*|\d+(?:\.\d+)+)\s*[.:)]?\s*", re.IGNORECASE)
# "Call flight_search to", "call X again to", "Use X for": the tool-naming part of a step.
_CALL_PART = re.compile(r"\b(?:call|use|invoke)\s+([A-Za-z0-9][\w.\-]*)\s+(?:again\s+)?(?:to|for)\s+", re.IGNORECASE)


def ultratool_subtask(step: str, tool_ids: frozenset[str] | set[str] = frozenset()) -> str:
    """A plan step as a natural-language subtask: drop the ``Step k`` prefix and every
    ``Call TOOL to`` part (the label would leak the gold tool), then capitalise.

    A ``Call X to`` counts as naming a tool when X is in ``tool_ids`` or looks like an
    identifier (has ``_``), so "Call the service personnel ..." stays.
    """
    text = _STEP_PREFIX.sub("", step, count=1)

    def strip(m: re.Match) -> str:
        name = m.group(1)
        return "" if (name in tool_ids or "_" in name) else m.group(0)

    text = _CALL_PART.sub(strip, text).strip()
    return text[:1].upper() + text[1:]


def _ultratool_corpus(tools_path: Path) -> ToolCorpus:
    data = read_json(tools_path)
    nodes = data.get("nodes") if isinstance(data, dict) else None
    if not isinstance(nodes, list):
        raise DatasetFormatError(f"{tools_path}: expected {{\"nodes\": [...]}}")
    tools = []
    for i, node in enumerate(nodes, start=1):
        where = f"{tools_path}: node {i}"
        tid = require_field(node, "id", where, str)
        domains = node.get("domain") or []
        if not isinstance(domains, list) or not all(isinstance(d, str) for d in domains):
            raise DatasetFormatError(f"{where}: 'domain' should be a list of strings, got {domains!r}"[:300])
        tools.append(
            make_tool(
                where,
                id=tid,
                name=tid,
                description=require_field(node, "desc", where, str).strip(),
                # Tools list 1-14 domains; the first is the category (the env filters on one).
                category=domains[0] if domains else None,
                parameters={"domains": list(domains)} if len(domains) > 1 else {},
            )
        )
    return make_corpus(tools, "ultratool", str(tools_path))


def load_ultratool(
    data_path: str | Path, tools_path: str | Path | None = None, *, missing_gold: str = "error"
) -> Dataset:
    """UltraTool plans in TaskBench format (GNN4TaskPlan): tools from ``tool_desc.json``
    (category = first domain), tasks from ``data.jsonl`` (or the folder holding both).
    Gold = ``task_nodes[].task``; ``subtasks`` = ``task_steps`` through :func:`ultratool_subtask`;
    ``group`` = the plan ``type`` (chain, dag, ...)."""
    data_path = require_file(data_path)
    if data_path.is_dir():
        data_path = data_path / "data.jsonl"
    tools_path = Path(tools_path) if tools_path is not None else data_path.parent / "tool_desc.json"
    corpus = _ultratool_corpus(tools_path)
    ids = frozenset(corpus.ids)
    collected = TaskCollector(opaque_ids="ultratool")
    for lineno, rec in iter_jsonl_numbered(data_path):
        where = f"{data_path}:{lineno}"
        tid = str(require_field(rec, "id", where, (str, int)))
        gold = [str(require_field(n, "task", where, str)) for n in require_field(rec, "task_nodes", where, list)]
        if not gold:
            raise DatasetFormatError(f"{where}: empty 'task_nodes'")
        steps = [ultratool_subtask(str(s), ids) for s in require_field(rec, "task_steps", where, list)]
        group = rec.get("type")
        if group is not None and not isinstance(group, str):
            raise DatasetFormatError(f"{where}: field 'type' should be a string, got {type(group).__name__}")
        collected.add(where, id=tid, query=require_field(rec, "user_request", where, str).strip(), gold=frozenset(gold),
                      subtasks=tuple(s for s in steps if s), split="train", group=group)
    dropped: dict[str, int] = {}
    return Dataset("ultratool", corpus, collected.checked(corpus, missing_gold, dropped), "train", dropped)
