"""Rollouts through the real ToolSearch env: exact token ids, loss masks, turn spans."""
from __future__ import annotations

import gymnasium
import pytest

import toolgym.envs  # noqa: F401  (registers the env ids)
from conftest import tool_call as _call
from toolgym.agents.hf_policy import HFChatPolicy
from toolgym.rewards import get_reward
from toolgym.trainers.grpo import trajectory_token_advantages
from toolgym.agents.rollout import collect_rollouts, rollout_groups


def test_retrieved_tokens_are_masked_and_sequence_is_what_the_model_saw(tokenizer, tiny, scripted_policy):
    env = gymnasium.make("toolgym/ToolSearch-v0", split="train", max_turns=4)
    task = env.unwrapped.tasks[0]
    script = [_call("search", query="number of nurses in a country"), _call("search", query="health workforce"),
              _call("submit", tools=sorted(task.gold))]
    policy = scripted_policy(tiny, tokenizer, script)
    (r,) = collect_rollouts(policy, [env], [task.id], seeds=[0])
    traj = r.trajectory
    assert traj.terminated_by == "submit" and len(traj.events) == 2 and traj.selection == sorted(task.gold)
    ids, mask, spans = traj.token_ids, traj.loss_mask, traj.turn_spans
    assert len(ids) == len(mask) and len(spans) == 3
    # every prompt the model was given is a prefix of the final sequence, which ends with the last turn
    for prompt in policy.seen_prompts:
        assert ids[: len(prompt)] == prompt
    assert policy.seen_prompts[-1] == ids[: spans[-1][0]] and spans[-1][1] == len(ids)
    # mask 1 exactly on the policy's spans
    inside = {p for s, e in spans for p in range(s, e)}
    assert [p for p, m in enumerate(mask) if m] == sorted(inside)
    # the whole sequence decodes to the chat template applied to the episode's messages
    last = max(i for i, m in enumerate(traj.messages) if m["role"] == "assistant")  # then the env's closing note
    expected = tokenizer.apply_chat_template(traj.messages[:last], tokenize=False, add_generation_prompt=True)
    assert tokenizer.decode(ids) == expected + traj.messages[last]["content"] + "<|im_end|>"
    # every retrieved tool id (and the tool text around it) sits in mask-0 tokens
    masked_text = tokenizer.decode([t for t, m in zip(ids, mask) if not m])
    policy_text = tokenizer.decode([t for t, m in zip(ids, mask) if m])
    for event in traj.events:
        for tool_id in event.results:
            assert tool_id in masked_text
    for m in traj.messages[:last]:
        if m["role"] == "tool":
            assert m["content"] in masked_text and m["content"] not in policy_text
    assert policy_text.startswith("<tool_call>")


def test_real_model_rollout_groups_and_turn_credit(tokenizer, tiny):
    policy = HFChatPolicy(tiny, tokenizer, {"max_new_tokens": 8, "temperature": 1.0})
    envs = [gymnasium.make("toolgym/ToolSearch-v0", split="train", max_turns=2) for _ in range(4)]
    tasks = envs[0].unwrapped.tasks[:2]
    groups = rollout_groups(policy, envs, [t.id for t in tasks], group_size=2, seed=3)
    assert [len(g) for g in groups] == [2, 2]
    reward = get_reward("toolsearcher")
    for task, group in zip(tasks, groups):
        trajs = [r.trajectory for r in group]
        assert all(t.task_id == task.id for t in trajs)
        for r in group:  # a random model makes invalid calls: the env answers with error text, masked out
            t = r.trajectory
            assert t.num_turns == len(t.turn_spans) == 2
            assert sum(t.loss_mask) == sum(e - s for s, e in t.turn_spans) == r.generated_tokens
        credit = reward.score_group(trajs, task)
        for i, t in enumerate(trajs):
            adv = trajectory_token_advantages(t, credit, i)
            assert all(a == 0 for a, m in zip(adv, t.loss_mask) if not m)


def test_decompose_env_single_step(tokenizer, tiny, scripted_policy):
    env = gymnasium.make("toolgym/Decompose-v0", split="train")
    task = env.unwrapped.tasks[0]
    policy = scripted_policy(tiny, tokenizer, ["find cloud SLA info\nback up data to the cloud\nupdate a shipment"])
    (r,) = collect_rollouts(policy, [env], [task.id])
    t = r.trajectory
    assert t.subtasks == ["find cloud SLA info", "back up data to the cloud", "update a shipment"]
    assert t.turn_spans == [(t.turn_spans[0][0], len(t.token_ids))] and sum(t.loss_mask) == t.turn_spans[0][1] - t.turn_spans[0][0]
    credit = get_reward("counterfactual", retrieve=lambda qs, k: [list(x.ids) for x in env.unwrapped.index.search_batch(qs, None, k)]).score_group([t], task)
    assert credit.rewards.shape == (1,)


def test_mismatched_inputs_are_rejected(tokenizer, tiny):
    policy = HFChatPolicy(tiny, tokenizer)
    with pytest.raises(ValueError, match="envs for"):
        collect_rollouts(policy, [], ["a"])
    with pytest.raises(ValueError, match="need 4 envs"):
        rollout_groups(policy, [object()], ["a", "b"], group_size=2)


