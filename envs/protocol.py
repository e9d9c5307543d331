"""The action protocol of the tool-search environments (DESIGN §4).

A policy turn is text. :func:`parse_action` turns it into one of three actions:

- :class:`Search` ``(query, category)`` — look up tools, the environment answers with the top-k;
- :class:`Submit` ``(tool_ids)`` — the final selection, ends the episode;
- :class:`Invalid` ``(reason)`` — anything else; ``reason`` is shown to the policy verbatim.

Two surface formats are understood:

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

Parsing is pure syntax; :func:`check_action` adds what needs the corpus (unknown category or
tool id, category mode, query length). Neither ever raises on policy text.
"""
from __future__ import annotations

import json
import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, Union

from toolgym.retrieval.corpus import Tool, ToolCorpus

PROTOCOLS = ("hermes", "search_r1")
CATEGORY_MODES = ("off", "optional", "required")
FUNCTION_NAMES = ("search", "submit")
DEFAULT_TOKEN_BUDGET = 768  # ToolSearcher's training budget for the five documents together
DEFAULT_MAX_QUERY_TOKENS = 256
MAX_QUERY_CHARS = 2048  # guards against one giant "word" slipping past a word count
MAX_SUBMIT = 64


@dataclass(frozen=True)
class Search:
    """``search(query, category?)``."""

    query: str
    category: str | None = None


@dataclass(frozen=True)
class Submit:
    """``submit(tools)``: the final selection, duplicates removed, order kept.

    ``answer`` keeps the text of a Search-R1 ``<answer>``: ids may contain commas (a dozen
    StableToolBench APIs do), so :func:`check_action` re-splits it against the corpus.
    """

    tool_ids: tuple[str, ...]
    answer: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Invalid:
    """A turn the environment cannot execute; ``reason`` says what was wrong."""

    reason: str


Action = Union[Search, Submit, Invalid]


# --------------------------------------------------------------------------------------
# token counting (policy tokenizer when given, words otherwise)
# --------------------------------------------------------------------------------------
class TokenCounter(Protocol):
    def count(self, text: str) -> int: ...

    def truncate(self, text: str, n: int) -> str: ...


class WordCounter:
    """Counts whitespace-separated words; the fallback when no tokenizer is given."""

    name = "words"

    def count(self, text: str) -> int:
        return len(text.split())

    def truncate(self, text: str, n: int) -> str:
        words = text.split()
        return " ".join(words[: max(n, 0)])


class TokenizerCounter:
    """Counts and cuts with a Hugging Face tokenizer (the policy's own), no special tokens."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.name = getattr(tokenizer, "name_or_path", type(tokenizer).__name__)

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def count(self, text: str) -> int:
        return len(self._ids(text)) if text else 0

    def truncate(self, text: str, n: int) -> str:
        if n <= 0:
            return ""
        if getattr(self.tokenizer, "is_fast", False):
            # Cut at a character offset so the kept text is the original text, byte for byte.
            enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            offsets = enc["offset_mapping"]
            if len(offsets) <= n:
                return text
            return text[: offsets[n - 1][1]].rstrip()
        ids = self._ids(text)
        return text if len(ids) <= n else self.tokenizer.decode(ids[:n]).rstrip()


class RustTokenizerCounter:
    """Counts and cuts with a ``tokenizers.Tokenizer`` (the Rust library, e.g. loaded from a
    ``tokenizer.json``); padding and truncation are switched off on a private copy."""

    def __init__(self, tokenizer: Any):
        import tokenizers

        self.tokenizer = tokenizers.Tokenizer.from_str(tokenizer.to_str())
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        self.name = "tokenizers.Tokenizer"

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids) if text else 0

    def truncate(self, text: str, n: int) -> str:
        if n <= 0:
            return ""
        offsets = self.tokenizer.encode(text, add_special_tokens=False).offsets
        return text if len(offsets) <= n else text[: offsets[n - 1][1]].rstrip()


def make_counter(tokenizer: Any = None) -> TokenCounter:
    """:class:`WordCounter` for ``None``; :class:`RustTokenizerCounter` for a
    ``tokenizers.Tokenizer``; :class:`TokenizerCounter` for a Hugging Face tokenizer."""
    if tokenizer is None:
        return WordCounter()
    if hasattr(tokenizer, "count") and hasattr(tokenizer, "truncate"):
        return tokenizer  # already a counter
    if type(tokenizer).__module__.startswith("tokenizers") and hasattr(tokenizer, "to_str"):
        return RustTokenizerCounter(tokenizer)
    return TokenizerCounter(tokenizer)


# --------------------------------------------------------------------------------------
# parsing
# --------------------------------------------------------------------------------------
_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
_TOOL_CALL_OPEN = re.compile(r"<tool_call>(.*)$", re.S)
_FENCE = re.compile(r"^```(?:json|JSON)?\s*(.*?)\s*```$", re.S)
_R1_TAG = re.compile(
    r"<(search|answer)(\s+category\s*=\s*(?:\"([^\"]*)\"|'([^']*)'))?\s*>(.*?)</\1\s*>", re.S | re.I
)
_R1_OPEN = re.compile(r"<(search|answer)(\s+category\s*=\s*(?:\"([^\"]*)\"|'([^']*)'))?\s*>(.*)$", re.S | re.I)

HERMES_EXAMPLE = '<tool_call>{"name": "search", "arguments": {"query": "..."}}</tool_call>'
R1_EXAMPLE = "<search>query</search> or <answer>tool_id, tool_id</answer>"


def _strip_thinking(text: str) -> str:
    return _THINK.sub("", text).strip()


def _describe(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__
    )


def parse_action(text: Any, protocol: str = "hermes") -> Action:
    """Parse one policy turn (syntax only). Never raises on any ``text``."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; choose one of {PROTOCOLS}")
    if not isinstance(text, str):
        return Invalid(f"the action must be text (a string), got {type(text).__name__}")
    if "\x00" in text:
        return Invalid("the action contains a NUL character")
    body = _strip_thinking(text)
    if not body:
        return Invalid("empty action: make a function call" if not text.strip() else
                       "the turn holds only <think> reasoning and no function call")
    if protocol == "hermes":
        return _parse_hermes(body)
    return _parse_search_r1(body)


