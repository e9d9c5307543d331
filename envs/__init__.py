"""toolgym.envs: gymnasium environments for agentic tool search (docs/envs.md).

Importing this package registers ``toolgym/ToolSearch-v0``, ``toolgym/Decompose-v0`` and one
id of each per bundled benchmark (``toolgym envs`` lists them). See docs/envs.md.

Exported here is what a user needs: the environments, the action protocol, registration and
the shared dataset/index caches. The pieces behind them live in their modules: ``base`` (what
both envs share), ``checker`` (``check_tool_env``, the env contract beside gymnasium's
``check_env``), ``actions`` / ``syntax`` / ``checks`` / ``tokens`` / ``prompts`` /
``rendering`` (the action protocol, split by concern), ``curriculum``, ``mixture``, ``registry``,
``resources``, ``spaces``, ``vector``.
"""
if __name__ != "toolgym.envs":  # the checkout folder imported by its own name: every module would load twice
    raise ImportError(f"this folder is the package toolgym.envs: import toolgym.envs (after `pip install -e .` or `make install`), not {__name__!r}")
from toolgym.envs.actions import CATEGORY_MODES, PROTOCOLS, Action, CategoryMode, Invalid, ProtocolName, Search, Submit
from toolgym.envs.checker import check_tool_env
from toolgym.envs.curriculum import CategoryCurriculum
from toolgym.envs.decomposition import DecompositionEnv, parse_subtasks
from toolgym.envs.mixture import MixtureDecompositionEnv
from toolgym.envs.registry import BUILTIN_IDS, register_tool_search_env, registered_ids, unavailable_reason
from toolgym.envs.resources import (
    DatasetUnavailableError,
    clear_caches,
    register_dataset,
    shared_dataset,
    shared_index,
)
from toolgym.envs.syntax import parse_action, render_call
from toolgym.envs.dialogue import DIALOGUE_IDS  # noqa: F401, E402  (registers the *-Dialogue-v0 ids, lazily)
from toolgym.envs.tool_search import ToolSearchEnv, selection_f1_reward, selection_match_reward
from toolgym.envs.vector import BatchedToolSearchVectorEnv

__all__ = [
    "Action",
    "BUILTIN_IDS",
    "BatchedToolSearchVectorEnv",
    "CATEGORY_MODES",
    "CategoryCurriculum",
    "CategoryMode",
    "DatasetUnavailableError",
    "DecompositionEnv",
    "Invalid",
    "MixtureDecompositionEnv",
    "PROTOCOLS",
    "ProtocolName",
    "Search",
    "Submit",
    "ToolSearchEnv",
    "check_tool_env",
    "clear_caches",
    "parse_action",
    "parse_subtasks",
    "register_dataset",
    "register_tool_search_env",
    "registered_ids",
    "render_call",
    "selection_f1_reward",
    "selection_match_reward",
    "shared_dataset",
    "shared_index",
    "unavailable_reason",
]
