"""A lean decoder for Llama-family policies: bf16 weights, a preallocated KV cache, ragged rows.

Why not ``model.generate``: profiled on this project's CPU (SmolLM2-135M, batch 64, ~300 tokens of
context) a decode step spends a quarter of its time in ``aten::cat`` (the dynamic KV cache grows
by concatenation every step) and a third in attention that first repeats the grouped KV heads;
and every row of a batch waits for the slowest one. Here:

* :class:`LeanWeights` — the sampler's own copy of the weights in the sampling dtype (bf16 where
  the CPU has AMX / AVX512-BF16, see :func:`sampling_dtype`), a LoRA adapter merged in, q/k/v and
  gate/up fused into one matrix product each. :meth:`LeanWeights.refresh` re-reads the trainer's
  model after an update. The trainer keeps its float32 master weights.
* :class:`KVCache` — per layer one ``[rows, kv_heads, length, head_dim]`` buffer, grown in blocks;
  a row's token ``j`` always sits at position ``j`` (no padding), so rows of any length share a
  batch and a new token is one indexed write.
* :class:`DecodeEngine` — rows join (a prompt whose longest prefix some cached row holds — a
  group's repeated prompt, the env's shared system prompt — copies that prefix instead of encoding
  it), decode together, and leave; when a row's turn ends the caller appends the
  environment's turn and the row goes on in the next step, so no row idles until the slowest row
  of the batch is done, and a finished row's place is given to a waiting episode. Attention reads
  the grouped KV heads in place (queries reshaped to ``[rows, kv_heads, group, ...]``).

Sampling (:func:`toolgym.agents.sampling.sample_tokens`, shared with the constrained decoder and the
``generate`` engine) follows ``generate``'s settings: ``logits / T``, then top-k, then top-p, then one
uniform draw per row from the global generator through the inverse CDF (greedy: argmax). Each sampled
token's log-probability under the sampling distribution is kept (``Generation.logprobs``) so the
trainer can measure and correct the sampler/trainer mismatch (truncated importance sampling).
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import Any, Hashable, Sequence

import numpy as np
import torch

from toolgym.agents.policy import Generation, SamplingConfig, check_bf16_setting
from toolgym.agents.sampling import sample_tokens

__all__ = ["DecodeEngine", "KVCache", "LeanWeights", "bf16_autocast", "cpu_has_bf16_matmul", "lean_supported",
           "sampling_dtype"]

SUPPORTED_TYPES = ("llama", "qwen2")
MIN_SHARED_PREFIX = 16  # prompt tokens worth copying from a cached row instead of encoding
STOP_WINDOW = 13  # tokens decoded to look for a stop string (as HFChatPolicy._cut)


@functools.lru_cache(maxsize=1)
def cpu_has_bf16_matmul() -> bool:
    """Whether this CPU multiplies bf16 matrices natively (AMX-BF16 or AVX512-BF16; Linux flags)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool({"amx_bf16", "avx512_bf16"} & flags)
    except OSError:
        pass
    return False


def bf16_autocast(setting: bool | str, device: torch.device | str, key: str = "bf16") -> bool:
    """Whether a bf16-autocast setting (``true`` / ``false`` / ``auto``) autocasts on ``device``.

    ``auto`` autocasts where bf16 matrices multiply natively (:func:`sampling_dtype`'s rule): on a
    CPU without AVX512-BF16 or AMX, PyTorch multiplies bf16 matrices in a scalar fallback, ~70x
    slower than float32 on a 2-core AVX2 EPYC (576 x 1 536 products, one thread), so a config that
    says ``true`` there turns a 40-second training step into many minutes."""
    check_bf16_setting(setting, key)
    if setting == "auto":
        return sampling_dtype("auto", device) == torch.bfloat16
    return bool(setting)


def sampling_dtype(precision: str, device: torch.device | str) -> torch.dtype:
    """``bfloat16`` / ``float32`` as asked; ``auto`` = bf16 on a GPU that has it or a CPU with bf16
    matrix units, float32 elsewhere (emulated bf16 is slower than float32)."""
    if precision in ("bfloat16", "bf16"):
        return torch.bfloat16
    if precision in ("float32", "fp32"):
        return torch.float32
    if precision != "auto":
        raise ValueError(f"sampling.precision must be auto, bfloat16 or float32, got {precision!r}")
    device = torch.device(device)
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    return torch.bfloat16 if device.type == "cpu" and cpu_has_bf16_matmul() else torch.float32


