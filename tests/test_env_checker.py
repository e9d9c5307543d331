"""check_tool_env: every registered env passes it; envs that break the chat contract, the record or
the action protocol are rejected with a message naming the broken rule."""
import json

import gymnasium as gym
import pytest

import toolgym
import toolgym.envs
from toolgym.envs import Invalid, Search, ToolSearchEnv, check_tool_env, registered_ids, shared_dataset
from toolgym.envs.checker import hostile_actions


BUILTIN = sorted({*toolgym.envs.BUILTIN_IDS, *toolgym.envs.DIALOGUE_IDS})


def test_the_builtin_ids_are_every_toolgym_id():
    assert {i for i in registered_ids() if i.startswith("toolgym/")} == set(BUILTIN)


@pytest.mark.parametrize("env_id", BUILTIN)
def test_every_registered_env_passes(env_id):
    if toolgym.envs.unavailable_reason(env_id):
        pytest.skip(toolgym.envs.unavailable_reason(env_id))  # UltraTool without ../shared/data
    check_tool_env(gym.make(env_id))


@pytest.mark.parametrize("kwargs", [{"protocol": "search_r1"}, {"max_turns": 1}, {"category_mode": "optional"}])
def test_tool_search_settings_pass(kwargs):
    check_tool_env(gym.make("toolgym/ToolSearch-v0", **kwargs), seed=3)


def test_exported_at_the_root():
    assert toolgym.check_tool_env is check_tool_env


def test_hostile_actions_fit_the_action_limit_except_the_huge_one():
    from toolgym.envs.actions import ACTION_MAX_CHARS

    long = [what for what, a in hostile_actions().items() if isinstance(a, str) and len(a) > ACTION_MAX_CHARS]
    assert long == ["a huge turn"]


# -- broken envs: each breaks one rule and must be rejected ------------------------------------------
def _env(cls, **kwargs):
    corpus, tasks = shared_dataset("seal_tools", None)
    return cls(corpus, tasks[:20], **kwargs)


class NoResetMessages(ToolSearchEnv):
    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        del info["messages"]
        return obs, info


class SharedResetMessages(ToolSearchEnv):
    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        info["messages"] = self.episode.messages  # the env's own list, not a copy
        return obs, info


class NoNewMessages(ToolSearchEnv):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        del info["new_messages"]
        return obs, reward, terminated, truncated, info


class DropsTheReply(ToolSearchEnv):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        info["new_messages"] = info["new_messages"][:1]  # the tool's reply is in the chat, not handed out
        return obs, reward, terminated, truncated, info


class RaisesOnBadJSON(ToolSearchEnv):
    def plan_step(self, action):
        if isinstance(action, str) and "<tool_call>" in action:
            json.loads(action.split("<tool_call>", 1)[1].split("</tool_call>", 1)[0])
        return super().plan_step(action)


class SearchesAnything(ToolSearchEnv):
    def plan_step(self, action):
        plan = super().plan_step(action)
        return Search(query="tool") if isinstance(plan, Invalid) else plan  # no error observation


class NoFinalTrajectory(ToolSearchEnv):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        info.pop("trajectory", None)
        return obs, reward, terminated, truncated, info


class WrongReturn(ToolSearchEnv):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward + 1.0, terminated, truncated, info


class NoTrajectory(gym.Env):
    def reset(self, *, seed=None, options=None):
        return "", {}

    def step(self, action):
        return "", 0.0, True, False, {}


@pytest.mark.parametrize("cls, message", [
    (NoResetMessages, r'reset: info\["messages"\] is missing'),
    (SharedResetMessages, r'info\["messages"\] must be a copy'),
    (NoNewMessages, r'info\["new_messages"\] is missing'),
    (DropsTheReply, r'plus every info\["new_messages"\] must be the chat'),
    (RaisesOnBadJSON, r"step\(malformed JSON: .*raised JSONDecodeError.*never an exception"),
    (SearchesAnything, r"must answer with an error observation"),
    (NoFinalTrajectory, r'ended the episode without info\["trajectory"\]'),
    (WrongReturn, r"env_reward .* is not the episode's return"),
])
def test_a_broken_env_is_rejected(cls, message):
    with pytest.raises(AssertionError, match=message):
        check_tool_env(_env(cls))


def test_an_env_without_trajectory_is_rejected():
    with pytest.raises(AssertionError, match=r"needs a trajectory\(\) method"):
        check_tool_env(NoTrajectory())


def test_a_wrapped_env_is_checked_through_its_wrappers():
    env = gym.wrappers.TimeLimit(_env(DropsTheReply), max_episode_steps=50)
    with pytest.raises(AssertionError, match="must be the chat"):
        check_tool_env(env)
