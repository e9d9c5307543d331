"""Malformed actions never raise: each gets an error observation and an invalid count.

``MALFORMED`` enumerates the kinds (protocol, category mode, action, words the error must
contain); a hypothesis fuzz adds random text and random JSON shapes on top.
"""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolgym.data.records import Task
from toolgym.envs import ToolSearchEnv
from toolgym.envs.actions import Invalid
from toolgym.envs.checks import check_action
from toolgym.envs.syntax import parse_action
from toolgym.retrieval.corpus import Tool, ToolCorpus

CORPUS = ToolCorpus(
    [Tool(f"tool{i}", f"tool{i}", f"does thing {i} for you", "Alpha" if i % 2 else "Beta") for i in range(12)],
    name="reliability",
)
TASKS = [Task(id="t", query="do thing 3", gold=frozenset({"tool3"}))]


def tc(obj) -> str:
    return "<tool_call>" + (obj if isinstance(obj, str) else json.dumps(obj)) + "</tool_call>"


def search(**arguments) -> str:
    return tc({"name": "search", "arguments": arguments})


def submit(**arguments) -> str:
    return tc({"name": "submit", "arguments": arguments})


GOOD = {"name": "search", "arguments": {"query": "thing"}}
H, R1 = "hermes", "search_r1"
MALFORMED = [
    (H, "optional", "", "empty action"),
    (H, "optional", "  \n\t ", "empty action"),
    (H, "optional", "hello there", "no function call found"),
    (H, "optional", "<think>only thinking</think>", "only <think>"),
    (H, "optional", "<think>never closed", "no function call found"),
    (H, "optional", "<tool_call></tool_call>", "empty"),
    (H, "optional", "<tool_call>   </tool_call>", "empty"),
    (H, "optional", tc("not json"), "not valid JSON"),
    (H, "optional", tc("{'name': 'search', 'arguments': {'query': 'x'}}"), "not valid JSON"),
    (H, "optional", tc('{"name": "search", "arguments": {"query": "x"}'), "not valid JSON"),
    (H, "optional", tc('{"name": "search", "arguments": {"query": "x"}}}'), "not valid JSON"),
    (H, "optional", tc(json.dumps(GOOD) + " trailing words"), "not valid JSON"),
    (H, "optional", tc(json.dumps(json.dumps(GOOD))), "double-encoded"),
    (H, "optional", json.dumps(json.dumps(GOOD)), "double-encoded"),
    (H, "optional", tc([GOOD]), "not a list"),
    (H, "optional", tc("42"), "got a number"),
    (H, "optional", tc("null"), "got null"),
    (H, "optional", tc('"search"'), "got a string"),
    (H, "optional", tc("true"), "got a boolean"),
    (H, "optional", tc({"arguments": {"query": "x"}}), "no \"name\""),
    (H, "optional", tc({"name": 5, "arguments": {"query": "x"}}), "must be a string"),
    (H, "optional", tc({"name": "find", "arguments": {"query": "x"}}), "unknown function 'find'"),
    (H, "optional", tc({"name": "Search", "arguments": {"query": "x"}}), "unknown function 'Search'"),
    (H, "optional", tc({"name": "search"}), "needs \"arguments\""),
    (H, "optional", tc({"name": "search", "arguments": None}), "needs \"arguments\""),
    (H, "optional", tc({"name": "search", "arguments": "not json"}), "string that is not JSON"),
    (H, "optional", tc({"name": "search", "arguments": json.dumps(json.dumps({"query": "x"}))}), "more than once"),
    (H, "optional", tc({"name": "search", "arguments": ["x"]}), "must be an object"),
    (H, "optional", tc({"name": "submit", "arguments": json.dumps(["tool1"])}), "must be an object"),
    (H, "optional", tc({"name": "search", "arguments": {"query": "x"}, "extra": 1}), "unexpected key"),
    (H, "optional", tc({"name": "search", "arguments": {"query": "x"}, "parameters": {"query": "y"}}), "not both"),
    (H, "optional", tc({"type": "function", "function": "search"}), "no \"name\""),
    (H, "optional", search(), "needs a \"query\""),
    (H, "optional", search(query=""), "query is empty"),
    (H, "optional", search(query="   "), "query is empty"),
    (H, "optional", search(query=123), "must be a string, got a number"),
    (H, "optional", search(query=["a", "b"]), "must be a string, got a list"),
    (H, "optional", search(query=None), "must be a string, got null"),
    (H, "optional", search(query="x", limit=5), "unexpected argument"),
    (H, "optional", search(query=" ".join(["word"] * 300)), "too long"),
    (H, "optional", search(query="x" * 5000), "too long"),
    (H, "optional", search(query="x", category="Gamma"), "unknown category"),
    (H, "optional", '<tool_call>{"name": "search", "arguments": {"query": "rain \\ud800"}}</tool_call>', "lone surrogate"),
    (R1, "optional", "<search>rain \ud800</search>", "lone surrogate"),
    (H, "optional", search(query="x", category=7), "category\" must be a string"),
    (H, "off", search(query="x", category="Alpha"), "category filtering is off"),
    (H, "required", search(query="x"), "requires a category"),
    (H, "required", search(query="x", category=None), "requires a category"),
    (H, "optional", submit(), "needs a \"tools\""),
    (H, "optional", submit(tools=[]), "at least one"),
    (H, "optional", submit(tools="tool1"), "must be a list"),
    (H, "optional", submit(tools=[1, 2]), "must be a string"),
    (H, "optional", submit(tools=[None]), "must be a string"),
    (H, "optional", submit(tools={"tool1": 1}), "must be a list"),
    (H, "optional", submit(tools=["no_such_tool"]), "unknown tool id"),
    (H, "optional", submit(tools=["tool1", "nope1", "nope2"]), "'nope1', 'nope2'"),
    (H, "optional", submit(tools=[""]), "empty"),
    (H, "optional", submit(tools=["tool1"], confidence=1), "unexpected argument"),
    (H, "optional", submit(tools=[f"tool{i}" for i in range(100)]), "at most"),
    (H, "optional", search(query="a") + search(query="b"), "2 tool calls"),
    (H, "optional", search(query="a") + submit(tools=["tool1"]), "2 tool calls"),
    (H, "optional", "<search>thing</search>", "not <search>/<answer>"),
    (H, "optional", "<answer>tool1</answer>", "not <search>/<answer>"),
    (H, "optional", "```json\n{bad}\n```", "not valid JSON"),
    (H, "optional", tc("[" * 16_000 + "]" * 16_000), "nested too deeply"),  # deep, and still under the cap
    (H, "optional", tc("[" * 100_000 + "]" * 100_000), "the limit is 32,768"),
    (R1, "optional", "<search>" + "x " * 20_000 + "</search>", "the limit is 32,768"),
    # integers over Python's 4,300-digit conversion limit (json.loads raises a bare ValueError)
    (H, "optional", tc('{"name": "search", "arguments": {"query": ' + "9" * 5000 + "}}"), "not valid JSON"),
    (H, "optional", tc({"name": "search", "arguments": '{"query": ' + "9" * 5000 + "}"}), "string that is not JSON"),
    (H, "optional", tc({"name": "submit", "arguments": {"tools": "[" + "9" * 5000 + "]"}}), "must be a list"),
    (H, "optional", "thing\x00" + search(query="x"), "NUL"),
    (H, "optional", None, "must be text"),
    (H, "optional", b'{"name": "search"}', "must be text"),
    (H, "optional", 42, "must be text"),
    (H, "optional", GOOD, "must be text"),
    (R1, "optional", "", "empty action"),
    (R1, "optional", "no tags at all", "no <search> or <answer>"),
    (R1, "optional", "<search></search>", "query is empty"),
    (R1, "optional", "<search>   </search>", "query is empty"),
    (R1, "optional", "<answer></answer>", "at least one"),
    (R1, "optional", "<answer> , , </answer>", "at least one"),
    (R1, "optional", "<answer>no_such_tool</answer>", "unknown tool id"),
    (R1, "optional", '<answer category="Alpha">tool1</answer>', "no category"),
    (R1, "optional", '<search category="Gamma">thing</search>', "unknown category"),
    (R1, "required", "<search>thing</search>", "requires a category"),
    (R1, "off", '<search category="Alpha">thing</search>', "category filtering is off"),
    (R1, "optional", search(query="thing"), "not function-call JSON"),
    (R1, "optional", "<answer>[1, 2]</answer>", "must be a string"),
    (R1, "optional", "<answer>[bad json</answer>", "not valid JSON"),
    (R1, "optional", "<answer>{\"a\": 1}</answer>", "unknown tool id"),
]


