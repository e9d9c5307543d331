"""What both environments share (envs/base.py): the info contract, the episode record and its
env_reward, reset options (progress), empty search results, vector-env input checks, and ids
whose data is missing."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolgym.data.records import Task
from toolgym.envs import CategoryCurriculum, DecompositionEnv, ToolSearchEnv
from toolgym.envs.base import ToolEnv
from toolgym.envs.vector import BatchedToolSearchVectorEnv
from toolgym.retrieval.corpus import Tool, ToolCorpus
from toolgym.retrieval.index import SearchResult

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ToolCorpus(
    [
        Tool("alpha", "alpha", "alpha alpha alpha service", "Greek"),
        Tool("beta", "beta", "beta beta beta service", "Greek"),
        Tool("gamma", "gamma", "gamma gamma gamma service", "Greek"),
        Tool("one", "one", "one one one counter", "Numbers"),
    ],
    name="base-tiny",
)
TASKS = [
    Task(id="t0", query="alpha and gamma", gold=frozenset({"alpha", "gamma"})),
    Task(id="t1", query="and beta", gold=frozenset({"beta"}), messages=({"role": "user", "content": "hi"},)),
    Task(id="t2", query="the other one", gold=frozenset({"beta"}), messages=({"role": "user", "content": "look up gamma"},)),
]


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_both_envs_share_the_base():
    assert issubclass(ToolSearchEnv, ToolEnv) and issubclass(DecompositionEnv, ToolEnv)
    for cls in (ToolSearchEnv, DecompositionEnv):
        assert "render" not in vars(cls) and "close" not in vars(cls)  # one copy, in the base


# -- info: only what a step added; the whole chat on demand ---------------------------------------
def test_step_info_holds_new_messages_not_the_whole_chat():
    env = ToolSearchEnv(CORPUS, TASKS, top_k=2)
    _, info = env.reset(options={"task": "t1"})
    assert [m["role"] for m in info["messages"]] == ["system", "user", "user"]
    infos = []
    for action in [call("search", query="alpha"), "oops", call("search", query="beta")]:
        obs, _, _, _, step_info = env.step(action)
        assert "messages" not in step_info
        assert step_info["new_messages"] == [{"role": "assistant", "content": action}, {"role": "tool", "content": obs}]
        infos.append(step_info)
    infos[0]["new_messages"][0]["content"] = "edited by the caller"  # a copy: the env's chat is untouched
    assert [m["role"] for m in env.messages] == ["system", "user", "user"] + ["assistant", "tool"] * 3
    assert env.messages[3]["content"] == call("search", query="alpha")
    _, _, _, _, info = env.step(call("submit", tools=["beta"]))
    assert info["trajectory"].messages == env.messages and len(env.messages) == 11


@pytest.mark.parametrize("make, action", [
    (lambda: ToolSearchEnv(CORPUS, TASKS, top_k=2), call("submit", tools=["beta"])),
    (lambda: DecompositionEnv(CORPUS, TASKS, k=2), "find beta\nfind one"),
])
def test_every_env_gives_its_record_so_far_as_trajectory(make, action):
    """``ToolEnv.trajectory()`` is the base contract: running before the end, then the final record, a copy each time."""
    env = make()
    with pytest.raises(RuntimeError, match="reset"):
        env.trajectory()
    _, info = env.reset(options={"task": "t1"})
    running = env.trajectory()
    assert running.task_id == "t1" and running.terminated_by == "running" and running.num_turns == 0
    assert running.messages == info["messages"] and running.events == []
    *_, step_info = env.step(action)
    final = env.trajectory()
    assert final.to_dict() == step_info["trajectory"].to_dict() and final.terminated_by == "submit"
    final.messages.append({"role": "user", "content": "edited by the caller"})
    assert env.trajectory().to_dict() == step_info["trajectory"].to_dict()  # a fresh copy


def test_episode_state_is_one_object_made_in_reset():
    env = ToolSearchEnv(CORPUS, TASKS)
    env.reset(options={"task": "t0"})
    first = env.episode
    env.step(call("search", query="alpha"))
    assert first.turn == 1 and list(first.seen)[:1] == ["alpha"]
    env.reset(options={"task": "t0"})
    assert env.episode is not first and env.episode.turn == 0 and not env.episode.seen


# -- Trajectory.env_reward ------------------------------------------------------------------------
def test_tool_search_sets_env_reward_to_its_final_reward():
    env = ToolSearchEnv(CORPUS, TASKS)
    env.reset(options={"task": "t0"})
    _, reward, _, _, info = env.step(call("submit", tools=["alpha"]))
    # P = 1, R = 1/2 -> F1 = 2/3
    assert reward == pytest.approx(2 / 3) and info["trajectory"].env_reward == reward
    truncated = ToolSearchEnv(CORPUS, TASKS, max_turns=1)
    truncated.reset(options={"task": "t0"})
    _, reward, _, trunc, info = truncated.step("oops")
    assert trunc and reward == 0.0 and info["trajectory"].env_reward == 0.0


def test_decomposition_sets_env_reward_to_r_cf():
    env = DecompositionEnv(CORPUS, TASKS, k=2)
    env.reset(options={"task": "t0"})
    _, reward, _, _, info = env.step("alpha\ngamma")
    # raw "alpha and gamma" -> [alpha, gamma] already (NDCG 1, complete): no gain either way
    assert info["raw_ranking"] == ["alpha", "gamma"] and reward == 0.0
    assert info["trajectory"].env_reward == reward
    env.reset(options={"task": "t2"})
    _, reward, _, _, info = env.step("beta")
    # raw "look up gamma the other one" misses beta (NDCG 0, incomplete); "beta" finds it first:
    # R_cf = max(0, 1 - 0) + (1 - 0) = 2
    assert "beta" not in info["raw_ranking"] and info["fused_ranking"][0] == "beta"
    assert reward == 2.0 and info["trajectory"].env_reward == 2.0


def test_decomposition_obs_renders_the_dialogue_and_render_is_the_transcript():
    env = DecompositionEnv(CORPUS, TASKS, k=2, render_mode="ansi")
    obs, _ = env.reset(options={"task": "t1"})
    assert obs.endswith("Conversation so far:\nuser: hi\n\nCurrent request: and beta")
    env.step("beta")
    assert env.render().endswith("[user]\nand beta\n\n[assistant]\nbeta")


def test_decomposition_over_long_or_non_text_action_is_invalid():
    env = DecompositionEnv(CORPUS, TASKS, k=2)
    env.reset(options={"task": "t1"})
    _, _, terminated, _, info = env.step("beta\n" * 10_000)
    assert terminated and info["invalid_actions"] == 1 and info["subtasks"] == []


# -- reset option progress: the trainer's clock decides the curriculum ----------------------------
def test_progress_decides_the_phase_instead_of_the_episode_counter():
    env = ToolSearchEnv(CORPUS, TASKS, curriculum=CategoryCurriculum(total_episodes=10))
    for _ in range(20):  # the env's own count now says "off"
        env.reset()
    _, info = env.reset(options={"progress": 0.0})
    assert info["curriculum_phase"] == "required" and info["category_mode"] == "required"
    assert info["curriculum_progress"] == 0.0
    fresh = ToolSearchEnv(CORPUS, TASKS, curriculum=CategoryCurriculum(total_episodes=10))
    _, info = fresh.reset(options={"progress": 0.95})  # the count says "required" (episode 0)
    assert info["curriculum_phase"] == "off" and info["category_mode"] == "off"
    assert fresh.reset(options={"progress": 1})[1]["curriculum_phase"] == "off"


@pytest.mark.parametrize("bad", [1.5, -0.01, float("nan"), "0.5", None, True, [0.5]])
def test_progress_out_of_range_or_not_a_number_is_a_clear_error(bad):
    for env in (ToolSearchEnv(CORPUS, TASKS, curriculum={"required_fraction": 0.5}), DecompositionEnv(CORPUS, TASKS)):
        with pytest.raises(ValueError, match=r"options\['progress'\]"):
            env.reset(options={"progress": bad})


def test_progress_without_a_curriculum_is_accepted_and_changes_nothing():
    env = ToolSearchEnv(CORPUS, TASKS, category_mode="optional")
    _, info = env.reset(options={"progress": 0.1})
    assert info["category_mode"] == "optional" and "curriculum_phase" not in info
    DecompositionEnv(CORPUS, TASKS).reset(options={"progress": 0.1})  # trainers pass it to every env


# -- a search with no matching tool --------------------------------------------------------------
class PositiveScoresOnly:
    """The index as the retrieval change makes it: BM25 hits with score 0 are not returned."""

    def __init__(self, index):
        self.index = index

    def search(self, query, category=None, k=10):
        return self.search_batch([query], [category], k)[0]

    def search_batch(self, queries, categories=None, k=10):
        out = []
        for r in self.index.search_batch(queries, categories, k):
            keep = [i for i, s in enumerate(r.scores) if s > 0]
            out.append(SearchResult(tuple(r.ids[i] for i in keep), tuple(r.scores[i] for i in keep)))
        return out


@pytest.mark.parametrize("protocol", ["hermes", "search_r1"])
def test_a_search_without_hits_says_no_tool_matched(protocol):
    from toolgym.envs.resources import shared_index

    env = ToolSearchEnv(CORPUS, TASKS, PositiveScoresOnly(shared_index(CORPUS)), protocol=protocol)
    env.reset(options={"task": "t0"})
    action = call("search", query="zebra") if protocol == "hermes" else "<search>zebra</search>"
    obs, _, _, _, info = env.step(action)
    assert 'No tool matched "zebra"; try other words.' in obs and "Top" not in obs
    assert info["event"].results == [] and not info["invalid"] and env.observation_space.contains(obs)
    obs, _, _, _, info = env.step(call("search", query="alpha") if protocol == "hermes" else "<search>alpha</search>")
    assert info["event"].results == ["alpha"]  # one hit: the one tool that shares a word


# -- the vector env checks its inputs ---------------------------------------------------------------
def test_vector_env_rejects_a_string_and_wrong_masks():
    venv = BatchedToolSearchVectorEnv([ToolSearchEnv(CORPUS, TASKS) for _ in range(3)])
    venv.reset(seed=0)
    with pytest.raises(ValueError, match="not a single str"):
        venv.step("abc")  # three characters would otherwise pass as three actions
    for mask in ([True, False], [[True, False, True]], "yes", [0.5, 1.0, 0.0]):
        with pytest.raises(ValueError, match="reset_mask"):
            venv.reset(options={"reset_mask": mask})
    with pytest.raises(ValueError, match="one task per sub-env"):
        venv.reset(options={"tasks": "t0t"})
    obs, infos = venv.reset(options={"reset_mask": [True, False, True], "tasks": ["t0", "t0", "t1"]})
    assert infos["_task_id"].tolist() == [True, False, True]
    venv.close()


# -- ids whose data is absent ----------------------------------------------------------------------
def test_ids_without_their_data_fail_in_one_line_and_are_listed_unavailable(tmp_path):
    code = """
