"""toolgym.data: benchmark loaders, task records and the dataset file readers.

``load_dataset(name, split)`` serves the registered benchmarks (``dataset_names()``); the
per-benchmark loaders read the original files from any path and return the same
:class:`Dataset`; ``load_corpus_and_tasks`` reads toolgym's own JSONL format. Bad files raise
:class:`DatasetFormatError` naming file and line. See docs/datasets.md.
"""
if __name__ != "toolgym.data":  # the checkout folder imported by its own name: every module would load twice
    raise ImportError(f"this folder is the package toolgym.data: import toolgym.data (after `pip install -e .` or `make install`), not {__name__!r}")
from toolgym.data.dataset import Dataset
from toolgym.data.loaders import (
    DATASETS,
    bundled_paths,
    dataset_names,
    load_api_bank,
    load_corpus,
    load_corpus_and_tasks,
    load_dataset,
    load_metatool,
    load_metatool_multi,
    load_seal_tools,
    load_stabletoolbench,
    load_ultratool,
    save_corpus_and_tasks,
    seal_tools_split,
    shared_data_dir,
    ultratool_subtask,
)
from toolgym.data.readers import DatasetFormatError, iter_jsonl, read_json
from toolgym.data.records import SearchEvent, Task, Trajectory, read_rollouts, write_rollouts

__all__ = [
    "DATASETS",
    "Dataset",
    "DatasetFormatError",
    "SearchEvent",
    "Task",
    "Trajectory",
    "bundled_paths",
    "dataset_names",
    "iter_jsonl",
    "load_api_bank",
    "load_corpus",
    "load_corpus_and_tasks",
    "load_dataset",
    "load_metatool",
    "load_metatool_multi",
    "load_seal_tools",
    "load_stabletoolbench",
    "load_ultratool",
    "read_json",
    "read_rollouts",
    "save_corpus_and_tasks",
    "seal_tools_split",
    "shared_data_dir",
    "ultratool_subtask",
    "write_rollouts",
]
