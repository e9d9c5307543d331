"""The surface syntax of the two protocols, both ways: :func:`parse_action` reads a policy turn,
:func:`render_call` writes one (the scripted agents use it, so the syntax lives here only).

``hermes`` (default)
    The Hermes/Qwen function-call format chat templates already speak::

        <tool_call>{"name": "search", "arguments": {"query": "...", "category": "..."}}</tool_call>
        <tool_call>{"name": "submit", "arguments": {"tools": ["id", ...]}}</tool_call>

    Also accepted: the bare JSON object without tags (optionally in a ```json fence), an
    ``arguments`` value that is itself a JSON-encoded string (OpenAI's wire format, which real
    models copy), ``parameters`` for ``arguments`` (Llama), the OpenAI
    ``{"type": "function", "function": {...}}`` wrapper, and a final ``<tool_call>`` whose closing
    tag was eaten by a stop sequence. ``<think>...</think>`` blocks are ignored.
``search_r1``
    The tag format of Search-R1: ``<search>query</search>`` (optionally
    ``<search category="Finance">query</search>``) and ``<answer>id, id</answer>``; the first
    tag wins, as in Search-R1's own rollout code.

Parsing is linear in the length of the turn, and a turn longer than ``ACTION_MAX_CHARS`` is
rejected before anything else: tags are found with ``str.find`` and fixed-length patterns, never
with lazy ``.*?`` scans that restart at every unclosed tag, and every JSON error (the >4,300
digit integer limit included) becomes an :class:`Invalid`. Nothing here raises on policy text.
"""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from toolgym.envs.actions import (
    ACTION_MAX_CHARS,
    FUNCTION_NAMES,
    MAX_SUBMIT,
    ProtocolName,
    Action,
    Invalid,
    Search,
    Submit,
    check_protocol,
    clip,
    quote_names,
)

HERMES_EXAMPLE = '<tool_call>{"name": "search", "arguments": {"query": "..."}}</tool_call>'
R1_EXAMPLE = "<search>query</search> or <answer>tool_id, tool_id</answer>"

_THINK_OPEN = re.compile(r"<think>", re.I)
_THINK_CLOSE = re.compile(r"</think>", re.I)
_CALL_OPEN, _CALL_CLOSE = "<tool_call>", "</tool_call>"
# The attribute value is bounded: an unbounded [^"]* rescans the rest of the text at every
# unclosed `category="`, which is quadratic in the number of such tags.
_R1_OPEN = re.compile(
    r"<(search|answer)(?:\s+category\s*=\s*(?:\"([^\"]{0,256})\"|'([^']{0,256})'))?\s*>", re.I
)
_R1_CLOSE = {tag: re.compile(rf"</{tag}\s*>", re.I) for tag in ("search", "answer")}
_SURROGATE = re.compile("[\ud800-\udfff]")
_TOO_DEEP = "nested too deeply"


def strip_thinking(text: str, replacement: str = "") -> str:
    """``text`` with every closed ``<think>...</think>`` block replaced by ``replacement``; an
    unclosed ``<think>`` is kept. Linear: the scan only moves forward."""
    parts: list[str] = []
    pos = 0
    while True:
        start = _THINK_OPEN.search(text, pos)
        if start is None:
            break
        end = _THINK_CLOSE.search(text, start.end())
        if end is None:  # no close after this open, so none after any later open either
            break
        parts += [text[pos : start.start()], replacement]
        pos = end.end()
    parts.append(text[pos:])
    return "".join(parts)


def _describe(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__
    )


def _loads(text: str) -> tuple[Any, str | None]:
    """``(value, None)`` or ``(None, why)``: every way ``json.loads`` can fail on policy text."""
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        return None, f"{exc.msg} at character {exc.pos}"
    except RecursionError:
        return None, _TOO_DEEP
    except ValueError as exc:  # e.g. an integer over Python's 4,300-digit conversion limit
        return None, clip(str(exc).split(";")[0], 120)