def _parse_hermes(body: str) -> Action:
    blocks = _TOOL_CALL.findall(body)
    if not blocks:
        opened = _TOOL_CALL_OPEN.search(body)
        if opened:  # a stop sequence ate "</tool_call>"
            blocks = [opened.group(1)]
    if len(blocks) > 1:
        return Invalid(f"found {len(blocks)} tool calls; make exactly one call per turn")
    if blocks:
        payload = blocks[0].strip()
        if not payload:
            return Invalid("the <tool_call> block is empty")
    else:
        fenced = _FENCE.match(body)
        payload = fenced.group(1) if fenced else body
        if not payload.lstrip().startswith(("{", "[", '"')):
            if _R1_TAG.search(body) or _R1_OPEN.search(body):
                return Invalid(f"this environment speaks the Hermes format, not <search>/<answer> tags: {HERMES_EXAMPLE}")
            return Invalid(f"no function call found; answer with {HERMES_EXAMPLE}")
    try:
        call = json.loads(payload)
    except json.JSONDecodeError as exc:
        return Invalid(f"the function call is not valid JSON ({exc.msg} at character {exc.pos})")
    except RecursionError:
        return Invalid("the function call is nested too deeply")
    return _call_from_json(call)


def _call_from_json(call: Any) -> Action:
    if isinstance(call, str):
        try:
            inner = json.loads(call)
        except (json.JSONDecodeError, RecursionError):
            inner = None
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
        return Invalid(f"unknown function {name[:80]!r}; the functions are \"search\" and \"submit\"")
    extra = set(call) - {"name", "arguments", "parameters", "id", "type"}
    if extra:
        return Invalid(f"unexpected key(s) {sorted(extra)} in the function call; use \"name\" and \"arguments\"")
    if "arguments" in call and "parameters" in call:
        return Invalid("give either \"arguments\" or \"parameters\", not both")
    args = call.get("arguments", call.get("parameters"))
    if args is None:
        return Invalid(f"{name} needs \"arguments\"" + (' with a "query"' if name == "search" else ' with "tools"'))
    if isinstance(args, str):
        # OpenAI's wire format sends arguments as a JSON string; models copy it.
        try:
            args = json.loads(args)
        except (json.JSONDecodeError, RecursionError):
            return Invalid(f"the \"arguments\" of {name} is a string that is not JSON; send an object")
        if isinstance(args, str):
            return Invalid(f"the \"arguments\" of {name} is encoded more than once; send an object")
    if not isinstance(args, dict):
        return Invalid(f"the \"arguments\" of {name} must be an object, got {_describe(args)}")
    return _search_from_args(args) if name == "search" else _submit_from_args(args)


