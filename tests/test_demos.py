"""Demonstrations: scripted demonstrators through the real envs, rejection sampling, no gold leak."""
import json
import re

import pytest

from toolgym.agents.demonstrators import (
    ClauseSearchDemonstrator,
    ReferenceSubtaskDemonstrator,
    RequestSearchDemonstrator,
    make_demonstrator,
)
from toolgym.data.records import Task, Trajectory, read_rollouts
from toolgym.agents.demonstrators import keyword_query
from toolgym.trainers.demos import assistant_actions, collect_demos, gold_leaks

TS_KWARGS = {"max_turns": 4}


def _submitted_ids(traj):
    last = traj.messages[[m["role"] for m in traj.messages].index("assistant"):]
    submits = [m["content"] for m in last if m["role"] == "assistant" and '"submit"' in m["content"]]
    return json.loads(re.search(r"<tool_call>(.*)</tool_call>", submits[-1], re.S).group(1))["arguments"]["tools"]


def test_toolsearch_demos_submit_only_ids_they_saw():
    groups, stats = collect_demos("toolgym/ToolSearch-v0", ["clauses_top1", "request_top3"], split="train", limit=25,
                                  env_kwargs=TS_KWARGS, progress=False)
    assert stats["kept"] == len(groups) > 0
    for task, (traj,) in groups:
        assert gold_leaks(traj, task) == []
        seen_in_obs = " ".join(m["content"] for m in traj.messages if m["role"] == "tool")
        for tool_id in _submitted_ids(traj):
            assert f"id: {tool_id}\n" in seen_in_obs  # only ids an earlier search result showed
        assert traj.env_reward is not None


def test_rejection_sampling_keeps_only_episodes_at_or_above_threshold():
    groups, stats = collect_demos("toolgym/ToolSearch-v0", ["clauses_top1"], split="train", limit=30,
                                  env_kwargs=TS_KWARGS, min_reward=0.6, progress=False)
    kept = [traj.env_reward for _, (traj,) in groups]
    assert all(r >= 0.6 for r in kept)
    assert stats["dropped_tasks"]["below_min_reward"] == 30 - len(groups) > 0  # imperfect strategy: some dropped
    assert stats["reward_kept"]["min"] >= 0.6
    assert stats["reward_all_episodes"]["min"] < 0.6


def test_gold_leak_detector_flags_unseen_gold_and_accepts_seen_gold():
    task = Task(id="t", query="book a flight", gold=frozenset({"bookFlight", "getWeather"}))
    leaked = Trajectory(task_id="t", messages=[
        {"role": "user", "content": "book a flight"},
        {"role": "assistant", "content": '<tool_call>{"name": "submit", "arguments": {"tools": ["bookFlight"]}}</tool_call>'},
    ])
    assert gold_leaks(leaked, task) == ["bookFlight"]
    fair = Trajectory(task_id="t", messages=[
        {"role": "user", "content": "book a flight"},
        {"role": "assistant", "content": "search flights"},
        {"role": "tool", "content": "[1] id: bookFlight\n"},
        {"role": "assistant", "content": '{"tools": ["bookFlight"]}'},
    ])
    assert gold_leaks(fair, task) == []
    # A longer id containing the gold id is not the gold id.
    other = Trajectory(task_id="t", messages=[{"role": "assistant", "content": "getWeatherForecast"}])
    assert gold_leaks(other, task) == []


def test_decompose_clause_demos_beat_the_raw_request():
    groups, stats = collect_demos("toolgym/Decompose-v0", ["clauses"], split="train", limit=30, min_reward=0.01,
                                  progress=False)
    assert groups and all(traj.env_reward >= 0.01 for _, (traj,) in groups)
    for task, (traj,) in groups:
        assert traj.subtasks and gold_leaks(traj, task) == []