def parse_action(text: Any, protocol: ProtocolName = "hermes", *, max_chars: int = ACTION_MAX_CHARS) -> Action:
    """Parse one policy turn (syntax only). Never raises on any ``text``; linear time."""
    check_protocol(protocol)
    if not isinstance(text, str):
        return Invalid(f"the action must be text (a string), got {type(text).__name__}")
    if len(text) > max_chars:
        return Invalid(f"the action is {len(text):,} characters long; the limit is {max_chars:,}")
    if "\x00" in text:
        return Invalid("the action contains a NUL character")
    body = strip_thinking(text).strip()
    if not body:
        return Invalid("empty action: make a function call" if not text.strip() else
                       "the turn holds only <think> reasoning and no function call")
    if protocol == "hermes":
        return _parse_hermes(body)
    return _parse_search_r1(body)


def _tool_call_blocks(body: str) -> list[str]:
    """The contents of the ``<tool_call>`` blocks (stops at two); a final unclosed block counts
    only when no block is closed (a stop sequence ate ``</tool_call>``)."""
    blocks: list[str] = []
    pos = 0
    while len(blocks) < 2:
        start = body.find(_CALL_OPEN, pos)
        if start < 0:
            break
        end = body.find(_CALL_CLOSE, start + len(_CALL_OPEN))
        if end < 0:
            if not blocks:
                blocks.append(body[start + len(_CALL_OPEN) :])
            break
        blocks.append(body[start + len(_CALL_OPEN) : end])
        pos = end + len(_CALL_CLOSE)
    return blocks


def _unfence(body: str) -> str | None:
    """The inside of a ```json ... ``` fence (``body`` is already stripped), else ``None``."""
    if len(body) < 6 or not (body.startswith("```") and body.endswith("```")):
        return None
    inner = body[3:-3]
    if inner.startswith(("json", "JSON")):
        inner = inner[4:]
    return inner.strip()


def _parse_hermes(body: str) -> Action:
    blocks = _tool_call_blocks(body)
    if len(blocks) > 1:
        return Invalid(f"found {body.count(_CALL_OPEN)} tool calls; make exactly one call per turn")
    if blocks:
        payload = blocks[0].strip()
        if not payload:
            return Invalid("the <tool_call> block is empty")
    else:
        fenced = _unfence(body)
        payload = fenced if fenced is not None else body
        if not payload.lstrip().startswith(("{", "[", '"')):
            if _R1_OPEN.search(body):
                return Invalid(f"this environment speaks the Hermes format, not <search>/<answer> tags: {HERMES_EXAMPLE}")
            return Invalid(f"no function call found; answer with {HERMES_EXAMPLE}")
    call, error = _loads(payload)
    if error == _TOO_DEEP:
        return Invalid("the function call is nested too deeply")
    if error is not None:
        return Invalid(f"the function call is not valid JSON ({error})")
    return _call_from_json(call)


def _call_from_json(call: Any) -> Action:
    if isinstance(call, str):
        inner, _ = _loads(call)
        if isinstance(inner, (dict, list)):
            return Invalid("the function call is double-encoded JSON (a string holding JSON); send the object itself")
        return Invalid("the function call must be a JSON object with \"name\" and \"arguments\", got a string")
    if isinstance(call, list):
        return Invalid("the function call must be one JSON object, not a list; make exactly one call per turn")
    if not isinstance(call, dict):
        return Invalid(f"the function call must be a JSON object with \"name\" and \"arguments\", got {_describe(call)}")
    if call.get("type") == "function" and isinstance(call.get("function"), dict):
        call = call["function"]  # OpenAI's {"type": "function", "function": {...}} wrapper
    name = call.get("name")
    if name is None:
        return Invalid("the function call has no \"name\"; use \"search\" or \"submit\"")
    if not isinstance(name, str):
        return Invalid(f"the function \"name\" must be a string, got {_describe(name)}")
    if name not in FUNCTION_NAMES:
        return Invalid(f"unknown function {clip(name)!r}; the functions are \"search\" and \"submit\"")
    extra = set(call) - {"name", "arguments", "parameters", "id", "type"}
    if extra:
        return Invalid(f"unexpected key(s) {quote_names(extra)} in the function call; use \"name\" and \"arguments\"")
    if "arguments" in call and "parameters" in call:
        return Invalid("give either \"arguments\" or \"parameters\", not both")
    args = call.get("arguments", call.get("parameters"))
    if args is None:
        return Invalid(f"{name} needs \"arguments\"" + (' with a "query"' if name == "search" else ' with "tools"'))
    if isinstance(args, str):
        # OpenAI's wire format sends arguments as a JSON string; models copy it.
        args, error = _loads(args)
        if error is not None:
            return Invalid(f"the \"arguments\" of {name} is a string that is not JSON; send an object")
        if isinstance(args, str):
            return Invalid(f"the \"arguments\" of {name} is encoded more than once; send an object")
    if not isinstance(args, dict):
        return Invalid(f"the \"arguments\" of {name} must be an object, got {_describe(args)}")
    return _search_from_args(args) if name == "search" else _submit_from_args(args)


