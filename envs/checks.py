"""What needs the corpus to check an action: category mode, known category, query length,
known tool ids (matched up to outer whitespace, Search-R1 answers re-split against the ids)."""
from __future__ import annotations

import weakref

from toolgym.envs.actions import (
    DEFAULT_MAX_QUERY_TOKENS,
    MAX_QUERY_CHARS,
    Action,
    CategoryMode,
    Invalid,
    Search,
    Submit,
    check_category_mode,
    clip,
)
from toolgym.envs.tokens import TokenCounter, WordCounter
from toolgym.retrieval.corpus import ToolCorpus


def check_action(
    action: Action,
    corpus: ToolCorpus,
    category_mode: CategoryMode = "optional",
    *,
    max_query_tokens: int = DEFAULT_MAX_QUERY_TOKENS,
    counter: TokenCounter | None = None,
) -> Action:
    """Return ``action`` unchanged if the environment can execute it, else an :class:`Invalid`."""
    check_category_mode(category_mode)
    if isinstance(action, Search):
        limits = f"keep it under {max_query_tokens} tokens and {MAX_QUERY_CHARS} characters"
        if len(action.query) > MAX_QUERY_CHARS:  # before counting: no tokenizer run on huge text
            return Invalid(f"the search query is too long ({len(action.query)} characters); {limits}")
        n = (counter or WordCounter()).count(action.query)
        if n > max_query_tokens:
            return Invalid(f"the search query is too long ({n} tokens, {len(action.query)} characters); {limits}")
        if action.category is not None:
            if category_mode == "off":
                return Invalid("category filtering is off in this episode; call search with a query only")
            if action.category not in corpus.categories:
                return Invalid(f"unknown category {clip(action.category)!r}; use one of the categories listed in the search schema")
        elif category_mode == "required":
            return Invalid("this episode requires a category: call search with both \"query\" and \"category\"")
        return action
    if isinstance(action, Submit):
        resolved, unknown = [], []
        pieces = split_answer(corpus, action.answer) if action.answer is not None else action.tool_ids
        for tool_id in pieces:
            found = resolve_tool_id(corpus, tool_id)
            (resolved if found is not None else unknown).append(found if found is not None else tool_id)
        if unknown:
            shown = ", ".join(repr(clip(t.strip())) for t in unknown[:5])
            more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
            return Invalid(f"unknown tool id(s) {shown}{more}; submit ids exactly as shown in search results")
        resolved = list(dict.fromkeys(resolved))
        return action if tuple(resolved) == action.tool_ids else Submit(tuple(resolved))
    return action


def split_answer(corpus: ToolCorpus, answer: str) -> list[str]:
    """Split a Search-R1 answer into ids: lines, then commas, greedily re-joining comma pieces
    while the longest join is a corpus id (``"api::Trending (music, gaming)"`` stays whole).

    A join is tried only up to the most commas any corpus id has, so the split is linear in the
    answer's length (an unbounded search for the longest join is cubic)."""
    most = _corpus_tables(corpus)[1]
    out: list[str] = []
    for line in answer.split("\n"):
        pieces = line.split(",")
        i = 0
        while i < len(pieces):
            j = i + 1
            for end in range(min(len(pieces), i + 1 + most), i + 1, -1):
                if resolve_tool_id(corpus, ",".join(pieces[i:end])) is not None:
                    j = end
                    break
            candidate = ",".join(pieces[i:j])
            if candidate.strip():
                out.append(candidate)
            i = j
    return out


_TABLES: "weakref.WeakKeyDictionary[ToolCorpus, tuple[dict[str, str], int]]" = weakref.WeakKeyDictionary()


def _corpus_tables(corpus: ToolCorpus) -> tuple[dict[str, str], int]:
    """(stripped id -> id for ids unique up to outer whitespace, most commas in one id)."""
    tables = _TABLES.get(corpus)
    if tables is None:
        table: dict[str, str] = {}
        clashes: set[str] = set()
        for known in corpus.ids:
            key = known.strip()
            if key in table:
                clashes.add(key)
            table[key] = known
        for key in clashes:
            del table[key]
        tables = (table, max((known.count(",") for known in corpus.ids), default=0))
        _TABLES[corpus] = tables
    return tables


def resolve_tool_id(corpus: ToolCorpus, tool_id: str) -> str | None:
    """The corpus id ``tool_id`` names: itself if present, else the unique id equal to it up to
    outer whitespace (tag formats lose it: ``<answer> a, b </answer>``); ``None`` if unknown."""
    if tool_id in corpus:
        return tool_id
    return _corpus_tables(corpus)[0].get(tool_id.strip())
