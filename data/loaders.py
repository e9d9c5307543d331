"""The dataset registry (:func:`load_dataset`) and the one import point for every loader.

Each benchmark has its own module (``stabletoolbench``, ``seal_tools``, ``metatool``,
``api_bank``, ``ultratool``; toolgym's own JSONL format in ``toolgym_format``). Every loader
takes a path (a folder or one file of the benchmark's own format, so the same loader reads
other splits) and returns a :class:`~toolgym.data.dataset.Dataset`. The registry serves the
bundled copies (``data/bundled/``) so a fresh install runs without ``../shared``;
``docs/datasets.md`` records how each benchmark was turned into tasks.

Bad input raises one :class:`DatasetFormatError` naming the file and the line (JSON arrays:
the file, the parse line or the record number); a gold id missing from the corpus is an error
unless ``missing_gold="drop"``, which drops it and counts it in ``Dataset.dropped``.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from toolgym.data.api_bank import load_api_bank
from toolgym.data.dataset import Dataset
from toolgym.data.metatool import load_metatool, load_metatool_multi
from toolgym.data.readers import DatasetFormatError
from toolgym.data.seal_tools import load_seal_tools, seal_tools_split
from toolgym.data.stabletoolbench import load_stabletoolbench
from toolgym.data.toolgym_format import encode_jsonl, load_corpus, load_corpus_and_tasks, save_corpus_and_tasks
from toolgym.data.ultratool import load_ultratool, ultratool_subtask

__all__ = [
    "DATASETS",
    "Dataset",
    "DatasetFormatError",
    "BUNDLED_DIR",
    "shared_data_dir",
    "dataset_names",
    "load_dataset",
    "load_corpus",
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


def shared_data_dir() -> Path:
    """``$TOOLGYM_SHARED_DATA`` if set, else ``<repo>/../shared/data``."""
    env = os.environ.get("TOOLGYM_SHARED_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent.parent / "shared" / "data"


@dataclass(frozen=True)
class _Spec:
    """How to load one registered dataset from the raw benchmark files under a data root."""

    source: Callable[[Path], Dataset]
    bundled: bool
    corpus_file: str  # bundled corpus file stem (metatool and metatool_multi share one)
    splits: tuple[str, ...]
    description: str


DATASETS: dict[str, _Spec] = {
    "stabletoolbench": _Spec(
        lambda r: load_stabletoolbench(r / "stabletoolbench" / "solvable_queries" / "test_instruction"),
        True, "stabletoolbench", ("test",), "StableToolBench solvable test queries, pooled api_list corpus"),
    "seal_tools": _Spec(
        lambda r: load_seal_tools(r / "seal_tools" / "Seal-Tools_Dataset" / "dev.jsonl"),
        True, "seal_tools", ("dev", "train", "heldout"), "Seal-Tools dev split over tool.jsonl"),
    "metatool": _Spec(
        lambda r: load_metatool(r / "metatool" / "dataset" / "data" / "all_clean_data.csv"),
        True, "metatool", ("test",), "MetaTool single-tool queries"),
    "metatool_multi": _Spec(
        lambda r: load_metatool_multi(r / "metatool" / "dataset" / "data" / "multi_tool_query_golden.json"),
        True, "metatool", ("test",), "MetaTool two-tool queries"),
    "api_bank": _Spec(
        lambda r: load_api_bank(r / "api_bank" / "api-bank"),
        True, "api_bank", ("test",), "API-Bank level-1/level-2 sample dialogues, one task per API-calling turn"),
    "ultratool": _Spec(
        lambda r: load_ultratool(r / "ultratool_plans"),
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
        loaded = load_corpus_and_tasks(corpus_path, tasks_path, name=spec.corpus_file)
        dropped = dict(_manifest().get(name, {}).get("dropped", {}))
    else:
        root = Path(data_root) if data_root is not None else shared_data_dir()
        if not root.is_dir():
            raise FileNotFoundError(
                f"dataset {name!r} reads the raw benchmark files, and {root} does not exist: put the shared data "
                f"folder beside the repo (../shared/data) or set TOOLGYM_SHARED_DATA"
            )
        loaded = spec.source(root)
        dropped = loaded.dropped
    tasks = loaded.tasks
    if name == "seal_tools":
        tasks = seal_tools_split(tasks, split or "dev")
    return Dataset(name=name, corpus=loaded.corpus, tasks=tasks, split=split or spec.splits[0], dropped=dropped)