def _search_from_args(args: dict[str, Any]) -> Action:
    extra = set(args) - {"query", "category"}
    if extra:
        return Invalid(f"search got unexpected argument(s) {quote_names(extra)}; it takes \"query\" and \"category\"")
    if "query" not in args:
        return Invalid("search needs a \"query\" argument")
    query = args["query"]
    if not isinstance(query, str):
        return Invalid(f"the search \"query\" must be a string, got {_describe(query)}")
    category = args.get("category")
    if category is not None and not isinstance(category, str):
        return Invalid(f"the search \"category\" must be a string, got {_describe(category)}")
    return _search(query, category)


def _search(query: str, category: str | None) -> Action:
    query = " ".join(query.split())
    if not query:
        return Invalid("the search query is empty")
    if "\x00" in query or (category and "\x00" in category):
        # the raw-text check in parse_action misses a NUL sent as the JSON escape "\u0000"
        return Invalid("the search contains a NUL character")
    if _SURROGATE.search(query) or (category and _SURROGATE.search(category)):
        # A JSON escape such as "\ud800" decodes to half a character; it cannot be shown or encoded.
        return Invalid("the search contains an invalid Unicode escape (a lone surrogate)")
    category = category.strip() if category else None
    return Search(query, category or None)


def _submit_from_args(args: dict[str, Any]) -> Action:
    extra = set(args) - {"tools"}
    if extra:
        return Invalid(f"submit got unexpected argument(s) {quote_names(extra)}; it takes \"tools\" (a list of tool ids)")
    if "tools" not in args:
        return Invalid("submit needs a \"tools\" argument: a list of tool ids")
    tools = args["tools"]
    if isinstance(tools, str):
        decoded, _ = _loads(tools)
        if not isinstance(decoded, list):
            return Invalid("submit \"tools\" must be a list of tool ids, e.g. [\"id1\", \"id2\"], got a string")
        tools = decoded
    if not isinstance(tools, list):
        return Invalid(f"submit \"tools\" must be a list of tool ids, got {_describe(tools)}")
    return _submit(tools)


def _submit(tools: Sequence[Any]) -> Action:
    bad = [t for t in tools if not isinstance(t, str)]
    if bad:
        return Invalid(f"every submitted tool id must be a string, got {_describe(bad[0])}")
    # Ids are kept verbatim (some corpora have ids with outer spaces); check_action resolves them.
    ids = tuple(dict.fromkeys(tools))
    if any(not t.strip() for t in ids):
        return Invalid("a submitted tool id is empty")
    if any("\x00" in t for t in ids):  # a JSON "\u0000" escape: the raw-text NUL check cannot see it
        return Invalid("a submitted tool id contains a NUL character")
    if not ids:
        return Invalid("submit needs at least one tool id")
    if len(ids) > MAX_SUBMIT:
        return Invalid(f"submitted {len(ids)} tools; submit at most {MAX_SUBMIT}")
    return Submit(ids)


def _first_r1_tag(body: str) -> tuple[re.Match[str], str] | None:
    """The winning tag and its content: the first open tag closed later in the text (what
    ``<(tag)>(.*?)</\\1>`` finds), else the first open tag with the rest of the text (a stop
    sequence ate the close). One pass over the opens, one over the closes."""
    opens = list(_R1_OPEN.finditer(body))
    if not opens:
        return None
    last_close = {tag: max((m.start() for m in pattern.finditer(body)), default=-1) for tag, pattern in _R1_CLOSE.items()}
    for match in opens:
        tag = match.group(1).lower()
        if last_close[tag] >= match.end():
            close = _R1_CLOSE[tag].search(body, match.end())
            assert close is not None
            return match, body[match.end() : close.start()]
    return opens[0], body[opens[0].end() :]


