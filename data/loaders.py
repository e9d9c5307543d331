"""Loaders for the public tool-retrieval benchmarks and toolgym's own JSONL format.

Every loader takes a path (a folder or one file of the benchmark's own format, so the same
loader reads other splits) and returns ``(ToolCorpus, list[Task])``. The registry at the end
(:func:`load_dataset`) serves the bundled copies (``data/bundled/``) so a fresh install runs
without ``../shared``; ``docs/datasets.md`` records how each benchmark was turned into tasks.

Bad input raises one :class:`DatasetFormatError` naming the file and the line (JSON arrays:
the file, the parse line or the record number); a gold id missing from the corpus is an error
unless ``missing_gold="drop"``, which drops it and counts it in ``Dataset.dropped``.
"""
from __future__ import annotations

import ast
import csv
import gzip
import json
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from toolgym.data.records import Task
from toolgym.retrieval.corpus import Tool, ToolCorpus
from toolgym.retrieval.jsonl import DatasetFormatError, read_json, require_file
from toolgym.retrieval.jsonl import iter_jsonl_numbered as _iter_jsonl_numbered
from toolgym.retrieval.jsonl import open_text as _open_text

__all__ = [
    "DATASETS",
    "Dataset",
    "DatasetFormatError",
    "BUNDLED_DIR",
    "shared_data_dir",
    "dataset_names",
    "load_dataset",
    "load_corpus_and_tasks",
    "save_corpus_and_tasks",
    "encode_jsonl",
    "bundled_paths",
    "load_stabletoolbench",
    "load_seal_tools",
    "seal_tools_split",
    "load_metatool",
    "load_metatool_multi",
    "load_api_bank",
    "load_ultratool",
    "ultratool_subtask",
]

BUNDLED_DIR = Path(__file__).resolve().parent / "bundled"
Loaded = tuple[ToolCorpus, list[Task]]


