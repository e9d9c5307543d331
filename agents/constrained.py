"""Constrained decoding of ToolSearch-v0 calls (issue 8, item 3): every turn parses.

:class:`ConstrainedToolSearchPolicy` wraps an :class:`~toolgym.agents.hf_policy.HFChatPolicy` and
writes each Hermes call as a sequence of segments, one token per decoding step (KV cache, all
rows of a batch together, each row its own state machine):

* **forced** text, the JSON skeleton (``<tool_call>{"name": "``, ``", "arguments": {"query": "``,
  ``"}}</tool_call>``, ...): appended, not sampled, loss mask 0;
* **choices**, sampled token by token from the model's distribution restricted to the tokens that
  continue a valid option (a :class:`TokenTrie` over each option's token ids; softmax renormalised
  over the allowed set): the function name (``submit`` only once a search showed an id), the
  category (the enum of the search schema the env offered, or none when optional) and each
  submitted id (among the :data:`MAX_IDS_CONSIDERED` most recent ids that this episode's search
  results showed, none twice, or stop). A step where only one token continues is forced (mask 0);
* the **query**, sampled from the distribution restricted to JSON-string-safe tokens: a token
  holding ``"``, ``\\``, ``<`` or a control character, or a special token, is disallowed; the
  one-character token ``"`` ends the query (allowed once the query has a non-space character,
  forced at ``query_max_tokens``). The query therefore needs no escaping and cannot close the
  ``<tool_call>`` block early.

Every sampled token records its allowed set (``Generation.allowed``), which the rollout carries
into the ``TokenBatch``, so :func:`~toolgym.trainers.grpo.response_logprobs` scores it under the
same restricted distribution it was drawn from: the PPO ratio is exactly 1 before an update.
Ids and categories come only from what the policy sees (the episode's tool messages and the
``tool_schemas`` of the reset ``info``), never from gold.
"""
from __future__ import annotations

import json
import re
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from toolgym.agents.policy import Generation, SamplingConfig

__all__ = ["CONSTRAINED_MODES", "ConstrainedToolSearchPolicy", "EpisodeView", "TokenTrie", "constrain_policy",
           "search_arguments", "seen_tool_ids"]

CONSTRAINED_MODES = ("toolsearch",)  # values of the `model.constrained` config key
MAX_IDS_CONSIDERED = 50  # most recent distinct ids offered to submit (hostile observations stay bounded)
MAX_OBSERVATION_CHARS = 65_536  # of each tool message, scanned for ids
MAX_MESSAGES_SCANNED = 64  # most recent tool messages scanned
MAX_OPTION_TOKENS = 64  # longer ids / categories are not offered
MAX_SUBMIT = 64  # as envs.actions.MAX_SUBMIT (agents do not import envs)
# One result line of the Hermes rendering (envs/rendering.py): "[1] id: <tool id>".
_ID_LINE = re.compile(r"^\[\d{1,4}\] id: ([^\n]{1,256})$", re.M)


@dataclass
class EpisodeView:
    """What the policy sees of its episode: the chat so far, the function schemas the env offered
    (its reset ``info["tool_schemas"]``; ``None`` = unknown: search without a category) and the
    env's protocol (constrained decoding writes Hermes calls only)."""

    messages: Sequence[Mapping[str, str]]
    tool_schemas: Sequence[Mapping[str, Any]] | None = None
    protocol: str = "hermes"


def seen_tool_ids(messages: Sequence[Mapping[str, str]], limit: int = MAX_IDS_CONSIDERED) -> list[str]:
    """The distinct tool ids the episode's search results showed, most recent first, at most ``limit``.

    Only ``tool`` messages are read (a request quoting an id offers nothing), the last
    :data:`MAX_MESSAGES_SCANNED` of them, each cut to :data:`MAX_OBSERVATION_CHARS`: linear and
    bounded on any input.
    """
    out: dict[str, None] = {}
    tool_messages = [m for m in messages[-4 * MAX_MESSAGES_SCANNED:] if m.get("role") == "tool"]
    for message in reversed(tool_messages[-MAX_MESSAGES_SCANNED:]):
        content = message.get("content")
        if not isinstance(content, str):
            continue
        if len(content) > MAX_OBSERVATION_CHARS:  # cut at a line end: never offer half an id
            content = content[:MAX_OBSERVATION_CHARS].rpartition("\n")[0]
        found = _ID_LINE.findall(content)
        for tool_id in reversed(found):
            if tool_id.strip() and tool_id not in out:
                out[tool_id] = None
                if len(out) >= limit:
                    return list(out)
    return list(out)


