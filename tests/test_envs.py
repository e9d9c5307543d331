"""ToolSearchEnv: episodes, records, rewards, determinism, curriculum, registry, vector envs."""
from __future__ import annotations

import json
import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.utils.env_checker import data_equivalence

import toolgym.envs  # noqa: F401  (registers the ids)
from toolgym.data.dataset import opaque_task_id
from toolgym.data.records import Task
from toolgym.envs import BUILTIN_IDS, CategoryCurriculum, ToolSearchEnv, shared_dataset, unavailable_reason
from toolgym.retrieval.corpus import Tool, ToolCorpus


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


# A hand-made library where each query word hits one tool, so rankings are known.
TINY = ToolCorpus(
    [
        Tool("alpha", "alpha", "alpha alpha alpha service", "Greek"),
        Tool("beta", "beta", "beta beta beta service", "Greek"),
        Tool("gamma", "gamma", "gamma gamma gamma service", "Greek"),
        Tool("one", "one", "one one one counter", "Numbers"),
        Tool("two", "two", "two two two counter", "Numbers"),
        Tool("three", "three", "three three three counter", "Numbers"),
    ],
    name="tiny-env",
)
TINY_TASKS = [
    Task(id="t0", query="I need alpha and gamma", gold=frozenset({"alpha", "gamma"}), split="train"),
    Task(id="t1", query="count to two", gold=frozenset({"two"}), split="test",
         messages=({"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"})),
]


@pytest.fixture
def tiny() -> ToolSearchEnv:
    return ToolSearchEnv(TINY, TINY_TASKS, top_k=2)


@pytest.fixture(scope="module")
def seal():
    return shared_dataset("seal_tools")


