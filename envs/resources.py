"""Process-wide caches: one index per (corpus, method, options), one dataset per (name, split),
one loaded mixture per (sources, seed).

Every environment built through ``gymnasium.make`` / ``make_vec`` in a process shares these,
so 64 sub-environments hold one BM25 matrix or one faiss index, not 64. Datasets registered
with :func:`register_dataset` (a researcher's own corpus) are found here by name too.
"""
from __future__ import annotations

import threading
from typing import Any, Sequence

from toolgym.data.records import Task
from toolgym.retrieval.corpus import ToolCorpus

_LOCK = threading.RLock()
_INDEXES: dict[tuple, Any] = {}
_DATASETS: dict[tuple[str, str | None], tuple[ToolCorpus, list[Task]]] = {}
_CUSTOM: dict[str, tuple[ToolCorpus, list[Task]]] = {}
_MIXTURES: dict[str, list[Any]] = {}


def _freeze(options: dict[str, Any]) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in options.items()))


def shared_index(corpus: ToolCorpus, method: str = "bm25", **options: Any) -> Any:
    """The :class:`~toolgym.retrieval.index.ToolIndex` for ``corpus`` built with ``method`` and
    ``options`` (``build_index`` keyword arguments), built on first use and then reused.

    The key uses the corpus's content hash, so an equal corpus loaded twice shares one index. An
    option ``build_index`` does not take is a ``ValueError`` naming it and the ones it takes.
    """
    from toolgym.retrieval.index import build_index

    check_index_options(options)
    key = (corpus.name, corpus.content_hash, method, _freeze(options))
    with _LOCK:
        index = _INDEXES.get(key)
        if index is None:
            index = build_index(corpus, method, **options)
            _INDEXES[key] = index
        return index


def index_option_names() -> list[str]:
    """The keyword options of :func:`~toolgym.retrieval.index.build_index` (an env's ``retriever_options``):
    the fields of :class:`~toolgym.retrieval.index.IndexConfig` but ``method``, which the env sets."""
    import dataclasses

    from toolgym.retrieval.index import IndexConfig

    return sorted(f.name for f in dataclasses.fields(IndexConfig) if f.name != "method")


def check_index_options(options: Any) -> None:
    """``retriever_options`` must be a mapping of :func:`index_option_names` keys (a ``ValueError``
    naming the unknown ones, not ``build_index``'s ``TypeError``)."""
    from collections.abc import Mapping

    if not isinstance(options, Mapping):
        raise ValueError(f"retriever_options must be a dict of build_index options, got {type(options).__name__}")
    known = index_option_names()
    unknown = sorted(str(k)[:80] for k in options if k not in known)
    if unknown:
        raise ValueError(f"unknown retriever_options key(s) {unknown}; build_index takes {', '.join(known)}")


def register_dataset(name: str, corpus: ToolCorpus, tasks: Sequence[Task]) -> None:
    """Make ``name`` resolve to this corpus and these tasks wherever a dataset name is accepted."""
    if not tasks:
        raise ValueError(f"dataset {name!r} has no tasks")
    with _LOCK:
        _CUSTOM[name] = (corpus, list(tasks))
        for key in [k for k in _DATASETS if k[0] == name]:
            del _DATASETS[key]


def shared_dataset(name: str, split: str | None = None) -> tuple[ToolCorpus, list[Task]]:
    """``(corpus, tasks)`` of a registered or bundled dataset, loaded once per process."""
    with _LOCK:
        hit = _DATASETS.get((name, split))
        if hit is not None:
            return hit
        if name in _CUSTOM:
            corpus, tasks = _CUSTOM[name]
            if split is not None:
                tasks = [t for t in tasks if t.split == split]
                if not tasks:
                    raise ValueError(f"dataset {name!r} has no tasks in split {split!r}")
        else:
            from toolgym.data import load_dataset

            ds = load_dataset(name, split=split)
            corpus, tasks = ds.corpus, list(ds.tasks)
        _DATASETS[(name, split)] = (corpus, tasks)
        return corpus, tasks


def shared_mixture(sources: Any, seed: int = 0) -> list[Any]:
    """The loaded sources of a mixture (:func:`toolgym.data.mixture.load_mixture`: each its corpus,
    training and held-out part), loaded once per process per ``(sources, seed)``."""
    from toolgym.data.mixture import load_mixture

    key = f"{sources!r}|{seed!r}"
    with _LOCK:
        hit = _MIXTURES.get(key)
        if hit is None:
            hit = _MIXTURES[key] = load_mixture(sources, seed)
        return hit


class DatasetUnavailableError(FileNotFoundError):
    """A registered dataset whose files are not on this machine (e.g. UltraTool without ../shared)."""


def _where_to_put_data(name: str, exc: BaseException) -> str:
    from toolgym.data import shared_data_dir

    return (f"dataset {name!r} is not available ({exc}): put the shared data folder at $TOOLGYM_SHARED_DATA "
            f"or <repo>/../shared/data (now looking in {shared_data_dir()})")


def load_shared_dataset(name: str, split: str | None = None) -> tuple[ToolCorpus, list[Task]]:
    """:func:`shared_dataset`, but missing files raise :class:`DatasetUnavailableError` with one
    line saying where the data goes."""
    try:
        return shared_dataset(name, split)
    except DatasetUnavailableError:
        raise
    except FileNotFoundError as exc:
        raise DatasetUnavailableError(_where_to_put_data(name, exc)) from None


# Datasets generated on first use (name -> the dataset they are generated from): available
# whenever that one is (the generated-dialogue envs register theirs, toolgym.envs.dialogue).
GENERATED_FROM: dict[str, str] = {}


def dataset_unavailable_reason(name: str) -> str | None:
    """``None`` if dataset ``name`` can be loaded here, else the one-line reason (where the data
    goes). Bundled and registered datasets are checked without loading; a dataset read from
    the raw benchmark files is loaded once (and cached), the only exact check; a generated one
    (:data:`GENERATED_FROM`) is available when its source is."""
    with _LOCK:
        if name in _CUSTOM or any(key[0] == name for key in _DATASETS):
            return None
    if name in GENERATED_FROM:
        return dataset_unavailable_reason(GENERATED_FROM[name])
    from toolgym.data.loaders import bundled_paths

    try:
        if all(path.exists() for path in bundled_paths(name)):
            return None
    except ValueError as exc:  # not a dataset name at all
        return str(exc)
    try:
        load_shared_dataset(name)
    except DatasetUnavailableError as exc:
        return str(exc)
    return None


def clear_caches() -> None:
    """Drop every cached index and dataset (tests; after editing data on disk)."""
    with _LOCK:
        _INDEXES.clear()
        _DATASETS.clear()
        _MIXTURES.clear()
