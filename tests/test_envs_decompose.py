"""DecompositionEnv: subtask parsing, the counterfactual reward by hand, records, registry."""
from __future__ import annotations

import math
import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import toolgym.envs  # noqa: F401
from toolgym.data.records import Task
from toolgym.envs import DecompositionEnv, parse_subtasks
from toolgym.retrieval.corpus import Tool, ToolCorpus

# BM25 on this library ranks: "alpha and beta please" -> [combo, alpha]; "alpha" -> [alpha, combo];
# "beta" -> [beta, combo] (asserted below, so the hand numbers rest on a checked premise).
CORPUS = ToolCorpus(
    [
        Tool("alpha", "alpha", "alpha lookup", "G"),
        Tool("beta", "beta", "beta lookup", "G"),
        Tool("combo", "combo", "alpha beta please combo combo", "G"),
        Tool("gamma", "gamma", "gamma lookup", "G"),
        Tool("delta", "delta", "delta lookup", "G"),
    ],
    name="decompose-tiny",
)
TASKS = [
    Task(id="two", query="alpha and beta please", gold=frozenset({"alpha", "beta"})),
    Task(id="one", query="alpha and beta please", gold=frozenset({"alpha"})),
    Task(id="chat", query="and the other one", gold=frozenset({"beta"}),
         messages=({"role": "user", "content": "look up alpha"}, {"role": "assistant", "content": "done"})),
]
N_RAW = (1 / math.log2(3)) / (1 + 1 / math.log2(3))  # [combo, alpha] against {alpha, beta}, k = 2


@pytest.fixture
def env() -> DecompositionEnv:
    return DecompositionEnv(CORPUS, TASKS, k=2)


def test_parse_subtasks():
    text = "<think>split it</think>1. alpha<br>2) beta\n- gamma\n\n* delta <BR/> Step 5: epsilon\n  \nalpha"
    assert parse_subtasks(text) == ["alpha", "beta", "gamma", "delta", "epsilon", "alpha"]
    assert parse_subtasks("") == [] and parse_subtasks(None) == [] and parse_subtasks("\n<br>\n") == []


def test_raw_context_joins_history_and_query():
    assert TASKS[2].context_text() == "look up alpha done and the other one"


def test_counterfactual_reward_by_hand(env):
    obs, info = env.reset(options={"task": "two"})
    assert "Current request: alpha and beta please" in obs and info["messages"][-1]["content"] == "alpha and beta please"
    _, reward, terminated, truncated, info = env.step("alpha\nbeta")
    assert info["raw_ranking"] == ["combo", "alpha"]
    assert info["rankings"] == [["alpha", "combo"], ["beta", "combo"]]
    assert info["fused_ranking"] == ["alpha", "beta"]  # round robin by rank
    assert info["ndcg_raw"] == pytest.approx(N_RAW) and info["ndcg_atom"] == pytest.approx(1.0)
    # R_cf = max(0, 1 - 0.3869) + (1 - 0) = 1.6131
    assert reward == pytest.approx(1 - N_RAW + 1) and reward == pytest.approx(1.613147, abs=1e-6)
    assert (terminated, truncated) == (True, False)
    traj = info["trajectory"]
    assert traj.subtasks == ["alpha", "beta"] and traj.selection == ["alpha", "beta"] and traj.num_turns == 1
    assert [(e.query, e.results, e.first_found) for e in traj.events] == [
        ("alpha", ["alpha", "combo"], ["alpha"]),
        ("beta", ["beta", "combo"], ["beta"]),
    ]


def test_duplicates_and_empty_output_score_badly_but_are_valid(env):
    env.reset(options={"task": "two"})
    _, reward, _, _, info = env.step("alpha\nalpha")
    # fused [alpha, combo]: N_atom = 1/1.6309 = 0.6131 -> R = 0.6131 - 0.3869 = 0.2263, no completeness gain
    assert info["fused_ranking"] == ["alpha", "combo"] and info["duplicate_subtasks"] == 1
    assert reward == pytest.approx(1 / (1 + 1 / math.log2(3)) - N_RAW) and info["invalid_actions"] == 0
    env.reset(options={"task": "one"})
    _, reward, terminated, _, info = env.step("   ")
    # raw [combo, alpha] already holds the one gold tool: losing it costs the completeness term
    assert reward == pytest.approx(-1.0) and terminated and info["subtasks"] == [] and info["invalid_actions"] == 0
    assert info["trajectory"].subtasks == [] and info["trajectory"].events == []
    env.reset(options={"task": "one"})
    _, reward, _, _, info = env.step(None)
    assert info["invalid_actions"] == 1 and reward == pytest.approx(-1.0)


def test_max_subtasks_and_fusion_options():
    env = DecompositionEnv(CORPUS, TASKS, k=2, max_subtasks=2, fusion="rrf")
    env.reset(options={"task": "two"})
    _, _, _, _, info = env.step("alpha\nbeta\ngamma")
    assert info["subtasks"] == ["alpha", "beta"] and info["subtasks_dropped"] == 1
    with pytest.raises(ValueError):
        DecompositionEnv(CORPUS, TASKS, fusion="best")


