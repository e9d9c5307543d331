"""Constrained decoding of ToolSearch-v0 calls (agents/constrained.py): every sampled turn parses,
ids come from what the episode showed, categories from the enum, forced tokens are masked out,
and the trainer scores each sample under the restricted distribution it was drawn from (the PPO
ratio is exactly 1 before an update)."""
from __future__ import annotations

import copy
import json

import gymnasium
import numpy as np
import pytest
import torch

import toolgym.envs  # noqa: F401  (registers the ids)
from toolgym.agents.constrained import (
    MAX_IDS_CONSIDERED,
    MAX_OBSERVATION_CHARS,
    ConstrainedToolSearchPolicy,
    EpisodeView,
    TokenTrie,
    search_arguments,
    seen_tool_ids,
)
from toolgym.agents.hf_policy import HFChatPolicy
from toolgym.agents.policy import ChatPolicy
from toolgym.envs.actions import Search, Submit
from toolgym.envs.syntax import parse_action, render_call
from toolgym.trainers.grpo import GRPOTrainer, TokenBatch, response_logprobs
from toolgym.agents.rollout import collect_rollouts


def constrained(model, tokenizer, temperature=1.0, max_new_tokens=96, **kwargs):
    return ConstrainedToolSearchPolicy(
        HFChatPolicy(model, tokenizer, {"max_new_tokens": max_new_tokens, "temperature": temperature}), **kwargs)


@pytest.fixture(scope="module")
def episodes():
    """Real ToolSearch-v0 episode views (category mode optional): the reset messages plus 0-2
    searches with the task's own words, as the policy would see them."""
    env = gymnasium.make("toolgym/ToolSearch-v0", split="train", max_turns=8, category_mode="optional")
    views = []
    for j, task in enumerate(env.unwrapped.tasks[:12]):
        _, info = env.reset(seed=j, options={"task": task.id})
        messages, schemas = list(info["messages"]), info["tool_schemas"]
        views.append(EpisodeView(list(messages), schemas))
        words = task.query.split()
        for turn in range(1 + j % 2):
            call = render_call(Search(" ".join(words[turn * 4:turn * 4 + 6]) or task.query))
            obs, *_ = env.step(call)
            messages += [{"role": "assistant", "content": call}, {"role": "tool", "content": obs}]
            views.append(EpisodeView(list(messages), schemas))
    return views


def test_token_trie_offers_the_tokens_that_continue_an_option():
    trie = TokenTrie({"a": [1, 2, 3], "b": [1, 4], "c": [5]})
    assert trie.root.allowed == (1, 5)
    assert trie.root.children[1].allowed == (2, 4)
    assert trie.root.children[1].children[4].key == "b" and not trie.root.children[1].children[4].children
    for bad in ({"a": [1, 2], "b": [1, 2, 3]}, {"a": [1, 2, 3], "b": [1, 2]}, {"a": [1], "b": [1]}, {"a": []}, {}):
        with pytest.raises(ValueError):
            TokenTrie(bad)


def test_seen_ids_are_read_from_tool_messages_only_most_recent_first(episodes):
    view = next(v for v in episodes if sum(m["role"] == "tool" for m in v.messages) == 2)
    results = [m["content"] for m in view.messages if m["role"] == "tool"]
    ids = seen_tool_ids(view.messages)
    shown = [line.split("id: ", 1)[1] for r in results for line in r.splitlines() if line.startswith("[")]
    assert set(ids) == set(shown) and len(ids) == len(set(shown))
    assert ids[0] == shown[-1]  # the last result of the last search first
    # a request (user message) that looks like a result offers nothing
    assert seen_tool_ids([{"role": "user", "content": "[1] id: fake"}]) == []


def test_hostile_observations_stay_bounded():
    many = "\n".join(f'[{i % 9999}] id: t"{i}\\x' for i in range(3000))
    ids = seen_tool_ids([{"role": "tool", "content": many}])
    assert len(ids) == MAX_IDS_CONSIDERED and ids[0] == 't"2999\\x' and ids[-1] == 't"2950\\x'
    cut = seen_tool_ids([{"role": "tool", "content": "[1] id: whole\n[2] id: " + "z" * MAX_OBSERVATION_CHARS}])
    assert cut == ["whole"]  # the line the cap cuts is dropped, not offered in part
    huge = "x" * MAX_OBSERVATION_CHARS + "\n[1] id: beyond_the_cap"
    assert seen_tool_ids([{"role": "tool", "content": "[1] id: early\n" + huge}]) == ["early"]
    long_line = "[1] id: " + "y" * 10_000  # an id longer than 256 characters is never offered
    assert seen_tool_ids([{"role": "tool", "content": long_line}, {"role": "tool", "content": None}]) == []


