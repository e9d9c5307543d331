"""A rule-based request splitter: the no-model baseline for decomposition.

``split_into_clauses`` cuts a request at sentence ends, semicolons and clause-joining
conjunctions ("and then", ", and", "also", "additionally" ...). It is what
``toolgym eval retrieval --decompose clauses`` retrieves with, so the learned decomposer of the
``Decompose`` environments has an honest baseline to beat.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

# Sentence ends, semicolons and explicit sequencing words. Plain "and" / "also" are too
# ambiguous ("clubs, managers, and referees", "I'm also curious") to split on.
_SEPARATOR = re.compile(
    r"((?<=[.!?])\s+|;\s*|,?\s+(?:and\s+then|and\s+after\s+that|then|after\s+that|afterwards|additionally)\s+)",
    re.IGNORECASE,
)
_MIN_WORDS = 3


def split_into_clauses(text: str) -> list[str]:
    """Split ``text`` into clauses; a fragment under three words stays joined to its neighbour.

    Always returns at least one clause for non-blank input (the whole text if nothing splits).
    """
    text = " ".join(text.split())
    if not text:
        return []
    parts = _SEPARATOR.split(text)  # [clause, sep, clause, sep, ..., clause]
    clauses: list[str] = []
    pending_sep = ""
    for i, part in enumerate(parts):
        if i % 2:  # a separator: kept only if its neighbours merge
            pending_sep = part
            continue
        piece = part.strip(" ,;")
        if not piece:
            continue
        if clauses and (len(piece.split()) < _MIN_WORDS or len(clauses[-1].split()) < _MIN_WORDS):
            clauses[-1] = (clauses[-1] + pending_sep + piece).strip(" ,;")
        else:
            clauses.append(piece)
    return clauses or [text]


def request_then_clauses(context: str, request: str) -> list[str]:
    """The raw request (``context``: earlier turns and the request, as retrieval reads it) as the
    first sub-query, then the latest ``request``'s clauses when it has at least two; else the raw
    request alone.

    Why: fused round robin, the list opens with what the whole request finds and adds each clause's
    best tools, so a multi-intent request keeps its raw ranking's head and recovers the tools one
    clause names; the clauses alone drop the history and the raw head (on the mixture's held-out
    Seal-Tools requests: C@10 93 and N@5 91.8 against the raw request's 85 / 88.1 and the clauses'
    93 / 86.8)."""
    clauses = split_into_clauses(request)
    context = " ".join(context.split())
    return [context, *clauses] if len(clauses) > 1 else [context]


class Request(Protocol):
    """What :func:`split_where` reads of a task (a :class:`toolgym.data.records.Task`; retrieval does
    not import data, which imports retrieval)."""

    query: str

    def context_text(self) -> str: ...


def split_where(tasks: Sequence[Request], split: Sequence[bool]) -> list[list[str]]:
    """Each task's sub-queries under a split decision: the raw request then its clauses
    (:func:`request_then_clauses`) where ``split``, else the raw request."""
    return [request_then_clauses(t.context_text(), t.query) if yes else [t.context_text()] for t, yes in zip(tasks, split)]