def search_arguments(tool_schemas: Sequence[Mapping[str, Any]] | None) -> tuple[list[str], bool]:
    """``(categories, required)`` of the ``search`` schema the env offered: the ``category`` enum
    (empty when the schema has no category) and whether it is required. ``None`` (schemas
    unknown) means no category; schemas without a ``search`` function are a ``ValueError``."""
    if tool_schemas is None:
        return [], False
    for schema in tool_schemas:
        function = schema.get("function", schema) if isinstance(schema, Mapping) else {}
        if not isinstance(function, Mapping) or function.get("name") != "search":
            continue
        params = function.get("parameters") or {}
        category = (params.get("properties") or {}).get("category")
        if not isinstance(category, Mapping):
            return [], False
        enum = [c for c in category.get("enum") or () if isinstance(c, str) and c.strip()]
        return list(dict.fromkeys(enum)), "category" in (params.get("required") or ())
    raise ValueError("constrained decoding writes ToolSearch calls, but the env offers no \"search\" function")


def json_string(text: str) -> str:
    """``text`` as a JSON string literal, ``<`` escaped as ``render_call`` does (never a tag)."""
    return json.dumps(text, ensure_ascii=False).replace("<", "\\u003c")


@dataclass
class _Node:
    children: dict[int, "_Node"] = field(default_factory=dict)
    key: Any = None
    allowed: tuple[int, ...] = ()


class TokenTrie:
    """A trie over token-id sequences, one per option; ``node.allowed`` = the tokens that continue
    some option (one shared tuple per node). Options must be prefix-free (each ends with a
    delimiter), so every option ends at a leaf."""

    def __init__(self, options: Mapping[Any, Sequence[int]]):
        if not options:
            raise ValueError("a choice needs at least one option")
        self.root = _Node()
        for key, ids in options.items():
            if not ids:
                raise ValueError(f"option {key!r} has no tokens")
            node = self.root
            for tid in ids:
                if node.key is not None:
                    raise ValueError(f"option {node.key!r} is a prefix of option {key!r}")
                node = node.children.setdefault(int(tid), _Node())
            if node.children or node.key is not None:
                raise ValueError(f"option {key!r} is a prefix of (or equal to) another option")
            node.key = key
        stack = [self.root]
        while stack:
            node = stack.pop()
            node.allowed = tuple(sorted(node.children))
            stack.extend(node.children.values())


# -- segments of one turn -------------------------------------------------------------------------
@dataclass
class _Forced:
    ids: list[int]


@dataclass
class _Choice:
    trie: TokenTrie


@dataclass
class _Query:
    cap: int


@dataclass
class _Row:
    program: Generator[Any, Any, None]
    segment: Any = None
    pos: int = 0  # forced: next index
    node: _Node | None = None  # choice: where in the trie
    query: list[int] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    allowed: list[tuple[int, ...] | None] = field(default_factory=list)
    logprobs: list[float | None] = field(default_factory=list)
    done: bool = False