def test_reference_demonstrator_answers_with_the_reference_subtasks(seal):
    import gymnasium

    import toolgym.envs  # noqa: F401
    from toolgym.envs.decomposition import DecompositionEnv
    from toolgym.evaluation.evaluate import run_episode

    base = next(t for t in seal.tasks if len(t.gold) >= 2)
    task = Task(id="ref", query=base.query, gold=base.gold, subtasks=("Find the weather  in Paris", "Book a table"))
    env = DecompositionEnv(seal.corpus, [task])
    agent = ReferenceSubtaskDemonstrator([task])
    traj, _ = run_episode(env, agent, task)
    assert traj.subtasks == ["Find the weather in Paris", "Book a table"]
    with pytest.raises(ValueError, match="not given task"):
        ReferenceSubtaskDemonstrator().reset("", {"task_id": "ref"})
    assert gymnasium  # the registry import above registers the ids the other tests use


def test_clause_demonstrator_keeps_a_turn_for_the_submit_and_category_from_the_enum():
    info = {"query": "Get the weather in Paris. Then book a table for two. Then call a taxi. Then pay the bill.",
            "protocol": "hermes", "max_turns": 3, "category_mode": "required",
            "tool_schemas": [{"function": {"name": "search", "parameters": {"properties": {
                "category": {"enum": ["Weather", "Restaurants", "Travel"]}}}}}]}
    agent = ClauseSearchDemonstrator(use_category=True)
    agent.reset("", info)
    assert len(agent.queries) == 2  # max_turns 3: two searches, then the submit
    first = json.loads(agent.act("", info)[len("<tool_call>"):-len("</tool_call>")])
    assert first["arguments"]["category"] == "Weather"


def test_a_bound_clause_demonstrator_searches_in_its_top_results_category_and_keeps_most_tasks():
    groups, stats = collect_demos("toolgym/ToolSearch-v0", ["clauses_top1_cat"], split="train", limit=20,
                                  env_kwargs={**TS_KWARGS, "min_gold": 2, "category_mode": "optional"},
                                  min_reward=0.5, progress=False)
    import gymnasium

    env = gymnasium.make("toolgym/ToolSearch-v0", split="train", **TS_KWARGS).unwrapped
    named = 0
    for task, (traj,) in groups:
        for m in traj.messages:
            if m["role"] == "assistant" and '"search"' in m["content"]:
                args = json.loads(re.search(r"<tool_call>(.*)</tool_call>", m["content"], re.S).group(1))["arguments"]
                top = env.index.search(args["query"], None, 1).ids[0]
                assert args["category"] == env.corpus[top].category  # the library's best match's category
                named += 1
        assert gold_leaks(traj, task) == []
    assert named >= 2 * len(groups) > 0
    # by name overlap (unbound), the same demonstrator cleared 0.5 on 17 of 90 such tasks; bound, on most
    assert stats["kept"] >= 12


def test_make_demonstrator_names():
    assert isinstance(make_demonstrator("clauses_top2"), ClauseSearchDemonstrator)
    assert make_demonstrator("clauses_top1_cat").use_category
    assert isinstance(make_demonstrator("request_top3"), RequestSearchDemonstrator)
    both = make_demonstrator("clauses_top2_rev_kw")
    assert (both.reverse, both.keywords, both.per_search, both.name) == (True, True, 2, "clauses_top2_rev_kw")
    for bad in ("clauses_topx", "clauses_top1_zzz", "nope", "", "clauses_top0", "clauses_top1_kw_kw"):
        with pytest.raises(ValueError, match="unknown demonstrator"):
            make_demonstrator(bad)


def test_demos_cli_writes_rollouts_and_stats(tmp_path, capsys):
    from toolgym.cli.main import main

    out = tmp_path / "demos.jsonl"
    rc = main(["demos", "toolgym/ToolSearch-v0", "--agent", "clauses_top1", "--limit", "6", "--out", str(out),
               "--env-kwargs", json.dumps(TS_KWARGS), "--no-progress"])
    assert rc == 0
    groups = read_rollouts(out)
    stats = json.loads((tmp_path / "demos.jsonl.stats.json").read_text())
    assert len(groups) == stats["kept"] and stats["tasks"] == 6
    assert "kept reward" in capsys.readouterr().out
    assert main(["demos", "toolgym/ToolSearch-v0", "--agent", "clauses_top1", "--out", str(out),
                 "--env-kwargs", "[1"]) == 2
    assert main(["demos", "toolgym/Nope-v0", "--agent", "clauses_top1", "--out", str(out)]) == 2