import gymnasium, toolgym.envs
from toolgym.envs import DatasetUnavailableError, unavailable_reason
from toolgym.cli.main import main
reason = unavailable_reason("toolgym/ToolSearch-UltraTool-v0")
assert reason and "TOOLGYM_SHARED_DATA" in reason and "../shared/data" in reason, reason
assert unavailable_reason("toolgym/ToolSearch-v0") is None  # bundled data needs no shared folder
try:
    gymnasium.make("toolgym/Decompose-UltraTool-v0")
except DatasetUnavailableError as exc:
    assert "\\n" not in str(exc) and "TOOLGYM_SHARED_DATA" in str(exc)
    print("MAKE:", exc)
else:
    raise AssertionError("made an env without its data")
main(["envs"])
"""
    env = {**os.environ, "TOOLGYM_SHARED_DATA": str(tmp_path)}  # an empty folder
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert any(line.startswith("MAKE: dataset 'ultratool' is not available") for line in lines)
    assert "toolgym/ToolSearch-UltraTool-v0  (unavailable: dataset 'ultratool'" in out.stdout
    assert "toolgym/ToolSearch-v0" in lines  # available ids are listed plainly


def test_vector_autoreset_keeps_the_trainers_progress():
    curriculum = {"required_fraction": 0.5}  # no total_episodes: only the trainer's progress says the phase
    venv = BatchedToolSearchVectorEnv([ToolSearchEnv(CORPUS, TASKS, curriculum=curriculum) for _ in range(2)])
    _, infos = venv.reset(seed=0, options={"progress": 0.25})
    assert infos["curriculum_phase"].tolist() == ["required", "required"]
    venv.step([call("submit", tools=["alpha"])] * 2)
    _, _, _, _, infos = venv.step(["ignored"] * 2)  # the autoreset step
    assert infos["action"].tolist() == ["reset", "reset"] and infos["curriculum_progress"].tolist() == [0.25, 0.25]
    venv.close()


def test_training_progress_is_step_over_total_and_reaches_only_curriculum_envs():
    from toolgym.envs.curriculum import curriculum_reset_options, training_progress

    assert [training_progress(s, 10) for s in (0, 3, 9, 12)] == [0.0, 0.3, 0.9, 1.0]
    for step, total in ((-1, 10), (1, 0), (True, 10), (1.5, 10)):
        with pytest.raises(ValueError):
            training_progress(step, total)
    plain = ToolSearchEnv(CORPUS, TASKS)
    staged = ToolSearchEnv(CORPUS, TASKS, curriculum={"required_fraction": 0.5})
    assert curriculum_reset_options(plain, 0.25) == {} and curriculum_reset_options(staged, None) == {}
    assert curriculum_reset_options(staged, 0.25) == {"progress": 0.25}
    with pytest.raises(ValueError, match="progress"):
        curriculum_reset_options(staged, 1.5)