class ConstrainedToolSearchPolicy:
    """An :class:`HFChatPolicy` whose every ToolSearch-v0 (Hermes) turn is a valid call.

    Same token interface as the wrapped policy (``encode_prompt``, ``encode_tool_turn``,
    ``generate_batch``); ``needs_episode = True`` tells the rollout to pass one
    :class:`EpisodeView` per prompt. Temperature is applied as in ``HFChatPolicy``
    (``logits / T``, then the restriction; ``T = 0`` is greedy). ``top_p`` / ``top_k`` are not
    supported (the trainer's log-probs never apply them): they must be 1.0 / 0.
    """

    needs_episode = True

    def __init__(self, base: Any, query_max_tokens: int = 48, max_ids: int = MAX_IDS_CONSIDERED):
        if query_max_tokens < 1 or max_ids < 1:
            raise ValueError("query_max_tokens and max_ids must be >= 1")
        self.base = base
        self.query_max_tokens = int(query_max_tokens)
        self.max_ids = int(max_ids)
        self._check_sampling(base.sampling)
        tok = base.tokenizer
        self._quote = tok.encode('"', add_special_tokens=False)
        if len(self._quote) != 1:
            raise ValueError("constrained decoding needs a tokenizer with a one-token '\"'")
        self._enc_cache: dict[str, list[int]] = {}
        self._head = self._enc('<tool_call>{"name": "')
        self._search = self._enc('search", "arguments": {"query": "')
        self._submit = self._enc('submit", "arguments": {"tools": [')
        self._no_category = self._enc("}}</tool_call>")
        self._stop = self._enc("]}}</tool_call>")
        self._safe, self._closable = self._query_sets(tok)
        self._query_masks: dict[tuple[int, str, int], torch.Tensor] = {}

    # -- the wrapped policy's interface -------------------------------------------------------------
    @property
    def model(self) -> Any:
        return self.base.model

    @model.setter
    def model(self, value: Any) -> None:
        self.base.model = value

    @property
    def sampling(self) -> SamplingConfig:
        return self.base.sampling

    @sampling.setter
    def sampling(self, value: SamplingConfig) -> None:
        self._check_sampling(value)
        self.base.sampling = value

    @property
    def tokenizer(self) -> Any:
        return self.base.tokenizer

    @property
    def end_ids(self) -> list[int]:
        return self.base.end_ids

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def encode_prompt(self, messages: Sequence[dict[str, str]], tools: list[dict] | None = None) -> list[int]:
        return self.base.encode_prompt(messages, tools)

    def encode_tool_turn(self, tool_text: str, generated_end: bool) -> list[int]:
        return self.base.encode_tool_turn(tool_text, generated_end)

    @staticmethod
    def _check_sampling(s: SamplingConfig) -> None:
        if s.top_p < 1.0 or s.top_k > 0:
            raise ValueError(f"constrained decoding samples from the whole renormalised distribution: set "
                             f"sampling.top_p=1.0 and top_k=0 (got {s.top_p}, {s.top_k})")

    # -- building blocks ----------------------------------------------------------------------------
    def _enc(self, text: str) -> list[int]:
        ids = self._enc_cache.get(text)
        if ids is None:
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            if len(self._enc_cache) < 10_000:
                self._enc_cache[text] = ids
        return list(ids)

    def _query_sets(self, tok: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Tokens a query may hold (JSON-string-safe, never a tag), and those plus the closing ``"``."""
        special = set(tok.all_special_ids) | {int(i) for i in getattr(tok, "added_tokens_decoder", {})}
        texts = tok.batch_decode([[i] for i in range(len(tok))])
        safe = tuple(i for i, t in enumerate(texts)
                     if t and i not in special and not any(c in '"\\<' or ord(c) < 0x20 for c in t))
        closable = tuple(sorted(set(safe) | set(self._quote)))
        return safe, closable

    def _turn(self, view: EpisodeView, budget: int) -> Generator[Any, Any, None]:
        """The segments of one call; ``budget`` = most tokens the turn may take (all of them fit)."""
        if view.protocol != "hermes":
            raise ValueError(f"constrained decoding writes Hermes tool calls; the env speaks {view.protocol!r}")
        ids = seen_tool_ids(view.messages, self.max_ids)
        categories, required = search_arguments(view.tool_schemas)
        left = budget - len(self._head)
        first_ids = {i: o for i in ids if len(o := self._enc(json_string(i))) <= MAX_OPTION_TOKENS}
        tails: dict[Any, list[int]] = {} if required else {None: self._no_category}
        for c in categories:
            if len(o := self._enc(", \"category\": " + json_string(c) + "}}</tool_call>")) <= MAX_OPTION_TOKENS:
                tails[c] = o
        names: dict[str, list[int]] = {}
        if tails and len(self._search) + 2 + min(map(len, tails.values())) <= left:
            names["search"] = self._search
        if first_ids and len(self._submit) + min(map(len, first_ids.values())) + len(self._stop) <= left:
            names["submit"] = self._submit
        if not names:
            raise ValueError(f"max_new_tokens={budget} leaves no room for a constrained call")
        yield _Forced(self._head)
        name = yield _Choice(TokenTrie(names))
        left -= len(names[name])
        if name == "search":
            cap = min(self.query_max_tokens, left - min(map(len, tails.values())) - 1)
            used = yield _Query(cap)
            left -= used
            yield _Choice(TokenTrie({k: v for k, v in tails.items() if len(v) <= left}))
            return
        left -= len(self._stop)
        options = {k: v for k, v in first_ids.items() if len(v) <= left}
        chosen = yield _Choice(TokenTrie(options))
        picked = {chosen}
        left -= len(options[chosen])
        while True:
            more = {} if len(picked) >= MAX_SUBMIT else {
                i: o for i in first_ids if i not in picked and len(o := self._enc(", " + json_string(i))) <= left}
            chosen = yield _Choice(TokenTrie({None: self._stop} | more))
            if chosen is None:
                return
            picked.add(chosen)
            left -= len(more[chosen])

    # -- decoding -----------------------------------------------------------------------------------
    def _advance(self, row: _Row, result: Any) -> None:
        """Send a finished segment's result to the row's program and set up the next segment."""
        try:
            seg = row.program.send(result) if row.segment is not None else next(row.program)
        except StopIteration:
            row.done, row.segment = True, None
            return
        row.segment, row.pos, row.node, row.query = seg, 0, None, []
        if isinstance(seg, _Choice):
            row.node = seg.trie.root

    def _need(self, row: _Row) -> tuple[int, ...] | int:
        """The row's next token if forced (an int), else the allowed set to sample from."""
        seg = row.segment
        if isinstance(seg, _Forced):
            return seg.ids[row.pos]
        if isinstance(seg, _Choice):
            allowed = row.node.allowed
            return allowed[0] if len(allowed) == 1 else allowed
        if len(row.query) >= seg.cap:
            return self._quote[0]
        text = self.tokenizer.decode(row.query) if row.query else ""
        return self._closable if text.strip() else self._safe

    def _accept(self, row: _Row, token: int, allowed: tuple[int, ...] | None, logprob: float | None) -> None:
        row.ids.append(token)
        row.mask.append(0 if allowed is None else 1)
        row.allowed.append(allowed)
        row.logprobs.append(logprob)
        seg = row.segment
        if isinstance(seg, _Forced):
            row.pos += 1
            if row.pos == len(seg.ids):
                self._advance(row, None)
        elif isinstance(seg, _Choice):
            row.node = row.node.children[token]
            if not row.node.children:
                self._advance(row, row.node.key)
        elif token == self._quote[0]:
            self._advance(row, len(row.query) + 1)
        else:
            row.query.append(token)

    def _mask(self, sets: list[tuple[int, ...]], logits: torch.Tensor) -> torch.Tensor:
        """Boolean mask shaped like ``logits``: True on each row's allowed tokens. The two query sets
        are kept as vocabulary masks per device; a choice's few ids are scattered in per step."""
        mask = torch.zeros(logits.shape, dtype=torch.bool, device=logits.device)
        for r, allowed in enumerate(sets):
            if allowed is self._safe or allowed is self._closable:
                key = (id(allowed), str(logits.device), logits.shape[-1])
                if key not in self._query_masks:
                    full = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
                    full[torch.tensor(allowed, dtype=torch.long, device=logits.device)] = True
                    self._query_masks[key] = full
                mask[r] = self._query_masks[key]
            else:
                mask[r, torch.tensor(allowed, dtype=torch.long, device=logits.device)] = True
        return mask

    def _sample(self, logits: torch.Tensor, sets: list[tuple[int, ...]]) -> tuple[list[int], list[float]]:
        """Sample (or argmax) each row of ``logits`` restricted to its allowed set; log π_T of the pick
        (:func:`toolgym.agents.sampling.sample_tokens` with the restriction as a logits mask)."""
        from toolgym.agents.sampling import sample_tokens

        picks, chosen = sample_tokens(logits.float(), self.sampling.temperature, allowed=self._mask(sets, logits))
        return picks.tolist(), chosen.tolist()

    @torch.no_grad()
    def generate_batch(self, prompts: Sequence[Sequence[int]], max_new_tokens: int | None = None,
                       episodes: Sequence[EpisodeView] | None = None) -> list[Generation]:
        """One constrained call per prompt; ``episodes[i]`` is what prompt ``i``'s episode showed.

        Without ``episodes`` nothing was seen: every turn is a search with no category.
        """
        if not prompts:
            return []
        if episodes is not None and len(episodes) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(episodes)} episode views")
        budget = int(max_new_tokens or self.sampling.max_new_tokens)
        views = list(episodes) if episodes is not None else [EpisodeView([]) for _ in prompts]
        rows = [_Row(self._turn(v, budget)) for v in views]
        for row in rows:
            self._advance(row, None)
        model, device, pad = self.model, self.device, self.base.pad_id
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        attn = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):  # left padding; positions count real tokens only, as in training
            ids[i, width - len(p):] = torch.tensor(list(p), dtype=torch.long)
            attn[i, width - len(p):] = 1
        positions = (attn.cumsum(-1) - 1).clamp(min=0)
        was_training = model.training
        model.eval()
        try:
            out = model(input_ids=ids.to(device), attention_mask=attn.to(device), position_ids=positions.to(device),
                        use_cache=True)
            cache, logits = out.past_key_values, out.logits[:, -1]
            next_pos = positions[:, -1] + 1
            while not all(r.done for r in rows):
                step = [pad] * len(rows)
                fed = [0 if r.done else 1 for r in rows]  # a finished row feeds padding nothing attends to
                sampling_rows, sets = [], []
                for i, row in enumerate(rows):
                    if row.done:
                        continue
                    need = self._need(row)
                    if isinstance(need, int):
                        step[i] = need
                        self._accept(row, need, None, None)
                    else:
                        sampling_rows.append(i)
                        sets.append(need)
                if sampling_rows:
                    picks, logps = self._sample(logits[sampling_rows], sets)
                    for i, tok, s, lp in zip(sampling_rows, picks, sets, logps):
                        step[i] = tok
                        self._accept(rows[i], tok, s, lp)
                if all(r.done for r in rows):
                    break
                attn = torch.cat([attn, torch.tensor(fed, dtype=torch.long)[:, None]], dim=1)
                out = model(input_ids=torch.tensor(step, dtype=torch.long)[:, None].to(device),
                            attention_mask=attn.to(device), position_ids=next_pos[:, None].to(device),
                            past_key_values=cache, use_cache=True)
                cache, logits = out.past_key_values, out.logits[:, -1]
                next_pos = next_pos + 1
        finally:
            model.train(was_training)
        gens = []
        for row in rows:
            text = self.tokenizer.decode(row.ids, skip_special_tokens=True)
            gens.append(Generation(text, list(row.ids), "stop", loss_mask=list(row.mask), allowed=list(row.allowed),
                                   logprobs=list(row.logprobs)))
        return gens

    # -- text interface -----------------------------------------------------------------------------
    def act(self, messages: Sequence[dict[str, str]], tool_schemas: Sequence[Mapping[str, Any]] | None = None) -> str:
        """The next call as text (``tool_schemas``: the env's ``info["tool_schemas"]``, for the category enum)."""
        return self.generate_batch([self.encode_prompt(messages)], episodes=[EpisodeView(messages, tool_schemas)])[0].text


def constrain_policy(policy: Any, mode: str | None, **options: Any) -> Any:
    """``policy`` wrapped for ``mode`` (``model.constrained``): ``None`` returns it unchanged."""
    if not mode:
        return policy
    if mode not in CONSTRAINED_MODES:
        raise ValueError(f"model.constrained={mode!r}: choose one of {list(CONSTRAINED_MODES)} or null")
    return ConstrainedToolSearchPolicy(policy, **options)
