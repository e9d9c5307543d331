"""Tool-text construction choices: identifier splitting and the parameter summary.

``getWeatherForecast`` or ``check_flight_status`` is one ``\\w+`` token, so a query that says
"weather forecast" shares no BM25 term with it. :func:`split_identifiers` cuts such words at
camelCase humps, underscores / hyphens and letter-digit borders; BM25 applies it to tool texts
and queries alike (``build_index(..., identifiers=...)``), and ``ToolCorpus(split_identifiers=True)``
applies it to the tool text every retriever sees. Both are regexes with fixed-width look-arounds:
linear in the text. The choices were measured per retriever and dataset (docs/retrieval.md).
"""
from __future__ import annotations

import re
from typing import Any

# How BM25 treats identifiers: "whole" = bm25s's own tokens (the old behaviour), "split" = the
# parts only, "both" = the parts plus the whole word (a query naming the identifier still hits).
IDENTIFIER_MODES = ("whole", "split", "both")

# A boundary inside a word: lower|Upper (getWeather), UPPER|Upper-lower (HTTPServer -> HTTP Server),
# letter|digit and digit|letter (mp3, 2fa).
_BOUNDARY = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])|(?<=[A-Za-z])(?=[0-9])|(?<=[0-9])(?=[A-Za-z])")
# A word that has something to split: a hump, a digit-letter border or an inner _ / -.
_COMPOUND = re.compile(r"\b\w*(?:[a-z][A-Z]|[A-Z][A-Z][a-z]|[A-Za-z][0-9]|[0-9][A-Za-z]|[A-Za-z0-9][_-]+[A-Za-z0-9])[\w-]*")
# Parameter summaries are capped: a tool file may carry thousands of parameters.
MAX_PARAMETER_TEXT = 1000


def split_identifiers(text: str, keep_whole: bool = False) -> str:
    """``text`` with each compound word cut into its parts (``keep_whole``: the word, then its parts).

    ``"getWeatherForecast for check_flight_status"`` -> ``"get Weather Forecast for check flight status"``.
    """
    if keep_whole:
        return _COMPOUND.sub(lambda m: m.group(0) + " " + _split_word(m.group(0)), text)
    return _COMPOUND.sub(lambda m: _split_word(m.group(0)), text)


def _split_word(word: str) -> str:
    return _BOUNDARY.sub(" ", word.replace("_", " ").replace("-", " ")).strip()


def parameter_text(parameters: Any, limit: int = MAX_PARAMETER_TEXT) -> str:
    """``"name: description; ..."`` of a JSON-schema ``parameters`` object, at most ``limit`` characters.

    Anything not shaped like ``{"properties": {name: {"description": ...}}}`` gives ``""``.
    """
    props = parameters.get("properties") if isinstance(parameters, dict) else None
    if not isinstance(props, dict):
        return ""
    parts: list[str] = []
    size = 0
    for name, spec in props.items():
        desc = spec.get("description") if isinstance(spec, dict) else None
        part = f"{name}: {desc}" if isinstance(desc, str) and desc.strip() else str(name)
        parts.append(part[: limit - size])
        size += len(parts[-1]) + 2
        if size >= limit:
            break
    return "; ".join(parts)[:limit]