def test_there_are_at_least_fifty_kinds():
    assert len(MALFORMED) >= 50
    assert len({(p, m, repr(a)) for p, m, a, _ in MALFORMED}) == len(MALFORMED)


@pytest.mark.parametrize("protocol, mode, action, says", MALFORMED, ids=[f"{i:02d}" for i in range(len(MALFORMED))])
def test_malformed_action_gives_error_observation(protocol, mode, action, says):
    parsed = check_action(parse_action(action, protocol), CORPUS, mode)
    assert isinstance(parsed, Invalid) and says in parsed.reason, parsed
    env = ToolSearchEnv(CORPUS, TASKS, protocol=protocol, category_mode=mode)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)
    assert "Error: " in obs and says in obs
    assert info["invalid"] and info["invalid_actions"] == 1 and info["error"] == parsed.reason
    assert (reward, terminated, truncated) == (0.0, False, False)
    obs, _, _, _, info = env.step(action)  # and again: the count accumulates, the env goes on
    assert info["invalid_actions"] == 2
    category = None if mode == "off" else "Alpha"
    if protocol == H:
        valid = search(query="thing", **({"category": category} if category else {}))
    else:
        valid = f'<search category="{category}">thing</search>' if category else "<search>thing</search>"
    _, _, _, _, info = env.step(valid)  # a good call afterwards is not counted
    assert not info["invalid"] and info["invalid_actions"] == 2 and info["event"] is not None


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
_calls = st.builds(
    lambda name, args, wrap: (lambda s: f"<tool_call>{s}</tool_call>" if wrap else s)(json.dumps({"name": name, "arguments": args})),
    st.sampled_from(["search", "submit", "x", ""]),
    st.one_of(_json, st.dictionaries(st.sampled_from(["query", "category", "tools", "k"]), _json, max_size=3)),
    st.booleans(),
)
_actions = st.one_of(
    st.text(max_size=300),
    _calls,
    _json.map(lambda v: f"<tool_call>{json.dumps(v)}</tool_call>"),
    st.text(max_size=60).map(lambda q: f"<search>{q}</search>"),
    st.text(max_size=60).map(lambda q: f"<answer>{q}</answer>"),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=st.lists(_actions, min_size=1, max_size=4), protocol=st.sampled_from([H, R1]),
       mode=st.sampled_from(["off", "optional", "required"]))
