"""MetaTool (``dataset/plugin_des.json`` + ``data/all_clean_data.csv`` or
``data/multi_tool_query_golden.json``)."""
from __future__ import annotations

from pathlib import Path

from toolgym.data.dataset import Dataset, TaskCollector, make_corpus, make_tool, require_field
from toolgym.data.readers import DatasetFormatError, csv_header, iter_csv_numbered, read_json, require_file
from toolgym.retrieval.corpus import ToolCorpus

__all__ = ["METATOOL_COLUMNS", "load_metatool", "load_metatool_multi"]

METATOOL_COLUMNS = ("Query", "Tool")


def _metatool_corpus(tools_path: Path) -> ToolCorpus:
    data = read_json(tools_path)
    if not isinstance(data, dict) or not data:
        raise DatasetFormatError(f"{tools_path}: expected a JSON object {{tool name: description}}")
    tools = []
    for name, desc in data.items():
        if not isinstance(desc, str):
            raise DatasetFormatError(f"{tools_path}: description of tool {name!r} should be a string")
        tools.append(make_tool(f"{tools_path}: tool {name!r}", id=name, name=name, description=desc.strip()))
    return make_corpus(tools, "metatool", str(tools_path))


def _metatool_paths(path: Path, default_file: str) -> tuple[Path, Path]:
    """(queries file, plugin_des.json) from the ``dataset`` folder or a queries file."""
    if path.is_dir():
        root = path / "dataset" if (path / "dataset").is_dir() else path
        return root / "data" / default_file, root / "plugin_des.json"
    return path, path.parent.parent / "plugin_des.json"


def load_metatool(
    queries_path: str | Path, tools_path: str | Path | None = None, *, missing_gold: str = "error"
) -> Dataset:
    """MetaTool single-tool queries (``all_clean_data.csv``: Query,Tool) over the 199 tools of
    ``plugin_des.json``. One task per distinct query (``source_id`` = ``metatool-<CSV line>`` of its
    first row); exact duplicate rows collapse; a query labelled with more than one tool is
    dropped (its label is ambiguous, exact match could not be right); ``Dataset.dropped``
    counts both.

    The header must name the ``Query`` and ``Tool`` columns (any order); a row whose Tool is
    not a corpus tool while its Query is one means the columns are swapped - an error, since
    every query would otherwise look ambiguous and be dropped, leaving no tasks.
    """
    queries_path, default_tools = _metatool_paths(require_file(queries_path), "all_clean_data.csv")
    corpus = _metatool_corpus(Path(tools_path) if tools_path is not None else default_tools)
    header = csv_header(queries_path)
    if not set(METATOOL_COLUMNS) <= set(header):
        raise DatasetFormatError(f"{queries_path}:1: header should name the columns Query and Tool, got {header}")
    first_line: dict[str, int] = {}
    labels: dict[str, set[str]] = {}
    rows = 0
    for lineno, row in iter_csv_numbered(queries_path):
        where = f"{queries_path}:{lineno}"
        query, tool = row["Query"].strip(), row["Tool"].strip()
        if not query or not tool:
            raise DatasetFormatError(f"{where}: empty Query or Tool")
        if tool not in corpus and query in corpus:
            raise DatasetFormatError(
                f"{where}: the Query and Tool columns look swapped (Tool {tool[:60]!r} is not a tool, Query {query!r} is)"
            )
        rows += 1
        first_line.setdefault(query, lineno)
        labels.setdefault(query, set()).add(tool)
    dropped = {"duplicate_rows": rows - sum(len(v) for v in labels.values())}
    collected = TaskCollector(opaque_ids="metatool")
    ambiguous = 0
    for query, tools in labels.items():
        if len(tools) > 1:
            ambiguous += 1
            continue
        collected.add(f"{queries_path}:{first_line[query]}", id=f"metatool-{first_line[query]}", query=query,
                      gold=frozenset(tools), split="test")
    dropped["ambiguous_queries"] = ambiguous
    if not collected.tasks:
        raise DatasetFormatError(f"{queries_path}: no tasks ({rows} rows, {ambiguous} ambiguous queries dropped)")
    return Dataset("metatool", corpus, collected.checked(corpus, missing_gold, dropped), "test", dropped)


def load_metatool_multi(
    queries_path: str | Path, tools_path: str | Path | None = None, *, missing_gold: str = "error"
) -> Dataset:
    """MetaTool two-tool queries (``multi_tool_query_golden.json``: [{query, tool: [a, b]}]);
    ``source_id`` = ``metatool-multi-<record number>``; ``id`` = an opaque hash of it."""
    queries_path, default_tools = _metatool_paths(require_file(queries_path), "multi_tool_query_golden.json")
    corpus = _metatool_corpus(Path(tools_path) if tools_path is not None else default_tools)
    data = read_json(queries_path)
    if not isinstance(data, list):
        raise DatasetFormatError(f"{queries_path}: expected a JSON list of {{query, tool}} records")
    collected = TaskCollector(opaque_ids="metatool_multi")
    for i, rec in enumerate(data, start=1):
        where = f"{queries_path}: record {i}"
        gold = require_field(rec, "tool", where, list)
        if not gold:
            raise DatasetFormatError(f"{where}: empty 'tool' list")
        if not all(isinstance(g, str) for g in gold):
            raise DatasetFormatError(f"{where}: 'tool' should list tool names (strings), got {gold!r}"[:300])
        collected.add(where, id=f"metatool-multi-{i}", query=require_field(rec, "query", where, str).strip(),
                      gold=frozenset(gold), split="test")
    dropped: dict[str, int] = {}
    return Dataset("metatool_multi", corpus, collected.checked(corpus, missing_gold, dropped), "test", dropped)
