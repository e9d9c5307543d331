"""The action protocol of the tool-search environments (docs/decisions.md#action-protocol), one import away.

A policy turn is text. :func:`parse_action` turns it into one of three actions:

- :class:`Search` ``(query, category)`` — look up tools, the environment answers with the top-k;
- :class:`Submit` ``(tool_ids)`` — the final selection, ends the episode;
- :class:`Invalid` ``(reason)`` — anything else; ``reason`` is shown to the policy verbatim.

The protocol lives in a few modules by concern; this one re-exports them:

- :mod:`toolgym.envs.actions` — the action types, ``Literal`` protocol and category-mode names, limits;
- :mod:`toolgym.envs.syntax` — :func:`parse_action` and its inverse :func:`render_call` (``hermes``
  function calls, ``search_r1`` tags), linear time and capped at ``ACTION_MAX_CHARS``;
- :mod:`toolgym.envs.checks` — :func:`check_action`, what needs the corpus;
- :mod:`toolgym.envs.tokens` — token counters (the policy's tokenizer, or words);
- :mod:`toolgym.envs.prompts` — the function schemas and the system prompt;
- :mod:`toolgym.envs.rendering` — search results under a token budget, error observations.

Neither parsing nor checking ever raises on policy text.
"""
from __future__ import annotations

from toolgym.envs.actions import (
    ACTION_MAX_CHARS,
    CATEGORY_MODES,
    DEFAULT_MAX_QUERY_TOKENS,
    DEFAULT_TOKEN_BUDGET,
    FUNCTION_NAMES,
    MAX_QUERY_CHARS,
    MAX_REASON_CHARS,
    MAX_SUBMIT,
    OBS_MAX_CHARS,
    PROTOCOLS,
    Action,
    CategoryMode,
    Invalid,
    ProtocolName,
    Search,
    Submit,
)
from toolgym.envs.checks import check_action, resolve_tool_id, split_answer
from toolgym.envs.prompts import search_schema, submit_schema, system_prompt, tool_schemas
from toolgym.envs.rendering import allocate_budget, render_error, render_results
from toolgym.envs.syntax import HERMES_EXAMPLE, R1_EXAMPLE, parse_action, render_call, strip_thinking
from toolgym.envs.tokens import RustTokenizerCounter, TokenCounter, TokenizerCounter, WordCounter, make_counter

__all__ = [
    "ACTION_MAX_CHARS",
    "CATEGORY_MODES",
    "DEFAULT_MAX_QUERY_TOKENS",
    "DEFAULT_TOKEN_BUDGET",
    "FUNCTION_NAMES",
    "HERMES_EXAMPLE",
    "MAX_QUERY_CHARS",
    "MAX_REASON_CHARS",
    "MAX_SUBMIT",
    "OBS_MAX_CHARS",
    "PROTOCOLS",
    "R1_EXAMPLE",
    "Action",
    "CategoryMode",
    "Invalid",
    "ProtocolName",
    "RustTokenizerCounter",
    "Search",
    "Submit",
    "TokenCounter",
    "TokenizerCounter",
    "WordCounter",
    "allocate_budget",
    "check_action",
    "make_counter",
    "parse_action",
    "render_call",
    "render_error",
    "render_results",
    "resolve_tool_id",
    "search_schema",
    "split_answer",
    "strip_thinking",
    "submit_schema",
    "system_prompt",
    "tool_schemas",
]