def test_demos_help_lists_every_demonstrator():
    import argparse

    from toolgym.agents.demonstrators import DEMONSTRATORS
    from toolgym.cli.demos import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    help_text = " ".join(parser.format_help().split())
    for name in DEMONSTRATORS:
        make_demonstrator(name)  # each listed name is one the factory accepts
        assert re.search(rf"\b{name}\b", help_text), name


def test_whole_request_demonstrator_is_the_null_decomposition(seal):
    from toolgym.envs.decomposition import DecompositionEnv
    from toolgym.evaluation.evaluate import run_episode

    base = next(t for t in seal.tasks if len(t.gold) >= 2 and not t.messages)
    # a dialogue: the raw request the env retrieves with holds the earlier turn too
    dialogue = Task(id="dlg", query="And also the second one, please.", gold=base.gold,
                    messages=({"role": "user", "content": base.query},))
    for task in (base, dialogue):
        env = DecompositionEnv(seal.corpus, [task])
        demo = make_demonstrator("request")
        demo.bind_env(env)
        traj, reward = run_episode(env, demo, task)
        assert traj.subtasks == [task.context_text()]
        assert reward == 0.0  # one subtask equal to the raw context retrieves the raw list
    assert base.query in dialogue.context_text()
    unbound = make_demonstrator("request")  # no tasks bound: the latest request
    unbound.reset("", {"task_id": "x", "query": "  book   a table "})
    assert unbound.act("", {}) == "book a table"


def test_request_and_clauses_demonstrator_keeps_the_whole_request_first(seal):
    """The raw context (history included) then the latest request's clauses; a request of one clause
    is the whole request alone, the same episode as ``request``."""
    from toolgym.envs.decomposition import DecompositionEnv
    from toolgym.evaluation.evaluate import run_episode
    from toolgym.retrieval.decompose import split_into_clauses

    base = next(t for t in seal.tasks if len(split_into_clauses(t.query)) >= 2 and not t.messages)
    dialogue = Task(id="dlg", query="Check the weather in Paris, and then book a table for two.", gold=base.gold,
                    messages=({"role": "user", "content": "I am planning an evening out."},))
    single = Task(id="one", query="Find the weather in Paris.", gold=base.gold)
    env = DecompositionEnv(seal.corpus, [base, dialogue, single])
    demo = make_demonstrator("request_clauses")
    demo.bind_env(env)
    for task in (base, dialogue):
        traj, _ = run_episode(env, demo, task)
        assert traj.subtasks == [task.context_text(), *split_into_clauses(task.query)]
        assert len(traj.subtasks) >= 3
    traj, reward = run_episode(env, demo, single)
    assert traj.subtasks == [single.context_text()] and reward == 0.0