def _search_from_args(args: dict[str, Any]) -> Action:
    extra = set(args) - {"query", "category"}
    if extra:
        return Invalid(f"search got unexpected argument(s) {sorted(extra)}; it takes \"query\" and \"category\"")
    if "query" not in args:
        return Invalid("search needs a \"query\" argument")
    query = args["query"]
    if not isinstance(query, str):
        return Invalid(f"the search \"query\" must be a string, got {_describe(query)}")
    category = args.get("category")
    if category is not None and not isinstance(category, str):
        return Invalid(f"the search \"category\" must be a string, got {_describe(category)}")
    return _search(query, category)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _search(query: str, category: str | None) -> Action:
    query = " ".join(query.split())
    if not query:
        return Invalid("the search query is empty")
    if _SURROGATE.search(query) or (category and _SURROGATE.search(category)):
        # A JSON escape such as "\ud800" decodes to half a character; it cannot be shown or encoded.
        return Invalid("the search contains an invalid Unicode escape (a lone surrogate)")
    category = category.strip() if category else None
    return Search(query, category or None)


def _submit_from_args(args: dict[str, Any]) -> Action:
    extra = set(args) - {"tools"}
    if extra:
        return Invalid(f"submit got unexpected argument(s) {sorted(extra)}; it takes \"tools\" (a list of tool ids)")
    if "tools" not in args:
        return Invalid("submit needs a \"tools\" argument: a list of tool ids")
    tools = args["tools"]
    if isinstance(tools, str):
        try:
            decoded = json.loads(tools)
        except (json.JSONDecodeError, RecursionError):
            decoded = None
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
    if not ids:
        return Invalid("submit needs at least one tool id")
    if len(ids) > MAX_SUBMIT:
        return Invalid(f"submitted {len(ids)} tools; submit at most {MAX_SUBMIT}")
    return Submit(ids)


def _parse_search_r1(body: str) -> Action:
    match = _R1_TAG.search(body) or _R1_OPEN.search(body)  # an open tag at the end: stop sequence ate the close
    if match is None:
        if "<tool_call>" in body or body.lstrip().startswith("{"):
            return Invalid(f"this environment speaks Search-R1 tags, not function-call JSON: {R1_EXAMPLE}")
        return Invalid(f"no <search> or <answer> tag found; answer with {R1_EXAMPLE}")
    tag, category, content = match.group(1).lower(), match.group(3) or match.group(4), match.group(5)
    if tag == "search":
        return _search(content, category)
    if category is not None:
        return Invalid("<answer> takes no category attribute")
    content = content.strip()
    ids: Any
    if content.startswith("["):
        try:
            ids = json.loads(content)
        except (json.JSONDecodeError, RecursionError):
            return Invalid("the <answer> looks like a JSON list but is not valid JSON")
        if not isinstance(ids, list):
            return Invalid("the <answer> must list tool ids separated by commas")
    else:
        ids = [part.strip() for part in re.split(r"[,\n]", content) if part.strip()]
        parsed = _submit(ids)
        return Submit(parsed.tool_ids, answer=content) if isinstance(parsed, Submit) else parsed
    return _submit(ids)


# --------------------------------------------------------------------------------------
# semantic checks against the corpus
# --------------------------------------------------------------------------------------
def check_action(
    action: Action,
    corpus: ToolCorpus,
    category_mode: str = "optional",
    *,
    max_query_tokens: int = DEFAULT_MAX_QUERY_TOKENS,
    counter: TokenCounter | None = None,
) -> Action:
    """Return ``action`` unchanged if the environment can execute it, else an :class:`Invalid`."""
    if category_mode not in CATEGORY_MODES:
        raise ValueError(f"unknown category mode {category_mode!r}; choose one of {CATEGORY_MODES}")
    if isinstance(action, Search):
        counter = counter or WordCounter()
        n = counter.count(action.query)
        if n > max_query_tokens or len(action.query) > MAX_QUERY_CHARS:
            return Invalid(
                f"the search query is too long ({n} tokens, {len(action.query)} characters); "
                f"keep it under {max_query_tokens} tokens and {MAX_QUERY_CHARS} characters"
            )
        if action.category is not None:
            if category_mode == "off":
                return Invalid("category filtering is off in this episode; call search with a query only")
            if action.category not in corpus.categories:
                return Invalid(f"unknown category {action.category[:80]!r}; use one of the categories listed in the search schema")
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
            shown = ", ".join(repr(t.strip()[:80]) for t in unknown[:5])
            more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
            return Invalid(f"unknown tool id(s) {shown}{more}; submit ids exactly as shown in search results")
        resolved = list(dict.fromkeys(resolved))
        return action if tuple(resolved) == action.tool_ids else Submit(tuple(resolved))
    return action


