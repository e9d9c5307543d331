"""Requests, slots and values read off a tool record (bounded parsing of user data)."""
from __future__ import annotations

import random
import re
from typing import Any, Iterable, Mapping

from toolgym.retrieval.corpus import Tool


_MAX_TEXT = 600  # characters of a description read; a tool record is user data, keep parsing bounded
_EXAMPLES = re.compile(r"\((?:e\.g\.|eg\.|for example|such as)[,:]?\s*([^()]{1,300})\)", re.IGNORECASE)
_ACTION_VERBS = frozenset(
    "add book buy cancel change charge close create delete disable donate enable install order pay place "
    "post publish register remove rename reserve reset schedule send set share start stop submit subscribe "
    "transfer turn update upload write assign allocate apply deploy launch modify move register".split()
)
_KNOWN_VERBS = frozenset(
    "add analyze analyse assess book buy calculate cancel change check compare compute convert create "
    "delete detect download estimate evaluate fetch find generate get identify list locate log look manage "
    "measure monitor open optimize order plan play predict provide query rate read recommend record register "
    "remove request reserve retrieve schedule search send set share simulate start stop submit subscribe "
    "summarize track transfer translate turn update upload validate verify view perform run initiate make "
    "report control train conduct enroll determine execute count classify command adjust process scan "
    "calibrate toggle establish recognize restore design mark join enhance sign resolve solve activate "
    "configure authenticate block test authorize interpret scale redeem organize select collect clean "
    "transcribe lock render encrypt drop compress compile invite end save build upgrade reduce decrypt "
    "receive explore enter use show give discover access ask talk interact connect export scrape boost see "
    "return display extract parse load lookup".split()
) | _ACTION_VERBS
_ARTICLES = frozenset("a an the some any this these that".split())
_TRAILING = frozenset("a an the of for with to and in on by from about or at into".split())
_FALLBACK_VALUES = {
    "city": ["Beijing", "Paris", "Chicago", "Nairobi"],
    "location": ["downtown Seattle", "Berlin", "the office"],
    "country": ["Japan", "Brazil", "Canada"],
    "date": ["tomorrow", "next Monday", "2024-05-17"],
    "time": ["at 3 pm", "this evening", "at 9:30"],
    "name": ["Alex Chen", "Maria Lopez", "the Johnson project"],
    "email": ["alex@example.com", "team@example.org"],
    "language": ["French", "Spanish", "German"],
    "id": ["A-1024", "7781", "X93"],
    "query": ["electric cars", "jazz festivals", "budget hotels"],
}


def _words(identifier: str) -> str:
    """``team_name`` / ``teamName`` -> ``team name``."""
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", identifier[:80])
    return " ".join(re.split(r"[\s_\-.:|]+", text)).strip().lower()


def tool_parameters(tool: Tool) -> dict[str, dict[str, Any]]:
    """The tool's parameters as ``name -> spec`` (JSON-schema ``properties`` or a flat mapping)."""
    params = tool.parameters or {}
    props = params.get("properties") if isinstance(params.get("properties"), dict) else None
    if props is None:
        return {}
    return {str(k): (v if isinstance(v, dict) else {}) for k, v in list(props.items())[:20]}


def _slot_values(name: str, spec: Mapping[str, Any], rng: random.Random) -> list[str]:
    """Candidate values for a slot: the description's "(e.g., A, B)" list, the default, else a pool."""
    desc = str(spec.get("description") or "")[:_MAX_TEXT]
    values: list[str] = []
    m = _EXAMPLES.search(desc)
    if m:
        values = [v.strip(" .'\"") for v in m.group(1).split(",")]
        values = [v for v in values if 0 < len(v) <= 40][:4]
    default = spec.get("default")
    if not values and isinstance(default, (str, int, float)) and not isinstance(default, bool) and len(str(default)) <= 40:
        values = [str(default)]
    if len(values) < 2:
        words = _words(name)
        pool = next((v for k, v in _FALLBACK_VALUES.items() if k in words.split()), None)
        if pool is None and str(spec.get("type", "")).lower() in ("int", "integer", "float", "number"):
            pool = [str(rng.randint(2, 60)), str(rng.randint(61, 500)), str(rng.randint(501, 5000))]
        if pool is None:
            pool = [f"the usual {words}", f"my {words}", f"a new {words}"]
        values += [v for v in pool if v not in values]
    return values[:4]


def request_clause(tool: Tool) -> str:
    """The tool's job as an imperative clause, from its description: "retrieve the score of a game".

    Third-person verbs lose their "s" ("Returns ..." -> "return ..."); a description that does
    not start with a verb becomes "help with <description>".
    """
    desc = " ".join(tool.description[:_MAX_TEXT].split())
    desc = re.sub(r"^(?:this|the)\s+(?:api|tool|endpoint|method|service|resource|route|function|call)\s+(?:will\s+|can\s+|is\s+used\s+to\s+|allows\s+you\s+to\s+|lets\s+you\s+)?"
                  r"|^(?:api|endpoint|method|used)\s+to\s+|^allows?\s+(?:users?\s+|you\s+)?to\s+",
                  "", desc, count=1, flags=re.IGNORECASE)
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", desc) if s.strip()]
    chosen = None
    for sentence in sentences[:4]:
        first = sentence.split()[0].lower().strip(",:;")
        base = first[:-2] if first.endswith("es") and first[:-2] in _KNOWN_VERBS else first.rstrip("s") if first.endswith("s") else first
        if first in _KNOWN_VERBS or base in _KNOWN_VERBS:
            chosen = (base if base in _KNOWN_VERBS else first) + sentence[len(first):]
            break
    if chosen is None:
        head = sentences[0] if sentences else _words(tool.name)
        chosen = "help with " + (head[:1].lower() + head[1:] if not head[:2].isupper() else head)
    chosen = chosen.rstrip(" .!?;:")
    if len(chosen) > 140:
        chosen = chosen[:140].rsplit(" ", 1)[0]
    return chosen[:1].lower() + chosen[1:]


def scrub(text: str, names: Iterable[str]) -> str:
    """``text`` with every tool id / name in ``names`` replaced by "the service" (no tool leakage)."""
    names = sorted({n for n in names if n and len(n) >= 3}, key=len, reverse=True)
    if not names:
        return text
    pattern = re.compile(r"(?<![\w])(?:" + "|".join(re.escape(n) for n in names) + r")(?![\w])", re.IGNORECASE)
    return pattern.sub("the service", text)
