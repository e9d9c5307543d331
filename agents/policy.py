"""What a chat policy is, to the trainer: the ``ChatPolicy`` protocol, ``Generation``, ``SamplingConfig``.

No torch import, so configs and type hints can name these cheaply.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Protocol, Sequence, runtime_checkable

TOOL_CALL_STOP = "</tool_call>"
PRECISIONS = ("auto", "bfloat16", "float32")
BF16_SETTINGS = (True, False, "auto")  # a bf16-autocast switch: decoding.bf16_autocast decides "auto"
ENGINES = ("auto", "lean", "generate")


def check_bf16_setting(value: Any, key: str) -> None:
    """A bf16-autocast switch is ``true``, ``false`` or ``"auto"`` (not 1, not "yes"): a ``ValueError`` naming ``key``."""
    if not isinstance(value, (bool, str)) or value not in BF16_SETTINGS:
        raise ValueError(f"{key} must be true, false or auto, got {value!r}")


@dataclass
class SamplingConfig:
    """How a policy samples one assistant turn.

    Parameters:
        max_new_tokens (`int`, defaults to `256`):
            Most tokens generated per turn; a turn that hits it finishes with reason ``"length"``.
        temperature (`float`, defaults to `1.0`):
            Softmax temperature; ``0`` means greedy decoding. The trainer computes every
            log-prob (old, new, reference) from ``logits / temperature``, the distribution the
            tokens were sampled from.
        top_p (`float`, defaults to `1.0`):
            Nucleus sampling mass. Not applied to the trainer's log-probs (as in verl): keep it
            at 1.0 for on-policy GRPO.
        top_k (`int`, defaults to `0`):
            Keep only the ``top_k`` most likely tokens (``0`` = all). Not applied to log-probs either.
        stop_strings (`tuple[str, ...]`, defaults to `("</tool_call>",)`):
            The turn ends once the generated text contains one of them.
        precision (`str`, defaults to `"auto"`):
            The sampler's weight dtype: ``bfloat16``, ``float32``, or ``auto`` (bf16 where the
            CPU has AMX / AVX512-BF16 or the GPU supports it, float32 elsewhere). The trainer
            keeps float32 master weights either way; ``grpo.tis_cap`` corrects the mismatch.
        engine (`str`, defaults to `"auto"`):
            ``lean`` decodes with :mod:`toolgym.agents.decoding` (a Llama-family model: bf16,
            preallocated KV cache, rows that finish a turn go on at once), ``generate`` with
            ``model.generate`` one turn at a time, ``auto`` = lean where the model supports it.
    """

    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop_strings: tuple[str, ...] = (TOOL_CALL_STOP,)
    precision: str = "auto"
    engine: str = "auto"

    def __post_init__(self) -> None:
        self.stop_strings = tuple(self.stop_strings)
        self.check()

    def check(self) -> None:
        """The ``sampling`` section's ranges, one ``ValueError`` naming the key (``temperature=.nan``
        sampled garbage; ``top_p=7`` and ``top_k=-2`` were accepted and ignored). Run at construction
        and again by the config loader's ``validate`` (a field may be set after construction)."""
        from toolgym.data.readers import check_finite_fields

        check_finite_fields(self, "sampling")
        _need(_is_int(self.max_new_tokens) and self.max_new_tokens >= 1, "max_new_tokens", self.max_new_tokens,
              "must be an integer >= 1")
        _need(_is_real(self.temperature) and self.temperature >= 0, "temperature", self.temperature,
              "must be >= 0 (0 = greedy)")
        _need(_is_real(self.top_p) and 0 < self.top_p <= 1, "top_p", self.top_p, "must be in (0, 1]")
        _need(_is_int(self.top_k) and self.top_k >= 0, "top_k", self.top_k, "must be an integer >= 0 (0 = off)")
        _need(self.precision in PRECISIONS, "precision", self.precision, f"must be one of {', '.join(PRECISIONS)}")
        _need(self.engine in ENGINES, "engine", self.engine, f"must be one of {', '.join(ENGINES)}")


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _need(ok: bool, key: str, value: Any, rule: str) -> None:
    if not ok:
        raise ValueError(f"sampling.{key}={value!r}: {rule}")


@dataclass
class Generation:
    """One sampled assistant turn: its text and the exact token ids the model produced.

    A constrained policy (:mod:`toolgym.agents.constrained`) also fills, one entry per token:
    ``loss_mask`` (0 for forced tokens, 1 for sampled ones), ``allowed`` (the token ids the
    sample was restricted to, ``None`` for an unrestricted or forced token) and ``logprobs``
    (log π_T of the sampled token under that restriction, ``None`` when forced). ``None`` means
    an ordinary turn: every token sampled from the full distribution, loss mask 1.
    """

    text: str
    token_ids: list[int]
    finish_reason: str  # "stop" (tool-call end or end-of-turn token) or "length"
    loss_mask: list[int] | None = None
    allowed: list[tuple[int, ...] | None] | None = None
    logprobs: list[float | None] | None = None


@runtime_checkable
class ChatModel(Protocol):
    """Anything that answers a chat: messages in, the reply text out. ``HFChatPolicy`` and
    ``OpenAICompatPolicy`` both are one; the dialogue generator's chat writer needs no more."""

    def act(self, messages: Sequence[dict[str, str]]) -> str: ...


@runtime_checkable
class ChatPolicy(Protocol):
    """A policy the trainer can roll out: token-id prompts in, sampled token ids out.

    :class:`~toolgym.agents.hf_policy.HFChatPolicy` is the implementation; tests script one.
    """

    sampling: SamplingConfig
    end_ids: list[int]
    model: Any

    def encode_prompt(self, messages: Sequence[dict[str, str]]) -> list[int]: ...

    def encode_tool_turn(self, tool_text: str, generated_end: bool) -> list[int]: ...

    def generate_batch(self, prompts: Sequence[Sequence[int]], max_new_tokens: int | None = None) -> list[Generation]: ...
