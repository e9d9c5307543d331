"""Local GRPO on token sequences with per-turn credit (docs/training.md).

Per token ``t`` of rollout ``i`` with loss mask 1:

* ratio ``ρ = exp(log π_θ(t) − log π_old(t))``;
* clipped surrogate ``L_clip = −min(ρ·A, clip(ρ, 1−ε, 1+ε)·A)`` with ``ε = 0.2``;
* KL to the reference policy, k3 estimator ``k3 = exp(r) − r − 1`` with ``r = log π_ref − log π_θ``;
* token loss ``L_clip + β·k3`` (``β = 0.001``), averaged over every policy token of the
  mini-batch (token-mean aggregation).

Log-probs are computed only at response positions: the decoder runs once, the LM head runs on
the hidden states of masked-in positions in chunks. All three (old, new, reference) are taken
under the sampling temperature, ``log softmax(logits / T)`` as verl does, so the ratio compares
the distribution the tokens were drawn from; top-p / top-k truncation is not applied to them.
A constrained policy's samples (:mod:`toolgym.agents.constrained`) carry their allowed token sets
(``TokenBatch.allowed``): at those positions the logits outside the set are −inf before the
log-softmax, the restricted distribution they were drawn from; forced tokens have loss mask 0.
With a LoRA-wrapped model (:func:`toolgym.agents.hf_policy.apply_lora`) the reference is the same
model with the adapter disabled; without LoRA a frozen copy is kept.
"""
from __future__ import annotations

import copy
import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import torch

from toolgym.agents.decoding import bf16_autocast
from toolgym.trainers.config import GRPOConfig

__all__ = ["GRPOConfig", "GRPOTrainer", "TokenBatch", "clipped_surrogate", "grpo_token_loss", "inert_sequences", "kl_k3",
           "response_logprobs", "token_advantages", "trajectory_token_advantages", "truncated_importance_weight"]


@dataclass
class TokenBatch:
    """Sequences to train on: ids, loss masks and per-token advantages (same lengths).

    ``allowed`` (constrained rollouts only): per sequence, position -> the token ids its sample was
    restricted to; those positions are scored under that restriction (:func:`response_logprobs`).
    """

    token_ids: list[list[int]]
    loss_mask: list[list[int]]
    advantages: list[np.ndarray]
    old_logprobs: list[torch.Tensor] | None = None  # per sequence, one value per masked position
    ref_logprobs: list[torch.Tensor] | None = None
    # the sampler's log-probs, one per masked position (None: the sampler reported none)
    sampling_logprobs: list[torch.Tensor | None] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    allowed: list[dict[int, Sequence[int]] | None] | None = None

    def __post_init__(self) -> None:
        for i, (ids, m, a) in enumerate(zip(self.token_ids, self.loss_mask, self.advantages)):
            if not (len(ids) == len(m) == len(a)):
                raise ValueError(f"sequence {i}: token_ids {len(ids)}, loss_mask {len(m)}, advantages {len(a)} differ")
            if m and m[0]:
                raise ValueError(f"sequence {i}: the first token cannot be a policy token (nothing predicts it)")
        if self.allowed is not None and len(self.allowed) != len(self.token_ids):
            raise ValueError(f"{len(self.token_ids)} sequences but {len(self.allowed)} allowed-set maps")
        as_sets: dict[int, frozenset[int]] = {}  # restricted sets are shared objects: one lookup table each
        for i, restricted in enumerate(self.allowed or ()):
            for p, ids in (restricted or {}).items():
                if not (0 < p < len(self.loss_mask[i]) and self.loss_mask[i][p]):
                    raise ValueError(f"sequence {i}: an allowed set at position {p}, which is not a policy token")
                if id(ids) not in as_sets:
                    as_sets[id(ids)] = frozenset(ids)
                if self.token_ids[i][p] not in as_sets[id(ids)]:
                    raise ValueError(f"sequence {i}: token {self.token_ids[i][p]} at position {p} is outside its allowed set")

    def allowed_of(self, indices: Sequence[int]) -> list[dict[int, Sequence[int]] | None] | None:
        """The allowed-set maps of sequences ``indices`` (``None`` when no sequence is constrained)."""
        return [self.allowed[i] for i in indices] if self.allowed is not None else None


