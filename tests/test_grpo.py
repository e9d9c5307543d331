"""Local GRPO: hand-computed loss pieces, a learning update, exact zero gradient through masked tokens."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from toolgym.agents.hf_policy import apply_lora, load_tokenizer, tiny_causal_lm
from toolgym.data.records import Trajectory
from toolgym.rewards.base import GroupCredit, grpo_advantage
from toolgym.trainers import grpo as grpo_module
from toolgym.trainers.grpo import (GRPOConfig, GRPOTrainer, TokenBatch, clipped_surrogate, inert_sequences, kl_k3,
                                   response_logprobs, token_advantages, trajectory_token_advantages)


def test_k3_kl_on_hand_numbers():
    # r = log(0.25) - log(0.5) = -ln 2; exp(r) - r - 1 = 0.5 + ln 2 - 1
    got = kl_k3(torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)]))
    assert got.item() == pytest.approx(0.5 + math.log(2) - 1, abs=1e-6)
    assert kl_k3(torch.tensor([-1.3]), torch.tensor([-1.3])).item() == 0.0


def test_clipped_surrogate_on_hand_numbers():
    logp, old = torch.tensor([math.log(1.5)] * 2), torch.zeros(2)
    loss, clipped = clipped_surrogate(logp, old, torch.tensor([1.0, -1.0]), 0.2)
    # A=+1: min(1.5, 1.2) = 1.2 (clipped); A=-1: min(-1.5, -1.2) = -1.5 (not clipped)
    assert loss.tolist() == pytest.approx([-1.2, 1.5], abs=1e-6)
    assert clipped.tolist() == [1.0, 0.0]


def test_turn_advantages_land_on_their_spans_and_outcome_broadcasts():
    adv = token_advantages(10, [(2, 4), (6, 9)], [0.5, -2.0])
    assert adv.tolist() == [0, 0, 0.5, 0.5, 0, 0, -2, -2, -2, 0]
    traj = Trajectory(task_id="t", token_ids=list(range(8)), loss_mask=[0, 1, 1, 0, 0, 1, 0, 0], turn_spans=[(1, 3), (5, 6)])
    per_turn = GroupCredit(np.zeros(2), np.array([9.0, 9.0]), [np.array([0.0, 0.0]), np.array([1.5, -0.5])])
    assert trajectory_token_advantages(traj, per_turn, 1).tolist() == [0, 1.5, 1.5, 0, 0, -0.5, 0, 0]
    outcome = GroupCredit(np.zeros(2), np.array([0.25, -0.25]))
    assert trajectory_token_advantages(traj, outcome, 0).tolist() == [0, 0.25, 0.25, 0, 0, 0.25, 0, 0]


def _toy_batch(tokenizer):
    prompt = tokenizer.encode("<|im_start|>user\nfind a weather tool<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    good = tokenizer.encode('<tool_call>{"name": "search", "arguments": {"query": "weather"}}</tool_call>', add_special_tokens=False)
    bad = tokenizer.encode("I do not know.<|im_end|>", add_special_tokens=False)
    seqs = [prompt + good, prompt + bad]
    masks = [[0] * len(prompt) + [1] * len(good), [0] * len(prompt) + [1] * len(bad)]
    adv = grpo_advantage([1.0, 0.0])  # the rewarded completion gets +1, the other -1
    advs = [np.where(np.array(m) == 1, a, 0.0) for m, a in zip(masks, adv)]
    return seqs, masks, advs


def test_one_update_raises_logprob_of_rewarded_completion(tokenizer):
    model = tiny_causal_lm(tokenizer, seed=1)
    trainer = GRPOTrainer(model, {"lr": 1e-3, "micro_batch_size": 1})
    seqs, masks, advs = _toy_batch(tokenizer)
    with torch.no_grad():
        before = [lp.sum().item() for lp in response_logprobs(trainer.model, seqs, masks)]
    metrics = trainer.train_on(TokenBatch(seqs, masks, advs))
    with torch.no_grad():
        after = [lp.sum().item() for lp in response_logprobs(trainer.model, seqs, masks)]
    assert after[0] > before[0] + 1e-3
    assert after[1] < before[1]
    assert metrics["kl"] == 0.0 and metrics["clip_frac"] == 0.0 and metrics["ratio"] == pytest.approx(1.0)
    assert metrics["policy_tokens"] == sum(map(sum, masks))


def _grads(model, seqs, masks, advs):
    trainer = GRPOTrainer(copy.deepcopy(model), {"lr": 0.0, "kl_coef": 0.1, "max_grad_norm": 0, "micro_batch_size": 1})
    batch = TokenBatch(seqs, masks, advs)
    trainer.prepare(batch)
    # shift old log-probs so the ratio differs from 1 and the KL reference differs too
    batch.old_logprobs = [lp - 0.1 for lp in batch.old_logprobs]
    trainer.train_on(batch)
    return {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}


def test_masked_tokens_contribute_exactly_zero_gradient(tokenizer):
    model = tiny_causal_lm(tokenizer, seed=2)
    seqs, masks, advs = _toy_batch(tokenizer)
    tool = tokenizer.encode("<|im_start|>tool\n1. weather_api: forecasts of rain<|im_end|>\n", add_special_tokens=False)
    other = tokenizer.encode("<|im_start|>tool\n1. stock_api: quotes of shares and bonds today<|im_end|>\n", add_special_tokens=False)
    other = other[: len(tool)]
    assert other != tool
    grads = []
    # retrieved tokens after the response (mask 0) with different content and garbage advantages:
    # same shapes, so any difference in the gradient would come from the masked tokens themselves
    for extra, garbage in ((tool, 123.0), (other, -77.0)):
        s2 = [seqs[0] + extra, seqs[1]]
        m2 = [masks[0] + [0] * len(extra), masks[1]]
        a2 = [np.concatenate([advs[0], np.full(len(extra), garbage)]), advs[1]]
        grads.append(_grads(model, s2, m2, a2))
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for name in grads[0]:
        assert torch.equal(grads[0][name], grads[1][name]), name
    base = _grads(model, seqs, masks, advs)  # without the tool tokens: equal up to float rounding
    for name in base:
        torch.testing.assert_close(base[name], grads[0][name], rtol=1e-4, atol=1e-8)


def test_gradient_accumulation_equals_one_big_batch(tokenizer):
    model = tiny_causal_lm(tokenizer, seed=3)
    seqs, masks, advs = _toy_batch(tokenizer)
    results = []
    for micro in (1, 2):
        trainer = GRPOTrainer(copy.deepcopy(model), {"lr": 1e-3, "micro_batch_size": micro})
        batch = TokenBatch(seqs, masks, advs)
        trainer.prepare(batch)
        batch.old_logprobs = [lp - 0.3 for lp in batch.old_logprobs]  # make clipping active
        metrics = trainer.train_on(batch)
        results.append((metrics, [p.detach().clone() for p in trainer.model.parameters()]))
    assert results[0][0]["loss"] == pytest.approx(results[1][0]["loss"], rel=1e-5)
    assert results[0][0]["clip_frac"] > 0
    for a, b in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_lora_reference_is_the_base_model_with_adapter_off(tokenizer):
    model = tiny_causal_lm(tokenizer, seed=4)
    seqs, masks, advs = _toy_batch(tokenizer)
    with torch.no_grad():
        original = torch.cat(response_logprobs(model, seqs, masks))
    trainer = GRPOTrainer(apply_lora(copy.deepcopy(model), {"r": 4, "lora_alpha": 8}), {"lr": 1e-2, "lora": {"r": 4, "lora_alpha": 8}})
    assert trainer.ref_model is None and trainer.uses_lora
    for _ in range(2):
        trainer.train_on(TokenBatch(seqs, masks, advs))
    with torch.no_grad():
        tuned = torch.cat(response_logprobs(trainer.model, seqs, masks))
        with trainer._reference() as ref:
            reference = torch.cat(response_logprobs(ref, seqs, masks))
    assert not torch.allclose(tuned, original)
    torch.testing.assert_close(reference, original)


def test_bad_batches_get_clear_errors():
    with pytest.raises(ValueError, match="differ"):
        TokenBatch([[1, 2, 3]], [[0, 1]], [np.zeros(3)])
    with pytest.raises(ValueError, match="first token"):
        TokenBatch([[1, 2]], [[1, 1]], [np.zeros(2)])
    with pytest.raises(ValueError, match="unknown GRPO settings"):
        GRPOConfig.from_dict({"learning_rate": 1e-3})


def test_logprobs_are_taken_under_the_sampling_temperature(tokenizer):
    """old log-prob of a sampled token = log softmax(logits / T) there, and the ratio is exactly 1 before any update."""
    model = tiny_causal_lm(tokenizer, seed=5)
    seqs, masks, advs = _toy_batch(tokenizer)
    T = 0.7
    trainer = GRPOTrainer(copy.deepcopy(model), {"lr": 1e-3, "micro_batch_size": 1}, temperature=T)
    batch = TokenBatch(seqs, masks, advs)
    trainer.prepare(batch)
    with torch.no_grad():
        for seq, mask, old in zip(seqs, masks, batch.old_logprobs):
            logits = model(torch.tensor([seq])).logits[0].float()
            pos = [p for p in range(1, len(seq)) if mask[p]]
            want = torch.stack([torch.log_softmax(logits[p - 1] / T, -1)[seq[p]] for p in pos])
            torch.testing.assert_close(old, want, rtol=1e-5, atol=1e-5)
            untempered = torch.stack([torch.log_softmax(logits[p - 1], -1)[seq[p]] for p in pos])
            assert not torch.allclose(old, untempered, atol=1e-3)
    metrics = trainer.train_on(batch)  # one epoch, one mini-batch: every ratio is taken before the step
    assert metrics["ratio"] == 1.0 and metrics["clip_frac"] == 0.0


def test_greedy_temperature_counts_as_one_and_lora_needs_a_wrapped_model(tokenizer):
    model = tiny_causal_lm(tokenizer, seed=6)
    assert GRPOTrainer(model, {"kl_coef": 0.0}, temperature=0.0).temperature == 1.0
    with pytest.raises(ValueError, match="apply_lora"):
        GRPOTrainer(model, {"lora": {"r": 2}})


def test_epoch_shuffle_follows_the_seed_not_the_batch_size(tokenizer):
    model = tiny_causal_lm(tokenizer, seed=7)
    seqs, masks, advs = _toy_batch(tokenizer)
    seqs, masks, advs = seqs * 2, masks * 2, [a * s for a, s in zip(advs * 2, (1.0, 1.0, 0.5, 0.5))]

    def params_after(seed):
        trainer = GRPOTrainer(copy.deepcopy(model), {"lr": 1e-2, "micro_batch_size": 1, "mini_batch_size": 1,
                                                      "epochs": 2, "kl_coef": 0.0})
        trainer.train_on(TokenBatch(seqs, masks, advs), seed=seed)
        return torch.cat([p.detach().flatten() for p in trainer.model.parameters()])

    same = params_after((0, 1))
    assert torch.equal(same, params_after((0, 1)))
    first_epoch = {tuple(np.random.default_rng(s).permutation(4)) for s in [(0, 1), (0, 6)]}
    assert len(first_epoch) == 2  # the two seeds visit the sequences in different orders ...
    assert not torch.equal(same, params_after((0, 6)))  # ... and so end at different weights


def test_on_policy_update_skips_the_old_pass_and_matches_the_prepared_update(tokenizer):
    model = tiny_causal_lm(tokenizer, seed=5)  # no dropout: eval and train passes agree
    seqs, masks, advs = _toy_batch(tokenizer)
    params = []
    for prepared in (True, False):
        trainer = GRPOTrainer(copy.deepcopy(model), {"lr": 1e-3, "kl_coef": 0.0, "micro_batch_size": 1})
        batch = TokenBatch(seqs, masks, advs)
        calls = []
        original = trainer._logprobs
        trainer._logprobs = lambda *a: calls.append(1) or original(*a)
        if prepared:
            trainer.prepare(batch)
        assert trainer.is_on_policy(batch) is (not prepared)
        metrics = trainer.train_on(batch)
        assert metrics["ratio"] == pytest.approx(1.0, abs=1e-6)
        assert len(calls) == (4 if prepared else 2)  # two sequences: a no-grad pass each, only when prepared
        params.append([p.detach().clone() for p in trainer.model.parameters()])
    for a, b in zip(*params):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    # several optimiser steps per batch are off-policy after the first: old log-probs are prepared
    trainer = GRPOTrainer(copy.deepcopy(model), {"lr": 1e-3, "mini_batch_size": 1})
    assert not trainer.is_on_policy(TokenBatch(seqs, masks, advs))


def test_skipping_zero_advantage_sequences_without_kl_leaves_the_update_unchanged(tokenizer, monkeypatch):
    model = tiny_causal_lm(tokenizer, seed=7)
    seqs, masks, advs = _toy_batch(tokenizer)
    # a zero-advantage copy of each sequence (a zero-variance group): inert only without a KL term
    batch_parts = (seqs + seqs, masks + masks, advs + [np.zeros(len(a)) for a in advs])
    assert inert_sequences(TokenBatch(*batch_parts), 0.0) == {2, 3}
    assert inert_sequences(TokenBatch(*batch_parts), 0.1) == set()

    def update(skip: bool, mini: int | None):
        if not skip:
            monkeypatch.setattr(grpo_module, "inert_sequences", lambda batch, kl: set())
        trainer = GRPOTrainer(copy.deepcopy(model), {"lr": 1e-2, "kl_coef": 0.0, "micro_batch_size": 1,
                                                     "mini_batch_size": mini, "weight_decay": 0.1})
        batch = TokenBatch(*batch_parts)
        calls = []
        original = trainer._logprobs
        trainer._logprobs = lambda *a: calls.append(len(a[1])) or original(*a)
        metrics = trainer.train_on(batch)
        monkeypatch.undo()
        return metrics, calls, [p.detach().clone() for p in trainer.model.parameters()]

    for mini in (None, 2):  # one step; or two steps, the second on inert sequences only (momentum still moves)
        skipped, calls_skipped, after_skipped = update(True, mini)
        full, calls_full, after_full = update(False, mini)
        assert skipped["inert_sequences"] == 2 and skipped["inert_tokens"] == sum(map(sum, masks))
        assert skipped["loss"] == pytest.approx(full["loss"], rel=1e-5)  # the same token mean of the objective
        assert sum(calls_skipped) < sum(calls_full)  # the inert sequences were never run ...
        for a, b in zip(after_skipped, after_full):  # ... and the weights end up the same
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
        assert skipped["optimizer_steps"] == full["optimizer_steps"] == (1 if mini is None else 2)


def test_bf16_autocast_logprobs_stay_close_and_float32(tokenizer):
    model = tiny_causal_lm(tokenizer, seed=6)
    seqs, masks, _ = _toy_batch(tokenizer)
    with torch.no_grad():
        full = torch.cat(response_logprobs(model, seqs, masks))
        half = torch.cat(response_logprobs(model, seqs, masks, autocast_bf16=True))
    assert half.dtype == torch.float32 and half.shape == full.shape
    assert not torch.equal(half, full)  # the decoder did run in bfloat16
    torch.testing.assert_close(half, full, rtol=0, atol=0.05)


# -- the shared prompt prefix ---------------------------------------------------------------------
def _group(seed=0, prompt_len=40, n=4):
    rng = np.random.default_rng(seed)
    prompt = rng.integers(5, 400, prompt_len).tolist()
    seqs, masks = [], []
    for i in range(n):
        # a turn, an observation (mask 0), a second turn: the rollouts diverge after the prompt
        tail = rng.integers(5, 400, 6 + 3 * i).tolist()
        obs = rng.integers(5, 400, 5).tolist()
        more = rng.integers(5, 400, 4 + i).tolist()
        seqs.append(prompt + tail + obs + more)
        masks.append([0] * prompt_len + [1] * len(tail) + [0] * len(obs) + [1] * len(more))
    return seqs, masks


def test_shared_prefix_length_stops_before_the_first_policy_token():
    seqs, masks = _group()
    assert grpo_module.shared_prefix_length(seqs, masks) == 40
    masks[2] = [0] * 30 + [1] * (len(seqs[2]) - 30)  # a policy token at 30: the prefix ends there
    assert grpo_module.shared_prefix_length(seqs, masks) == 30
    seqs[1] = [7] + seqs[1][1:]
    assert grpo_module.shared_prefix_length(seqs, masks) == (0 if seqs[0][0] != 7 else 30)


@pytest.mark.parametrize("autocast, recompute", [(False, False), (True, False), (False, True), (True, True)])
def test_shared_prefix_gives_the_unshared_logprobs_and_gradients(tiny, autocast, recompute, monkeypatch):
    seqs, masks = _group()
    model = copy.deepcopy(tiny)
    prefix_passes = []
    pass_fn = grpo_module._prefix_pass
    monkeypatch.setattr(grpo_module, "_prefix_pass", lambda *a: prefix_passes.append(1) or pass_fn(*a))
    results = {}
    for share in (False, True):
        model.zero_grad(set_to_none=True)
        lp = grpo_module.response_logprobs(model, seqs, masks, temperature=0.9, autocast_bf16=autocast,
                                           share_prefix=share, recompute_prefix=recompute)
        loss = sum((l * (k + 1)).sum() for k, l in enumerate(lp))  # a different weight per row
        loss.backward()
        results[share] = ([l.detach().clone() for l in lp], {n: p.grad.clone() for n, p in model.named_parameters()})
    assert len(prefix_passes) == (2 if recompute else 1)  # recomputed once in the backward pass
    tol = 3e-2 if autocast else 1e-4
    for a, b in zip(results[False][0], results[True][0]):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)
    for name, g in results[False][1].items():
        torch.testing.assert_close(g, results[True][1][name], atol=tol * 10, rtol=tol * 10, msg=name)


def test_gradient_checkpointing_with_a_shared_prompt_runs_every_row_whole(tiny):
    # The decoder's cache is off under gradient checkpointing in training, and the shared pass used
    # to fail on it (a None cache); now the rows run whole and give the unshared log-probs.
    seqs, masks = _group()
    model = copy.deepcopy(tiny)
    plain = [l.detach() for l in grpo_module.response_logprobs(model, seqs, masks, temperature=0.9)]
    model.gradient_checkpointing_enable()
    model.train()
    lp = grpo_module.response_logprobs(model, seqs, masks, temperature=0.9, share_prefix=True)
    sum(l.sum() for l in lp).backward()
    for a, b in zip(plain, lp):
        torch.testing.assert_close(a, b.detach(), atol=1e-4, rtol=1e-4)


def test_padded_width_rounds_up_to_the_multiple():
    assert [grpo_module.padded_width(n, 64) for n in (1, 63, 64, 65, 128)] == [64, 64, 64, 128, 128]
    assert grpo_module.padded_width(37, 1) == 37


@pytest.mark.parametrize("share", [False, True])
def test_padding_to_a_multiple_changes_no_logprob_and_widens_the_batch(tiny, share, monkeypatch):
    seqs, masks = _group()  # rows of 55, 59, 63 and 67 tokens: padded to 128
    widths = []
    decoder, _ = grpo_module._decoder_and_head(tiny)
    forward = decoder.forward

    def spy(*args, **kw):
        widths.append(kw["input_ids"].shape[1])
        return forward(*args, **kw)

    plain = [l.detach() for l in grpo_module.response_logprobs(tiny, seqs, masks, share_prefix=share)]
    monkeypatch.setattr(decoder, "forward", spy)
    padded = grpo_module.response_logprobs(tiny, seqs, masks, share_prefix=share, pad_to_multiple=64)
    # one pass of the whole width, or the 40-token shared prompt then the continuations up to 128
    assert widths == ([40, 88] if share else [128])
    for a, b in zip(plain, padded):
        torch.testing.assert_close(a, b.detach(), atol=1e-5, rtol=1e-5)


def test_pad_to_multiple_must_be_positive():
    with pytest.raises(ValueError, match="grpo.pad_to_multiple"):
        GRPOConfig(pad_to_multiple=0)


def test_update_with_a_shared_prompt_matches_the_unshared_update(tiny):
    """One GRPO step with share_prompt_prefix: micro-batches hold one group's rollouts, and the
    updated weights equal the plain step's."""
    seqs, masks = [], []
    for seed in (1, 2):  # two tasks, four rollouts each, interleaved as a batch might come
        s, m = _group(seed=seed)
        seqs += s
        masks += m
    order = [0, 4, 1, 5, 2, 6, 3, 7]
    seqs, masks = [seqs[i] for i in order], [masks[i] for i in order]
    adv = [np.where(np.asarray(m) == 1, (-1.0) ** i * 0.5, 0.0) for i, m in enumerate(masks)]
    weights = {}
    for share in (False, True):
        model = copy.deepcopy(tiny)
        trainer = grpo_module.GRPOTrainer(model, {"lr": 1e-2, "kl_coef": 0.0, "micro_batch_size": 4,
                                                  "share_prompt_prefix": share})
        trainer.train_on(grpo_module.TokenBatch(token_ids=seqs, loss_mask=masks, advantages=adv))
        weights[share] = {n: p.detach().clone() for n, p in model.named_parameters()}
    for name, w in weights[False].items():
        torch.testing.assert_close(w, weights[True][name], atol=1e-4, rtol=1e-4, msg=name)