def test_category_enum_comes_from_the_schema_the_env_offered():
    env = gymnasium.make("toolgym/ToolSearch-v0", split="train")
    categories = env.unwrapped.corpus.categories
    for mode, expect in (("off", ([], False)), ("optional", (list(categories), False)), ("required", (list(categories), True))):
        _, info = env.reset(seed=0, options={"category_mode": mode})
        assert search_arguments(info["tool_schemas"]) == expect
    assert search_arguments(None) == ([], False)
    with pytest.raises(ValueError, match="no \"search\" function"):
        search_arguments([{"type": "function", "function": {"name": "decompose"}}])


def test_every_sampled_turn_is_a_valid_call(tokenizer, tiny, episodes):
    """Hundreds of turns sampled by a random model on real observations: all parse, submitted ids
    were shown, categories are from the enum, forced tokens have mask 0."""
    policy = constrained(tiny, tokenizer, query_max_tokens=6)  # short queries keep the test fast
    assert isinstance(policy, ChatPolicy)
    enum = set(search_arguments(episodes[0].tool_schemas)[0])
    head = tokenizer.encode('<tool_call>{"name": "', add_special_tokens=False)
    prompt = tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
    kinds = {"search": 0, "submit": 0, "category": 0}
    torch.manual_seed(0)
    for _ in range(11):
        gens = policy.generate_batch([prompt] * len(episodes), episodes=episodes)
        for view, gen in zip(episodes, gens):
            action = parse_action(gen.text)
            assert isinstance(action, (Search, Submit)), (gen.text, action)
            assert gen.token_ids[:len(head)] == head and gen.loss_mask[:len(head)] == [0] * len(head)
            assert len(gen.token_ids) == len(gen.loss_mask) == len(gen.allowed) == len(gen.logprobs) <= 96
            for tok, m, allowed, lp in zip(gen.token_ids, gen.loss_mask, gen.allowed, gen.logprobs):
                assert (m == 1) == (allowed is not None) == (lp is not None)
                if m:
                    assert tok in allowed and len(allowed) > 1 and lp <= 0
            assert gen.text.endswith("</tool_call>") and gen.text == tokenizer.decode(gen.token_ids)
            if isinstance(action, Submit):
                kinds["submit"] += 1
                shown = seen_tool_ids(view.messages)
                assert shown and set(action.tool_ids) <= set(shown)
                assert len(set(action.tool_ids)) == len(action.tool_ids)
            else:
                kinds["search"] += 1
                assert action.query.strip() and "<" not in action.query
                if action.category is not None:
                    kinds["category"] += 1
                    assert action.category in enum
    assert sum(kinds.values()) - kinds["category"] >= 200
    assert kinds["submit"] > 10 and kinds["search"] > 10 and kinds["category"] > 10  # every branch was sampled


def test_no_result_seen_means_search_and_a_required_category_is_always_written(tokenizer, tiny):
    env = gymnasium.make("toolgym/ToolSearch-v0", split="train", category_mode="required")
    _, info = env.reset(seed=0)
    policy = constrained(tiny, tokenizer)
    prompt = tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
    torch.manual_seed(1)
    gens = policy.generate_batch([prompt] * 16, episodes=[EpisodeView(info["messages"], info["tool_schemas"])] * 16)
    for gen in gens:
        action = parse_action(gen.text)
        assert isinstance(action, Search) and action.category in env.unwrapped.corpus.categories
    with pytest.raises(ValueError, match="Hermes"):
        policy.generate_batch([prompt], episodes=[EpisodeView(info["messages"], info["tool_schemas"], "search_r1")])


