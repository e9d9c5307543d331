"""Text spaces wide enough for real model output (docs/decisions.md#text-spaces).

``gymnasium.spaces.Text`` defaults to alphanumerics, so ``check_env`` would reject any real
observation. :class:`UnicodeText` samples from the Basic Multilingual Plane without the
surrogate block (what ``check_env`` draws actions from) and accepts any well-formed Python
string of the right length, emoji and other astral characters included. The 63,488-character
tables are built once per process and shared by every instance and copy: a plain ``Text`` with
that charset costs about half a second to build and a quarter second to deep-copy, which
``batch_space`` does once per sub-environment.
"""
from __future__ import annotations

import copy
import re
from functools import lru_cache
from typing import Any

import numpy as np
from gymnasium.spaces import Space, Text

_SURROGATE = re.compile("[\ud800-\udfff]")
_SHARED = ("_char_set", "_char_list", "_char_index", "_char_str", "_char_array")


@lru_cache(maxsize=1)
def _bmp_tables() -> dict[str, Any]:
    chars = [chr(c) for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF]
    return {
        "_char_set": frozenset(chars),
        "_char_list": tuple(chars),
        "_char_index": {c: np.int32(i) for i, c in enumerate(chars)},
        "_char_str": "".join(chars),  # already sorted by code point
        "_char_array": np.array(chars),
    }


class UnicodeText(Text):
    """A ``Text`` space over the BMP (minus surrogates) that contains any well-formed string."""

    def __init__(self, max_length: int, *, min_length: int = 1, seed: int | np.random.Generator | None = None):
        if not 0 <= min_length <= max_length:
            raise ValueError(f"need 0 <= min_length <= max_length, got {min_length}, {max_length}")
        self.min_length = int(min_length)
        self.max_length = int(max_length)
        self.__dict__.update(_bmp_tables())
        Space.__init__(self, dtype=str, seed=seed)

    def contains(self, x: Any) -> bool:
        return (
            isinstance(x, str)
            and self.min_length <= len(x) <= self.max_length
            and _SURROGATE.search(x) is None
        )

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is not None or probability is not None:
            return super().sample(mask=mask, probability=probability)
        length = int(self.np_random.integers(self.min_length, self.max_length + 1))
        codes = self.np_random.integers(0, len(self._char_array), size=length)
        return "".join(self._char_array[codes].tolist())

    def __deepcopy__(self, memo: dict[int, Any]) -> "UnicodeText":
        new = object.__new__(type(self))
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            new.__dict__[key] = value if key in _SHARED else copy.deepcopy(value, memo)
        return new

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length}, charset=BMP without surrogates)"
