"""toolgym: RL environments and credit-assignment modules for LLM agents that search tool libraries.

The root holds the short API most scripts need; everything else lives in the subpackages
(``toolgym.envs``, ``toolgym.rewards``, ``toolgym.retrieval``, ``toolgym.data``, ``toolgym.agents``,
``toolgym.evaluation``, ``toolgym.trainers``, ...; docs/architecture.md). Every name below is
loaded on first use, so ``import toolgym`` imports neither torch nor gymnasium::

    import toolgym

    env = toolgym.make("toolgym/ToolSearch-v0")           # gymnasium.make, built-in ids registered
    toolgym.check_tool_env(env)                          # the chat contract and the action protocol
    module = toolgym.get_reward("toolsearcher")          # a reward module or a named scheme
    credit = module.score_group(trajectories, task)      # one group of rollouts of one task

Environments
    ``make``, ``register_tool_search_env``, ``registered_ids``, ``check_tool_env``, ``ToolEnv``,
    ``ToolSearchEnv``, ``DecompositionEnv``, ``render_call`` (write a search / submit action)
Rewards
    ``get_reward``, ``build_reward``, ``register_reward``, ``reward_names``, ``GroupCredit``,
    ``RewardModule``
Retrieval
    ``build_index``, ``ToolIndex``, ``Tool``, ``ToolCorpus``
Records and data
    ``Task``, ``Trajectory``, ``load_dataset``, ``read_rollouts``, ``write_rollouts``
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> the module that defines it (imported on first access)
_LAZY: dict[str, str] = {
    # environments
    "register_tool_search_env": "toolgym.envs",
    "registered_ids": "toolgym.envs",
    "check_tool_env": "toolgym.envs",
    "ToolEnv": "toolgym.envs.base",
    "ToolSearchEnv": "toolgym.envs",
    "DecompositionEnv": "toolgym.envs",
    "render_call": "toolgym.envs",
    # rewards
    "get_reward": "toolgym.rewards",
    "build_reward": "toolgym.rewards",
    "register_reward": "toolgym.rewards",
    "reward_names": "toolgym.rewards",
    "GroupCredit": "toolgym.rewards",
    "RewardModule": "toolgym.rewards",
    # retrieval
    "build_index": "toolgym.retrieval",
    "ToolIndex": "toolgym.retrieval",
    "Tool": "toolgym.retrieval",
    "ToolCorpus": "toolgym.retrieval",
    # records and data
    "Task": "toolgym.data.records",
    "Trajectory": "toolgym.data.records",
    "load_dataset": "toolgym.data",
    "read_rollouts": "toolgym.data.records",
    "write_rollouts": "toolgym.data.records",
}

__all__ = ["__version__", "make", *sorted(_LAZY)]


def make(env_id: str, **kwargs: Any) -> Any:
    """``gymnasium.make(env_id, **kwargs)`` with toolgym's built-in ids registered first."""
    import gymnasium

    importlib.import_module("toolgym.envs")  # registers toolgym/ToolSearch-v0, toolgym/Decompose-v0, ...
    return gymnasium.make(env_id, **kwargs)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later look-ups skip __getattr__
        return value
    raise AttributeError(f"module 'toolgym' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
