"""Observations: search results cut to a shared token budget, and error messages."""
from __future__ import annotations

from collections.abc import Sequence

from toolgym.envs.actions import DEFAULT_TOKEN_BUDGET, MAX_REASON_CHARS, ProtocolName, clip
from toolgym.envs.syntax import HERMES_EXAMPLE, R1_EXAMPLE
from toolgym.envs.tokens import TokenCounter, WordCounter
from toolgym.retrieval.corpus import Tool


def allocate_budget(lengths: Sequence[int], budget: int) -> list[int]:
    """Split ``budget`` tokens over documents of ``lengths`` tokens (water-filling).

    Short documents keep their full length and leave what they do not use to the longer ones;
    each long document gets an equal share of the rest. The sum never exceeds ``budget``.
    """
    out = [0] * len(lengths)
    remaining = max(budget, 0)
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    for position, i in enumerate(order):
        share = remaining // (len(order) - position)
        out[i] = min(lengths[i], share)
        remaining -= out[i]
    return out


def render_results(
    tools: Sequence[Tool],
    *,
    query: str,
    category: str | None = None,
    protocol: ProtocolName = "hermes",
    budget: int = DEFAULT_TOKEN_BUDGET,
    counter: TokenCounter | None = None,
) -> str:
    """Render search results: id, name, category and a description, the descriptions of all
    documents together cut to ``budget`` tokens (see :func:`allocate_budget`)."""
    counter = counter or WordCounter()
    descriptions = [" ".join(t.description.split()) for t in tools]
    lengths = [counter.count(d) for d in descriptions]
    shares = allocate_budget(lengths, budget)
    cut = []
    for text, n, share in zip(descriptions, lengths, shares):
        if share >= n:
            cut.append(text or "(no description)")
        else:
            kept = counter.truncate(text, share)
            cut.append(f"{kept} …" if kept else "…")
    where = f' in category "{category}"' if category else ""
    words = query.split()
    query = clip(" ".join(words[:30]) + (" …" if len(words) > 30 else ""), 300)  # echo, not repeat, long queries
    if not tools:  # the retriever found no tool sharing a word with the query
        hint = "try other words" + (" or another category" if category else "")
        text = f'No tool matched "{query}"{where}; {hint}.'
        return f"<information>{text}</information>" if protocol == "search_r1" else text
    if protocol == "search_r1":
        docs = [
            f"Doc {r} (id: {t.id} | name: {t.name} | category: {t.category or '-'}) {d}"
            for r, (t, d) in enumerate(zip(tools, cut), start=1)
        ]
        return "<information>" + "\n".join(docs) + "</information>"
    lines = [f'Top {len(tools)} tools for "{query}"{where}:']
    for r, (t, d) in enumerate(zip(tools, cut), start=1):
        lines.append(f"[{r}] id: {t.id}\n    name: {t.name}\n    category: {t.category or '-'}\n    description: {d}")
    return "\n".join(lines)


def render_error(reason: str, protocol: ProtocolName = "hermes") -> str:
    """The observation for an invalid action: what was wrong (at most ``MAX_REASON_CHARS``) and
    the expected format."""
    example = HERMES_EXAMPLE if protocol == "hermes" else R1_EXAMPLE
    text = f"Error: {clip(reason, MAX_REASON_CHARS)}. Expected one call such as {example}."
    return f"<information>{text}</information>" if protocol == "search_r1" else text
