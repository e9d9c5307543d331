"""The lean decoder (toolgym.agents.decoding): the same tokens as ``generate`` / a fresh encoding,
continuous batching that changes no episode, the sampling distribution, and the TIS weight."""
from __future__ import annotations

import math

import gymnasium
import numpy as np
import pytest
import torch

import toolgym.envs  # noqa: F401
from toolgym.agents.decoding import DecodeEngine, LeanWeights, sampling_dtype, _sample
from toolgym.agents.hf_policy import HFChatPolicy, apply_lora, tiny_causal_lm
from toolgym.agents.policy import SamplingConfig
from toolgym.trainers.grpo import GRPOTrainer, TokenBatch, truncated_importance_weight
from toolgym.agents.rollout import collect_rollouts

MESSAGES = [{"role": "system", "content": "You find tools."}, {"role": "user", "content": "Book a flight to Oslo"}]


def sharp_tiny(tokenizer, seed=1):
    """A tiny Llama whose greedy tokens depend on every position (scaled weights)."""
    model = tiny_causal_lm(tokenizer, seed=seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" not in name:
                param.mul_(20.0)
    return model.eval()


def fp32(**kw):
    return {"precision": "float32", **kw}


def run_engine(engine, prompts):
    engine.add(list(enumerate(prompts)))
    out = {}
    while len(engine):
        for key, gen in engine.step():
            out[key] = gen
            engine.remove(key)
    return [out[i] for i in range(len(prompts))]


def test_lean_greedy_turns_equal_generate_with_shared_ragged_and_early_ending_rows(tokenizer):
    model = sharp_tiny(tokenizer)
    lean = HFChatPolicy(model, tokenizer, fp32(max_new_tokens=8, temperature=0.0))
    ref = HFChatPolicy(model, tokenizer, fp32(max_new_tokens=8, temperature=0.0, engine="generate"))
    a = lean.encode_prompt(MESSAGES)
    b = lean.encode_prompt([MESSAGES[0], {"role": "user", "content": "x"}])
    probe = ref.generate_batch([b])[0].token_ids
    stop_at = next(j for j in range(1, len(probe) - 1) if probe[j] not in probe[:j])
    for p in (lean, ref):  # row b ends early on a token of its own
        p.end_ids = sorted(set(p.end_ids) | {probe[stop_at]})
    prompts = [a, b, a, a[:-3]]
    got, want = lean.generate_batch(prompts), ref.generate_batch(prompts)
    assert [g.token_ids for g in got] == [g.token_ids for g in want]
    assert [g.finish_reason for g in got] == [g.finish_reason for g in want]
    assert got[1].finish_reason == "stop" and len(got[1].token_ids) == stop_at + 1
    # every sampled token's log-prob is the model's own log-softmax at that position (T = 1 when greedy)
    ids = list(a)
    with torch.no_grad():
        for tok, lp in zip(got[0].token_ids, got[0].logprobs):
            expect = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1], -1)[tok]
            assert lp == pytest.approx(float(expect), abs=1e-4)
            ids.append(tok)


def test_a_shared_prompt_prefix_is_copied_not_encoded_and_changes_no_token(tokenizer):
    model = sharp_tiny(tokenizer, seed=6)
    policy = HFChatPolicy(model, tokenizer, fp32(max_new_tokens=6, temperature=0.0))
    ref = HFChatPolicy(model, tokenizer, fp32(max_new_tokens=6, temperature=0.0, engine="generate"))
    system = {"role": "system", "content": "You find tools. " * 12}  # what every task of an env shares
    prompts = [policy.encode_prompt([system, {"role": "user", "content": q}]) for q in ("Book a flight", "Weather in Oslo?")]
    common = next(i for i, (x, y) in enumerate(zip(*prompts)) if x != y)
    assert common >= 40
    engine = policy.decode_engine(capacity=3)
    engine.add([(0, prompts[0])])
    first = engine.step()  # row 0 is cached (and decoding) when the others join
    engine.add([(1, prompts[1]), (2, prompts[0])])
    assert engine.stats["shared_prompt_tokens"] == common + len(prompts[0]) - 1
    out = {k: g for k, g in first}
    while len(out) < 3 or len(engine):
        for key, gen in engine.step():
            out.setdefault(key, gen)
            engine.remove(key)
        if not len(engine):
            break
    for key, prompt in ((1, prompts[1]), (2, prompts[0])):
        assert out[key].token_ids == ref.generate_batch([prompt])[0].token_ids