# ---------------------------------------------------------------------------------------
# Shared readers: every error names the file and the line.
# ---------------------------------------------------------------------------------------
def _iter_csv_numbered(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield ``(line number, row)``; a row with the wrong number of fields or an unclosed quote
    (a truncated file) raises ``DatasetFormatError(file:line)``."""
    path = require_file(path)
    with _open_text(path) as f:
        reader = csv.reader(f, strict=True)
        try:
            header = next(reader)
        except StopIteration:
            raise DatasetFormatError(f"{path}:1: empty CSV file (no header)") from None
        except csv.Error as exc:
            raise DatasetFormatError(f"{path}:{reader.line_num}: malformed CSV ({exc})") from None
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                raise DatasetFormatError(f"{path}:{reader.line_num}: malformed CSV ({exc})") from None
            if not row:
                continue
            if len(row) != len(header):
                raise DatasetFormatError(
                    f"{path}:{reader.line_num}: expected {len(header)} fields ({', '.join(header)}), got {len(row)}"
                )
            yield reader.line_num, dict(zip(header, row))


def _field(record: dict[str, Any], key: str, where: str, kind: type | tuple[type, ...] = object) -> Any:
    """``record[key]`` with a format error naming ``where`` when missing or of the wrong type."""
    if not isinstance(record, dict) or key not in record:
        raise DatasetFormatError(f"{where}: missing field {key!r}")
    value = record[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise DatasetFormatError(f"{where}: field {key!r} should be {names}, got {type(value).__name__}")
    return value


def _check_gold(
    tasks: list[Task], corpus: ToolCorpus, where: dict[str, str], missing_gold: str, dropped: dict[str, int]
) -> list[Task]:
    """Raise (or, with ``missing_gold="drop"``, drop and count) gold ids absent from the corpus."""
    if missing_gold not in ("error", "drop"):
        raise ValueError(f"missing_gold must be 'error' or 'drop', got {missing_gold!r}")
    out = []
    for task in tasks:
        missing = sorted(g for g in task.gold if g not in corpus)
        if not missing:
            out.append(task)
            continue
        if missing_gold == "error":
            raise DatasetFormatError(
                f"{where.get(task.id, task.id)}: gold tool id(s) {missing} of task {task.id!r} are not in "
                f"corpus {corpus.name!r} (pass missing_gold='drop' to drop them)"
            )
        dropped["missing_gold_ids"] = dropped.get("missing_gold_ids", 0) + len(missing)
        kept = task.gold - set(missing)
        if not kept:
            dropped["tasks_without_gold"] = dropped.get("tasks_without_gold", 0) + 1
            continue
        out.append(_replace(task, gold=kept))
    return out


def _replace(task: Task, **changes: Any) -> Task:
    d = task.to_dict()
    d.update(changes)
    return Task.from_dict(d)


def _object_schema(properties: dict[str, dict[str, Any]], required: list[str]) -> dict[str, Any]:
    """Parameters as an OpenAI/JSON-schema object (what the env's tool schemas speak)."""
    return {"type": "object", "properties": properties, "required": list(required)}


# ---------------------------------------------------------------------------------------
# toolgym's own format
# ---------------------------------------------------------------------------------------
def load_corpus_and_tasks(
    corpus_path: str | Path,
    tasks_path: str | Path,
    *,
    name: str | None = None,
    text_template: str | None = None,
    missing_gold: str = "error",
) -> Loaded:
    """Read a corpus file of ``Tool.to_dict()`` lines and a tasks file of ``Task.to_dict()`` lines
    (plain or ``.gz``). Gold ids must be in the corpus (see ``missing_gold``)."""
    corpus_path, tasks_path = Path(corpus_path), Path(tasks_path)
    tools = []
    for lineno, rec in _iter_jsonl_numbered(corpus_path):
        where = f"{corpus_path}:{lineno}"
        _field(rec, "id", where, (str, int))
        try:
            tools.append(Tool.from_dict(rec))
        except (TypeError, ValueError) as exc:
            raise DatasetFormatError(f"{where}: bad tool record ({exc})") from None
    try:
        corpus = ToolCorpus(tools, name=name or corpus_path.name.split(".")[0], text_template=text_template)
    except ValueError as exc:
        raise DatasetFormatError(f"{corpus_path}: {exc}") from None
    tasks, where_of = [], {}
    for lineno, rec in _iter_jsonl_numbered(tasks_path):
        where = f"{tasks_path}:{lineno}"
        for key in ("id", "query", "gold"):
            _field(rec, key, where)
        if not isinstance(rec["gold"], list):
            raise DatasetFormatError(f"{where}: field 'gold' should be a list of tool ids")
        try:
            task = Task.from_dict(rec)
        except (KeyError, TypeError, ValueError) as exc:
            raise DatasetFormatError(f"{where}: bad task record ({exc})") from None
        tasks.append(task)
        where_of[task.id] = where
    return corpus, _check_gold(tasks, corpus, where_of, missing_gold, {})


def encode_jsonl(records: list[dict[str, Any]], gz: bool) -> bytes:
    """JSONL bytes (sorted keys); gzip with mtime 0 and no name, so equal records give equal bytes."""
    data = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in records).encode("utf-8")
    return gzip.compress(data, compresslevel=9, mtime=0) if gz else data


def save_corpus_and_tasks(corpus: ToolCorpus, tasks: list[Task], corpus_path: str | Path, tasks_path: str | Path) -> None:
    """Write the two files :func:`load_corpus_and_tasks` reads (gzipped when a path ends in ``.gz``)."""
    for path, records in ((corpus_path, [t.to_dict() for t in corpus]), (tasks_path, [t.to_dict() for t in tasks])):
        path = Path(path)
        path.write_bytes(encode_jsonl(records, gz=path.suffix == ".gz"))


# ---------------------------------------------------------------------------------------
# StableToolBench
# ---------------------------------------------------------------------------------------
STB_GROUP_ORDER = ("G1_instruction", "G1_category", "G1_tool", "G2_instruction", "G2_category", "G3_instruction")


def _stb_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    for folder in (path, path / "test_instruction", path / "solvable_queries" / "test_instruction"):
        files = [p for p in folder.glob("*.json")] if folder.is_dir() else []
        if files:
            rank = {g: i for i, g in enumerate(STB_GROUP_ORDER)}
            return sorted(files, key=lambda p: (rank.get(p.stem, len(rank)), p.stem))
    raise FileNotFoundError(f"no StableToolBench query files (*.json) under {path}")


def _stb_params(api: dict[str, Any], where: str) -> dict[str, Any]:
    props: dict[str, dict[str, Any]] = {}
    required: list[str] = []
    for key in ("required_parameters", "optional_parameters"):
        for p in api.get(key) or []:
            pname = str(_field(p, "name", where))
            spec = {"type": str(p.get("type") or "string").lower(), "description": str(p.get("description") or "")}
            if p.get("default") not in (None, ""):
                spec["default"] = p["default"]
            props[pname] = spec
            if key == "required_parameters":
                required.append(pname)
    return _object_schema(props, required)


def load_stabletoolbench(path: str | Path, *, missing_gold: str = "error") -> Loaded:
    """StableToolBench solvable queries: a folder of ``G*_*.json`` files (or one such file).

    The corpus pools every query's ``api_list``; an API is keyed ``tool_name::api_name`` (108
    API names recur under different tools). When the same key appears with different metadata
    (8 keys in the test files) the first occurrence wins, files read in the order G1_instruction,
    G1_category, G1_tool, G2_instruction, G2_category, G3_instruction. ``Tool.name`` is
    ``"tool | api"`` so the indexed text is ``"category | tool | api: description"``.
    Tasks: one per query, ``id`` = query_id, ``group`` = file stem, gold = ``relevant APIs``.
    """
    path = require_file(path)
    tools: dict[str, Tool] = {}
    tasks, where_of = [], {}
    for file in _stb_files(path):
        data = read_json(file)
        if not isinstance(data, list):
            raise DatasetFormatError(f"{file}: expected a JSON list of queries, got {type(data).__name__}")
        for i, q in enumerate(data, start=1):
            where = f"{file}: query record {i}"
            qid = str(_field(q, "query_id", where, (int, str)))
            where = f"{file}: query record {i} (query_id {qid})"
            for api in _field(q, "api_list", where, list):
                tool_name = str(_field(api, "tool_name", where))
                api_name = str(_field(api, "api_name", where))
                tid = f"{tool_name}::{api_name}"
                if tid not in tools:
                    tools[tid] = Tool(
                        id=tid,
                        name=f"{tool_name} | {api_name}",
                        description=str(api.get("api_description") or "").strip(),
                        category=api.get("category_name") or None,
                        parameters=_stb_params(api, where),
                    )
            gold = []
            for pair in _field(q, "relevant APIs", where, list):
                if not (isinstance(pair, list) and len(pair) == 2):
                    raise DatasetFormatError(f"{where}: 'relevant APIs' entries must be [tool_name, api_name], got {pair!r}")
                gold.append(f"{pair[0]}::{pair[1]}")
            if not gold:
                raise DatasetFormatError(f"{where}: empty 'relevant APIs'")
            task = Task(id=qid, query=str(_field(q, "query", where, str)), gold=frozenset(gold), split="test", group=file.stem)
            tasks.append(task)
            where_of[qid] = where
    corpus = ToolCorpus(tools.values(), name="stabletoolbench")
    return corpus, _check_gold(tasks, corpus, where_of, missing_gold, {})


# ---------------------------------------------------------------------------------------
# Seal-Tools
# ---------------------------------------------------------------------------------------
def _seal_tools_corpus(tools_path: Path) -> ToolCorpus:
    tools: list[Tool] = []
    seen: dict[str, int] = {}
    for lineno, rec in _iter_jsonl_numbered(tools_path):
        where = f"{tools_path}:{lineno}"
        api = str(_field(rec, "api_name", where, str))
        if api in seen:
            # The published tool.jsonl has none; a duplicate would make gold ambiguous.
            raise DatasetFormatError(f"{where}: duplicate api_name {api!r} (first at line {seen[api]})")
        seen[api] = lineno
        fieldname = str(_field(rec, "field", where, str))
        params = rec.get("parameters") or {}
        if not isinstance(params, dict):
            raise DatasetFormatError(f"{where}: field 'parameters' should be an object")
        props = {
            k: {"type": str((v or {}).get("type", "str")), "description": str((v or {}).get("description", ""))}
            for k, v in params.items()
        }
        tools.append(
            Tool(
                id=api,
                name=api,
                description=str(rec.get("api_description") or "").strip(),
                # Top level of "Domain/Subfield": 146 categories (field.jsonl), the full path has 2,276.
                category=fieldname.split("/")[0].strip() or None,
                parameters=_object_schema(props, [str(r) for r in rec.get("required") or []]),
            )
        )
    if not tools:
        raise DatasetFormatError(f"{tools_path}: no tools")
    return ToolCorpus(tools, name="seal_tools")


def load_seal_tools(
    queries_path: str | Path, tools_path: str | Path | None = None, *, split: str | None = None, missing_gold: str = "error"
) -> Loaded:
    """Seal-Tools: corpus from ``tool.jsonl`` (id = ``api_name``, unique; category = top-level
    ``field``), tasks from a split file in the ``dev.jsonl`` format (or a folder holding
    ``dev.jsonl`` and ``tool.jsonl``). Gold = the set of ``calling[].api``; ``group`` = easy /
    difficult from the id; no NL subtasks (Seal-Tools has none)."""
    queries_path = require_file(queries_path)
    if queries_path.is_dir():
        folder = queries_path
        queries_path = folder / "dev.jsonl"
    tools_path = Path(tools_path) if tools_path is not None else queries_path.parent / "tool.jsonl"
    corpus = _seal_tools_corpus(tools_path)
    split_name = split or queries_path.name.split(".")[0]
    tasks, where_of = [], {}
    for lineno, rec in _iter_jsonl_numbered(queries_path):
        where = f"{queries_path}:{lineno}"
        tid = str(_field(rec, "id", where, (str, int)))
        calls = _field(rec, "calling", where, list)
        gold = [str(_field(c, "api", where)) for c in calls]
        if not gold:
            raise DatasetFormatError(f"{where}: empty 'calling'")
        m = re.match(r"^[a-z]+-([a-z]+)-\d+$", tid)
        tasks.append(
            Task(id=tid, query=str(_field(rec, "query", where, str)), gold=frozenset(gold), split=split_name,
                 group=m.group(1) if m else None)
        )
        where_of[tid] = where
    return corpus, _check_gold(tasks, corpus, where_of, missing_gold, {})


SEAL_TOOLS_HELDOUT_SIZE = 100
SEAL_TOOLS_SPLIT_SEED = 0


def seal_tools_split(
    tasks: list[Task], split: str, *, heldout_size: int = SEAL_TOOLS_HELDOUT_SIZE, seed: int = SEAL_TOOLS_SPLIT_SEED
) -> list[Task]:
    """Deterministic train / held-out partition of Seal-Tools dev for the trainer.

    ``heldout`` = ``heldout_size`` multi-tool tasks (|gold| >= 2) drawn with
    ``random.Random(seed).sample`` from their ids sorted; ``train`` = every other task (the
    single-tool ones included); ``dev`` = all, unchanged. Input order is kept and each returned
    task carries ``split`` = the requested name.
    """
    if split == "dev":
        return list(tasks)
    if split not in ("train", "heldout"):
        raise ValueError(f"unknown Seal-Tools split {split!r}: choose dev, train or heldout")
    multi = sorted(t.id for t in tasks if len(t.gold) >= 2)
    if heldout_size > len(multi):
        raise ValueError(f"heldout_size {heldout_size} exceeds the {len(multi)} multi-tool tasks")
    heldout = set(random.Random(seed).sample(multi, heldout_size))
    keep = (lambda t: t.id in heldout) if split == "heldout" else (lambda t: t.id not in heldout)
    return [_replace(t, split=split) for t in tasks if keep(t)]


# ---------------------------------------------------------------------------------------
# MetaTool
# ---------------------------------------------------------------------------------------
def _metatool_corpus(tools_path: Path) -> ToolCorpus:
    data = read_json(tools_path)
    if not isinstance(data, dict) or not data:
        raise DatasetFormatError(f"{tools_path}: expected a JSON object {{tool name: description}}")
    tools = []
    for name, desc in data.items():
        if not isinstance(desc, str):
            raise DatasetFormatError(f"{tools_path}: description of tool {name!r} should be a string")
        tools.append(Tool(id=name, name=name, description=desc.strip()))
    return ToolCorpus(tools, name="metatool")


def _metatool_paths(path: Path, default_file: str) -> tuple[Path, Path]:
    """(queries file, plugin_des.json) from the ``dataset`` folder or a queries file."""
    if path.is_dir():
        root = path / "dataset" if (path / "dataset").is_dir() else path
        return root / "data" / default_file, root / "plugin_des.json"
    return path, path.parent.parent / "plugin_des.json"


def load_metatool(
    queries_path: str | Path, tools_path: str | Path | None = None, *, missing_gold: str = "error"
) -> tuple[ToolCorpus, list[Task], dict[str, int]]:
    """MetaTool single-tool queries (``all_clean_data.csv``: Query,Tool) over the 199 tools of
    ``plugin_des.json``. One task per distinct query (``id`` = ``metatool-<CSV line>`` of its
    first row); exact duplicate rows collapse; a query labelled with more than one tool is
    dropped (its label is ambiguous, exact match could not be right). Returns the drop counts too.
    """
    queries_path, default_tools = _metatool_paths(require_file(queries_path), "all_clean_data.csv")
    corpus = _metatool_corpus(Path(tools_path) if tools_path is not None else default_tools)
    first_line: dict[str, int] = {}
    labels: dict[str, set[str]] = {}
    rows = 0
    for lineno, row in _iter_csv_numbered(queries_path):
        where = f"{queries_path}:{lineno}"
        query, tool = (row.get("Query") or "").strip(), (row.get("Tool") or "").strip()
        if not query or not tool:
            raise DatasetFormatError(f"{where}: empty Query or Tool (columns must be Query,Tool)")
        rows += 1
        first_line.setdefault(query, lineno)
        labels.setdefault(query, set()).add(tool)
    dropped = {"duplicate_rows": rows - sum(len(v) for v in labels.values())}
    tasks, where_of = [], {}
    ambiguous = 0
    for query, tools in labels.items():
        if len(tools) > 1:
            ambiguous += 1
            continue
        tid = f"metatool-{first_line[query]}"
        tasks.append(Task(id=tid, query=query, gold=frozenset(tools), split="test"))
        where_of[tid] = f"{queries_path}:{first_line[query]}"
    dropped["ambiguous_queries"] = ambiguous
    return corpus, _check_gold(tasks, corpus, where_of, missing_gold, dropped), dropped


def load_metatool_multi(
    queries_path: str | Path, tools_path: str | Path | None = None, *, missing_gold: str = "error"
) -> Loaded:
    """MetaTool two-tool queries (``multi_tool_query_golden.json``: [{query, tool: [a, b]}]);
    ``id`` = ``metatool-multi-<record number>``."""
    queries_path, default_tools = _metatool_paths(require_file(queries_path), "multi_tool_query_golden.json")
    corpus = _metatool_corpus(Path(tools_path) if tools_path is not None else default_tools)
    data = read_json(queries_path)
    if not isinstance(data, list):
        raise DatasetFormatError(f"{queries_path}: expected a JSON list of {{query, tool}} records")
    tasks, where_of = [], {}
    for i, rec in enumerate(data, start=1):
        where = f"{queries_path}: record {i}"
        gold = _field(rec, "tool", where, list)
        if not gold:
            raise DatasetFormatError(f"{where}: empty 'tool' list")
        tid = f"metatool-multi-{i}"
        tasks.append(Task(id=tid, query=str(_field(rec, "query", where, str)).strip(), gold=frozenset(map(str, gold)), split="test"))
        where_of[tid] = where
    return corpus, _check_gold(tasks, corpus, where_of, missing_gold, {})


# ---------------------------------------------------------------------------------------
# API-Bank
# ---------------------------------------------------------------------------------------
# all_apis.csv gives each API's scenario (应用场景) in Chinese; the category is its English gloss.
API_BANK_CATEGORIES = {
    "信息查询和处理": "Information query and processing",
    "日程安排和管理": "Schedule management",
    "旅游出行": "Travel",
    "财务管理": "Finance",
    "健康管理": "Health",
    "智能家居控制": "Smart home",
    "娱乐消遣": "Entertainment",
    "账户管理": "Account management",
    "学习科研相关": "Study and research",
    "工作相关": "Work",
    "钉钉": "DingTalk",
}
API_BANK_SEARCH_TOOL = "ToolSearcher"  # the level-3 meta-API that searches tools: not a gold tool


def _parse_api_info(text: str, where: str) -> dict[str, Any]:
    """``api_info`` is Python source: ``description = "..."``, ``input_parameters = {...}``, ..."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    out: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError as exc:
                raise DatasetFormatError(f"{where}: api_info is not a literal ({exc})") from None
    return out


def _api_bank_corpus(apis_path: Path) -> ToolCorpus:
    tools = []
    for lineno, row in _iter_csv_numbered(apis_path):
        where = f"{apis_path}:{lineno}"
        name = (row.get("类名") or "").strip()
        if not name:
            raise DatasetFormatError(f"{where}: empty class name (column 类名)")
        info = _parse_api_info(row.get("api_info") or "", where)
        description = str(info.get("description") or "").strip()
        if description:
            params = info.get("input_parameters")
            # GetToday writes its empty parameter list as ``{None}`` (a set).
            params = params if isinstance(params, dict) else {}
            props = {
                str(k): {"type": str(v.get("type", "str")), "description": str(v.get("description", ""))}
                for k, v in params.items()
                if isinstance(v, dict)
            }
        else:
            # One API (ImageCaption) has api_info "."; its signature is the only English text left.
            description = (row.get("expressions") or name).strip()
            props = {}
            for part in (row.get("input_parameters") or "").strip("() ").split(","):
                if ":" in part:
                    pname, ptype = (s.strip() for s in part.split(":", 1))
                    props[pname] = {"type": ptype, "description": ""}
        scenario = (row.get("应用场景") or "").strip()
        tools.append(
            Tool(
                id=name,
                name=name,
                description=description,
                category=API_BANK_CATEGORIES.get(scenario, scenario or None),
                parameters=_object_schema(props, list(props)),
            )
        )
    if not tools:
        raise DatasetFormatError(f"{apis_path}: no APIs")
    return ToolCorpus(tools, name="api_bank")


def _api_bank_dialogue_tasks(path: Path, root: Path, dropped: dict[str, int]) -> tuple[list[Task], dict[str, str]]:
    """Tasks of one dialogue: one per user turn whose AI reply calls at least one API."""
    lines = list(_iter_jsonl_numbered(path))
    if not lines:
        dropped["empty_dialogue_files"] = dropped.get("empty_dialogue_files", 0) + 1
        return [], {}
    rel = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
    stem = rel[: -len(".jsonl")] if rel.endswith(".jsonl") else rel
    folder = path.parent.name
    tasks, where_of = [], {}
    history: list[dict[str, str]] = []  # user/assistant turns before the current user turn
    current: tuple[int, str] | None = None  # (line, text) of the latest user turn
    user_no = 0
    calls: list[str] = []
    after: list[dict[str, str]] = []  # assistant text after the current user turn

    def close() -> None:
        if current is not None and calls:
            tid = f"{stem}#{user_no}"
            tasks.append(
                Task(id=tid, query=current[1], gold=frozenset(calls), messages=tuple(history), split="test", group=folder)
            )
            where_of[tid] = f"{path}:{current[0]}"

    for lineno, rec in lines:
        where = f"{path}:{lineno}"
        role = _field(rec, "role", where, str)
        if role == "User":
            close()
            if current is not None:
                history.append({"role": "user", "content": current[1]})
            history.extend(after)
            current, after, calls = (lineno, str(_field(rec, "text", where, str)).strip()), [], []
            user_no += 1
        elif role == "AI":
            after.append({"role": "assistant", "content": str(_field(rec, "text", where, str)).strip()})
        elif role == "API":
            api = str(_field(rec, "api_name", where, str))
            if current is None:
                raise DatasetFormatError(f"{where}: API call before any user turn")
            if api == API_BANK_SEARCH_TOOL:
                dropped["toolsearcher_calls"] = dropped.get("toolsearcher_calls", 0) + 1
            elif api not in calls:
                calls.append(api)
        else:
            raise DatasetFormatError(f"{where}: unknown role {role!r} (expected User, AI or API)")
    close()
    return tasks, where_of


def load_api_bank(
    dialogues_path: str | Path, apis_path: str | Path | None = None, *, missing_gold: str = "error"
) -> tuple[ToolCorpus, list[Task], dict[str, int]]:
    """API-Bank level-1/level-2 sample dialogues over the 101 APIs of ``data/all_apis.csv``.

    ``dialogues_path``: the ``api-bank`` folder, a samples folder, or one dialogue file
    (``apis_path`` then defaults to ``<api-bank>/data/all_apis.csv``). Each user turn whose
    AI reply (everything up to the next user turn) calls APIs becomes a task: ``query`` = that
    user utterance, ``messages`` = the user/assistant text turns before it (API calls and
    results left out; the reply turn itself never included), gold = the APIs called in that
    reply, ``ToolSearcher`` excepted. Returns the drop counts too.
    """
    path = require_file(dialogues_path)
    if path.is_dir():
        api_root = path if (path / "data" / "all_apis.csv").exists() else None
        root = path / "lv1-lv2-samples" if (path / "lv1-lv2-samples").is_dir() else path
        files = sorted(root.rglob("*.jsonl"))
        if not files:
            raise FileNotFoundError(f"no API-Bank dialogue files (*.jsonl) under {root}")
    else:
        api_root, files, root = None, [path], path.parent.parent
    if apis_path is None:
        candidates = [api_root] if api_root else []
        candidates += [p for p in (root.parent, root.parent.parent, root) if p is not None]
        found = [c / "data" / "all_apis.csv" for c in candidates if (c / "data" / "all_apis.csv").exists()]
        if not found:
            raise FileNotFoundError(f"all_apis.csv not found near {path}; pass apis_path")
        apis_path = found[0]
    corpus = _api_bank_corpus(Path(apis_path))
    dropped: dict[str, int] = {}
    tasks, where_of = [], {}
    for file in files:
        t, w = _api_bank_dialogue_tasks(file, root, dropped)
        tasks.extend(t)
        where_of.update(w)
    return corpus, _check_gold(tasks, corpus, where_of, missing_gold, dropped), dropped


# ---------------------------------------------------------------------------------------
# UltraTool plans (TaskBench format)
# ---------------------------------------------------------------------------------------
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
        tid = str(_field(node, "id", where, str))
        domains = node.get("domain") or []
        tools.append(
            Tool(
                id=tid,
                name=tid,
                description=str(_field(node, "desc", where, str)).strip(),
                # Tools list 1-14 domains; the first is the category (the env filters on one).
                category=str(domains[0]) if domains else None,
                parameters={"domains": list(domains)} if len(domains) > 1 else {},
            )
        )
    try:
        return ToolCorpus(tools, name="ultratool")
    except ValueError as exc:
        raise DatasetFormatError(f"{tools_path}: {exc}") from None


def load_ultratool(
    data_path: str | Path, tools_path: str | Path | None = None, *, missing_gold: str = "error"
) -> Loaded:
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
    tasks, where_of = [], {}
    for lineno, rec in _iter_jsonl_numbered(data_path):
        where = f"{data_path}:{lineno}"
        tid = str(_field(rec, "id", where, (str, int)))
        gold = [str(_field(n, "task", where)) for n in _field(rec, "task_nodes", where, list)]
        if not gold:
            raise DatasetFormatError(f"{where}: empty 'task_nodes'")
        steps = [ultratool_subtask(str(s), ids) for s in _field(rec, "task_steps", where, list)]
        tasks.append(
            Task(id=tid, query=str(_field(rec, "user_request", where, str)).strip(), gold=frozenset(gold),
                 subtasks=tuple(s for s in steps if s), split="train", group=rec.get("type"))
        )
        where_of[tid] = where
    return corpus, _check_gold(tasks, corpus, where_of, missing_gold, {})


# ---------------------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------------------
@dataclass
class Dataset:
    """A named benchmark: its corpus, its tasks, and what was dropped while loading (counts)."""

    name: str
    corpus: ToolCorpus
    tasks: list[Task]
    split: str | None = None
    dropped: dict[str, int] = field(default_factory=dict)

    def groups(self) -> dict[str, list[Task]]:
        """Tasks by ``Task.group`` (in first-seen order; ungrouped tasks under ``""``)."""
        out: dict[str, list[Task]] = {}
        for task in self.tasks:
            out.setdefault(task.group or "", []).append(task)
        return out

    def task(self, task_id: str) -> Task:
        for t in self.tasks:
            if t.id == task_id:
                return t
        raise KeyError(f"no task {task_id!r} in dataset {self.name!r}")

    def __len__(self) -> int:
        return len(self.tasks)

    def __repr__(self) -> str:
        return f"Dataset({self.name!r}, {len(self.corpus)} tools, {len(self.tasks)} tasks, split={self.split!r})"


def shared_data_dir() -> Path:
    """``$TOOLGYM_SHARED_DATA`` if set, else ``<repo>/../shared/data``."""
    env = os.environ.get("TOOLGYM_SHARED_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent.parent / "shared" / "data"


@dataclass(frozen=True)
class _Spec:
    """How to load one registered dataset from the raw benchmark files under a data root."""

    source: Callable[[Path], tuple[ToolCorpus, list[Task], dict[str, int]]]
    bundled: bool
    corpus_file: str  # bundled corpus file stem (metatool and metatool_multi share one)
    splits: tuple[str, ...]
    description: str


def _with_drops(fn: Callable[[Path], Any]) -> Callable[[Path], tuple[ToolCorpus, list[Task], dict[str, int]]]:
    def load(root: Path) -> tuple[ToolCorpus, list[Task], dict[str, int]]:
        out = fn(root)
        return out if len(out) == 3 else (out[0], out[1], {})

    return load


DATASETS: dict[str, _Spec] = {
    "stabletoolbench": _Spec(
        _with_drops(lambda r: load_stabletoolbench(r / "stabletoolbench" / "solvable_queries" / "test_instruction")),
        True, "stabletoolbench", ("test",), "StableToolBench solvable test queries, pooled api_list corpus"),
    "seal_tools": _Spec(
        _with_drops(lambda r: load_seal_tools(r / "seal_tools" / "Seal-Tools_Dataset" / "dev.jsonl")),
        True, "seal_tools", ("dev", "train", "heldout"), "Seal-Tools dev split over tool.jsonl"),
    "metatool": _Spec(
        lambda r: load_metatool(r / "metatool" / "dataset" / "data" / "all_clean_data.csv"),
        True, "metatool", ("test",), "MetaTool single-tool queries"),
    "metatool_multi": _Spec(
        _with_drops(lambda r: load_metatool_multi(r / "metatool" / "dataset" / "data" / "multi_tool_query_golden.json")),
        True, "metatool", ("test",), "MetaTool two-tool queries"),
    "api_bank": _Spec(
        lambda r: load_api_bank(r / "api_bank" / "api-bank"),
        True, "api_bank", ("test",), "API-Bank level-1/level-2 sample dialogues, one task per API-calling turn"),
    "ultratool": _Spec(
        _with_drops(lambda r: load_ultratool(r / "ultratool_plans")),
        False, "ultratool", ("train",), "UltraTool plans (TaskBench format); not bundled, read from shared data"),
}


def dataset_names() -> list[str]:
    return list(DATASETS)


def _spec(name: str) -> _Spec:
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known datasets: {', '.join(DATASETS)}")
    return DATASETS[name]


def bundled_paths(name: str) -> tuple[Path, Path]:
    """(corpus file, tasks file) of a bundled dataset inside the package."""
    spec = _spec(name)
    return BUNDLED_DIR / f"{spec.corpus_file}.corpus.jsonl.gz", BUNDLED_DIR / f"{name}.tasks.jsonl.gz"


def _manifest() -> dict[str, Any]:
    path = BUNDLED_DIR / "manifest.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def load_dataset(name: str, split: str | None = None, *, data_root: str | Path | None = None) -> Dataset:
    """Load a registered dataset.

    Bundled datasets read the package copy unless ``data_root`` (a folder laid out like
    ``shared/data``) is given, in which case they are parsed afresh from the raw files.
    ``ultratool`` always reads raw files: ``data_root`` or :func:`shared_data_dir`.
    ``split``: ``None`` = the dataset's first split; Seal-Tools also takes ``train`` / ``heldout``
    (:func:`seal_tools_split`).
    """
    spec = _spec(name)
    if split is not None and split not in spec.splits:
        raise ValueError(f"dataset {name!r} has splits {list(spec.splits)}, not {split!r}")
    if data_root is None and spec.bundled:
        corpus_path, tasks_path = bundled_paths(name)
        if not corpus_path.exists() or not tasks_path.exists():
            raise FileNotFoundError(f"bundled copy of {name!r} missing ({tasks_path}); run `python data/bundle.py`")
        corpus, tasks = load_corpus_and_tasks(corpus_path, tasks_path, name=spec.corpus_file)
        dropped = dict(_manifest().get(name, {}).get("dropped", {}))
    else:
        root = Path(data_root) if data_root is not None else shared_data_dir()
        if not root.is_dir():
            raise FileNotFoundError(
                f"dataset {name!r} reads the raw benchmark files, and {root} does not exist: put the shared data "
                f"folder beside the repo (../shared/data) or set TOOLGYM_SHARED_DATA"
            )
        corpus, tasks, dropped = spec.source(root)
    if name == "seal_tools":
        tasks = seal_tools_split(tasks, split or "dev")
    return Dataset(name=name, corpus=corpus, tasks=tasks, split=split or spec.splits[0], dropped=dropped)