def test_fuzz_never_raises(actions, protocol, mode):
    env = ToolSearchEnv(CORPUS, TASKS, protocol=protocol, category_mode=mode, max_turns=3)
    env.reset(seed=0)
    invalid = 0
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        assert isinstance(obs, str) and obs and env.observation_space.contains(obs)
        invalid += info["invalid"]
        assert info["invalid_actions"] == invalid
        assert info["invalid"] == obs.removeprefix("<information>").startswith("Error: ")
        if terminated or truncated:
            assert info["trajectory"].invalid_actions == invalid
            break


HOSTILE_TURNS = [
    tc({"name": "search", **{f"key{i}": i for i in range(2000)}}),  # once echoed every key: 1.1 MB
    search(query="x", **{f"arg{i}": i for i in range(2000)}),
    submit(tools=["tool1"], **{"k" * 5000: 1}),
    tc({"name": "n" * 20_000, "arguments": {}}),
    submit(tools=["x" * 30_000]),
    "<search>" * 4000,
    "z" * 1_000_000,
    "\ud800" * 100,
]


@pytest.mark.parametrize("protocol", [H, R1])
@pytest.mark.parametrize("action", HOSTILE_TURNS, ids=[f"{i:02d}" for i in range(len(HOSTILE_TURNS))])
def test_error_observations_are_bounded_and_in_the_observation_space(action, protocol):
    env = ToolSearchEnv(CORPUS, TASKS, protocol=protocol, category_mode="optional")
    env.reset(seed=0)
    obs, _, _, _, info = env.step(action)
    assert info["invalid"] and len(obs) < 1000 and env.observation_space.contains(obs)
