"""API-Bank level-1/level-2 sample dialogues (``api-bank/lv1-lv2-samples``) over ``data/all_apis.csv``."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from toolgym.data.dataset import Dataset, TaskCollector, make_corpus, make_tool, object_schema, require_field
from toolgym.data.readers import DatasetFormatError, iter_csv_numbered, iter_jsonl_numbered, require_file
from toolgym.retrieval.corpus import ToolCorpus

__all__ = ["API_BANK_CATEGORIES", "API_BANK_SEARCH_TOOL", "load_api_bank"]

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
# api_info cells are at most 1.6 kB and 3 brackets deep; ast.parse recurses per level, so a
# hostile cell is refused by size and bracket count before parsing.
MAX_API_INFO_CHARS = 64 * 1024
MAX_API_INFO_BRACKETS = 200


def _parse_api_info(text: str, where: str) -> dict[str, Any]:
    """``api_info`` is Python source: ``description = "..."``, ``input_parameters = {...}``, ..."""
    if len(text) > MAX_API_INFO_CHARS:
        raise DatasetFormatError(f"{where}: api_info longer than {MAX_API_INFO_CHARS} characters")
    if sum(text.count(c) for c in "([{") > MAX_API_INFO_BRACKETS:
        raise DatasetFormatError(f"{where}: api_info has more than {MAX_API_INFO_BRACKETS} brackets")
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return {}  # e.g. ImageCaption's api_info "."; the caller falls back to the CSV columns
    out: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as exc:
                # TypeError: an unhashable literal such as {[1]: 2} or {{1}}.
                raise DatasetFormatError(f"{where}: api_info is not a literal ({type(exc).__name__}: {exc})") from None
    return out


def _api_bank_corpus(apis_path: Path) -> ToolCorpus:
    tools = []
    for lineno, row in iter_csv_numbered(apis_path):
        where = f"{apis_path}:{lineno}"
        name = (row.get("类名") or "").strip()
        if not name:
            raise DatasetFormatError(f"{where}: empty class name (column 类名)")
        info = _parse_api_info(row.get("api_info") or "", where)
        description = info.get("description") or ""
        if not isinstance(description, str):
            raise DatasetFormatError(f"{where}: api_info description should be a string, got {type(description).__name__}")
        description = description.strip()
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
            make_tool(
                where,
                id=name,
                name=name,
                description=description,
                category=API_BANK_CATEGORIES.get(scenario, scenario or None),
                parameters=object_schema(props, list(props)),
            )
        )
    if not tools:
        raise DatasetFormatError(f"{apis_path}: no APIs")
    return make_corpus(tools, "api_bank", str(apis_path))


def _api_bank_dialogue_tasks(path: Path, root: Path, collected: TaskCollector, dropped: dict[str, int]) -> None:
    """Tasks of one dialogue: one per user turn whose AI reply calls at least one API."""
    lines = list(iter_jsonl_numbered(path))
    if not lines:
        dropped["empty_dialogue_files"] = dropped.get("empty_dialogue_files", 0) + 1
        return
    rel = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
    stem = rel[: -len(".jsonl")] if rel.endswith(".jsonl") else rel
    folder = path.parent.name
    history: list[dict[str, str]] = []  # user/assistant turns before the current user turn
    current: tuple[int, str] | None = None  # (line, text) of the latest user turn
    user_no = 0
    calls: list[str] = []
    after: list[dict[str, str]] = []  # assistant text after the current user turn

    def close() -> None:
        if current is not None and calls:
            collected.add(f"{path}:{current[0]}", id=f"{stem}#{user_no}", query=current[1], gold=frozenset(calls),
                          messages=tuple(history), split="test", group=folder)

    for lineno, rec in lines:
        where = f"{path}:{lineno}"
        role = require_field(rec, "role", where, str)
        if role == "User":
            close()
            if current is not None:
                history.append({"role": "user", "content": current[1]})
            history.extend(after)
            current, after, calls = (lineno, require_field(rec, "text", where, str).strip()), [], []
            user_no += 1
        elif role == "AI":
            after.append({"role": "assistant", "content": require_field(rec, "text", where, str).strip()})
        elif role == "API":
            api = require_field(rec, "api_name", where, str)
            if current is None:
                raise DatasetFormatError(f"{where}: API call before any user turn")
            if api == API_BANK_SEARCH_TOOL:
                dropped["toolsearcher_calls"] = dropped.get("toolsearcher_calls", 0) + 1
            elif api not in calls:
                calls.append(api)
        else:
            raise DatasetFormatError(f"{where}: unknown role {role!r} (expected User, AI or API)")
    close()


def load_api_bank(
    dialogues_path: str | Path, apis_path: str | Path | None = None, *, missing_gold: str = "error"
) -> Dataset:
    """API-Bank level-1/level-2 sample dialogues over the 101 APIs of ``data/all_apis.csv``.

    ``dialogues_path``: the ``api-bank`` folder, a samples folder, or one dialogue file
    (``apis_path`` then defaults to ``<api-bank>/data/all_apis.csv``). Each user turn whose
    AI reply (everything up to the next user turn) calls APIs becomes a task: ``query`` = that
    user utterance, ``messages`` = the user/assistant text turns before it (API calls and
    results left out; the reply turn itself never included), gold = the APIs called in that
    reply, ``ToolSearcher`` excepted. ``Dataset.dropped`` counts what was left out.
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
    collected = TaskCollector(opaque_ids="api_bank")
    for file in files:
        _api_bank_dialogue_tasks(file, root, collected, dropped)
    tasks = collected.checked(corpus, missing_gold, dropped)
    return Dataset("api_bank", corpus, tasks, "test", dropped)