def test_a_row_extended_with_an_env_turn_continues_as_a_fresh_encoding(tokenizer):
    model = sharp_tiny(tokenizer, seed=3)
    policy = HFChatPolicy(model, tokenizer, fp32(max_new_tokens=5, temperature=0.0))
    ref = HFChatPolicy(model, tokenizer, fp32(max_new_tokens=5, temperature=0.0, engine="generate"))
    engine = policy.decode_engine(capacity=3, length_hint=8)  # small: the cache must grow
    prompts = [policy.encode_prompt(MESSAGES), policy.encode_prompt([MESSAGES[0], {"role": "user", "content": "hi"}])]
    engine.add(list(enumerate(prompts)))
    turns = {0: [], 1: []}
    history = {i: list(p) for i, p in enumerate(prompts)}
    while any(len(t) < 3 for t in turns.values()):
        for key, gen in engine.step():
            want = ref.generate_batch([history[key]])[0]
            assert gen.token_ids == want.token_ids
            turns[key].append(gen)
            if len(turns[key]) == 3:
                engine.remove(key)
                continue
            glue = policy.encode_tool_turn("result " * (5 * key + len(turns[key])), gen.finish_reason == "stop")
            history[key] += gen.token_ids + glue
            engine.extend(key, glue)
            assert engine.tokens(key) == history[key]


def test_continuous_rollouts_equal_turn_by_turn_rollouts_and_envs_are_reused(tokenizer):
    """Greedy, float32: rows that run ahead of others (and a pool of 2 envs for 5 episodes) change no episode."""
    model = sharp_tiny(tokenizer, seed=5)
    kwargs = {"split": "train", "max_turns": 3}
    tasks = [t.id for t in gymnasium.make("toolgym/ToolSearch-v0", **kwargs).unwrapped.tasks[:5]]
    results = {}
    for engine, n_envs in (("generate", 5), ("lean", 5), ("lean", 2)):
        policy = HFChatPolicy(model, tokenizer, fp32(max_new_tokens=12, temperature=0.0, engine=engine))
        envs = [gymnasium.make("toolgym/ToolSearch-v0", **kwargs) for _ in range(n_envs)]
        done = []
        rollouts = collect_rollouts(policy, envs, tasks, seeds=list(range(5)), max_context_tokens=4096,
                                    on_episode=done.append)
        assert sum(done) == 5
        results[(engine, n_envs)] = [(r.trajectory.task_id, r.trajectory.token_ids, r.trajectory.loss_mask,
                                      r.trajectory.turn_spans, r.trajectory.terminated_by) for r in rollouts]
    assert results[("lean", 5)] == results[("generate", 5)]
    assert results[("lean", 2)] == results[("generate", 5)]
    assert [r[0] for r in results[("lean", 2)]] == tasks


def test_lean_weights_follow_a_lora_update(tokenizer):
    model = apply_lora(sharp_tiny(tokenizer, seed=4), {"r": 2, "lora_alpha": 4})
    policy = HFChatPolicy(model, tokenizer, fp32(max_new_tokens=6, temperature=0.0))
    prompt = policy.encode_prompt(MESSAGES)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 5.0)  # what an update does: the adapter's delta becomes non-zero
    got = policy.generate_batch([prompt])[0].token_ids
    ref = HFChatPolicy(model, tokenizer, fp32(max_new_tokens=6, temperature=0.0, engine="generate"))
    assert got == ref.generate_batch([prompt])[0].token_ids
    with model.disable_adapter():
        base = ref.generate_batch([prompt])[0].token_ids
    assert got != base  # the adapter changed the greedy turn, and the lean copy followed


def test_bf16_sampler_stays_close_to_the_float32_model(tokenizer):
    model = tiny_causal_lm(tokenizer, seed=0).eval()
    weights = LeanWeights(model, torch.bfloat16)
    engine = DecodeEngine(weights, tokenizer, SamplingConfig(max_new_tokens=1, temperature=1.0, stop_strings=()), [], 1)
    prompt = tokenizer.encode("hello there, how are you today")
    torch.manual_seed(0)
    gen = run_engine(engine, [prompt])[0]
    with torch.no_grad():
        exact = torch.log_softmax(model(torch.tensor([prompt])).logits[0, -1], -1)[gen.token_ids[0]]
    assert abs(gen.logprobs[0] - float(exact)) < 0.05
    assert sampling_dtype("float32", "cpu") is torch.float32 and sampling_dtype("bfloat16", "cpu") is torch.bfloat16
    with pytest.raises(ValueError, match="precision"):
        sampling_dtype("float77", "cpu")


