"""StableToolBench solvable queries (``solvable_queries/test_instruction/G*_*.json``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from toolgym.data.dataset import Dataset, TaskCollector, make_corpus, make_tool, object_schema, require_field
from toolgym.data.readers import DatasetFormatError, read_json, require_file
from toolgym.retrieval.corpus import Tool

__all__ = ["STB_GROUP_ORDER", "load_stabletoolbench"]

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
        params = api.get(key) or []
        if not isinstance(params, list):
            raise DatasetFormatError(f"{where}: field {key!r} should be a list, got {type(params).__name__}")
        for p in params:
            pname = str(require_field(p, "name", where))
            spec = {"type": str(p.get("type") or "string").lower(), "description": str(p.get("description") or "")}
            if p.get("default") not in (None, ""):
                spec["default"] = p["default"]
            props[pname] = spec
            if key == "required_parameters":
                required.append(pname)
    return object_schema(props, required)


def load_stabletoolbench(path: str | Path, *, missing_gold: str = "error") -> Dataset:
    """StableToolBench solvable queries: a folder of ``G*_*.json`` files (or one such file).

    The corpus pools every query's ``api_list``; an API is keyed ``tool_name::api_name`` (108
    API names recur under different tools). When the same key appears with different metadata
    (8 keys in the test files) the first occurrence wins, files read in the order G1_instruction,
    G1_category, G1_tool, G2_instruction, G2_category, G3_instruction. ``Tool.name`` is
    ``"tool | api"`` so the indexed text is ``"category | tool | api: description"``; the
    category is ``category_name`` (a string, or absent).
    Tasks: one per query, ``id`` = query_id, ``group`` = file stem, gold = ``relevant APIs``.
    """
    path = require_file(path)
    tools: dict[str, Tool] = {}
    collected = TaskCollector(opaque_ids="stabletoolbench")
    for file in _stb_files(path):
        data = read_json(file)
        if not isinstance(data, list):
            raise DatasetFormatError(f"{file}: expected a JSON list of queries, got {type(data).__name__}")
        for i, q in enumerate(data, start=1):
            where = f"{file}: query record {i}"
            qid = str(require_field(q, "query_id", where, (int, str)))
            where = f"{file}: query record {i} (query_id {qid})"
            for api in require_field(q, "api_list", where, list):
                tool_name = str(require_field(api, "tool_name", where))
                api_name = str(require_field(api, "api_name", where))
                tid = f"{tool_name}::{api_name}"
                if tid not in tools:
                    category = api.get("category_name") or None
                    if category is not None and not isinstance(category, str):
                        raise DatasetFormatError(
                            f"{where}: 'category_name' of {tid!r} should be a string, got {type(category).__name__}"
                        )
                    tools[tid] = make_tool(
                        where,
                        id=tid,
                        name=f"{tool_name} | {api_name}",
                        description=str(api.get("api_description") or "").strip(),
                        category=category,
                        parameters=_stb_params(api, where),
                    )
            gold = []
            for pair in require_field(q, "relevant APIs", where, list):
                if not (isinstance(pair, list) and len(pair) == 2):
                    raise DatasetFormatError(f"{where}: 'relevant APIs' entries must be [tool_name, api_name], got {pair!r}")
                gold.append(f"{pair[0]}::{pair[1]}")
            if not gold:
                raise DatasetFormatError(f"{where}: empty 'relevant APIs'")
            collected.add(where, id=qid, query=require_field(q, "query", where, str), gold=frozenset(gold),
                          split="test", group=file.stem)
    corpus = make_corpus(tools.values(), "stabletoolbench", str(path))
    dropped: dict[str, int] = {}
    return Dataset("stabletoolbench", corpus, collected.checked(corpus, missing_gold, dropped), "test", dropped)
