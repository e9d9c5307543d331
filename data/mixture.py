"""Training mixtures: several tool libraries, each with its own corpus, training part and held-out
part, as one fit config's ``sources`` list names them (MagicSelector trains its retriever on such
a mixture).

The same parts serve every trainable piece: ``toolgym fit-retriever`` / ``fit-reranker`` train on
them, ``toolgym demos --mixture`` records demonstrations on the training parts, and the mixture
Decompose env (``toolgym/Decompose-Mixture-v0``) trains a decomposer on them. Because one function
(:func:`load_sources`) draws every held-out part, no piece ever trains on a query another piece
is evaluated on. It sits in the data layer so environments can use it.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

from toolgym.data.config_keys import check_known_keys, require

__all__ = ["FitSource", "MIXTURE_SOURCES", "SourceData", "load_mixture", "load_sources", "load_train_eval"]

# The project's mixture: the five sources of configs/fit_retriever_mixture.yaml (a test keeps the
# two equal), so a decomposer trained on these training parts never sees the retriever's held-out queries.
MIXTURE_SOURCES: tuple[dict[str, Any], ...] = (
    {"dataset": "seal_tools", "train_split": "train", "eval_split": "heldout"},
    {"dataset": "ultratool", "heldout_fraction": 0.2},
    {"dataset": "metatool", "heldout_fraction": 0.2},
    {"dataset": "api_bank", "heldout_fraction": 0.2},
    {"dataset": "stabletoolbench", "heldout_fraction": 0.2},
)


def load_train_eval(cfg: Any) -> tuple[Any, list[Any], list[Any]]:
    """(corpus, training tasks, held-out tasks) from the data keys of ``cfg`` (a fit config's
    ``FitDataConfig``, or any object with those attributes).

    The two task lists never share an id or a query text (checked).
    """
    from toolgym.data.training_data import check_disjoint, split_tasks

    if cfg.corpus_path or cfg.tasks_path:
        if not (cfg.corpus_path and cfg.tasks_path):
            raise ValueError("give both corpus_path and tasks_path (or neither, to use dataset)")
        from toolgym.data import load_corpus_and_tasks

        data = load_corpus_and_tasks(cfg.corpus_path, cfg.tasks_path)
        corpus, tasks = data.corpus, data.tasks
        train, held = split_tasks(tasks, float(cfg.heldout_fraction), int(cfg.seed))
    else:
        from toolgym.data import load_dataset

        if cfg.eval_split is not None and cfg.train_split == cfg.eval_split:
            raise ValueError("train_split and eval_split must differ: training never sees the evaluated queries")
        ds = load_dataset(cfg.dataset, split=cfg.train_split)
        corpus, train = ds.corpus, list(ds.tasks)
        if cfg.eval_split is None:  # hold out a share of the one split
            train, held = split_tasks(train, float(cfg.heldout_fraction), int(cfg.seed))
        else:
            held = list(load_dataset(cfg.dataset, split=cfg.eval_split).tasks)
    if int(cfg.train_limit) > 0:
        train = train[: int(cfg.train_limit)]
    if int(cfg.eval_limit) > 0:
        held = held[: int(cfg.eval_limit)]
    if not train:
        raise ValueError("no training tasks")
    check_disjoint(train, held)
    return corpus, train, held


@dataclass
class FitSource:
    """One source of a training mixture (an entry of a fit config's ``sources`` list).

    Parameters:
        dataset (`str` or `None`), train_split (`str` or `None`: the dataset's first split),
        eval_split (`str` or `None`: hold out ``heldout_fraction`` of the training split):
            A registered dataset and its parts.
        corpus_path (`str` or `None`), tasks_path (`str` or `None`):
            Or a corpus and a tasks JSONL (e.g. ``toolgym generate`` output), held out by fraction.
        heldout_fraction (`float`, defaults to `0.2`), train_limit / eval_limit (`int`, `0` = all).
        weight (`float`, defaults to `1.0`):
            Its share of the training batches: batches are drawn per source in proportion to the
            weights (a source with fewer batches than its share repeats them).
        name (`str` or `None`): its label in the summary (default: the dataset or the tasks file's stem).
    """

    dataset: Optional[str] = None
    train_split: Optional[str] = None
    eval_split: Optional[str] = None
    corpus_path: Optional[str] = None
    tasks_path: Optional[str] = None
    heldout_fraction: float = 0.2
    train_limit: int = 0
    eval_limit: int = 0
    weight: float = 1.0
    name: Optional[str] = None

    def __post_init__(self) -> None:
        from toolgym.data.readers import check_finite_fields

        check_finite_fields(self, "sources[]")
        where = self.name or self.dataset or self.tasks_path
        if (self.dataset is None) == (self.tasks_path is None):
            raise ValueError(f"a source ({where!r}) names exactly one of dataset or corpus_path + tasks_path")
        require(self.weight > 0, f"sources[{where}].weight", self.weight, "must be > 0")
        require(0 <= self.heldout_fraction < 1, f"sources[{where}].heldout_fraction", self.heldout_fraction,
                "must be in [0, 1)")
        require(self.train_limit >= 0, f"sources[{where}].train_limit", self.train_limit, "must be >= 0 (0 = all)")
        require(self.eval_limit >= 0, f"sources[{where}].eval_limit", self.eval_limit, "must be >= 0 (0 = all)")


@dataclass
class SourceData:
    """A loaded source: its own corpus (negatives are drawn from it only), train and held-out tasks."""

    name: str
    corpus: Any
    train: list
    heldout: list
    weight: float = 1.0


def load_sources(cfg: Any) -> list[SourceData]:
    """The training sources of a fit config: its ``sources`` list, or (when empty) the one source its
    top-level data keys name. No held-out query of any source is a training query of any source."""
    from toolgym.data.training_data import check_disjoint

    specs = list(getattr(cfg, "sources", None) or [])
    if not specs:
        corpus, train, held = load_train_eval(cfg)
        name = cfg.dataset if not cfg.tasks_path else Path(cfg.tasks_path).stem
        return [SourceData(str(name), corpus, train, held, 1.0)]
    out: list[SourceData] = []
    for spec in specs:  # each FitSource checked its own values when it was built
        view = SimpleNamespace(dataset=spec.dataset or "", train_split=spec.train_split, eval_split=spec.eval_split,
                               corpus_path=spec.corpus_path, tasks_path=spec.tasks_path,
                               heldout_fraction=spec.heldout_fraction, train_limit=spec.train_limit,
                               eval_limit=spec.eval_limit, seed=cfg.seed)
        corpus, train, held = load_train_eval(view)
        name = spec.name or spec.dataset or Path(str(spec.tasks_path)).stem
        if any(s.name == name for s in out):
            raise ValueError(f"two sources are named {name!r}: give one a name")
        out.append(SourceData(name, corpus, train, held, float(spec.weight)))
    check_disjoint([t for s in out for t in s.train], [t for s in out for t in s.heldout])
    return out


def load_mixture(sources: Any = MIXTURE_SOURCES, seed: int = 0) -> list[SourceData]:
    """:func:`load_sources` of a ``sources`` list given as :class:`FitSource` or plain dicts (YAML
    entries, env kwargs; an unknown key is an error naming the valid ones), split with ``seed``
    (a fit config's ``seed``: the same seed draws the same held-out parts)."""
    if isinstance(sources, (str, bytes)) or not hasattr(sources, "__iter__"):
        raise ValueError(f"sources must be a list of source entries, got {type(sources).__name__}")
    specs = []
    for entry in sources:
        if isinstance(entry, FitSource):
            specs.append(entry)
            continue
        if not hasattr(entry, "keys"):
            raise ValueError(f"a source entry must be a mapping of FitSource keys, got {type(entry).__name__}")
        check_known_keys(entry.keys(), [f.name for f in fields(FitSource)], "source keys")
        specs.append(FitSource(**dict(entry)))
    if not specs:
        raise ValueError("a mixture needs at least one source")
    return load_sources(SimpleNamespace(sources=specs, seed=int(seed)))
