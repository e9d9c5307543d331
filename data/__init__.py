"""toolgym.data: benchmark loaders and task records.

``load_dataset(name, split)`` serves the bundled benchmarks (``dataset_names()``); the
per-benchmark loaders read the original files from any path; ``load_corpus_and_tasks`` reads
toolgym's own JSONL format. See docs/datasets.md.
"""
from toolgym.data.loaders import (
    DATASETS,
    Dataset,
    DatasetFormatError,
    dataset_names,
    load_api_bank,
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

__all__ = [
    "DATASETS",
    "Dataset",
    "DatasetFormatError",
    "dataset_names",
    "load_api_bank",
    "load_corpus_and_tasks",
    "load_dataset",
    "load_metatool",
    "load_metatool_multi",
    "load_seal_tools",
    "load_stabletoolbench",
    "load_ultratool",
    "save_corpus_and_tasks",
    "seal_tools_split",
    "shared_data_dir",
    "ultratool_subtask",
]
