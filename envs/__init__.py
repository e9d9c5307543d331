"""toolgym.envs: gymnasium environments for agentic tool search (DESIGN §4-§5).

Importing this package registers ``toolgym/ToolSearch-v0``, ``toolgym/Decompose-v0`` and one
id of each per bundled benchmark (``toolgym envs`` lists them). See docs/envs.md.
"""
from toolgym.envs.curriculum import CategoryCurriculum
from toolgym.envs.decomposition import DecompositionEnv, parse_subtasks
from toolgym.envs.protocol import (
    CATEGORY_MODES,
    PROTOCOLS,
    Action,
    Invalid,
    Search,
    Submit,
    check_action,
    parse_action,
    render_results,
    search_schema,
    submit_schema,
    system_prompt,
    tool_schemas,
)
from toolgym.envs.registry import (
    BENCHMARKS,
    BUILTIN_IDS,
    make_decomposition_env,
    make_tool_search_env,
    make_tool_search_vector_env,
    register_tool_search_env,
    registered_ids,
)
from toolgym.envs.resources import clear_caches, register_dataset, shared_dataset, shared_index
from toolgym.envs.dialogue import DIALOGUE_IDS  # noqa: F401  (registers the *-Dialogue-v0 ids, lazily)
from toolgym.envs.spaces import UnicodeText
from toolgym.envs.tool_search import ToolSearchEnv, selection_f1_reward, selection_match_reward
from toolgym.envs.vector import BatchedToolSearchVectorEnv

__all__ = [
    "Action",
    "BENCHMARKS",
    "BUILTIN_IDS",
    "BatchedToolSearchVectorEnv",
    "CATEGORY_MODES",
    "CategoryCurriculum",
    "DecompositionEnv",
    "Invalid",
    "PROTOCOLS",
    "Search",
    "Submit",
    "ToolSearchEnv",
    "UnicodeText",
    "check_action",
    "clear_caches",
    "make_decomposition_env",
    "make_tool_search_env",
    "make_tool_search_vector_env",
    "parse_action",
    "parse_subtasks",
    "register_dataset",
    "register_tool_search_env",
    "registered_ids",
    "render_results",
    "search_schema",
    "selection_f1_reward",
    "selection_match_reward",
    "shared_dataset",
    "shared_index",
    "submit_schema",
    "system_prompt",
    "tool_schemas",
]