def test_one_batched_search_per_step(env, monkeypatch):
    calls = []
    original = env.index.search_batch
    monkeypatch.setattr(env.index, "search_batch", lambda q, c=None, k=10: calls.append(list(q)) or original(q, c, k))
    env.reset(options={"task": "chat"})
    env.step("look up beta\nlook up alpha")
    assert calls == [["look up alpha done and the other one", "look up beta", "look up alpha"]]


def test_check_env_and_registry():
    env = gymnasium.make("toolgym/Decompose-v0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)
    assert all(len(t.gold) >= 2 for t in env.unwrapped.tasks)
    env.close()
    env.close()
    stb = gymnasium.make("toolgym/Decompose-StableToolBench-v0", max_tasks=5)
    obs, info = stb.reset(seed=1)
    _, reward, terminated, _, info = stb.step(info["query"].replace(". ", "\n"))
    assert terminated and isinstance(reward, float) and len(info["raw_ranking"]) == 10


def test_make_vec_sync_for_decompose():
    venv = gymnasium.make_vec("toolgym/Decompose-v0", num_envs=2, max_tasks=4)
    _, infos = venv.reset(seed=0)
    _, rewards, terminated, _, infos = venv.step(["get energy data\nsearch the museum catalogue"] * 2)
    assert terminated.tolist() == [True, True] and rewards.shape == (2,)
    assert infos["subtasks"][0] == ["get energy data", "search the museum catalogue"]
    venv.close()


@pytest.mark.parametrize("text", [
    " " * 16_000 + "1" * 16_000 + "x",
    "<think>" * 4600,
    ("<br" + " " * 100) * 300,
    "Step " * 6000 + "x",
    "1.\n" * 10_000,
    "alpha\n" * 1_000_000,  # over the cap: only the first 32,768 characters are read
])
def test_parse_subtasks_is_fast_and_bounded_on_hostile_text(text):
    import time

    start = time.perf_counter()
    subtasks = parse_subtasks(text)
    assert time.perf_counter() - start < 2.0  # a hang detector, not a benchmark
    assert sum(len(s) for s in subtasks) + len(subtasks) - 1 <= 32_768  # text and separators


def test_split_rule_lets_the_answer_decide_only_whether_to_split():
    tasks = [Task(id="multi", query="look up alpha alpha then look up beta", gold=frozenset({"alpha", "beta"}))]
    gated = DecompositionEnv(CORPUS, tasks, k=2, split_rule="request_clauses")
    free = DecompositionEnv(CORPUS, tasks, k=2)
    rule = ["look up alpha alpha then look up beta", "look up alpha alpha", "look up beta"]
    free.reset(options={"task": "multi"})
    _, rule_reward, _, _, rule_info = free.step("\n".join(rule))
    # the premise: raw [alpha, combo]; the rule's split fuses [alpha, beta] and completes the gold set:
    # R_cf = (1 - 1 / (1 + 1/log2 3)) + 1 = 1.3869
    assert rule_info["raw_ranking"] == ["alpha", "combo"] and rule_info["fused_ranking"] == ["alpha", "beta"]
    assert rule_reward == pytest.approx(2 - 1 / (1 + 1 / math.log2(3)))
    for answer in ("x\ny", "1. alpha\n2. beta\n3. gamma"):  # any split retrieves the rule's sub-queries
        gated.reset(options={"task": "multi"})
        _, reward, _, _, info = gated.step(answer)
        assert info["split"] and info["subtasks"] == rule and info["trajectory"].subtasks == rule
        assert reward == pytest.approx(rule_reward) and info["fused_ranking"] == ["alpha", "beta"]
    for answer in ("alpha", "", "  \n "):  # one line or none: the whole request, so R_cf is exactly 0
        gated.reset(options={"task": "multi"})
        _, reward, _, _, info = gated.step(answer)
        assert not info["split"] and info["subtasks"] == [tasks[0].query] and reward == 0.0
        assert info["fused_ranking"] == info["raw_ranking"] and info["invalid_actions"] == 0
    gated.reset(options={"task": "multi"})
    _, reward, _, _, info = gated.step(None)  # an invalid turn stays invalid: nothing searched
    assert info["invalid_actions"] == 1 and info["subtasks"] == [] and info["fused_ranking"] == [] and reward == 0.0
    with pytest.raises(ValueError, match="unknown split_rule"):
        DecompositionEnv(CORPUS, tasks, split_rule="clauses")


def test_split_rule_reaches_every_source_of_the_mixture():
    from toolgym.envs.mixture import MixtureDecompositionEnv

    env = MixtureDecompositionEnv([("tiny", CORPUS, TASKS)], split_rule="request_clauses", k=2)
    assert all(e.split_rule == "request_clauses" for e in env.envs.values())
