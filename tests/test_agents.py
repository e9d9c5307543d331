"""Scripted agents and ``evaluate_agent``."""
from __future__ import annotations

import json

import gymnasium
import pytest

import toolgym.envs  # noqa: F401
from toolgym.agents import Agent, OracleAgent, RandomAgent, RawQueryAgent, format_search, format_submit, make_agent
from toolgym.data.records import Task, read_rollouts
from toolgym.envs import ToolSearchEnv, parse_action
from toolgym.envs.actions import Search, Submit
from toolgym.retrieval.corpus import Tool, ToolCorpus
from toolgym.evaluation.evaluate import evaluate_agent

CORPUS = ToolCorpus(
    [
        Tool("alpha", "alpha", "alpha alpha alpha service", "Greek"),
        Tool("beta", "beta", "beta beta beta service", "Greek"),
        Tool("gamma", "gamma", "gamma gamma gamma service", "Greek"),
        Tool("one", "one", "one one one counter", "Numbers"),
        Tool("two", "two", "two two two counter", "Numbers"),
    ],
    name="agents-tiny",
)
TASKS = [
    Task(id="a", query="alpha please", gold=frozenset({"alpha"})),
    Task(id="b", query="gamma and one", gold=frozenset({"gamma", "one"})),
]


def test_agents_satisfy_the_protocol():
    for agent in (RawQueryAgent(), OracleAgent(CORPUS, TASKS), RandomAgent(seed=1)):
        assert isinstance(agent, Agent)


def test_format_round_trips_through_the_parser():
    assert parse_action(format_search("rain", "Weather")) == Search("rain", "Weather")
    assert parse_action(format_search("rain", "Weather", "search_r1"), "search_r1") == Search("rain", "Weather")
    assert parse_action(format_submit(["a", "b"])) == Submit(("a", "b"))
    assert parse_action(format_submit(["a", "b"], "search_r1"), "search_r1") == Submit(("a", "b"))


def test_raw_query_agent_searches_the_request_and_submits_top_k():
    env = ToolSearchEnv(CORPUS, TASKS, top_k=3)
    agent = RawQueryAgent(k=2)
    obs, info = env.reset(options={"task": "b"})
    agent.reset(obs, info)
    first = agent.act(obs, info)
    assert parse_action(first) == Search("gamma and one")
    obs, _, _, _, info = env.step(first)
    second = agent.act(obs, info)
    assert parse_action(second) == Submit(tuple(info["event"].results[:2]))


def test_raw_query_agent_in_required_mode_picks_an_overlapping_category():
    env = ToolSearchEnv(CORPUS, [Task(id="n", query="numbers: two", gold=frozenset({"two"}))], category_mode="required")
    agent = RawQueryAgent()
    obs, info = env.reset()
    agent.reset(obs, info)
    assert parse_action(agent.act(obs, info)) == Search("numbers: two", "Numbers")


def test_oracle_reads_gold_only_from_given_tasks():
    env = ToolSearchEnv(CORPUS, TASKS, top_k=1)
    oracle = OracleAgent(CORPUS, TASKS[:1])
    obs, info = env.reset(options={"task": "b"})
    with pytest.raises(ValueError, match="not given task 'b'"):
        oracle.reset(obs, info)  # the observation alone does not let it find the gold
    result = evaluate_agent(env, OracleAgent(CORPUS, TASKS), progress=False)
    assert result["F1"] == 100.0 and result["Match"] == 100.0 and result["SRecall"] == 100.0
    # top-1 results: one search per gold tool, then the submit: (2 + 3) / 2 turns
    assert result["turns"] == 2.5


def test_random_agent_is_seeded():
    def actions(seed):
        env = ToolSearchEnv(CORPUS, TASKS)
        agent = RandomAgent(seed=seed)
        out = []
        obs, info = env.reset(seed=0)
        agent.reset(obs, info)
        for _ in range(8):
            action = agent.act(obs, info)
            out.append(action)
            obs, _, term, trunc, info = env.step(action)
            if term or trunc:
                obs, info = env.reset()
                agent.reset(obs, info)
        return out

    assert actions(3) == actions(3)
    assert actions(3) != actions(4)


def test_evaluate_agent_metrics_by_hand_and_rollouts(tmp_path):
    env = ToolSearchEnv(CORPUS, TASKS, top_k=2)
    # By hand, RawQueryAgent(k=1): "alpha please" -> top-1 alpha: P = R = F1 = Match = 1.
    # "gamma and one" -> BM25 top-2 holds gamma and one, top-1 is one of them: P = 1, R = 1/2, F1 = 2/3.
    path = tmp_path / "rollouts.jsonl"
    result = evaluate_agent(env, RawQueryAgent(k=1), group_size=2, save_rollouts=str(path), progress=False)
    assert result["n"] == 4 and result["tasks"] == 2
    assert result["P"] == pytest.approx(100.0)
    assert result["R"] == pytest.approx(75.0)
    assert result["F1"] == pytest.approx(100 * (1 + 2 / 3) / 2)
    assert result["Match"] == pytest.approx(50.0) and result["SRecall"] == pytest.approx(100.0)
    assert result["turns"] == 2.0 and result["invalid"] == 0.0
    assert result["reward"] == pytest.approx((1 + 2 / 3) / 2)
    groups = read_rollouts(path)
    assert [t.id for t, _ in groups] == ["a", "b"] and all(len(trajs) == 2 for _, trajs in groups)
    assert groups[1][1][0].selection and groups[1][1][0].events[0].query == "gamma and one"


def test_evaluate_agent_by_id_with_limit_and_invalid_rate():
    result = evaluate_agent("toolgym/ToolSearch-v0", make_agent("random", seed=0, p_search=0.0, p_submit=0.0),
                            limit=3, progress=False)
    assert result["invalid"] == 100.0 and result["turns"] == 8.0 and result["F1"] == 0.0 and result["n"] == 3
    assert result["config"]["env"] == "toolgym/ToolSearch-v0"
    oracle = evaluate_agent("toolgym/ToolSearch-StableToolBench-v0", make_agent("oracle"), limit=10, progress=False)
    assert oracle["F1"] == 100.0 and "groups" in oracle
    with pytest.raises(ValueError):
        evaluate_agent("toolgym/ToolSearch-v0", make_agent("raw"), tasks=["no-such-task"], progress=False)
    with pytest.raises(ValueError):
        make_agent("genius")


def test_eval_cli_runs_an_agent(tmp_path, capsys):
    from toolgym.cli.main import main

    out = tmp_path / "m.json"
    code = main(["eval", "--env", "toolgym/ToolSearch-v0", "--agent", "raw", "--limit", "5", "--json", str(out)])
    assert code == 0
    metrics = json.loads(out.read_text())
    assert metrics["n"] == 5 and 0.0 <= metrics["F1"] <= 100.0
    assert main(["envs"]) == 0 and "toolgym/Decompose-v0" in capsys.readouterr().out


def test_clause_agent_on_the_decomposition_env():
    from toolgym.agents import ClauseSplitAgent

    env = gymnasium.make("toolgym/Decompose-v0", max_tasks=20)
    agent = ClauseSplitAgent()
    obs, info = env.reset(options={"task": 0})
    agent.reset(obs, info)
    action = agent.act(obs, info)
    assert len(action.splitlines()) >= 2
    _, _, _, _, info = env.step(action)
    assert info["subtasks"] == action.splitlines()
    result = evaluate_agent(env, make_agent("clauses"), progress=False)
    assert result["n"] == 20 and result["turns"] == 1.0 and result["invalid"] == 0.0