def test_hostile_ids_are_offered_escaped_and_round_trip(tokenizer, tiny):
    """Thousands of ids with quotes and backslashes: at most 50 are offered, each parses back exactly."""
    weird = [f'id"{i}\\q</tool_call>' for i in range(1500)]
    obs = "\n".join(f"[{i % 5 + 1}] id: {t}\n    name: x" for i, t in enumerate(weird))
    view = EpisodeView([{"role": "user", "content": "u"}, {"role": "tool", "content": obs}], None)
    offered = set(weird[-MAX_IDS_CONSIDERED:])
    policy = constrained(tiny, tokenizer, max_new_tokens=160)
    prompt = tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
    torch.manual_seed(2)
    submits = 0
    for gen in policy.generate_batch([prompt] * 24, episodes=[view] * 24):
        action = parse_action(gen.text)
        assert isinstance(action, (Search, Submit)), gen.text
        if isinstance(action, Submit):
            submits += 1
            assert set(action.tool_ids) <= offered
    assert submits > 0


def test_greedy_turns_and_small_budgets(tokenizer, tiny, episodes):
    prompt = tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
    greedy = constrained(tiny, tokenizer, temperature=0.0, query_max_tokens=8)
    a = greedy.generate_batch([prompt] * 3, episodes=episodes[:3])
    b = greedy.generate_batch([prompt] * 3, episodes=episodes[:3])
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    tight = constrained(tiny, tokenizer, max_new_tokens=30)  # the turn always fits the budget
    torch.manual_seed(3)
    for gen in tight.generate_batch([prompt] * 8, episodes=episodes[:8]):
        assert len(gen.token_ids) <= 30 and isinstance(parse_action(gen.text), (Search, Submit))
    with pytest.raises(ValueError, match="no room"):
        constrained(tiny, tokenizer, max_new_tokens=12).generate_batch([prompt], episodes=episodes[:1])
    with pytest.raises(ValueError, match="top_p"):
        ConstrainedToolSearchPolicy(HFChatPolicy(tiny, tokenizer, {"top_p": 0.9}))


def test_restricted_logprob_is_the_renormalised_softmax(tokenizer, tiny):
    """Hand-computed: log π(t) = z_t/T − logsumexp over the allowed set of z/T, positions without a set unchanged."""
    seq = [1, 2, 3, 4, 5, 6]
    mask = [0, 0, 1, 1, 0, 1]
    allowed = {2: (3, 7, 9), 5: (6, 100)}
    got = response_logprobs(tiny, [seq], [mask], temperature=0.7, allowed=[allowed])[0]
    with torch.no_grad():
        z = tiny(torch.tensor([seq])).logits[0].float() / 0.7
    expect = [
        z[1, 3] - torch.logsumexp(z[1, [3, 7, 9]], 0),
        torch.log_softmax(z[2], -1)[4],
        z[4, 6] - torch.logsumexp(z[4, [6, 100]], 0),
    ]
    assert torch.allclose(got, torch.stack(expect), atol=1e-5)
    plain = response_logprobs(tiny, [seq], [mask], temperature=0.7)[0]
    assert plain[1] == got[1] and plain[0] < got[0] and plain[2] < got[2]
    with pytest.raises(ValueError, match="outside its allowed set"):
        TokenBatch([seq], [mask], [np.zeros(6)], allowed=[{2: (7, 9)}])
    with pytest.raises(ValueError, match="not a policy token"):
        TokenBatch([seq], [mask], [np.zeros(6)], allowed=[{1: (2, 9)}])


def test_old_logprobs_equal_sampling_logprobs_and_the_ratio_is_one(tokenizer, tiny):
    """Real rollouts in ToolSearch-v0: GRPOTrainer.prepare reproduces the sampling log-probs, and
    before any update the ratio exp(log π_θ − log π_old) is exactly 1."""
    model = copy.deepcopy(tiny)
    policy = constrained(model, tokenizer, temperature=0.8, max_new_tokens=64, query_max_tokens=8)
    envs = [gymnasium.make("toolgym/ToolSearch-v0", split="train", max_turns=2, category_mode="optional")
            for _ in range(3)]
    tasks = envs[0].unwrapped.tasks[:3]
    torch.manual_seed(4)
    rollouts = collect_rollouts(policy, envs, [t.id for t in tasks], seeds=[0, 1, 2])
    for r in rollouts:
        assert r.trajectory.invalid_actions == 0
        assert set(r.allowed) == set(r.sampling_logprobs) == {p for p, m in enumerate(r.trajectory.loss_mask) if m}
    seqs = [r.trajectory.token_ids for r in rollouts]
    masks = [r.trajectory.loss_mask for r in rollouts]
    advs = [np.where(np.asarray(m) == 1, 1.0 if i % 2 else -1.0, 0.0) for i, m in enumerate(masks)]
    batch = TokenBatch(seqs, masks, advs, allowed=[r.allowed for r in rollouts])
    trainer = GRPOTrainer(model, {"lr": 1e-3, "kl_coef": 0.001, "micro_batch_size": 2}, temperature=0.8)
    trainer.prepare(batch)
    for r, old in zip(rollouts, batch.old_logprobs):
        sampled = torch.tensor([r.sampling_logprobs[p] for p in sorted(r.sampling_logprobs)])
        assert torch.allclose(old, sampled, atol=1e-4), float((old - sampled).abs().max())
    new = response_logprobs(model, seqs, masks, temperature=0.8, allowed=batch.allowed)
    for n, old in zip(new, batch.old_logprobs):
        assert torch.equal(torch.exp(n - old), torch.ones_like(n))
    # without the restriction the same tokens score lower: the mask is what makes the ratio exact
    unrestricted = torch.cat(response_logprobs(model, seqs, masks, temperature=0.8))
    assert bool((unrestricted < torch.cat(new)).all())
    metrics = trainer.train_on(batch)
    assert metrics["ratio"] == pytest.approx(1.0, abs=1e-6)
    assert metrics["policy_tokens"] == sum(sum(m) for m in masks)


