"""What a chat policy is, to the trainer: the ``ChatPolicy`` protocol, ``Generation``, ``SamplingConfig``.

No torch import, so configs and type hints can name these cheaply.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence, runtime_checkable

TOOL_CALL_STOP = "</tool_call>"
PRECISIONS = ("auto", "bfloat16", "float32")
ENGINES = ("auto", "lean", "generate")


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
        from toolgym.data.readers import check_finite_fields

        self.stop_strings = tuple(self.stop_strings)
        check_finite_fields(self, "sampling")  # temperature=.nan sampled garbage
        if self.precision not in PRECISIONS:
            raise ValueError(f"sampling.precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.engine not in ENGINES:
            raise ValueError(f"sampling.engine must be one of {ENGINES}, got {self.engine!r}")


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