def test_a_rollout_cut_by_the_context_limit_keeps_its_searches(tokenizer, tiny, scripted_policy):
    """The cut trajectory is the env's own record so far: ESM/TCA credit must see its searches."""
    script = [_call("search", query="number of nurses in a country"), _call("search", query="health workforce"),
              _call("search", query="hospital staff statistics")]
    env = gymnasium.make("toolgym/ToolSearch-v0", split="train", max_turns=4)
    task = env.unwrapped.tasks[0]
    (full,) = collect_rollouts(scripted_policy(tiny, tokenizer, script, max_new_tokens=64), [env], [task.id], seeds=[0])
    assert full.trajectory.terminated_by == "max_turns" and len(full.trajectory.events) == 4
    # room for exactly two turns: the third turn would start at turn_spans[2][0]
    limit = full.trajectory.turn_spans[2][0] + 64 - 1
    (cut,) = collect_rollouts(scripted_policy(tiny, tokenizer, script, max_new_tokens=64), [env], [task.id], seeds=[0],
                              max_context_tokens=limit)
    traj = cut.trajectory
    assert traj.terminated_by == "context" and traj.num_turns == 2 and len(traj.turn_spans) == 2
    assert [e.to_dict() for e in traj.events] == [e.to_dict() for e in full.trajectory.events[:2]]
    assert traj.seen and traj.messages[-1]["role"] == "tool"
    assert len(traj.token_ids) == len(traj.loss_mask) == full.trajectory.turn_spans[2][0]


def test_no_room_for_a_first_turn_is_an_error(tokenizer, tiny):
    env = gymnasium.make("toolgym/ToolSearch-v0", split="train", max_turns=2)
    policy = HFChatPolicy(tiny, tokenizer, {"max_new_tokens": 8})
    with pytest.raises(ValueError, match="max_context_tokens=10 leaves no room"):
        collect_rollouts(policy, [env], [0], max_context_tokens=10)


@pytest.mark.parametrize("protocol, script, obs_role", [
    ("hermes", [_call("search", query="number of nurses in a country"), _call("submit", tools=["getHealthWorkforce"])], "tool"),
    ("search_r1", ["<search>number of nurses in a country</search>", "<answer>getHealthWorkforce</answer>"], "user"),
])
def test_rollout_messages_are_the_envs_own_with_its_roles(tokenizer, tiny, protocol, script, obs_role):
    """What a policy is shown of its episode is the env's chat (reset messages + each step's
    ``new_messages``): a search_r1 env answers as ``user``, a Hermes env as ``tool``."""
    from toolgym.agents.hf_policy import Generation

    class RecordingPolicy(HFChatPolicy):
        needs_episode = True  # the rollout hands it an EpisodeView of every episode

        def __init__(self):
            super().__init__(tiny, tokenizer, {"max_new_tokens": 64})
            self.views, self.turn = [], 0

        def generate_batch(self, prompts, max_new_tokens=None, episodes=()):
            self.views.append([dict(m) for m in episodes[0].messages])
            text = script[min(self.turn, len(script) - 1)]
            self.turn += 1
            return [Generation(text, self.tokenizer.encode(text, add_special_tokens=False) + [self.end_ids[0]], "stop")]

    env = gymnasium.make("toolgym/ToolSearch-v0", split="train", max_turns=4, protocol=protocol)
    task = env.unwrapped.tasks[0]
    assert task.gold == {"getHealthWorkforce"}
    policy = RecordingPolicy()
    (r,) = collect_rollouts(policy, [env], [task.id], seeds=[0])
    traj = r.trajectory
    assert traj.terminated_by == "submit" and len(policy.views) == 2
    first, second = policy.views
    assert [m["role"] for m in first] == ["system", "user"] and first[-1]["content"] == task.query
    assert [m["role"] for m in traj.messages] == ["system", "user"] + ["assistant", obs_role] * 2
    assert second[:2] == first and [m["role"] for m in second[2:]] == ["assistant", obs_role]
    assert second[2]["content"] == script[0]
    assert second == traj.messages[: len(second)]  # the env's record, not a copy the rollout rebuilt
    assert all(tool_id in second[3]["content"] for tool_id in traj.events[0].results)  # the env's rendered results


def test_a_context_cut_episode_is_the_envs_record_so_far(tokenizer, tiny, scripted_policy):
    env = gymnasium.make("toolgym/ToolSearch-v0", split="train", max_turns=4, protocol="search_r1")
    task = env.unwrapped.tasks[0]
    script = ["<search>nurses</search>", "<search>health workforce</search>", "<answer>getHealthWorkforce</answer>"]
    (full,) = collect_rollouts(scripted_policy(tiny, tokenizer, script), [env], [task.id], seeds=[0])
    # room for the first turn only: after it the context cannot take a second turn of max_new_tokens
    limit = full.trajectory.turn_spans[1][0] + 64 - 1
    (cut,) = collect_rollouts(scripted_policy(tiny, tokenizer, script), [env], [task.id], seeds=[0], max_context_tokens=limit)
    t = cut.trajectory
    assert t.terminated_by == "context" and t.num_turns == 1 == len(t.turn_spans) and len(t.events) == 1
    assert [m["role"] for m in t.messages] == ["system", "user", "assistant", "user"]
    assert t.messages == full.trajectory.messages[:4] and t.events[0].query == "nurses"