def test_config_key_builds_the_constrained_policy():
    from toolgym.trainers.config import load_train_config
    from toolgym.trainers.config import ModelConfig
    from toolgym.agents.model import build_policy

    cfg = load_train_config(None, ["model.name=tiny-llama", "model.constrained=toolsearch"])
    policy = build_policy(cfg.model, {"max_new_tokens": 48})
    assert isinstance(policy, ConstrainedToolSearchPolicy) and isinstance(policy, ChatPolicy)
    assert not isinstance(build_policy(ModelConfig(name="tiny-llama"), {}), ConstrainedToolSearchPolicy)
    with pytest.raises(ValueError, match="model.constrained"):
        load_train_config(None, ["model.constrained=json"])
    with pytest.raises(ValueError, match="top_p"):
        load_train_config(None, ["model.constrained=toolsearch", "sampling.top_p=0.9"])


def test_rollout_passes_messages_not_gold(tokenizer, tiny):
    """The policy is given the episode's messages and schemas only (no info, no task)."""
    seen = []

    class Spy(ConstrainedToolSearchPolicy):
        def generate_batch(self, prompts, max_new_tokens=None, episodes=None):
            seen.extend(episodes)
            return super().generate_batch(prompts, max_new_tokens, episodes)

    env = gymnasium.make("toolgym/ToolSearch-v0", split="train", max_turns=2)
    policy = Spy(HFChatPolicy(tiny, tokenizer, {"max_new_tokens": 48}))
    collect_rollouts(policy, [env], [env.unwrapped.tasks[0].id], seeds=[0])
    assert seen and all(set(vars(v)) == {"messages", "tool_schemas", "protocol"} for v in seen)
    assert json.dumps(seen[0].tool_schemas)  # plain data, as the env offered it


def test_a_constrained_training_run_and_its_checkpoint_evaluation(tmp_path):
    """`toolgym train ... model.constrained=toolsearch`: no invalid action, ratio 1 on the first
    update; the checkpoint evaluates constrained (its config says so)."""
    from toolgym.trainers.config import load_train_config
    from toolgym.evaluation.evaluate import evaluate_policy
    from toolgym.trainers.policy_loading import load_policy
    from toolgym.trainers.train import train

    overrides = ["model.name=tiny-llama", "model.constrained=toolsearch", f"run_dir={tmp_path / 'run'}",
                 "env.kwargs={max_turns: 2}", "sampling.max_new_tokens=40", "grpo.lr=1e-3", "reward.name=toolsearcher",
                 "train.steps=1", "train.tasks_per_step=1", "train.group_size=2", "train.checkpoint_every=1"]
    train(load_train_config(None, overrides), progress=False)
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert row["invalid_rate"] == 0.0 and row["ratio"] == pytest.approx(1.0, abs=1e-6)
    result = evaluate_policy(load_policy(str(tmp_path / "run")), "toolgym/ToolSearch-v0", split="heldout", num_tasks=2,
                             env_kwargs={"max_turns": 2}, max_new_tokens=40, progress=False)
    assert result["invalid_rate"] == 0.0 and result["num_tasks"] == 2