def test_check_env_passes_for_tool_search():
    env = gymnasium.make("toolgym/ToolSearch-v0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning from the checker is a failure here
        check_env(env.unwrapped)
    env.close()


def test_episode_records_first_found_and_reward(tiny):
    obs, info = tiny.reset(options={"task": "t0"})
    assert info["messages"][-1] == {"role": "user", "content": "I need alpha and gamma"}
    assert info["messages"][0]["role"] == "system" and "User request: I need alpha and gamma" in obs
    _, r, term, trunc, info = tiny.step(call("search", query="alpha"))
    assert info["event"].results[0] == "alpha" and info["event"].first_found == ["alpha"] and info["event"].turn == 0
    assert (r, term, trunc) == (0.0, False, False)
    _, _, _, _, info = tiny.step(call("search", query="alpha"))  # seen before: nothing new
    assert info["event"].first_found == [] and info["event"].turn == 1
    _, _, _, _, info = tiny.step("garbage")
    assert info["invalid"] and info["invalid_actions"] == 1 and info["event"] is None
    _, _, _, _, info = tiny.step(call("search", query="gamma"))
    assert info["event"].turn == 3 and info["event"].first_found == ["gamma"]
    assert info["seen"][:1] == ["alpha"] and "gamma" in info["seen"]
    _, r, term, trunc, info = tiny.step(call("submit", tools=["alpha", "beta"]))
    # P = 1/2, R = 1/2 -> F1 = 0.5
    assert (r, term, trunc) == (0.5, True, False)
    traj = info["trajectory"]
    assert traj.selection == ["alpha", "beta"] and traj.terminated_by == "submit"
    assert traj.num_turns == 5 and traj.invalid_actions == 1 and len(traj.events) == 3
    assert [m["role"] for m in traj.messages] == ["system", "user"] + ["assistant", "tool"] * 5
    with pytest.raises(RuntimeError):
        tiny.step(call("search", query="beta"))


def test_first_found_against_an_independent_count(seal):
    corpus, tasks = seal
    env = ToolSearchEnv(corpus, tasks)
    for task in tasks[:30]:
        env.reset(options={"task": task.id})
        seen: set[str] = set()
        for query in [task.query, task.query, "get information", "retrieve data about a location"]:
            _, _, _, _, info = env.step(call("search", query=" ".join(task.query.split()[:60]) if query == task.query else query))
            results = info["event"].results
            assert len(results) == 5
            assert info["event"].first_found == [t for t in results if t in task.gold and t not in seen]
            seen |= set(results)
        assert set(info["seen"]) == seen


def test_truncation_after_max_turns(tiny):
    tiny.reset(options={"task": "t1"})
    for turn in range(8):
        _, r, term, trunc, info = tiny.step("")
        assert info["error"].startswith("empty action")
    assert (r, term, trunc) == (0.0, False, True)
    traj = info["trajectory"]
    assert traj.terminated_by == "max_turns" and traj.num_turns == 8 and traj.invalid_actions == 8 and traj.selection is None


def test_prior_dialogue_goes_into_messages_and_obs(tiny):
    obs, info = tiny.reset(options={"task": "t1"})
    assert [m["role"] for m in info["messages"]] == ["system", "user", "assistant", "user"]
    assert "user: hi\nassistant: hello" in obs


def test_options_pick_task_split_and_category_mode(tiny):
    assert tiny.reset(options={"task": 1})[1]["task_id"] == "t1"
    assert {tiny.reset(seed=s, options={"split": "train"})[1]["task_id"] for s in range(10)} == {"t0"}
    _, info = tiny.reset(options={"task": "t0", "category_mode": "required"})
    search = info["tool_schemas"][0]["function"]["parameters"]
    assert search["required"] == ["query", "category"] and search["properties"]["category"]["enum"] == ["Greek", "Numbers"]
    _, _, _, _, info = tiny.step(call("search", query="alpha"))
    assert "requires a category" in info["error"]
    _, _, _, _, info = tiny.step(call("search", query="one", category="Greek"))
    assert set(info["event"].results) <= {"alpha", "beta", "gamma"} and info["event"].category == "Greek"
    for bad in [{"task": "nope"}, {"task": 9}, {"split": "dev"}, {"category_mode": "always"}, {"colour": 1}]:
        with pytest.raises(ValueError):
            tiny.reset(options=bad)


def test_gold_never_in_obs(seal):
    corpus, tasks = seal
    env = ToolSearchEnv(corpus, tasks, category_mode="optional")
    for task in tasks:
        obs, _ = env.reset(options={"task": task.id})
        # A dozen Seal-Tools requests name their APIs themselves; the env adds no gold id of its own.
        assert not any(g in obs.replace(task.query, "") for g in task.gold), task.id
    # The observations do not depend on the gold set at all: same actions, different gold.
    task = tasks[5]
    decoy = Task(id=task.id, query=task.query, gold=frozenset(corpus.ids[:3]))
    actions = [call("search", query=task.query), call("search", query="weather"), "oops",
               call("submit", tools=corpus.ids[:2])]
    transcripts = []
    for variant in (task, decoy):
        env.reset(options={"task": variant})
        transcripts.append([env.step(a)[0] for a in actions])
    assert transcripts[0] == transcripts[1]


def test_same_seed_same_actions_same_observations_and_infos(seal):
    corpus, tasks = seal
    actions = [call("search", query="energy"), "not a call", call("search", query="museum catalogue"),
               call("submit", tools=["getEnergySustainability"])]

    def run(seed):
        env = ToolSearchEnv(corpus, tasks)
        out = [env.reset(seed=seed)]
        out += [env.step(a) for a in actions]
        return out

    a, b = run(7), run(7)
    assert all(data_equivalence(x, y) for x, y in zip(a, b))
    assert len({run(s)[0][1]["task_id"] for s in range(5)}) > 1  # the seed does pick the task


def test_close_twice_is_safe(tiny):
    tiny.reset()
    tiny.close()
    tiny.close()


def test_render_ansi_transcript():
    env = ToolSearchEnv(TINY, TINY_TASKS, render_mode="ansi")
    env.reset(options={"task": "t0"})
    env.step(call("search", query="beta"))
    text = env.render()
    assert "[assistant]" in text and "id: beta" in text


def test_search_r1_protocol_episode(tiny):
    r1 = ToolSearchEnv(TINY, TINY_TASKS, top_k=2, protocol="search_r1")
    obs, _ = r1.reset(options={"task": "t0"})
    assert "<search>" in obs
    obs, _, _, _, info = r1.step("<think>first alpha</think><search>alpha</search>")
    assert obs.startswith("<information>Doc 1 (id: alpha")
    assert info["new_messages"] == [{"role": "assistant", "content": "<think>first alpha</think><search>alpha</search>"},
                                    {"role": "user", "content": obs}]
    obs, r, term, _, info = r1.step("<answer>alpha, gamma</answer>")
    assert term and r == 1.0


def test_match_reward_and_custom_reward():
    env = ToolSearchEnv(TINY, TINY_TASKS, final_reward="match")
    env.reset(options={"task": "t0"})
    assert env.step(call("submit", tools=["alpha"]))[1] == 0.0
    env = ToolSearchEnv(TINY, TINY_TASKS, final_reward=lambda traj, task: len(traj.events) + 0.5)
    env.reset(options={"task": "t0"})
    env.step(call("search", query="alpha"))
    assert env.step(call("submit", tools=["alpha"]))[1] == 1.5


# -- curriculum ---------------------------------------------------------------------------------
def test_curriculum_schedule_by_episode_and_progress():
    cur = CategoryCurriculum(total_episodes=10)
    env = ToolSearchEnv(TINY, TINY_TASKS, curriculum=cur)
    phases = [env.reset(seed=i)[1]["curriculum_phase"] for i in range(12)]
    assert phases == ["required"] * 3 + ["off"] * 9  # 30% of 10 episodes, then global search
    _, info = env.reset(options={"progress": 0.1})
    assert info["category_mode"] == "required" and info["curriculum_progress"] == 0.1
    _, info = env.reset(options={"progress": 0.3})
    assert info["category_mode"] == "off"
    _, info = env.reset(options={"category_mode": "optional"})
    assert info["curriculum_phase"] == "override" and info["category_mode"] == "optional"
    with pytest.raises(ValueError):
        CategoryCurriculum(required_fraction=1.5)
    no_total = ToolSearchEnv(TINY, TINY_TASKS, curriculum={"required_fraction": 0.5})
    assert no_total.reset(options={"progress": 0.49})[1]["curriculum_phase"] == "required"
    with pytest.raises(ValueError):
        no_total.reset()


# -- registry and vector envs -------------------------------------------------------------------
def test_registered_ids():
    expected = {"toolgym/ToolSearch-v0", "toolgym/Decompose-v0", "toolgym/ToolSearch-StableToolBench-v0",
                "toolgym/Decompose-StableToolBench-v0", "toolgym/ToolSearch-MetaTool-v0", "toolgym/ToolSearch-APIBank-v0",
                "toolgym/ToolSearch-UltraTool-v0", "toolgym/ToolSearch-SealTools-v0", "toolgym/Decompose-APIBank-v0"}
    assert expected <= set(BUILTIN_IDS) <= set(gymnasium.registry)


@pytest.mark.parametrize("env_id", [i for i in BUILTIN_IDS if "ToolSearch" in i])
def test_every_tool_search_id_makes_and_steps(env_id):
    reason = unavailable_reason(env_id)  # UltraTool reads ../shared/data, absent on a bare clone
    if reason:
        pytest.skip(reason)
    env = gymnasium.make(env_id)
    obs, info = env.reset(seed=0)
    query = info["query"][:200]
    obs, _, _, _, info = env.step(call("search", query=query))
    # BM25 returns only hits (score > 0), up to top_k = 5: exactly the index's own answer.
    expected = env.unwrapped.index.search(query, None, 5).ids
    assert info["event"] is not None and 1 <= len(info["event"].results) <= 5
    assert tuple(info["event"].results) == expected
    env.close()


def _info_at(infos: dict, i: int) -> dict:
    return {k: v[i] for k, v in infos.items() if not k.startswith("_") and infos.get(f"_{k}", np.ones(99, bool))[i]}


def _drive(venv, steps: int):
    from toolgym.agents import RawQueryAgent

    obs, infos = venv.reset(seed=3)
    agents = [RawQueryAgent() for _ in range(venv.num_envs)]
    out = []
    for step in range(steps):
        actions = []
        for i, agent in enumerate(agents):
            info = _info_at(infos, i)
            if info["action"] == "reset":
                agent.reset(obs[i], info)
            actions.append(agent.act(obs[i], info))
        obs, rewards, term, trunc, infos = venv.step(actions)
        out.append((tuple(obs), rewards.tolist(), term.tolist(), trunc.tolist(), infos["task_id"].tolist()))
    return out


def test_batched_vector_env_matches_sync_and_batches_searches(monkeypatch):
    sync = gymnasium.make_vec("toolgym/ToolSearch-v0", num_envs=6, vectorization_mode="sync")
    batched = gymnasium.make_vec("toolgym/ToolSearch-v0", num_envs=6)
    assert type(batched).__name__ == "BatchedToolSearchVectorEnv"
    expected = _drive(sync, 7)
    index = batched.envs[0].index
    assert all(env.index is index for env in batched.envs)  # one shared index
    calls = []
    original = index.search_batch
    monkeypatch.setattr(index, "search_batch", lambda q, c=None, k=10: calls.append(len(q)) or original(q, c, k))
    monkeypatch.setattr(index, "search", lambda *a, **k: pytest.fail("the batched env must not search one by one"))
    assert _drive(batched, 7) == expected
    # steps 1, 4, 7 search in all six envs (search, submit, autoreset, ...): one call each
    assert calls == [6, 6, 6]
    sync.close()
    batched.close()
    batched.close()


def test_vector_reset_with_one_task_per_env_and_repeated_queries_searched_once(monkeypatch):
    venv = gymnasium.make_vec("toolgym/ToolSearch-v0", num_envs=4)
    first, second = opaque_task_id("seal_tools", "dev-easy-0"), opaque_task_id("seal_tools", "dev-easy-1")
    _, infos = venv.reset(options={"tasks": [first] * 2 + [second] * 2})
    assert infos["task_id"].tolist() == [first, first, second, second]
    index = venv.envs[0].index
    calls = []
    original = index.search_batch
    monkeypatch.setattr(index, "search_batch", lambda q, c=None, k=10: calls.append(list(q)) or original(q, c, k))
    _, _, _, _, infos = venv.step([call("search", query="nurses"), call("search", query="nurses"),
                                   call("search", query="post engagement"), "oops"])
    assert calls == [["nurses", "post engagement"]]
    results = [e.results if e is not None else None for e in infos["event"]]
    assert results[0] == results[1] == list(original(["nurses"], None, 5)[0].ids) and results[3] is None
    venv.close()


def test_generated_dialogue_envs_are_listed_available_before_first_use():
    """`toolgym envs` used to call them unavailable: their dataset is generated on first make."""
    from toolgym.envs.dialogue import DIALOGUE_IDS

    for env_id in DIALOGUE_IDS:
        assert unavailable_reason(env_id) is None, env_id