def token_advantages(num_tokens: int, turn_spans: Sequence[tuple[int, int]], turn_advantage: Sequence[float]) -> np.ndarray:
    """Spread per-turn advantages onto tokens: tokens in ``turn_spans[t]`` get ``turn_advantage[t]``, others 0."""
    if len(turn_advantage) < len(turn_spans):
        raise ValueError(f"{len(turn_spans)} turns but {len(turn_advantage)} turn advantages")
    adv = np.zeros(num_tokens, dtype=np.float32)
    for (start, end), value in zip(turn_spans, turn_advantage):
        adv[start:end] = value
    return adv


def trajectory_token_advantages(trajectory: Any, credit: Any, index: int) -> np.ndarray:
    """Token advantages of rollout ``index`` of a group from a reward module's ``GroupCredit``.

    One value per turn span from ``credit.rollout_turn_advantages(index, len(turn_spans))`` (per-turn
    credit, zero-padded past the turns the scheme scored; else the outcome advantage on every turn).
    """
    spans = trajectory.turn_spans or []
    return token_advantages(len(trajectory.token_ids), spans, credit.rollout_turn_advantages(index, len(spans)))


def inert_sequences(batch: TokenBatch, kl_coef: float) -> set[int]:
    """Sequences whose forward/backward can be skipped without changing the update.

    Without a KL term (``kl_coef == 0``) a sequence whose advantage is 0 on every policy token
    contributes ``-min(r·0, clip(r)·0) = 0`` to the loss and nothing to the gradient, whatever its
    ratio. Its tokens still count in the token-mean divisor, so the update is the same as running
    it; under ESM/TCA credit and zero-variance GRPO groups that is most of a batch. With a KL
    term every sequence has a gradient and none is inert.
    """
    if kl_coef != 0:
        return set()
    return {i for i, (mask, adv) in enumerate(zip(batch.loss_mask, batch.advantages))
            if not np.any(np.asarray(adv)[np.asarray(mask, dtype=bool)])}


def truncated_importance_weight(train_logp: torch.Tensor, sample_logp: torch.Tensor, cap: float) -> torch.Tensor:
    """Truncated importance sampling (TIS) weight per token: ``w = min(π_train / π_sample, C)``
    ``= min(exp(log π_train − log π_sample), C)``.

    ``π_train`` is the trainer's old policy (its own recomputed log-probs, float32 master weights),
    ``π_sample`` the sampler's (bf16) probability of the same token; the weight multiplies the
    token's clipped-surrogate loss and carries no gradient (as verl's ``tis_imp_ratio_cap``).
    """
    return torch.exp(train_logp.detach() - sample_logp).clamp(max=float(cap))


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 KL estimator (Schulman): ``exp(r) − r − 1`` with ``r = log π_ref − log π_θ``; ≥ 0, unbiased for KL(π_θ‖π_ref)."""
    r = ref_logp - logp
    return torch.exp(r) - r - 1


def clipped_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, clip_eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO clipped surrogate per token: ``−min(ρA, clip(ρ, 1−ε, 1+ε)A)``, ``ρ = exp(logp − old_logp)``.

    Returns ``(loss per token, clipped indicator per token)``.
    """
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * adv
    loss = -torch.minimum(unclipped, clipped)
    return loss, (clipped < unclipped).float()


