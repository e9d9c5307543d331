"""``toolgym/ToolSearch-Dialogue-v0`` and ``toolgym/Decompose-Dialogue-v0``: the generated
MagicSelector dialogues over Seal-Tools as environments.

The dataset is generated on first use in the process (under 0.5 s CPU, measured in docs/datasets.md)
from a fixed seed and config, then registered like a user's dataset
(:func:`~toolgym.envs.resources.register_dataset`), so every later ``make`` shares it and its
index. Nothing is cached on disk: generation is deterministic, so there is no stale copy to
invalidate. Splits: ``train``, ``test`` (in-domain tools) and ``ood`` (held-out categories).
"""
from __future__ import annotations

import threading
from typing import Any

import gymnasium

from toolgym.envs.registry import (
    NAMESPACE,
    make_decomposition_env,
    make_tool_search_env,
    make_tool_search_vector_env,
)
from toolgym.envs.resources import GENERATED_FROM, register_dataset

DIALOGUE_DATASET = "dialogue_seal_tools"
DIALOGUE_LIBRARY = "seal_tools"
# Mirrors configs/generate_seal_tools.yaml (the GeneratorConfig defaults, seed 0).
DIALOGUE_CONFIG: dict[str, Any] = {"seed": 0}
DIALOGUE_IDS = (f"{NAMESPACE}/ToolSearch-Dialogue-v0", f"{NAMESPACE}/Decompose-Dialogue-v0")
GENERATED_FROM[DIALOGUE_DATASET] = DIALOGUE_LIBRARY  # `toolgym envs`: available when Seal-Tools is

_LOCK = threading.Lock()
_READY = False


def ensure_dialogue_dataset() -> str:
    """Generate and register the dialogue dataset once per process; returns its dataset name."""
    global _READY
    with _LOCK:
        if not _READY:
            from toolgym.data import load_dataset
            from toolgym.data.dialogue_generator import dialogue_tasks, generate_dialogues

            corpus = load_dataset(DIALOGUE_LIBRARY).corpus
            register_dataset(DIALOGUE_DATASET, corpus, dialogue_tasks(generate_dialogues(corpus, DIALOGUE_CONFIG)))
            _READY = True
    return DIALOGUE_DATASET


def make_dialogue_tool_search_env(**kwargs: Any) -> Any:
    """:func:`~toolgym.envs.registry.make_tool_search_env` on the generated dialogues."""
    ensure_dialogue_dataset()
    return make_tool_search_env(**kwargs)


def make_dialogue_decomposition_env(**kwargs: Any) -> Any:
    """:func:`~toolgym.envs.registry.make_decomposition_env` on the generated dialogues."""
    ensure_dialogue_dataset()
    return make_decomposition_env(**kwargs)


def make_dialogue_vector_env(num_envs: int = 1, **kwargs: Any) -> Any:
    ensure_dialogue_dataset()
    return make_tool_search_vector_env(num_envs, **kwargs)


def register_dialogue_envs() -> list[str]:
    """Register the two ids (lazily: nothing is generated until the first ``make``)."""
    search_id, decompose_id = DIALOGUE_IDS
    for env_id in DIALOGUE_IDS:
        if env_id in gymnasium.registry:
            del gymnasium.registry[env_id]
    gymnasium.register(id=search_id, entry_point="toolgym.envs.dialogue:make_dialogue_tool_search_env",
                       vector_entry_point="toolgym.envs.dialogue:make_dialogue_vector_env",
                       kwargs={"dataset": DIALOGUE_DATASET})
    # Every turn is a decomposition task, single-tool ones included: resolving the history is the point.
    gymnasium.register(id=decompose_id, entry_point="toolgym.envs.dialogue:make_dialogue_decomposition_env",
                       kwargs={"dataset": DIALOGUE_DATASET, "min_gold": 1})
    return list(DIALOGUE_IDS)


register_dialogue_envs()
