"""Seal-Tools (``Seal-Tools_Dataset/tool.jsonl`` + a split file such as ``dev.jsonl``)."""
from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

from toolgym.data.dataset import Dataset, TaskCollector, make_corpus, make_tool, object_schema, require_field
from toolgym.data.readers import DatasetFormatError, iter_jsonl_numbered, require_file
from toolgym.data.records import Task
from toolgym.retrieval.corpus import Tool, ToolCorpus

__all__ = ["SEAL_TOOLS_HELDOUT_SIZE", "SEAL_TOOLS_SPLIT_SEED", "load_seal_tools", "seal_tools_group", "seal_tools_split"]

SEAL_TOOLS_HELDOUT_SIZE = 100
SEAL_TOOLS_SPLIT_SEED = 0


def _seal_tools_corpus(tools_path: Path) -> ToolCorpus:
    tools: list[Tool] = []
    seen: dict[str, int] = {}
    for lineno, rec in iter_jsonl_numbered(tools_path):
        where = f"{tools_path}:{lineno}"
        api = str(require_field(rec, "api_name", where, str))
        if api in seen:
            # The published tool.jsonl has none; a duplicate would make gold ambiguous.
            raise DatasetFormatError(f"{where}: duplicate api_name {api!r} (first at line {seen[api]})")
        seen[api] = lineno
        fieldname = str(require_field(rec, "field", where, str))
        params = rec.get("parameters") or {}
        if not isinstance(params, dict):
            raise DatasetFormatError(f"{where}: field 'parameters' should be an object, got {type(params).__name__}")
        props = {}
        for name, spec in params.items():
            spec = spec or {}
            if not isinstance(spec, dict):
                raise DatasetFormatError(f"{where}: parameter {name!r} should be an object, got {type(spec).__name__}")
            props[name] = {"type": str(spec.get("type", "str")), "description": str(spec.get("description", ""))}
        required = rec.get("required") or []
        if not isinstance(required, list):
            raise DatasetFormatError(f"{where}: field 'required' should be a list, got {type(required).__name__}")
        tools.append(
            make_tool(
                where,
                id=api,
                name=api,
                description=str(rec.get("api_description") or "").strip(),
                # Top level of "Domain/Subfield": 146 categories (field.jsonl), the full path has 2,276.
                category=fieldname.split("/")[0].strip() or None,
                parameters=object_schema(props, [str(r) for r in required]),
            )
        )
    if not tools:
        raise DatasetFormatError(f"{tools_path}: no tools")
    return make_corpus(tools, "seal_tools", str(tools_path))


def seal_tools_group(task_id: str) -> str | None:
    """The easy / difficult group in a Seal-Tools id ``<split>-<group>-<n>``.

    The split part may hold ``_`` or ``-`` (the official test files: ``test_in_domain``), so
    the id is read from the right.
    """
    parts = task_id.rsplit("-", 2)
    if len(parts) == 3 and parts[0] and parts[1].isalpha() and parts[2].isdigit():
        return parts[1]
    return None


def load_seal_tools(
    queries_path: str | Path, tools_path: str | Path | None = None, *, split: str | None = None, missing_gold: str = "error"
) -> Dataset:
    """Seal-Tools: corpus from ``tool.jsonl`` (id = ``api_name``, unique; category = top-level
    ``field``), tasks from a split file in the ``dev.jsonl`` format (or a folder holding
    ``dev.jsonl`` and ``tool.jsonl``). Gold = the set of ``calling[].api``; ``group`` = easy /
    difficult from the id (:func:`seal_tools_group`); no NL subtasks (Seal-Tools has none).
    ``split`` defaults to the file name's stem."""
    queries_path = require_file(queries_path)
    if queries_path.is_dir():
        queries_path = queries_path / "dev.jsonl"
    tools_path = Path(tools_path) if tools_path is not None else queries_path.parent / "tool.jsonl"
    corpus = _seal_tools_corpus(tools_path)
    split_name = split or queries_path.name.split(".")[0]
    collected = TaskCollector(opaque_ids="seal_tools")
    for lineno, rec in iter_jsonl_numbered(queries_path):
        where = f"{queries_path}:{lineno}"
        tid = str(require_field(rec, "id", where, (str, int)))
        gold = [str(require_field(c, "api", where, str)) for c in require_field(rec, "calling", where, list)]
        if not gold:
            raise DatasetFormatError(f"{where}: empty 'calling'")
        collected.add(where, id=tid, query=require_field(rec, "query", where, str), gold=frozenset(gold),
                      split=split_name, group=seal_tools_group(tid))
    dropped: dict[str, int] = {}
    return Dataset("seal_tools", corpus, collected.checked(corpus, missing_gold, dropped), split_name, dropped)


def seal_tools_split(
    tasks: list[Task], split: str, *, heldout_size: int = SEAL_TOOLS_HELDOUT_SIZE, seed: int = SEAL_TOOLS_SPLIT_SEED
) -> list[Task]:
    """Deterministic train / held-out partition of Seal-Tools dev for the trainer.

    ``heldout`` = ``heldout_size`` multi-tool tasks (|gold| >= 2) drawn with
    ``random.Random(seed).sample`` from their Seal-Tools ids (``source_id``) sorted; ``train`` = every other task (the
    single-tool ones included); ``dev`` = all, unchanged. Input order is kept and each returned
    task carries ``split`` = the requested name.
    """
    if split == "dev":
        return list(tasks)
    if split not in ("train", "heldout"):
        raise ValueError(f"unknown Seal-Tools split {split!r}: choose dev, train or heldout")
    multi = sorted(t.source_id or t.id for t in tasks if len(t.gold) >= 2)
    if heldout_size > len(multi):
        raise ValueError(f"heldout_size {heldout_size} exceeds the {len(multi)} multi-tool tasks")
    heldout = set(random.Random(seed).sample(multi, heldout_size))
    keep = (lambda t: (t.source_id or t.id) in heldout) if split == "heldout" else (lambda t: (t.source_id or t.id) not in heldout)
    return [replace(t, split=split) for t in tasks if keep(t)]
