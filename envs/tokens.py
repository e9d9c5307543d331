"""Token counting for observation budgets and query limits: the policy's tokenizer when given,
whitespace-separated words otherwise."""
from __future__ import annotations

from typing import Any, Protocol


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