def _base_model(model: Any) -> Any:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def lean_supported(model: Any) -> bool:
    """A Llama-family decoder (RMSNorm, rotary, SiLU-gated MLP, full attention) the lean path runs."""
    base = _base_model(model)
    cfg = getattr(base, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) not in SUPPORTED_TYPES:
        return False
    if getattr(cfg, "hidden_act", "silu") != "silu" or getattr(cfg, "use_sliding_window", False):
        return False
    inner = getattr(base, "model", None)
    return all(hasattr(inner, a) for a in ("embed_tokens", "layers", "norm", "rotary_emb"))


def _effective_linear(module: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(W, b)`` of a Linear, with an active, unmerged LoRA adapter folded in (``W + ΔW``)."""
    base = getattr(module, "base_layer", None)
    if base is None:
        return module.weight, module.bias
    weight = base.weight
    if not getattr(module, "merged", False) and not getattr(module, "disable_adapters", False):
        for name in getattr(module, "active_adapters", ()):
            if name in getattr(module, "lora_A", {}):
                if getattr(module, "use_dora", {}).get(name):
                    raise NotImplementedError("DoRA adapters are not supported by the lean decoder")
                weight = weight + module.get_delta_weight(name)
    return weight, base.bias


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """As ``LlamaRMSNorm``: normalise in float32, cast back, scale."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


@dataclass
class _Layer:
    norm_in: torch.Tensor
    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    norm_post: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor
    q_norm: torch.Tensor | None = None  # Qwen3-style per-head norms (absent in Llama / Qwen2)
    k_norm: torch.Tensor | None = None


class LeanWeights:
    """The sampler's weights: a ``dtype`` copy of a Llama-family model, LoRA merged, q/k/v and
    gate/up fused. The model's own rotary module computes the positions' cos / sin."""

    def __init__(self, model: Any, dtype: torch.dtype):
        if not lean_supported(model):
            raise ValueError(f"{type(_base_model(model)).__name__} is not a Llama-family model the lean decoder runs")
        cfg = _base_model(model).config
        self.dtype = dtype
        self.heads = int(cfg.num_attention_heads)
        self.kv_heads = int(getattr(cfg, "num_key_value_heads", None) or self.heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads)
        self.eps = float(cfg.rms_norm_eps)
        self.num_layers = int(cfg.num_hidden_layers)
        self.layers: list[_Layer] = []
        self.refresh(model)

    @property
    def device(self) -> torch.device:
        return self.embed.device

    @torch.no_grad()
    def refresh(self, model: Any) -> None:
        """Re-read ``model``'s current weights (call after every optimiser step)."""
        inner = _base_model(model).model
        head = _base_model(model).get_output_embeddings()
        d = self.dtype
        self.rotary = inner.rotary_emb
        self.embed = inner.embed_tokens.weight.detach().to(d)
        head_w, _ = _effective_linear(head)
        self.lm_head = self.embed if head_w is inner.embed_tokens.weight else head_w.detach().to(d)
        self.norm = inner.norm.weight.detach().to(d)
        layers = []
        for layer in inner.layers:
            attn, mlp = layer.self_attn, layer.mlp
            parts = [_effective_linear(m) for m in (attn.q_proj, attn.k_proj, attn.v_proj)]
            biases = [b for _, b in parts]
            bias = torch.cat([b if b is not None else torch.zeros(w.shape[0], device=w.device, dtype=w.dtype)
                              for (w, _), b in zip(parts, biases)]).to(d) if any(b is not None for b in biases) else None
            o_w, o_b = _effective_linear(attn.o_proj)
            g_w, _ = _effective_linear(mlp.gate_proj)
            u_w, _ = _effective_linear(mlp.up_proj)
            dn_w, _ = _effective_linear(mlp.down_proj)
            if o_b is not None or getattr(mlp.gate_proj, "bias", None) is not None:
                raise NotImplementedError("output / MLP biases are not supported by the lean decoder")
            layers.append(_Layer(
                norm_in=layer.input_layernorm.weight.detach().to(d),
                qkv=torch.cat([w for w, _ in parts]).detach().to(d).contiguous(), qkv_bias=bias,
                o=o_w.detach().to(d).contiguous(), norm_post=layer.post_attention_layernorm.weight.detach().to(d),
                gate_up=torch.cat([g_w, u_w]).detach().to(d).contiguous(), down=dn_w.detach().to(d).contiguous(),
                q_norm=attn.q_norm.weight.detach().to(d) if hasattr(attn, "q_norm") else None,
                k_norm=attn.k_norm.weight.detach().to(d) if hasattr(attn, "k_norm") else None,
            ))
        self.layers = layers

    def rotary_cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        probe = torch.empty(0, device=self.device, dtype=torch.float32)
        cos, sin = self.rotary(probe, positions)
        return cos.to(self.dtype), sin.to(self.dtype)


class KVCache:
    """Per layer a ``[rows, kv_heads, head_dim, length]`` key and ``[rows, kv_heads, length, head_dim]``
    value buffer; row ``r``'s token ``j`` at position ``j``. ``lengths[r]`` is how many tokens row ``r`` holds. Grows in ``block``s."""

    def __init__(self, weights: LeanWeights, rows: int, length: int, block: int = 128):
        self.w, self.block = weights, int(block)
        self.rows = int(rows)
        self.capacity = 0
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.lengths = torch.zeros(self.rows, dtype=torch.long)
        self.ensure(length)

    def _alloc(self, *shape: int) -> torch.Tensor:
        # zeros, not empty: a masked position still enters probs @ V (as 0 * value), and
        # uninitialised memory can hold NaN
        return torch.zeros(shape, dtype=self.w.dtype, device=self.w.device)

    def ensure(self, length: int) -> None:
        """Room for ``length`` positions in every row (keeps what is cached)."""
        if length <= self.capacity:
            return
        w, old = self.w, self.capacity
        # decode attends over the whole capacity (a contiguous block per row: no copy before the
        # matrix product), so grow in small steps; each growth copies the cache once
        new = -(-max(length, int(old * 1.125)) // self.block) * self.block
        keys, values = [], []
        for i in range(w.num_layers):
            k = self._alloc(self.rows, w.kv_heads, w.head_dim, new)  # keys transposed: q @ K is one strided bmm
            v = self._alloc(self.rows, w.kv_heads, new, w.head_dim)
            if old:
                k[..., :old] = self.keys[i]
                v[:, :, :old] = self.values[i]
            keys.append(k)
            values.append(v)
        self.keys, self.values, self.capacity = keys, values, new

    def copy_row(self, src: int, dst: int, n: int | None = None) -> None:
        """Row ``dst`` holds the first ``n`` (default: all) cached positions of row ``src``."""
        n = int(self.lengths[src]) if n is None else int(n)
        for k, v in zip(self.keys, self.values):
            k[dst, ..., :n] = k[src, ..., :n]
            v[dst, :, :n] = v[src, :, :n]
        self.lengths[dst] = n


def _forward(w: LeanWeights, cache: KVCache, rows: torch.Tensor | slice, ids: torch.Tensor,
             starts: torch.Tensor, want_logits: bool) -> torch.Tensor | None:
    """Feed ``ids[i]`` (``[b, t]``; right-padded) to cache rows ``rows`` whose tokens start at
    ``starts[i]``; writes their keys/values. Returns the logits (float32) at each row's last
    position when ``want_logits`` (decode: ``t == 1``)."""
    b, t = ids.shape
    dev = w.device
    pos = starts.to(dev)[:, None] + torch.arange(t, device=dev)[None]  # [b, t]
    span = int(pos.max()) + 1
    cache.ensure(span)
    x = w.embed[ids.to(dev)]
    cos, sin = w.rotary_cos_sin(pos)
    cos, sin = cos[:, None], sin[:, None]  # [b, 1, t, D]
    # key j is visible to the query at position p iff j <= p (its own row's earlier tokens)
    contiguous = isinstance(rows, slice)
    width = cache.capacity if contiguous else span
    visible = torch.arange(width, device=dev)[None, None, :] <= pos[:, :, None]  # [b, t, width]
    group = w.heads // w.kv_heads
    bias = torch.zeros(visible.shape, dtype=torch.float32, device=dev).masked_fill_(~visible, float("-inf"))
    bias = bias[:, None, None].expand(b, 1, group, t, width).reshape(b, 1, group * t, width)
    scale = w.head_dim ** -0.5
    row_idx = torch.arange(cache.rows, device=dev)[rows] if contiguous else rows.to(dev)
    hq, hk, hd = w.heads * w.head_dim, w.kv_heads * w.head_dim, w.head_dim
    for i, layer in enumerate(w.layers):
        h = _rms_norm(x, layer.norm_in, w.eps)
        qkv = torch.nn.functional.linear(h, layer.qkv, layer.qkv_bias)
        q = qkv[..., :hq].view(b, t, w.heads, hd).transpose(1, 2)
        k = qkv[..., hq:hq + hk].view(b, t, w.kv_heads, hd).transpose(1, 2)
        v = qkv[..., hq + hk:].view(b, t, w.kv_heads, hd).transpose(1, 2)
        if layer.q_norm is not None:
            q, k = _rms_norm(q, layer.q_norm, w.eps), _rms_norm(k, layer.k_norm, w.eps)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        K, V = cache.keys[i], cache.values[i]
        K[row_idx[:, None], :, :, pos] = k.transpose(1, 2)  # [b, t, kv_heads, D] at (row, position)
        V[row_idx[:, None], :, pos] = v.transpose(1, 2)
        if contiguous:  # decode: the rows' whole buffers, contiguous; positions past each row are masked
            keys, vals = K[rows], V[rows]  # [b, kv_heads, D, capacity], [b, kv_heads, capacity, D]
        else:  # prefill of some rows: gathered (a copy) up to the longest
            keys, vals = K[row_idx, ..., :span], V[row_idx, :, :span]
        # grouped heads in place: [b, kv_heads, group * t, D] queries against the kv heads' keys
        qg = q.reshape(b, w.kv_heads, group * t, hd) * scale
        scores = torch.matmul(qg, keys).float() + bias
        probs = torch.softmax(scores, dim=-1).to(w.dtype)
        out = torch.matmul(probs, vals).view(b, w.heads, t, hd).transpose(1, 2).reshape(b, t, hq)
        x = x + torch.nn.functional.linear(out, layer.o)
        h = _rms_norm(x, layer.norm_post, w.eps)
        gu = torch.nn.functional.linear(h, layer.gate_up)
        inter = gu.shape[-1] // 2
        x = x + torch.nn.functional.linear(torch.nn.functional.silu(gu[..., :inter]) * gu[..., inter:], layer.down)
    if not want_logits:
        return None
    last = _rms_norm(x[:, -1], w.norm, w.eps)
    return torch.nn.functional.linear(last, w.lm_head).float()


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two token arrays."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


def _sample(logits: torch.Tensor, s: SamplingConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """``(token ids, their log-probabilities under the sampling distribution)`` for ``[n, V]`` logits
    (:func:`toolgym.agents.sampling.sample_tokens`, the one sampler of toolgym's decoding paths)."""
    return sample_tokens(logits, s.temperature, s.top_k, s.top_p)


@dataclass(eq=False)
class _Row:
    key: Hashable
    tokens: list[int]  # every token of the row, fed or not
    pending: int  # tokens at the end of ``tokens`` not yet in the cache (>= 1: the last is fed by decode)
    ended: bool = False  # its turn ended: extend() or remove() before the next step
    turn: list[int] = field(default_factory=list)  # sampled this turn
    logprobs: list[float] = field(default_factory=list)


class DecodeEngine:
    """Rows decode together; each row's turn ends at an end token, a stop string or
    ``max_new_tokens``. Drive it with :meth:`add` / :meth:`extend` / :meth:`step` / :meth:`remove`.

    ``step()`` feeds every row its pending tokens (a prompt or an environment turn in one ragged
    prefill, then one decode position for all rows together), samples one token per row and
    returns ``(key, Generation)`` for each row whose turn ended. That row stays (its next prompt
    tokens can be appended with :meth:`extend`) until :meth:`remove`. At most ``capacity`` rows.
    """

    def __init__(self, weights: LeanWeights, tokenizer: Any, sampling: SamplingConfig, end_ids: Sequence[int],
                 capacity: int, length_hint: int = 0, prefill_tokens: int = 4096):
        self.w, self.tokenizer, self.sampling = weights, tokenizer, sampling
        self.end_ids = frozenset(int(i) for i in end_ids)
        self.capacity = int(capacity)
        self.cache = KVCache(weights, self.capacity, length_hint)
        self.rows: list[_Row] = []  # row r of the cache is self.rows[r]
        self.prefill_tokens = int(prefill_tokens)
        self.stops = [s for s in (sampling.stop_strings or ()) if s]
        self.closers = self._closers(tokenizer, self.stops)
        # counts, and wall seconds of prefill and of the decode forwards (a rollout's profile, benchmarks/throughput.py)
        self.stats = {"decode_steps": 0, "decode_rows": 0, "prefill_tokens": 0, "shared_prompt_tokens": 0,
                      "prefill_s": 0.0, "decode_s": 0.0}

    @staticmethod
    def _closers(tokenizer: Any, stops: Sequence[str]) -> frozenset[int]:
        """Token ids whose text can complete a stop string (holds its last character); only after
        those is the tail decoded and searched."""
        if not stops:
            return frozenset()
        lasts = {s[-1] for s in stops}
        return _closer_ids(tokenizer, "".join(sorted(lasts)))

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def free(self) -> int:
        return self.capacity - len(self.rows)

    def add(self, items: Sequence[tuple[Hashable, Sequence[int]]]) -> None:
        """New rows with their prompts. A prompt's longest prefix that some cached row holds (at
        least :data:`MIN_SHARED_PREFIX` tokens: a group's repeated prompt, the system prompt every
        task of an env shares) is copied from that row instead of encoded; the rest is prefilled."""
        if len(items) > self.free:
            raise ValueError(f"{len(items)} rows asked, {self.free} free")
        if not items:
            return
        # room for the longest prompt and one turn, before any row is written
        self.cache.ensure(max(len(p) for _, p in items) + int(self.sampling.max_new_tokens))
        cached = [(r, np.asarray(row.tokens[: int(self.cache.lengths[r])])) for r, row in enumerate(self.rows)]
        new, sources = [], []
        for key, prompt in items:
            prompt = [int(x) for x in prompt]
            if not prompt:
                raise ValueError("an empty prompt")
            r = len(self.rows)
            self.rows.append(_Row(key, prompt, len(prompt)))
            self.cache.lengths[r] = 0
            ids = np.asarray(prompt)
            new.append((r, ids))
            # a row none of whose prefix is cached or about to be is encoded whole (a source)
            if max((_common_prefix(ids, c) for _, c in cached + sources), default=0) < MIN_SHARED_PREFIX:
                sources.append((r, ids[:-1]))  # a source's cache will hold all but its last token
        self._prefill([r for r, _ in sources])
        cached += [(r, c) for r, c in sources]
        source_rows = {r for r, _ in sources}
        for r, ids in new:
            if r in source_rows:
                continue
            src, n = max(((c_r, min(_common_prefix(ids, c), len(ids) - 1)) for c_r, c in cached), key=lambda x: x[1])
            if n < MIN_SHARED_PREFIX:
                continue  # encoded in the next step's prefill
            self.cache.copy_row(src, r, n)
            self.rows[r].pending = len(ids) - n
            self.stats["shared_prompt_tokens"] += n

    def extend(self, key: Hashable, tokens: Sequence[int]) -> None:
        """Append tokens (the environment's turn) to a row whose turn ended; its next turn starts after them."""
        row = self._row(key)
        row.tokens.extend(int(x) for x in tokens)
        row.pending += len(tokens)
        row.ended = False

    def remove(self, key: Hashable) -> None:
        """Drop a row; the last row moves into its place (rows stay contiguous)."""
        r = self._index(key)
        last = len(self.rows) - 1
        if r != last:
            self.cache.copy_row(last, r)
            self.rows[r] = self.rows[last]
        self.rows.pop()
        self.cache.lengths[last] = 0

    def tokens(self, key: Hashable) -> list[int]:
        return list(self._row(key).tokens)

    def _index(self, key: Hashable) -> int:
        for r, row in enumerate(self.rows):
            if row.key == key:
                return r
        raise KeyError(key)

    def _row(self, key: Hashable) -> _Row:
        return self.rows[self._index(key)]

    @torch.no_grad()
    def _prefill(self, indices: Sequence[int]) -> None:
        """Feed rows ``indices`` all their pending tokens but the last, in ragged batches."""
        todo = [r for r in indices if self.rows[r].pending > 1]
        todo.sort(key=lambda r: self.rows[r].pending)
        while todo:
            batch = [todo.pop()]  # longest first; then rows while the padded batch stays small
            width = self.rows[batch[0]].pending - 1
            while todo and (len(batch) + 1) * width <= self.prefill_tokens:
                batch.append(todo.pop())
            ids = torch.zeros((len(batch), width), dtype=torch.long)
            starts = torch.zeros(len(batch), dtype=torch.long)
            for i, r in enumerate(batch):
                row = self.rows[r]
                n = row.pending - 1
                chunk = row.tokens[len(row.tokens) - row.pending: len(row.tokens) - 1]
                ids[i, :n] = torch.tensor(chunk, dtype=torch.long)
                starts[i] = self.cache.lengths[r]
            _forward(self.w, self.cache, torch.tensor(batch, dtype=torch.long), ids, starts, want_logits=False)
            for r in batch:
                row = self.rows[r]
                self.cache.lengths[r] += row.pending - 1
                self.stats["prefill_tokens"] += row.pending - 1
                row.pending = 1

    @torch.no_grad()
    def step(self) -> list[tuple[Hashable, Generation]]:
        """One decode position for every row (after prefilling what rows have pending)."""
        if not self.rows:
            return []
        n = len(self.rows)
        if any(row.ended for row in self.rows):
            raise RuntimeError("a row whose turn ended needs extend() or remove() before the next step")
        t0 = time.perf_counter()
        self._prefill(range(n))
        t1 = time.perf_counter()
        ids = torch.tensor([[row.tokens[-1]] for row in self.rows], dtype=torch.long)
        starts = self.cache.lengths[:n].clone()
        logits = _forward(self.w, self.cache, slice(0, n), ids, starts, want_logits=True)
        self.cache.lengths[:n] += 1
        assert logits is not None
        sampled, logps = _sample(logits, self.sampling)
        self.stats["prefill_s"] += t1 - t0
        self.stats["decode_s"] += time.perf_counter() - t1
        self.stats["decode_steps"] += 1
        self.stats["decode_rows"] += n
        done = []
        limit = int(self.sampling.max_new_tokens)
        for row, tok, lp in zip(self.rows, sampled.tolist(), logps.tolist()):
            row.pending = 1
            row.tokens.append(tok)
            row.turn.append(tok)
            row.logprobs.append(lp)
            reason = None
            if tok in self.end_ids:
                reason = "stop"
            elif tok in self.closers and self._stop_in_tail(row.turn):
                reason = "stop"
            elif len(row.turn) >= limit:
                reason = "length"
            if reason is not None:
                gen = Generation(self.tokenizer.decode(row.turn, skip_special_tokens=True), list(row.turn), reason,
                                 logprobs=list(row.logprobs))
                done.append((row.key, gen))
                row.turn, row.logprobs = [], []
                row.ended = True
        return done

    def _stop_in_tail(self, turn: Sequence[int]) -> bool:
        window = self.tokenizer.decode(list(turn[-STOP_WINDOW:]))
        return any(s in window for s in self.stops)


_CLOSERS: dict[tuple[str, int, str], frozenset[int]] = {}


def _closer_ids(tokenizer: Any, chars: str) -> frozenset[int]:
    """Ids whose decoded text contains any of ``chars`` (one vocabulary pass per tokenizer and stop
    set; keyed by what the tokenizer is, not ``id()``, which a collected object's successor reuses)."""
    key = (str(getattr(tokenizer, "name_or_path", "")), len(tokenizer), chars)
    if key not in _CLOSERS:
        ids = sorted(tokenizer.get_vocab().values())
        texts = tokenizer.batch_decode([[i] for i in ids])
        _CLOSERS[key] = frozenset(i for i, t in zip(ids, texts) if any(c in t for c in chars))
    return _CLOSERS[key]
