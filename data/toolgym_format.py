"""toolgym's own dataset format: a corpus file of ``Tool.to_dict()`` lines and a tasks file of
``Task.to_dict()`` lines (JSONL, plain or ``.gz``). The bundled benchmarks are stored this way."""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from toolgym.data.dataset import Dataset, TaskCollector, make_corpus, make_tool, require_field
from toolgym.data.readers import iter_jsonl_numbered
from toolgym.data.records import Task
from toolgym.retrieval.corpus import ToolCorpus

__all__ = ["load_corpus", "load_corpus_and_tasks", "save_corpus_and_tasks", "encode_jsonl"]


def load_corpus(corpus_path: str | Path, *, name: str | None = None, text_template: str | None = None) -> ToolCorpus:
    """Read a corpus file of ``Tool.to_dict()`` lines; a bad line names the file and line."""
    corpus_path = Path(corpus_path)
    tools = []
    for lineno, rec in iter_jsonl_numbered(corpus_path):
        where = f"{corpus_path}:{lineno}"
        tid = require_field(rec, "id", where, (str, int))
        tools.append(
            make_tool(
                where,
                id=str(tid),
                name=str(rec.get("name", tid)),
                description=str(rec.get("description") or ""),
                category=rec.get("category"),
                parameters=rec.get("parameters") or {},
            )
        )
    return make_corpus(tools, name or corpus_path.name.split(".")[0], str(corpus_path), text_template)


def load_corpus_and_tasks(
    corpus_path: str | Path,
    tasks_path: str | Path,
    *,
    name: str | None = None,
    text_template: str | None = None,
    missing_gold: str = "error",
) -> Dataset:
    """Read a corpus file (:func:`load_corpus`) and a tasks file of ``Task.to_dict()`` lines.

    Gold ids must be in the corpus (see ``missing_gold``); task ids must be unique (a repeat
    names both lines); ``Dataset.name`` is ``name`` or the tasks file's stem, ``split`` ``None``.
    """
    corpus_path, tasks_path = Path(corpus_path), Path(tasks_path)
    corpus = load_corpus(corpus_path, name=name, text_template=text_template)
    collected = TaskCollector()
    for lineno, rec in iter_jsonl_numbered(tasks_path):
        where = f"{tasks_path}:{lineno}"
        for key in ("id", "query", "gold"):
            require_field(rec, key, where)
        require_field(rec, "gold", where, list)
        collected.add(where, lambda: Task.from_dict(rec))
    dropped: dict[str, int] = {}
    tasks = collected.checked(corpus, missing_gold, dropped)
    return Dataset(name=name or tasks_path.name.split(".")[0], corpus=corpus, tasks=tasks, dropped=dropped)


def encode_jsonl(records: list[dict[str, Any]], gz: bool) -> bytes:
    """JSONL bytes (sorted keys); gzip with mtime 0 and no name, so equal records give equal bytes."""
    data = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in records).encode("utf-8")
    return gzip.compress(data, compresslevel=9, mtime=0) if gz else data


def save_corpus_and_tasks(corpus: ToolCorpus, tasks: list[Task], corpus_path: str | Path, tasks_path: str | Path) -> None:
    """Write the two files :func:`load_corpus_and_tasks` reads (gzipped when a path ends in ``.gz``)."""
    for path, records in ((corpus_path, [t.to_dict() for t in corpus]), (tasks_path, [t.to_dict() for t in tasks])):
        path = Path(path)
        path.write_bytes(encode_jsonl(records, gz=path.suffix == ".gz"))