def grpo_token_loss(logp: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor | None, adv: torch.Tensor,
                    clip_eps: float = 0.2, kl_coef: float = 0.001) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token GRPO loss ``L_clip + β·k3`` (1-D tensors over policy tokens) and its parts."""
    pg, clipped = clipped_surrogate(logp, old_logp, adv, clip_eps)
    kl = kl_k3(logp, ref_logp) if ref_logp is not None else torch.zeros_like(logp)
    return pg + kl_coef * kl, {"pg": pg, "kl": kl, "clipped": clipped}


def _decoder_and_head(model: Any) -> tuple[Any, Any]:
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    head = model.get_output_embeddings()
    if decoder is None or head is None:
        raise TypeError(f"{type(model).__name__}: need get_decoder() and get_output_embeddings() for response-only log-probs")
    return decoder, head


MIN_SHARED_PREFIX = 16  # tokens: a shorter common prompt is not worth a pass of its own


def shared_prefix_length(sequences: Sequence[Sequence[int]], masks: Sequence[Sequence[int]]) -> int:
    """Tokens every sequence starts with, up to (not into) the first policy token (mask 1) of any of them."""
    first = min((_first_policy_token(mask) for mask in masks), default=0)
    limit = min([first] + [len(s) - 1 for s in sequences])
    head = sequences[0]
    n = 0
    while n < limit and all(s[n] == head[n] for s in sequences):
        n += 1
    return n


def response_logprobs(model: Any, sequences: Sequence[Sequence[int]], masks: Sequence[Sequence[int]],
                      chunk: int = 1024, temperature: float = 1.0,
                      allowed: Sequence[Mapping[int, Sequence[int]] | None] | None = None,
                      autocast_bf16: bool = False, share_prefix: bool = False,
                      pad_to_multiple: int = 1, recompute_prefix: bool = False) -> list[torch.Tensor]:
    """log π_T(token_p | tokens_<p) = log softmax(logits_p / T)[token_p] at every position ``p`` with mask 1.

    ``T`` is the sampling temperature (``<= 0``, greedy, counts as 1). One decoder pass over the
    right-padded batch; the LM head and log-softmax run only on the hidden states that predict
    masked-in tokens, ``chunk`` positions at a time, in float32 (also with ``autocast_bf16``,
    which runs only the decoder under bfloat16 autocast). ``allowed[i]`` (constrained
    sampling) maps positions of sequence ``i`` to the token ids its sample was restricted to; there
    the restricted distribution is scored: ``log softmax(logits_p / T + M)[token_p]`` with
    ``M = 0`` on the allowed ids and ``−inf`` elsewhere. Other positions are unchanged.
    ``pad_to_multiple`` right-pads the batch to a multiple of that many tokens (the padding is
    masked out and changes no log-prob): fewer distinct shapes for the CPU allocator to keep.
    ``recompute_prefix`` (with ``share_prefix``) keeps none of the shared prompt's activations:
    its forward runs again in the backward pass (``torch.utils.checkpoint``).
    """
    scale = 1.0 / temperature if temperature and temperature > 0 else 1.0
    device = next(model.parameters()).device
    decoder, head = _decoder_and_head(model)
    # Gradient checkpointing turns the decoder's cache off in training, and the shared pass needs it:
    # then every row runs whole (same log-probs, the prefix paid B times).
    checkpointing = model.training and getattr(model, "is_gradient_checkpointing", False)
    shared = shared_prefix_length(sequences, masks) if share_prefix and len(sequences) > 1 and not checkpointing else 0
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast_bf16):
        if shared >= MIN_SHARED_PREFIX:
            hidden = _hidden_with_shared_prefix(decoder, sequences, shared, device, pad_to_multiple,
                                                recompute_prefix and torch.is_grad_enabled())
        else:
            hidden = _hidden(decoder, sequences, device, pad_to_multiple)
    hidden = hidden.float()
    rows, cols, targets, counts = [], [], [], []
    sets: list[Sequence[int] | None] = []
    for i, (s, m) in enumerate(zip(sequences, masks)):
        pos = [p for p in range(1, len(s)) if m[p]]
        rows += [i] * len(pos)
        cols += [p - 1 for p in pos]  # the hidden state at p-1 predicts token p
        targets += [s[p] for p in pos]
        counts.append(len(pos))
        restricted = allowed[i] if allowed is not None else None
        sets += [restricted.get(p) for p in pos] if restricted else [None] * len(pos)
    if not rows:
        return [hidden.new_zeros(0) for _ in sequences]
    picked = hidden[torch.tensor(rows, device=device), torch.tensor(cols, device=device)]
    tgt = torch.tensor(targets, device=device)
    out = []
    masks_by_set: dict[int, torch.Tensor] = {}  # one vocabulary mask per distinct allowed set
    for start in range(0, len(rows), chunk):
        with torch.autocast(device.type, enabled=False):
            logits = head(picked[start:start + chunk]).float() * scale
        here = [(j, a) for j, a in enumerate(sets[start:start + chunk]) if a is not None]
        if here:
            logits = logits.masked_fill(_outside(here, logits, masks_by_set), float("-inf"))
        out.append(torch.log_softmax(logits, dim=-1).gather(-1, tgt[start:start + chunk, None]).squeeze(-1))
    flat = torch.cat(out)
    return list(torch.split(flat, counts))


def prompt_keys(batch: "TokenBatch") -> list[tuple[int, ...]]:
    """Each sequence's tokens before its first policy token: rollouts of one task share it."""
    return [tuple(ids[: _first_policy_token(mask)]) for ids, mask in zip(batch.token_ids, batch.loss_mask)]