def split_answer(corpus: ToolCorpus, answer: str) -> list[str]:
    """Split a Search-R1 answer into ids: lines, then commas, greedily re-joining comma pieces
    while the longest join is a corpus id (``"api::Trending (music, gaming)"`` stays whole)."""
    out: list[str] = []
    for line in answer.split("\n"):
        pieces = line.split(",")
        i = 0
        while i < len(pieces):
            for j in range(len(pieces), i, -1):
                candidate = ",".join(pieces[i:j])
                if j == i + 1 or resolve_tool_id(corpus, candidate) is not None:
                    break
            if candidate.strip():
                out.append(candidate)
            i = j
    return out


_STRIPPED_IDS: "weakref.WeakKeyDictionary[ToolCorpus, dict[str, str]]" = weakref.WeakKeyDictionary()


def resolve_tool_id(corpus: ToolCorpus, tool_id: str) -> str | None:
    """The corpus id ``tool_id`` names: itself if present, else the unique id equal to it up to
    outer whitespace (tag formats lose it: ``<answer> a, b </answer>``); ``None`` if unknown."""
    if tool_id in corpus:
        return tool_id
    table = _STRIPPED_IDS.get(corpus)
    if table is None:
        table, clashes = {}, set()
        for known in corpus.ids:
            key = known.strip()
            if key in table:
                clashes.add(key)
            table[key] = known
        for key in clashes:
            del table[key]
        _STRIPPED_IDS[corpus] = table
    return table.get(tool_id.strip())


# --------------------------------------------------------------------------------------
# schemas and the system prompt
# --------------------------------------------------------------------------------------
def search_schema(categories: Sequence[str] = (), category_mode: str = "off", top_k: int = 5) -> dict[str, Any]:
    """OpenAI function schema of ``search``; ``category`` is an enum of the corpus's categories
    when category mode is on, and listed in ``required`` in ``required`` mode."""
    if category_mode not in CATEGORY_MODES:
        raise ValueError(f"unknown category mode {category_mode!r}; choose one of {CATEGORY_MODES}")
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


def tool_schemas(categories: Sequence[str] = (), category_mode: str = "off", top_k: int = 5) -> list[dict[str, Any]]:
    return [search_schema(categories, category_mode, top_k), submit_schema()]


def system_prompt(
    corpus: ToolCorpus,
    *,
    protocol: str = "hermes",
    category_mode: str = "off",
    max_turns: int = 8,
    top_k: int = 5,
) -> str:
    """The system prompt: the task, the turn budget, the function schemas and the call format."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; choose one of {PROTOCOLS}")
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
        return (
            f"{intro}\n\n# Tools\n\nYou are provided with function signatures within <tools></tools> XML tags:\n"
            f"<tools>\n{schema_text}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
        )
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


# --------------------------------------------------------------------------------------
# observations
# --------------------------------------------------------------------------------------
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
    protocol: str = "hermes",
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
    query = " ".join(words[:30]) + (" …" if len(words) > 30 else "")  # echo, not repeat, long queries
    if protocol == "search_r1":
        if not tools:
            return f"<information>No tools found for \"{query}\"{where}.</information>"
        docs = [
            f"Doc {r} (id: {t.id} | name: {t.name} | category: {t.category or '-'}) {d}"
            for r, (t, d) in enumerate(zip(tools, cut), start=1)
        ]
        return "<information>" + "\n".join(docs) + "</information>"
    if not tools:
        return f'No tools found for "{query}"{where}.'
    lines = [f'Top {len(tools)} tools for "{query}"{where}:']
    for r, (t, d) in enumerate(zip(tools, cut), start=1):
        lines.append(f"[{r}] id: {t.id}\n    name: {t.name}\n    category: {t.category or '-'}\n    description: {d}")
    return "\n".join(lines)


def render_error(reason: str, protocol: str = "hermes") -> str:
    """The observation for an invalid action: what was wrong and the expected format."""
    example = HERMES_EXAMPLE if protocol == "hermes" else R1_EXAMPLE
    text = f"Error: {reason}. Expected one call such as {example}."
    return f"<information>{text}</information>" if protocol == "search_r1" else text