def test_sampling_follows_temperature_top_k_and_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).repeat(20000, 1)
    torch.manual_seed(0)
    ids, logp = _sample(logits, SamplingConfig(temperature=1.0))
    freq = torch.bincount(ids, minlength=4).float() / len(ids)
    assert torch.allclose(freq, torch.tensor([0.5, 0.3, 0.15, 0.05]), atol=0.015)
    assert torch.allclose(logp, torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))[ids], atol=1e-5)
    ids, logp = _sample(logits, SamplingConfig(temperature=1.0, top_k=2))
    assert set(ids.tolist()) == {0, 1} and torch.allclose(logp[ids == 0], torch.tensor(math.log(0.5 / 0.8)), atol=1e-5)
    # top_p = 0.85: the tail whose mass is <= 0.15 (the two smallest: 0.05 + 0.15 = 0.2 > 0.15, so only 0.05) goes
    ids, _ = _sample(logits, SamplingConfig(temperature=1.0, top_p=0.85))
    assert set(ids.tolist()) == {0, 1, 2}
    ids, logp = _sample(logits[:3], SamplingConfig(temperature=0.0))
    assert ids.tolist() == [0, 0, 0]


def test_stop_strings_cut_where_the_generate_path_cuts(tokenizer):
    from toolgym.agents.decoding import _closer_ids

    closers = _closer_ids(tokenizer, ">")
    ids = tokenizer.encode('<tool_call>{"name": "search"}</tool_call> more', add_special_tokens=False)
    first_close = next(j for j in range(len(ids)) if "</tool_call>" in tokenizer.decode(ids[: j + 1]))
    assert ids[first_close] in closers  # the token completing the stop string is one that is checked
    assert all(">" in tokenizer.decode([i]) for i in list(closers)[:50])


def test_truncated_importance_weight_on_hand_numbers():
    train = torch.log(torch.tensor([0.5, 0.2, 0.9]))
    sample = torch.log(torch.tensor([0.25, 0.4, 0.1]))
    w = truncated_importance_weight(train, sample, cap=2.5)
    # ratios 2.0, 0.5, 9.0 -> capped at 2.5
    assert w.tolist() == pytest.approx([2.0, 0.5, 2.5], abs=1e-6)
    assert not w.requires_grad


def test_tis_with_a_float32_sampler_is_exactly_one_and_a_bf16_gap_is_logged(tokenizer):
    model = tiny_causal_lm(tokenizer, seed=0)
    trainer = GRPOTrainer(model, {"lr": 0.0, "kl_coef": 0.0, "tis_cap": 2.0})
    seq = tokenizer.encode("a b c d e f g h")
    mask = [0, 0, 0, 1, 1, 1, 1, 1]
    from toolgym.trainers.grpo import response_logprobs

    with torch.no_grad():
        own = response_logprobs(model, [seq], [mask])[0]
    # a float32 sampler reports the trainer's own log-probs: every weight is exactly 1
    metrics = trainer.train_on(TokenBatch([seq], [mask], [np.array([0, 0, 0] + [1.0] * 5, dtype=np.float32)],
                                          sampling_logprobs=[own.clone()]))
    assert metrics["tis_weight_mean"] == 1.0 and metrics["tis_weight_max"] == 1.0
    assert metrics["sampler_logp_gap"] == 0.0 and metrics["tis_capped_frac"] == 0.0
    # a sampler that put 4x less mass on the first token: weight capped at 2, gap log 4 on that token
    shifted = own.clone()
    shifted[0] -= math.log(4.0)
    metrics = trainer.train_on(TokenBatch([seq], [mask], [np.array([0, 0, 0] + [1.0] * 5, dtype=np.float32)],
                                          sampling_logprobs=[shifted]))
    assert metrics["tis_weight_max"] == pytest.approx(2.0)
    assert metrics["sampler_logp_gap"] == pytest.approx(math.log(4.0) / 5, abs=1e-5)
    assert metrics["tis_capped_frac"] == pytest.approx(0.2)
