"""The one token sampler of every toolgym decoding path: the lean decoder, the constrained decoder and
``generate`` (through a logits processor, :class:`toolgym.agents.hf_policy.HFChatPolicy`).

``generate``'s settings, in its order: ``logits / T``, then top-k, then top-p, then a restriction
(the constrained decoder's allowed tokens) applied as a logits mask, then one uniform draw per row
through the inverse CDF (greedy, ``T = 0``: the argmax of the masked logits). It returns each pick's
log-probability under that distribution, which the trainer uses to measure the sampler/trainer gap.

Why an inverse CDF and not ``torch.multinomial``: one uniform draw per row costs less than
multinomial's exponential draw over the whole vocabulary (more than a transformer layer of this
model on a CPU). Why it is written once: the two paths used to differ where the uniform draw is
exactly 0 (``torch.rand`` gives 0 about once in 2**24 draws): the lean decoder's ``searchsorted``
from the left then returned token 0 whatever its mass, a token outside top-k with log-probability
−inf. The search stays from the left (the first token whose cumulative mass reaches the draw: the
lean decoder's choice, so every earlier run repeats draw for draw — searching from the right, as
the constrained decoder did, changes the pick wherever the draw lands exactly on a cumulative value,
measured at 4 of 6 400 draws over the full vocabulary), and a pick without mass moves to the first
token whose mass exceeds the draw, or to the argmax when only float rounding at the top of the CDF
put it there.
``transformers``' ``generate`` (the fallback engine for models the lean decoder does not support)
runs greedy over logits this sampler has already reduced to its pick, so it draws the same tokens
from the same random stream instead of ``torch.multinomial``'s.
"""
from __future__ import annotations

import torch

__all__ = ["sample_tokens"]


def sample_tokens(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0,
                  allowed: torch.Tensor | None = None,
                  uniform: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(token ids [n], their log-probabilities [n])`` for ``[n, V]`` logits.

    p_T = softmax(mask(logits / T)), mask = top-k (the ``top_k`` largest), then top-p (drop the
    low tail whose mass is <= 1 - ``top_p``, as transformers' ``TopPLogitsWarper``), then
    ``allowed`` (a ``[n, V]`` bool mask; False = −inf). Pick: the first token whose cumulative p_T
    reaches u · Σp_T, u ~ U[0, 1) (``uniform``: the draws, ``[n, 1]``, for tests), never one without
    mass; T <= 0: argmax.
    """
    greedy = not temperature or temperature <= 0
    scores = logits if greedy else logits / float(temperature)
    if not greedy and top_k and 0 < top_k < scores.shape[-1]:
        kth = torch.topk(scores, int(top_k), dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if not greedy and top_p is not None and top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=False, dim=-1)
        cum = sorted_scores.softmax(-1).cumsum(-1)
        drop_sorted = cum <= (1 - float(top_p))
        drop_sorted[:, -1] = False  # the most likely token always stays
        scores = scores.masked_fill(drop_sorted.scatter(1, order, drop_sorted), float("-inf"))
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    logp = torch.log_softmax(scores, dim=-1)
    if greedy:
        ids = logp.argmax(dim=-1)
    else:
        cdf = logp.exp().cumsum(-1)
        u = uniform if uniform is not None else torch.rand((cdf.shape[0], 1), device=cdf.device, dtype=cdf.dtype)
        target = u.to(cdf.dtype) * cdf[:, -1:]
        ids = torch.searchsorted(cdf, target).squeeze(-1).clamp(max=cdf.shape[-1] - 1)
        outside = torch.isneginf(logp.gather(-1, ids[:, None]).squeeze(-1))
        if bool(outside.any()):  # a draw of 0 before the first token with mass: the first token whose mass exceeds it
            ahead = torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp(max=cdf.shape[-1] - 1)
            ids = torch.where(outside, ahead, ids)
            outside = torch.isneginf(logp.gather(-1, ids[:, None]).squeeze(-1))
            if bool(outside.any()):  # only float rounding at the very top of the CDF lands here
                ids = torch.where(outside, logp.argmax(dim=-1), ids)
    return ids, logp.gather(-1, ids[:, None]).squeeze(-1)
