"""The OpenAI function schemas of ``search`` and ``submit`` and the system prompt built on them."""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from toolgym.envs.actions import CategoryMode, ProtocolName, check_category_mode, check_protocol
from toolgym.retrieval.corpus import ToolCorpus


# The Hermes schema block of the system prompt: OPEN + one JSON schema per line + CLOSE. A chat
# template that renders ``tools`` itself (toolgym.integrations.trl) writes the same bytes.
HERMES_TOOLS_OPEN = "\n\n# Tools\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
HERMES_TOOLS_CLOSE = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)


def search_schema(categories: Sequence[str] = (), category_mode: CategoryMode = "off", top_k: int = 5) -> dict[str, Any]:
    """OpenAI function schema of ``search``; ``category`` is an enum of the corpus's categories
    when category mode is on, and listed in ``required`` in ``required`` mode."""
    check_category_mode(category_mode)
    properties: dict[str, Any] = {
        "query": {"type": "string", "description": "What the needed tool does, in plain words."}
    }
    required = ["query"]
    if category_mode != "off":
        if not categories:
            raise ValueError("category mode is on but the corpus has no categories")
        properties["category"] = {
            "type": "string",
            "enum": list(categories),
            "description": "Only search tools of this category."
            + ("" if category_mode == "required" else " Omit to search every tool."),
        }
        if category_mode == "required":
            required.append("category")
    return {
        "type": "function",
        "function": {
            "name": "search",
            "description": f"Search the tool library; returns the top {top_k} tools (id, name, category, description).",
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


def submit_schema() -> dict[str, Any]:
    """OpenAI function schema of ``submit``."""
    return {
        "type": "function",
        "function": {
            "name": "submit",
            "description": "Submit the final set of tool ids that together fulfil the request. Ends the episode.",
            "parameters": {
                "type": "object",
                "properties": {
                    "tools": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Tool ids exactly as shown in search results.",
                    }
                },
                "required": ["tools"],
            },
        },
    }


def tool_schemas(categories: Sequence[str] = (), category_mode: CategoryMode = "off", top_k: int = 5) -> list[dict[str, Any]]:
    """``[search_schema(...), submit_schema()]``: the two functions of one episode."""
    return [search_schema(categories, category_mode, top_k), submit_schema()]


def system_prompt(
    corpus: ToolCorpus,
    *,
    protocol: ProtocolName = "hermes",
    category_mode: CategoryMode = "off",
    max_turns: int = 8,
    top_k: int = 5,
) -> str:
    """The system prompt: the task, the turn budget, the function schemas and the call format."""
    check_protocol(protocol)
    schemas = tool_schemas(corpus.categories, category_mode, top_k)
    intro = (
        f"You are a tool-search assistant. A library of {len(corpus)} tools is available but hidden. "
        "Find the tools that together fulfil the user's request: search the library, read the results, "
        "then submit the ids of every needed tool and no others.\n"
        f"You have at most {max_turns} turns; make exactly one call per turn. "
        f"Each search returns the top {top_k} tools. Submitting ends the episode."
    )
    if category_mode == "required":
        intro += " Every search must name one category from the schema."
    elif category_mode == "optional":
        intro += " A search may name one category from the schema to search only that category."
    schema_text = "\n".join(json.dumps(s, ensure_ascii=False) for s in schemas)
    if protocol == "hermes":
        return f"{intro}{HERMES_TOOLS_OPEN}{schema_text}{HERMES_TOOLS_CLOSE}"
    category_line = ""
    if category_mode != "off":
        category_line = (
            '\nTo search one category, write <search category="CATEGORY">query</search>'
            + (" (required in this episode)" if category_mode == "required" else "")
            + ". Categories: " + "; ".join(corpus.categories) + "."
        )
    return (
        f"{intro}\n\nThe two actions, as function schemas:\n{schema_text}\n\n"
        "Reason inside <think> and </think> first. To search, write <search> query </search>; the results "
        "come back between <information> and </information>. When you are done, write the tool ids "
        "separated by commas inside <answer> and </answer>, for example <answer> id_1, id_2 </answer>."
        + category_line
    )
