"""Gymnasium registration: ``toolgym/ToolSearch-v0``, ``toolgym/Decompose-v0``,
``toolgym/Decompose-Mixture-v0`` (every source of the training mixture, each searched in its own
library) and one id of each kind per bundled benchmark. Importing :mod:`toolgym.envs` registers them.

The entry points take a dataset *name* (plus plain keyword options), never a corpus or index
object: gymnasium deep-copies registered kwargs on every ``make``, and names keep that cheap
and let every sub-env share the process-wide index (:mod:`toolgym.envs.resources`).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium

from toolgym.data.records import Task
from toolgym.envs.actions import check_count
from toolgym.envs.decomposition import DecompositionEnv
from toolgym.envs.mixture import MixtureDecompositionEnv
from toolgym.envs.resources import dataset_unavailable_reason, load_shared_dataset, register_dataset
from toolgym.envs.tool_search import ToolSearchEnv
from toolgym.envs.vector import MAX_NUM_ENVS, BatchedToolSearchVectorEnv
from toolgym.retrieval.corpus import ToolCorpus

NAMESPACE = "toolgym"

# id suffix -> (dataset name, min gold tools for Decompose or None for no Decompose env)
BENCHMARKS: dict[str, tuple[str, int | None]] = {
    "StableToolBench": ("stabletoolbench", 2),
    "SealTools": ("seal_tools", 2),
    "MetaTool": ("metatool", None),  # single-tool queries: nothing to decompose
    "MetaToolMulti": ("metatool_multi", 2),
    "APIBank": ("api_bank", 1),  # multi-turn dialogues: the point is resolving the history
    "UltraTool": ("ultratool", 2),
}


def _tasks(dataset: str, split: str | None, min_gold: int, max_tasks: int | None) -> tuple[ToolCorpus, list[Task]]:
    # checked before any loading: a negative count sliced tasks off the end (tasks[:-1]), silently
    max_tasks = None if max_tasks is None else check_count("max_tasks", max_tasks, 1)
    corpus, tasks = load_shared_dataset(dataset, split)  # missing files: one line saying where data goes
    if min_gold > 1:
        tasks = [t for t in tasks if len(t.gold) >= min_gold]
    if max_tasks is not None:
        tasks = tasks[:max_tasks]
    if not tasks:
        raise ValueError(f"dataset {dataset!r} has no task with at least {min_gold} gold tools")
    return corpus, tasks


def make_tool_search_env(
    dataset: str = "seal_tools",
    split: str | None = None,
    *,
    min_gold: int = 1,
    max_tasks: int | None = None,
    **kwargs: Any,
) -> ToolSearchEnv:
    """A :class:`ToolSearchEnv` on a bundled or :func:`register_dataset`-ed dataset.

    ``kwargs`` go to :class:`ToolSearchEnv` (``retriever``, ``category_mode``, ``protocol``...).
    """
    corpus, tasks = _tasks(dataset, split, min_gold, max_tasks)
    return ToolSearchEnv(corpus, tasks, **kwargs)


def make_decomposition_env(
    dataset: str = "seal_tools",
    split: str | None = None,
    *,
    min_gold: int = 2,
    max_tasks: int | None = None,
    **kwargs: Any,
) -> DecompositionEnv:
    """A :class:`DecompositionEnv` on the tasks of ``dataset`` with at least ``min_gold`` gold tools."""
    corpus, tasks = _tasks(dataset, split, min_gold, max_tasks)
    return DecompositionEnv(corpus, tasks, **kwargs)


def make_mixture_decomposition_env(
    sources: Any = None,
    split: str | None = "train",
    *,
    seed: int = 0,
    limit: int | None = None,
    min_gold: int = 1,
    unseen_by_retriever: bool = False,
    **kwargs: Any,
) -> MixtureDecompositionEnv:
    """A :class:`~toolgym.envs.mixture.MixtureDecompositionEnv` on one part of a mixture: ``split``
    ``"train"`` or ``"heldout"`` (``None``: train) of every source. ``sources`` is a fit config's
    ``sources`` list (default: the project's five, :data:`toolgym.data.mixture.MIXTURE_SOURCES`),
    split into parts with ``seed`` (a fit config's seed: 0 draws the held-out parts the mixture
    retriever was evaluated on); at most ``limit`` tasks per source (a seeded sample), those with at
    least ``min_gold`` gold tools. ``kwargs`` go to every source's :class:`DecompositionEnv`
    (``retriever``, ``retriever_options``, ``k``, ``fusion``...).

    ``unseen_by_retriever``: the training part keeps only the queries the fine-tuned encoder of
    ``retriever_options["model"]`` set aside and never trained on
    (:func:`~toolgym.retrieval.models.set_aside_task_ids`), so a reward computed with it sees
    retrieval as good as on new requests, not the near-perfect retrieval of the queries it learnt
    (the held-out part is unseen anyway and stays whole).

    ``split`` names the part because a trainer passes ``split="train"`` to its rollout envs and
    ``split="heldout"`` to its evaluation env (``env.train_kwargs`` / ``env.eval_kwargs``)."""
    from toolgym.data.mixture import MIXTURE_SOURCES
    from toolgym.envs.mixture import mixture_sources

    min_gold = check_count("min_gold", min_gold, 1)
    part = "train" if split is None else split
    keep = None
    if unseen_by_retriever and part == "train":
        from toolgym.retrieval.models import set_aside_task_ids

        model = (kwargs.get("retriever_options") or {}).get("model")
        if not model:
            raise ValueError("unseen_by_retriever needs retriever_options.model: a fine-tuned encoder folder")
        unseen = {i for ids in set_aside_task_ids(model).values() for i in ids}
        keep = lambda task: task.id in unseen  # noqa: E731
    parts = [(name, corpus, [t for t in tasks if len(t.gold) >= min_gold])
             for name, corpus, tasks in mixture_sources(MIXTURE_SOURCES if sources is None else sources,
                                                        part, seed, limit, keep=keep)]
    empty = [name for name, _, tasks in parts if not tasks]
    if empty:
        raise ValueError(f"mixture source(s) {empty} have no {part} task with at least {min_gold} gold tools")
    return MixtureDecompositionEnv(parts, **kwargs)


def make_tool_search_vector_env(num_envs: int = 1, **kwargs: Any) -> BatchedToolSearchVectorEnv:
    """``num_envs`` tool-search envs (same arguments as :func:`make_tool_search_env`) with batched search.

    ``num_envs``: an integer in ``[1, MAX_NUM_ENVS]`` (each sub-env holds its own episode; 10**5 of
    them took 7 GB), checked before any env is built."""
    num_envs = check_count("num_envs", num_envs, 1)
    if num_envs > MAX_NUM_ENVS:
        raise ValueError(f"num_envs={num_envs}: must be <= {MAX_NUM_ENVS} (each sub-env holds its own episode; "
                         "run several vector envs for more)")
    kwargs.pop("max_episode_steps", None)  # the env truncates itself after max_turns
    return BatchedToolSearchVectorEnv([make_tool_search_env(**kwargs) for _ in range(num_envs)])


def register_tool_search_env(
    env_id: str,
    corpus: ToolCorpus,
    tasks: Sequence[Task],
    *,
    decompose_id: str | None = None,
    **kwargs: Any,
) -> None:
    """Register ``env_id`` (and optionally a decomposition env ``decompose_id``) on your corpus.

    The corpus and tasks are stored under the dataset name ``env_id``; ``kwargs`` become the
    env's defaults (``retriever``, ``category_mode``, ``max_turns``...). ``gymnasium.make`` and
    ``gymnasium.make_vec`` (batched search) both work on the new id.
    """
    register_dataset(env_id, corpus, tasks)
    _register(env_id, "make_tool_search_env", {"dataset": env_id, **kwargs}, vector=True)
    if decompose_id is not None:
        _register(decompose_id, "make_decomposition_env", {"dataset": env_id, "min_gold": 1})


def _register(env_id: str, factory: str, kwargs: dict[str, Any], vector: bool = False) -> None:
    if env_id in gymnasium.registry:
        del gymnasium.registry[env_id]  # re-registering (a reload, a notebook cell run twice)
    gymnasium.register(
        id=env_id,
        entry_point=f"toolgym.envs.registry:{factory}",
        vector_entry_point="toolgym.envs.registry:make_tool_search_vector_env" if vector else None,
        kwargs=kwargs,
        disable_env_checker=False,
    )


def register_all() -> list[str]:
    """Register every built-in id; returns them."""
    ids = []
    _register(f"{NAMESPACE}/ToolSearch-v0", "make_tool_search_env", {"dataset": "seal_tools"}, vector=True)
    _register(f"{NAMESPACE}/Decompose-v0", "make_decomposition_env", {"dataset": "seal_tools", "min_gold": 2})
    # every source of the project's mixture, 300 tasks each (about API-Bank's whole training part, so
    # no source dominates a trainer's task order); split="heldout" for the held-out parts
    _register(f"{NAMESPACE}/Decompose-Mixture-v0", "make_mixture_decomposition_env", {"limit": 300})
    ids += [f"{NAMESPACE}/ToolSearch-v0", f"{NAMESPACE}/Decompose-v0", f"{NAMESPACE}/Decompose-Mixture-v0"]
    for suffix, (dataset, min_gold) in BENCHMARKS.items():
        env_id = f"{NAMESPACE}/ToolSearch-{suffix}-v0"
        _register(env_id, "make_tool_search_env", {"dataset": dataset}, vector=True)
        ids.append(env_id)
        if min_gold is not None:
            env_id = f"{NAMESPACE}/Decompose-{suffix}-v0"
            _register(env_id, "make_decomposition_env", {"dataset": dataset, "min_gold": min_gold})
            ids.append(env_id)
    return ids


def registered_ids() -> list[str]:
    """Every registered toolgym id (built-in and yours), sorted."""
    return sorted(i for i in gymnasium.registry if i.startswith(f"{NAMESPACE}/") or _is_ours(i))


class UnknownEnvIdError(ValueError, KeyError):
    """An env id gymnasium has no registration for. Bad input, so a ``ValueError`` (the command
    line prints it as one line); also a ``KeyError``, the type these lookups raised before."""

    __str__ = BaseException.__str__  # the message itself, not KeyError's quoted repr of it


def require_env_id(env_id: Any) -> str:
    """``env_id`` when it is registered with gymnasium (toolgym's ids are, once :mod:`toolgym.envs`
    is imported, which importing this module does), else :class:`UnknownEnvIdError` naming it and
    the closest toolgym id. The one check before every ``gymnasium.make`` of a user-given id."""
    import difflib

    if isinstance(env_id, str) and env_id in gymnasium.registry:
        return env_id
    close = difflib.get_close_matches(env_id, registered_ids(), n=1) if isinstance(env_id, str) else []
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise UnknownEnvIdError(f"unknown env id {env_id!r}{hint} (see `toolgym envs`)")


def unavailable_reason(env_id: str) -> str | None:
    """``None`` if ``gymnasium.make(env_id)`` finds its data here, else why not (one line)."""
    spec = gymnasium.spec(env_id)
    if spec.entry_point == "toolgym.envs.registry:make_mixture_decomposition_env":
        from toolgym.data.mixture import MIXTURE_SOURCES

        sources = spec.kwargs.get("sources") or MIXTURE_SOURCES
        names = [s.get("dataset") for s in sources if isinstance(s, dict)]
        return next((r for r in map(dataset_unavailable_reason, filter(None, names)) if r), None)
    dataset = spec.kwargs.get("dataset")
    return dataset_unavailable_reason(dataset) if isinstance(dataset, str) else None


def _is_ours(env_id: str) -> bool:
    entry = gymnasium.registry[env_id].entry_point
    return isinstance(entry, str) and entry.startswith("toolgym.")


BUILTIN_IDS = register_all()