def test_mixture_demos_come_from_each_sources_training_part_only(tmp_path, capsys):
    from toolgym.cli.main import main
    from toolgym.fitting.common import load_sources
    from toolgym.fitting.retriever import FitRetrieverConfig
    from toolgym.trainers.config import load_config

    config = tmp_path / "mix.yaml"
    config.write_text("output_dir: unused\nsources:\n"
                      "  - {dataset: seal_tools, train_split: train, eval_split: heldout}\n"
                      "  - {dataset: api_bank, heldout_fraction: 0.2}\n")
    out = tmp_path / "demos.jsonl"
    rc = main(["demos", "toolgym/Decompose-v0", "--agent", "request,reference,clauses", "--mixture", str(config),
               "--limit", "6", "--env-kwargs", '{"min_gold": 1}', "--out", str(out), "--no-progress"])
    assert rc == 0
    stats = json.loads((tmp_path / "demos.jsonl.stats.json").read_text())
    assert set(stats["sources"]) == {"mixture:seal_tools", "mixture:api_bank"}
    assert stats["tasks"] == 12 and all(s["tasks"] == 6 for s in stats["sources"].values())
    groups = read_rollouts(out)
    assert len(groups) == stats["kept"] == sum(stats["kept_by_agent"].values())
    sources = {s.name: s for s in load_sources(load_config(FitRetrieverConfig, config))}
    held = {t.id for s in sources.values() for t in s.heldout}
    train = {t.id for s in sources.values() for t in s.train}
    assert all(task.id in train and task.id not in held for task, _ in groups)
    # the null decomposition is listed first, so it wins every tie: single-intent API-Bank turns keep it
    assert stats["sources"]["mixture:api_bank"]["kept_by_agent"].get("request", 0) > 0
    assert "mixture:api_bank: kept" in capsys.readouterr().out
    assert main(["demos", "toolgym/Decompose-v0", "--agent", "request", "--mixture", str(config),
                 "--env-kwargs", '{"dataset": "seal_tools"}', "--out", str(out)]) == 2


def test_clause_variants_search_other_orders_and_content_words():
    info = {"query": "Please find the weather in Paris, and then book a table for two", "protocol": "hermes", "max_turns": 4}
    queries = {}
    for name in ("clauses_top1", "clauses_top1_rev", "clauses_top1_kw"):
        agent = make_demonstrator(name)
        agent.reset("", info)
        queries[name] = agent.queries
    assert len(queries["clauses_top1"]) == 2
    assert queries["clauses_top1_rev"] == queries["clauses_top1"][::-1]
    assert queries["clauses_top1_kw"] == [keyword_query(q) for q in queries["clauses_top1"]]
    assert "weather Paris" in queries["clauses_top1_kw"][0] and "the" not in queries["clauses_top1_kw"][0].split()


def test_keyword_query_keeps_content_words_and_is_bounded():
    assert keyword_query("Find me the weather in Oslo") == "weather Oslo"
    assert keyword_query("the of and") == "the of and"  # nothing left: the text itself
    assert keyword_query("") == ""
    huge = "weather " * 1_000_000
    assert len(keyword_query(huge)) <= 4096  # capped before splitting


def test_per_task_keeps_several_distinct_episodes_best_first():
    agents = ["clauses_top1", "clauses_top1_rev", "clauses_top1_kw", "clauses_top1"]  # the last repeats the first
    one, _ = collect_demos("toolgym/ToolSearch-v0", agents, split="train", limit=12,
                           env_kwargs={**TS_KWARGS, "min_gold": 2}, min_reward=0.3, progress=False)
    many, stats = collect_demos("toolgym/ToolSearch-v0", agents, split="train", limit=12,
                                env_kwargs={**TS_KWARGS, "min_gold": 2}, min_reward=0.3, progress=False, per_task=3)
    assert len(many) > len(one) and stats["episodes_per_task"] == 3
    by_task: dict[str, list] = {}
    for task, (traj,) in many:
        by_task.setdefault(task.id, []).append(traj)
    assert set(by_task) == {t.id for t, _ in one}  # the same tasks clear the bar
    for task_id, trajs in by_task.items():
        assert 1 <= len(trajs) <= 3
        actions = [assistant_actions(t) for t in trajs]
        assert len(set(actions)) == len(actions)  # no episode repeats another
        rewards = [t.env_reward for t in trajs]
        assert rewards == sorted(rewards, reverse=True) and min(rewards) >= 0.3
    assert sum(r.get("episodes", 0) for r in stats["per_task"]) == len(many) == stats["kept"]
    with pytest.raises(ValueError, match="per_task"):
        collect_demos("toolgym/ToolSearch-v0", agents, split="train", limit=1, per_task=0, progress=False)
