"""The three actions of a tool-search turn and the vocabulary both environments share.

:class:`Search`, :class:`Submit` and :class:`Invalid` are what :func:`~toolgym.envs.syntax.parse_action`
makes of a policy turn; the ``Literal`` types name the protocols and category modes once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args

ProtocolName = Literal["hermes", "search_r1"]
CategoryMode = Literal["off", "optional", "required"]
PROTOCOLS: tuple[str, ...] = get_args(ProtocolName)
CATEGORY_MODES: tuple[str, ...] = get_args(CategoryMode)
FUNCTION_NAMES = ("search", "submit")

ACTION_MAX_CHARS = 32_768  # a longer turn is rejected before any parsing
OBS_MAX_CHARS = 1_048_576
DEFAULT_TOKEN_BUDGET = 768  # ToolSearcher's training budget for the five documents together
DEFAULT_MAX_QUERY_TOKENS = 256
MAX_QUERY_CHARS = 2048  # guards against one giant "word" slipping past a word count
MAX_SUBMIT = 64
MAX_REASON_CHARS = 600  # an error reason (and so an error observation) never grows past this


@dataclass(frozen=True)
class Search:
    """``search(query, category?)``."""

    query: str
    category: str | None = None


@dataclass(frozen=True)
class Submit:
    """``submit(tools)``: the final selection, duplicates removed, order kept.

    ``answer`` keeps the text of a Search-R1 ``<answer>``: ids may contain commas (a dozen
    StableToolBench APIs do), so :func:`~toolgym.envs.checks.check_action` re-splits it against
    the corpus.
    """

    tool_ids: tuple[str, ...]
    answer: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Invalid:
    """A turn the environment cannot execute; ``reason`` says what was wrong."""

    reason: str


Action = Union[Search, Submit, Invalid]


def check_protocol(protocol: str) -> str:
    """``protocol`` if it is one of :data:`PROTOCOLS`, else a ``ValueError`` naming them."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; choose one of {PROTOCOLS}")
    return protocol


def check_category_mode(mode: str) -> str:
    """``mode`` if it is one of :data:`CATEGORY_MODES`, else a ``ValueError`` naming them."""
    if mode not in CATEGORY_MODES:
        raise ValueError(f"unknown category mode {mode!r}; choose one of {CATEGORY_MODES}")
    return mode


def check_count(name: str, value: Any, minimum: int) -> int:
    """``value`` as an ``int`` >= ``minimum``; a bool, a fraction (``2.7``), inf/NaN or a string
    is a ``ValueError`` naming the setting, never silently rounded (``int(2.7)`` is 2,
    ``int(True)`` is 1, ``int(inf)`` an ``OverflowError``)."""
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {type(value).__name__} {clip(repr(value))}")
    if isinstance(value, numbers.Integral):
        out = int(value)
    else:
        f = float(value)
        if not math.isfinite(f) or not f.is_integer():
            raise ValueError(f"{name} must be an integer >= {minimum}, got {clip(repr(value))}")
        out = int(f)
    if out < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {out}")
    return out


def clip(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters (with ``…``): echoes of policy text stay bounded."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def quote_names(names: list[str] | set[str], shown: int = 5, each: int = 40) -> str:
    """At most ``shown`` names, each cut to ``each`` characters, as ``['a', 'b'] and 7 more``."""
    ordered = sorted(names)  # the names come from a capped action, so this is cheap
    head = ", ".join(repr(clip(n, each)) for n in ordered[:shown])
    more = f" and {len(ordered) - shown} more" if len(ordered) > shown else ""
    return f"[{head}]{more}"