def _first_policy_token(mask: Sequence[int]) -> int:
    """Index of the first mask-1 position (``len(mask)`` when there is none)."""
    return next((p for p, m in enumerate(mask) if m), len(mask))


def padded_width(length: int, multiple: int) -> int:
    """``length`` rounded up to a multiple of ``multiple`` (>= 1)."""
    return -(-length // multiple) * multiple


def _hidden(decoder: Any, sequences: Sequence[Sequence[int]], device: torch.device,
            pad_to_multiple: int = 1) -> torch.Tensor:
    """Last hidden states ``[B, width, H]`` of the right-padded batch, one decoder pass."""
    width = padded_width(max(len(s) for s in sequences), pad_to_multiple)
    ids = torch.zeros((len(sequences), width), dtype=torch.long)
    attn = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, s in enumerate(sequences):
        ids[i, : len(s)] = torch.tensor(list(s), dtype=torch.long)
        attn[i, : len(s)] = 1
    return decoder(input_ids=ids.to(device), attention_mask=attn.to(device)).last_hidden_state


def _prefix_pass(decoder: Any, prefix: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The prompt's last hidden states, then every layer's keys and values, as plain tensors
    (what ``torch.utils.checkpoint`` can keep and recompute)."""
    out = decoder(input_ids=prefix, use_cache=True)
    return (out.last_hidden_state, *(t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)))


def _hidden_with_shared_prefix(decoder: Any, sequences: Sequence[Sequence[int]], shared: int,
                               device: torch.device, pad_to_multiple: int = 1,
                               recompute_prefix: bool = False) -> torch.Tensor:
    """The same ``[B, width, H]`` as :func:`_hidden`, the common prompt run once: one pass over the
    ``shared`` prefix tokens (its key/value cache, with its graph, repeated for every row), then one
    pass over the right-padded continuations attending to it. Gradients reach the prefix through
    every row's attention, so the loss and its gradient are those of the unshared pass (up to float
    rounding); the prefix costs one row instead of B. ``recompute_prefix``: the prefix pass keeps
    only its outputs (hidden states, keys, values) and runs again in the backward pass: its
    activations, the bulk of an update's memory when the prompt is long, are not held."""
    from transformers import DynamicCache

    prefix = torch.tensor(list(sequences[0][:shared]), dtype=torch.long, device=device)[None]
    if recompute_prefix:
        outputs = torch.utils.checkpoint.checkpoint(_prefix_pass, decoder, prefix, use_reentrant=False)
    else:
        outputs = _prefix_pass(decoder, prefix)
    prefix_hidden, kv = outputs[0], outputs[1:]
    cache = DynamicCache(config=decoder.config)
    for layer in range(len(kv) // 2):
        cache.update(kv[2 * layer], kv[2 * layer + 1], layer)
    cache.batch_repeat_interleave(len(sequences))
    rest = padded_width(max(len(s) for s in sequences), pad_to_multiple) - shared
    ids = torch.zeros((len(sequences), rest), dtype=torch.long)
    attn = torch.zeros((len(sequences), shared + rest), dtype=torch.long)
    attn[:, :shared] = 1
    for i, s in enumerate(sequences):
        ids[i, : len(s) - shared] = torch.tensor(list(s[shared:]), dtype=torch.long)
        attn[i, shared: len(s)] = 1
    positions = torch.arange(shared, shared + rest, device=device)[None].expand(len(sequences), -1)
    tail = decoder(input_ids=ids.to(device), attention_mask=attn.to(device), position_ids=positions,
                   past_key_values=cache, use_cache=False).last_hidden_state
    return torch.cat([prefix_hidden.expand(len(sequences), -1, -1), tail], dim=1)


def _outside(restricted: Sequence[tuple[int, Sequence[int]]], logits: torch.Tensor,
             cache: dict[int, torch.Tensor]) -> torch.Tensor:
    """Boolean mask shaped like ``logits``: True where row ``j``'s logit lies outside its allowed set
    (rows not listed: all False). ``cache`` keeps one mask per distinct set object of the call."""
    out = torch.zeros(logits.shape, dtype=torch.bool, device=logits.device)
    for j, ids in restricted:
        key = id(ids)
        if key not in cache:
            outside = torch.ones(logits.shape[-1], dtype=torch.bool, device=logits.device)
            outside[torch.as_tensor(list(ids), dtype=torch.long, device=logits.device)] = False
            cache[key] = outside
        out[j] = cache[key]
    return out


class GRPOTrainer:
    """Owns the policy model, the reference and the optimiser; ``train_on(batch)`` does one GRPO update.

    ``model`` is trained as given: wrap it with :func:`~toolgym.agents.hf_policy.apply_lora` first
    to train a LoRA adapter (then the reference is the model with the adapter off).
    ``temperature`` is the sampling temperature the rollouts were drawn with.
    """

    def __init__(self, model: Any, config: GRPOConfig | dict | None = None, temperature: float = 1.0):
        self.config = config if isinstance(config, GRPOConfig) else GRPOConfig.from_dict(config)
        self._prompt_keys: list[tuple[int, ...]] | None = None  # per sequence of the batch being run
        cfg = self.config
        self.uses_lora = hasattr(model, "disable_adapter")
        if cfg.lora and not self.uses_lora:
            raise ValueError("grpo.lora is set but the model has no adapter: wrap it with apply_lora(model, lora) first")
        self.temperature = float(temperature) if temperature and temperature > 0 else 1.0
        self.model = model
        device = next(model.parameters()).device
        self.autocast_bf16 = bf16_autocast(cfg.autocast_bf16, device, "grpo.autocast_bf16")  # "auto" decided once
        self.ref_model = None
        if not self.uses_lora and cfg.kl_coef > 0:
            self.ref_model = copy.deepcopy(model).eval()
            for p in self.ref_model.parameters():
                p.requires_grad_(False)
        if cfg.gradient_checkpointing and hasattr(model, "gradient_checkpointing_enable"):
            model.gradient_checkpointing_enable()
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)

    @contextmanager
    def _reference(self) -> Iterator[Any]:
        if self.ref_model is not None:
            yield self.ref_model
        else:
            with self.model.disable_adapter():
                yield self.model

    def _micro_batches(self, idx: Sequence[int], lengths: Sequence[int] | None = None) -> Iterator[list[int]]:
        """``micro_batch_size`` sequences at a time; with ``lengths``, sequences of similar length
        together (each micro-batch is right-padded to its longest: sorting cuts the padding, and the
        gradient is a sum over the mini-batch, so the order changes nothing but float rounding)."""
        step = max(1, self.config.micro_batch_size)
        idx = sorted(idx, key=lambda i: lengths[i]) if lengths is not None else list(idx)
        if self.config.share_prompt_prefix and self._prompt_keys is not None:
            # a group's rollouts (one prompt) together, so a micro-batch shares its prompt; by length inside
            idx = sorted(idx, key=lambda i: (self._prompt_keys[i], lengths[i] if lengths is not None else 0))
        for start in range(0, len(idx), step):
            yield list(idx[start:start + step])

    def _logprobs(self, model: Any, seqs: Sequence[Sequence[int]], masks: Sequence[Sequence[int]],
                  allowed: Sequence[Any] | None = None) -> list[torch.Tensor]:
        return response_logprobs(model, seqs, masks, self.config.logprob_chunk, self.temperature, allowed,
                                 self.autocast_bf16, self.config.share_prompt_prefix,
                                 self.config.pad_to_multiple, self.config.recompute_prompt)

    def is_on_policy(self, batch: TokenBatch) -> bool:
        """One optimiser step on fresh rollouts: the old log-probs are the current ones."""
        n = len(batch.token_ids)
        return batch.old_logprobs is None and self.config.epochs == 1 and (self.config.mini_batch_size or n) >= n

    @torch.no_grad()
    def prepare(self, batch: TokenBatch, old: bool = True) -> None:
        """Fill old (current policy, before the update; unless ``old=False``) and reference
        log-probs, no gradients."""
        cfg = self.config
        n = len(batch.token_ids)
        self._prompt_keys = prompt_keys(batch)
        old_lp: list[torch.Tensor] = [None] * n  # type: ignore[list-item]
        ref: list[torch.Tensor] = [None] * n  # type: ignore[list-item]
        was_training = self.model.training
        self.model.eval()
        for mb in self._micro_batches(range(n)):
            seqs = [batch.token_ids[i] for i in mb]
            masks = [batch.loss_mask[i] for i in mb]
            allowed = batch.allowed_of(mb)
            if old:
                for i, lp in zip(mb, self._logprobs(self.model, seqs, masks, allowed)):
                    old_lp[i] = lp.detach()
            if cfg.kl_coef > 0:
                with self._reference() as ref_model:
                    for i, lp in zip(mb, self._logprobs(ref_model, seqs, masks, allowed)):
                        ref[i] = lp.detach()
        self.model.train(was_training)
        if old:
            batch.old_logprobs = old_lp
        batch.ref_logprobs = ref if cfg.kl_coef > 0 else None

    def train_on(self, batch: TokenBatch, seed: int | Sequence[int] = 0) -> dict[str, float]:
        """One GRPO update on ``batch`` (``epochs`` passes, one optimiser step per mini-batch).

        With ``epochs > 1`` each pass visits the sequences in an order drawn from
        ``default_rng(seed)``; the train loop passes ``(run seed, step)``.
        """
        cfg = self.config
        on_policy = self.is_on_policy(batch)
        if batch.old_logprobs is None and not on_policy:
            self.prepare(batch)
        elif on_policy and cfg.kl_coef > 0 and batch.ref_logprobs is None:
            self.prepare(batch, old=False)
        n = len(batch.token_ids)
        self._prompt_keys = prompt_keys(batch)
        mini = cfg.mini_batch_size or n
        sums = {"loss": 0.0, "pg_loss": 0.0, "kl": 0.0, "clip_frac": 0.0, "ratio": 0.0}
        tokens_seen = skipped_tokens = 0
        inert = inert_sequences(batch, cfg.kl_coef)
        grad_norms = []
        tis_weights: list[torch.Tensor] = []
        gap_sum = 0.0
        lengths = [len(ids) for ids in batch.token_ids]
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.model.train()
        rng = np.random.default_rng(seed)
        for _ in range(cfg.epochs):
            order = rng.permutation(n) if cfg.epochs > 1 else np.arange(n)
            for start in range(0, n, mini):
                members = [int(i) for i in order[start:start + mini]]
                total = sum(int(sum(batch.loss_mask[i])) for i in members)
                if total == 0:
                    continue
                self.optimizer.zero_grad(set_to_none=True)
                # inert sequences add exactly zero to the loss and its gradient, but their tokens stay in `total`
                active = [i for i in members if i not in inert]
                skipped_tokens += total - sum(int(sum(batch.loss_mask[i])) for i in active)
                if not active:  # the step still runs (Adam momentum, weight decay), on a zero gradient
                    for p in params:
                        p.grad = torch.zeros_like(p)
                for mb in self._micro_batches(active, lengths):
                    seqs = [batch.token_ids[i] for i in mb]
                    masks = [batch.loss_mask[i] for i in mb]
                    logp = torch.cat(self._logprobs(self.model, seqs, masks, batch.allowed_of(mb)))
                    if logp.numel() == 0:
                        continue
                    device = logp.device
                    # on-policy: π_old is the policy that is about to change, i.e. this very pass
                    old = logp.detach() if on_policy else torch.cat([batch.old_logprobs[i] for i in mb]).to(device)
                    ref = torch.cat([batch.ref_logprobs[i] for i in mb]).to(device) if batch.ref_logprobs else None
                    adv = torch.cat([torch.as_tensor(np.asarray(batch.advantages[i])[np.asarray(batch.loss_mask[i], dtype=bool)],
                                                     dtype=torch.float32) for i in mb]).to(device)
                    tok_loss, parts = grpo_token_loss(logp, old, ref, adv, cfg.clip_eps, cfg.kl_coef)
                    sampled = self._sampler_logprobs(batch, mb, device)
                    if sampled is not None:
                        gap = old - sampled  # log π_train − log π_sample on the same tokens
                        gap_sum += float(gap.abs().sum())
                        weight = truncated_importance_weight(old, sampled, cfg.tis_cap or math.inf)
                        tis_weights.append(weight)
                        if cfg.tis_cap is not None:
                            tok_loss = tok_loss * weight
                    # token-mean over the whole mini-batch: divide by its token count, not the micro-batch's
                    (tok_loss.sum() / total).backward()
                    with torch.no_grad():
                        sums["loss"] += float(tok_loss.sum())
                        sums["pg_loss"] += float(parts["pg"].sum())
                        sums["kl"] += float(parts["kl"].sum())
                        sums["clip_frac"] += float(parts["clipped"].sum())
                        sums["ratio"] += float(torch.exp(logp - old).sum())
                        tokens_seen += logp.numel()
                norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm if cfg.max_grad_norm > 0 else math.inf)
                grad_norms.append(float(norm))
                self.optimizer.step()
        # the objective's token mean counts inert tokens (they add 0); the ratio is over the tokens run
        metrics = {k: v / max(tokens_seen + (skipped_tokens if k != "ratio" else 0), 1) for k, v in sums.items()}
        metrics["grad_norm"] = float(np.mean(grad_norms)) if grad_norms else 0.0
        metrics["policy_tokens"] = float(tokens_seen / max(cfg.epochs, 1))
        metrics["optimizer_steps"] = float(len(grad_norms))
        metrics["inert_sequences"] = float(len(inert))  # not run: zero advantage and no KL term
        metrics["inert_tokens"] = float(skipped_tokens / max(cfg.epochs, 1))
        if tis_weights:  # the sampler/trainer mismatch, on the tokens that were run
            w = torch.cat(tis_weights)
            metrics["sampler_logp_gap"] = gap_sum / max(w.numel(), 1)
            metrics["tis_weight_mean"] = float(w.mean())
            metrics["tis_weight_std"] = float(w.std()) if w.numel() > 1 else 0.0
            metrics["tis_weight_max"] = float(w.max())
            if cfg.tis_cap is not None:
                metrics["tis_capped_frac"] = float((w >= cfg.tis_cap).float().mean())
        return metrics

    @staticmethod
    def _sampler_logprobs(batch: TokenBatch, mb: Sequence[int], device: torch.device) -> torch.Tensor | None:
        """The sampler's log-probs of micro-batch ``mb`` (masked positions, in order), or None if any
        sequence of it has none."""
        if batch.sampling_logprobs is None or any(batch.sampling_logprobs[i] is None for i in mb):
            return None
        return torch.cat([batch.sampling_logprobs[i] for i in mb]).to(device)  # type: ignore[misc]