def _parse_search_r1(body: str) -> Action:
    found = _first_r1_tag(body)
    if found is None:
        if _CALL_OPEN in body or body.lstrip().startswith("{"):
            return Invalid(f"this environment speaks Search-R1 tags, not function-call JSON: {R1_EXAMPLE}")
        return Invalid(f"no <search> or <answer> tag found; answer with {R1_EXAMPLE}")
    match, content = found
    tag, category = match.group(1).lower(), match.group(2) if match.group(2) is not None else match.group(3)
    if tag == "search":
        return _search(content, category)
    if category is not None:
        return Invalid("<answer> takes no category attribute")
    content = content.strip()
    if content.startswith("["):
        ids, error = _loads(content)
        if error is not None:
            return Invalid("the <answer> looks like a JSON list but is not valid JSON")
        if not isinstance(ids, list):
            return Invalid("the <answer> must list tool ids separated by commas")
        return _submit(ids)
    parsed = _submit([part.strip() for part in re.split(r"[,\n]", content) if part.strip()])
    return Submit(parsed.tool_ids, answer=content) if isinstance(parsed, Submit) else parsed


# --------------------------------------------------------------------------------------
# writing calls (the inverse of parse_action)
# --------------------------------------------------------------------------------------
_R1_BREAKERS = re.compile(r"</?think>|</search|</answer|<search|<answer", re.I)


def _r1_text(text: str, what: str) -> str:
    if "\x00" in text or _R1_BREAKERS.search(text):
        raise ValueError(f"the {what} {clip(text)!r} cannot be written in Search-R1 tags (it holds a tag or NUL)")
    return text


def render_call(action: Search | Submit, protocol: ProtocolName = "hermes") -> str:
    """The text of ``action`` in ``protocol``: ``parse_action(render_call(a, p), p) == a``.

    Hermes writes one ``<tool_call>`` with ``<`` escaped as ``\\u003c`` inside the JSON, so no
    argument can be mistaken for a tag. Search-R1 writes ``<search>``/``<answer>`` tags; ids with
    commas, newlines or outer spaces go in a JSON list (``<answer>["a, b"]</answer>``), and text
    that would close or open a tag raises ``ValueError`` (the format has no escapes).
    """
    check_protocol(protocol)
    if isinstance(action, Search):
        if protocol == "search_r1":
            query = _r1_text(action.query, "query")
            if action.category is None:
                return f"<search>{query}</search>"
            category = _r1_text(action.category, "category")
            if len(category) > 256 or ('"' in category and "'" in category):
                raise ValueError(f"the category {clip(category)!r} cannot be written as a Search-R1 attribute")
            quote = "'" if '"' in category else '"'
            return f"<search category={quote}{category}{quote}>{query}</search>"
        args: dict[str, Any] = {"query": action.query}
        if action.category is not None:
            args["category"] = action.category
        return hermes_call("search", args)
    if isinstance(action, Submit):
        ids = list(action.tool_ids)
        if protocol == "search_r1":
            plain = all(t == t.strip() and not any(c in t for c in ",\n<>") for t in ids) and not (ids and ids[0].startswith("["))
            if plain:
                return "<answer>" + ", ".join(ids) + "</answer>"
            return "<answer>" + json.dumps(ids, ensure_ascii=False).replace("<", "\\u003c") + "</answer>"
        return hermes_call("submit", {"tools": ids})
    raise ValueError(f"render_call writes a Search or a Submit, got {type(action).__name__}")


def hermes_call(name: str, arguments: dict[str, Any]) -> str:
    """``<tool_call>{"name": name, "arguments": arguments}</tool_call>``, any arguments (the env judges them)."""
    # "<" only occurs inside JSON strings, where \u003c means the same character.
    payload = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False).replace("<", "\\u003c")
    return f"{_CALL_OPEN}{payload}{_CALL_CLOSE}"
