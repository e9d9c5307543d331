"""The action protocol: parsing (Hermes + Search-R1), corpus checks, schemas, rendering."""
from __future__ import annotations

import json

import pytest

from toolgym.envs.actions import Invalid, Search, Submit
from toolgym.envs.checks import check_action
from toolgym.envs.prompts import search_schema, submit_schema, system_prompt
from toolgym.envs.rendering import allocate_budget, render_error, render_results
from toolgym.envs.syntax import parse_action
from toolgym.envs.tokens import RustTokenizerCounter, TokenizerCounter, WordCounter, make_counter
from toolgym.retrieval.corpus import Tool, ToolCorpus

CORPUS = ToolCorpus(
    [
        Tool("getWeather", "getWeather", "Current weather for a city", "Weather"),
        Tool("getForecast", "getForecast", "Seven day weather forecast", "Weather"),
        Tool(" Quotes API::by_source", "Quotes API | by_source", "Quotes by source", "Data"),
        Tool("YT::Trending (music, gaming, news)", "YT | Trending", "Trending videos by section", "Media"),
        Tool("YT::Popular", "YT | Popular", "Popular videos", "Media"),
    ],
    name="tiny",
)


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


# -- Hermes ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, expected",
    [
        (call("search", query="weather in Oslo"), Search("weather in Oslo")),
        (call("search", query="  weather \n in   Oslo "), Search("weather in Oslo")),
        (call("search", query="rain", category="Weather"), Search("rain", "Weather")),
        (call("search", query="rain", category=""), Search("rain")),
        (call("search", query="rain", category=None), Search("rain")),
        ('{"name": "search", "arguments": {"query": "rain"}}', Search("rain")),  # bare JSON
        ('```json\n{"name": "search", "arguments": {"query": "rain"}}\n```', Search("rain")),
        # OpenAI's wire format: arguments as a JSON string
        ('<tool_call>{"name": "search", "arguments": "{\\"query\\": \\"rain\\"}"}</tool_call>', Search("rain")),
        ('<tool_call>{"name": "search", "parameters": {"query": "rain"}}</tool_call>', Search("rain")),
        ('{"type": "function", "function": {"name": "search", "arguments": "{\\"query\\": \\"rain\\"}"}}', Search("rain")),
        ('<tool_call>\n{"name": "search", "arguments": {"query": "rain"}}\n', Search("rain")),  # stop ate </tool_call>
        ("<think>the user wants weather</think>\n" + call("search", query="rain"), Search("rain")),
        (call("submit", tools=["getWeather", "getForecast", "getWeather"]), Submit(("getWeather", "getForecast"))),
        ('<tool_call>{"name": "submit", "arguments": {"tools": "[\\"getWeather\\"]"}}</tool_call>', Submit(("getWeather",))),
        (call("search", query="météo 天气 🌧"), Search("météo 天气 🌧")),
    ],
)
def test_hermes_accepts(text, expected):
    assert parse_action(text, "hermes") == expected


def test_double_encoded_call_is_rejected_with_reason():
    inner = json.dumps({"name": "search", "arguments": {"query": "rain"}})
    action = parse_action("<tool_call>" + json.dumps(inner) + "</tool_call>")
    assert isinstance(action, Invalid) and "double-encoded" in action.reason


def test_two_calls_in_one_turn_is_rejected():
    action = parse_action(call("search", query="a") + call("search", query="b"))
    assert isinstance(action, Invalid) and "2 tool calls" in action.reason


# -- Search-R1 ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, expected",
    [
        ("<search>weather in Oslo</search>", Search("weather in Oslo")),
        ("<think>hmm</think><search> rain </search>", Search("rain")),
        ('<search category="Weather">rain</search>', Search("rain", "Weather")),
        ("<search>rain", Search("rain")),  # stop sequence ate the close tag
        ("<answer>getWeather, getForecast</answer>", Submit(("getWeather", "getForecast"))),
        ("<answer>getWeather\ngetForecast</answer>", Submit(("getWeather", "getForecast"))),
        ('<answer>["getWeather"]</answer>', Submit(("getWeather",))),
        ("<search>first</search> then <answer>getWeather</answer>", Search("first")),  # first tag wins
    ],
)
def test_search_r1_accepts(text, expected):
    assert parse_action(text, "search_r1") == expected


def test_answer_ids_with_commas_and_outer_spaces_resolve_against_the_corpus():
    action = parse_action("<answer>YT::Trending (music, gaming, news), YT::Popular, Quotes API::by_source</answer>", "search_r1")
    checked = check_action(action, CORPUS, "off")
    assert checked == Submit(("YT::Trending (music, gaming, news)", "YT::Popular", " Quotes API::by_source"))
    # Hermes keeps ids verbatim; a missing outer space is forgiven, a wrong id is not.
    assert check_action(parse_action(call("submit", tools=["Quotes API::by_source"])), CORPUS) == Submit(
        (" Quotes API::by_source",)
    )
    bad = check_action(parse_action(call("submit", tools=["getWeather", "nope"])), CORPUS)
    assert isinstance(bad, Invalid) and "'nope'" in bad.reason


def test_wrong_format_gets_a_hint_about_the_other_protocol():
    assert "Hermes" in parse_action("<search>rain</search>", "hermes").reason
    assert "Search-R1" in parse_action(call("search", query="rain"), "search_r1").reason


# -- corpus checks --------------------------------------------------------------------------
def test_category_modes():
    with_cat, without = Search("rain", "Weather"), Search("rain")
    assert check_action(with_cat, CORPUS, "optional") == with_cat
    assert check_action(without, CORPUS, "optional") == without
    assert check_action(with_cat, CORPUS, "required") == with_cat
    assert "requires a category" in check_action(without, CORPUS, "required").reason
    assert "category filtering is off" in check_action(with_cat, CORPUS, "off").reason
    assert "unknown category" in check_action(Search("rain", "weather"), CORPUS, "optional").reason


def test_query_length_limit_counts_tokens():
    assert check_action(Search(" ".join(["w"] * 10)), CORPUS, max_query_tokens=10) == Search(" ".join(["w"] * 10))
    too_long = check_action(Search(" ".join(["w"] * 11)), CORPUS, max_query_tokens=10)
    assert isinstance(too_long, Invalid) and "11 tokens" in too_long.reason
    assert isinstance(check_action(Search("x" * 5000), CORPUS), Invalid)  # one giant word


# -- schemas and prompt -----------------------------------------------------------------------
def test_search_schema_category_per_mode():
    off = search_schema(CORPUS.categories, "off")["function"]["parameters"]
    assert set(off["properties"]) == {"query"} and off["required"] == ["query"]
    optional = search_schema(CORPUS.categories, "optional")["function"]["parameters"]
    assert optional["properties"]["category"]["enum"] == ["Data", "Media", "Weather"]
    assert optional["required"] == ["query"]
    required = search_schema(CORPUS.categories, "required")["function"]["parameters"]
    assert required["required"] == ["query", "category"]
    assert submit_schema()["function"]["parameters"]["required"] == ["tools"]
    with pytest.raises(ValueError):
        search_schema((), "required")


def test_system_prompt_holds_schemas_and_format():
    hermes = system_prompt(CORPUS, protocol="hermes", category_mode="required", max_turns=6)
    assert json.dumps(search_schema(CORPUS.categories, "required")) in hermes
    assert json.dumps(submit_schema()) in hermes
    assert "<tool_call>" in hermes and "at most 6 turns" in hermes
    r1 = system_prompt(CORPUS, protocol="search_r1", category_mode="optional")
    assert "<search>" in r1 and "<answer>" in r1 and "Weather" in r1


# -- rendering ------------------------------------------------------------------------------
def test_allocate_budget_water_filling_by_hand():
    # sorted 3, 10, 200, 500, 1000 with 768: shares 153 -> 3, 191 -> 10, 251 -> 200, 277 -> 277, 278 -> 278
    assert allocate_budget([10, 500, 3, 1000, 200], 768) == [10, 277, 3, 278, 200]
    assert allocate_budget([5, 5], 768) == [5, 5]
    assert allocate_budget([100, 100, 100], 10) == [3, 3, 4]
    assert allocate_budget([4], 0) == [0]


def _desc(n: int, word: str) -> str:
    return " ".join(f"{word}{i}" for i in range(n))


def test_render_cuts_descriptions_to_the_shared_budget_in_words():
    tools = [Tool(f"t{i}", f"name{i}", _desc(n, "w"), "Cat") for i, n in enumerate([4, 30, 30])]
    text = render_results(tools, query="q", budget=20, counter=WordCounter())
    lines = [line.split("description: ", 1)[1] for line in text.splitlines() if "description: " in line]
    # allocation by hand: 4 -> 4, then 16 left over two -> 8 and 8
    assert lines[0] == _desc(4, "w")
    assert lines[1] == _desc(8, "w") + " …" and lines[2] == _desc(8, "w") + " …"
    for tool in tools:
        assert f"id: {tool.id}" in text and f"name: {tool.name}" in text
    assert "category: Cat" in text


def test_render_search_r1_and_errors():
    text = render_results(list(CORPUS)[:2], query="rain", protocol="search_r1")
    assert text.startswith("<information>Doc 1 (id: getWeather") and text.endswith("</information>")
    assert render_results([], query="rain", category="Weather") == (
        'No tool matched "rain" in category "Weather"; try other words or another category.')
    assert render_error("bad", "hermes").startswith("Error: bad.")


@pytest.fixture(scope="module")
def minilm_tokenizer():
    import tokenizers

    from toolgym.retrieval.models import minilm_path

    return tokenizers.Tokenizer.from_file(str(minilm_path() / "tokenizer.json"))


LONG = "Retrieve photovoltaic decarbonisation telemetry for geothermal microgrids and hydroelectricity " * 8


def _check_token_budget(counter) -> None:
    tools = [Tool(f"t{i}", f"n{i}", LONG, "Energy") for i in range(5)]
    text = render_results(tools, query="energy", budget=100, counter=counter)
    kept = [line.split("description: ", 1)[1].removesuffix(" …") for line in text.splitlines() if "description: " in line]
    counts = [counter.count(k) for k in kept]
    assert all(c == 20 for c in counts), counts  # 100 tokens over five equal documents
    assert all(LONG.startswith(k) for k in kept)  # cut at a token boundary of the original text
    assert counter.count(LONG) > 100 and WordCounter().count(kept[0]) < 20  # tokens, not words


def test_render_counts_the_budget_with_a_tokenizer(minilm_tokenizer):
    counter = make_counter(minilm_tokenizer)
    assert isinstance(counter, RustTokenizerCounter)
    assert counter.count("Retrieve photovoltaic decarbonisation") == 9  # padding to 128 is switched off
    _check_token_budget(counter)


@pytest.mark.slow
def test_render_counts_the_budget_with_the_policy_hf_tokenizer():
    from toolgym.agents.hf_policy import load_tokenizer

    counter = make_counter(load_tokenizer("smollm2"))  # SmolLM2's own tokenizer, from the GGUF
    assert isinstance(counter, TokenizerCounter)
    _check_token_budget(counter)
    from toolgym.envs import ToolSearchEnv
    from toolgym.data.records import Task

    env = ToolSearchEnv(CORPUS, [Task(id="q", query="weather", gold=frozenset({"getWeather"}))],
                        tokenizer=counter.tokenizer, token_budget=6)  # BM25 has 2 hits here; 6 tokens cut them
    env.reset(seed=0)
    obs = env.step(call("search", query="weather"))[0]
    kept = [line.split("description: ", 1)[1] for line in obs.splitlines() if "description: " in line]
    assert any(k.endswith("…") for k in kept)
    assert sum(counter.count(k.removesuffix("…").strip()) for k in kept) <= 6


# -- hostile input: linear time, bounded output ------------------------------------------------
CAP = 32_768
HOSTILE = {
    # the old fence regex was cubic here: 2,000 spaces took 16 s (SmolLM2 has a 64-space token)
    "fence of spaces": "```json" + " " * (CAP - 10) + "x",
    "fence of spaces, half closed": "```json" + " " * (CAP - 10) + "``",
    "fence of spaces, closed": "```json" + " " * (CAP - 20) + "x```",
    "unclosed tool_call tags": "<tool_call>" * (CAP // 11),
    "unclosed think tags": "<think>" * (CAP // 7),
    "think then unclosed tool_call": "<think>a</think><tool_call>" * (CAP // 27),
    "unclosed search tags": "<search>" * (CAP // 8),
    "unclosed answer tags": "<answer>" * (CAP // 8),
    "unclosed category quotes": '<search category="' * (CAP // 18),
    "spaces inside a tag": ("<search" + " " * 200) * (CAP // 210),
    "many close tags": "</search>" * (CAP // 9),
    "deep nesting": "<tool_call>" + "[" * 16_000 + "]" * 16_000 + "</tool_call>",
    "unclosed nesting": "<tool_call>" + '{"a":' * (CAP // 6) + "</tool_call>",
    "huge integer": '<tool_call>{"name": "search", "arguments": {"query": ' + "9" * 30_000 + "}}</tool_call>",
    "many keys": "<tool_call>" + json.dumps({"name": "search", **{f"k{i}": 0 for i in range(2500)}}) + "</tool_call>",
    "repeated id in answer": "<answer>" + ", getWeather" * 2700 + "</answer>",
    "repeated comma pieces": "<answer>" + "YT::Trending (music" + ", gaming" * 4000 + "</answer>",
    "over the cap": "<search>" + "a" * 10 * CAP + "</search>",
    "over the cap, unclosed tags": "<search><tool_call><think>" * (4 * CAP // 26),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
@pytest.mark.parametrize("protocol", ["hermes", "search_r1"])
def test_hostile_turns_parse_fast_and_give_bounded_errors(name, protocol):
    import time

    from toolgym.envs.actions import MAX_REASON_CHARS

    text = HOSTILE[name]
    start = time.perf_counter()
    action = check_action(parse_action(text, protocol), CORPUS, "optional")
    elapsed = time.perf_counter() - start
    assert elapsed < 2.0, f"{name}: {elapsed:.1f}s (a hang detector, not a benchmark)"
    if isinstance(action, Invalid):
        assert len(action.reason) <= MAX_REASON_CHARS and "\x00" not in action.reason
        assert len(render_error(action.reason, protocol)) < MAX_REASON_CHARS + 200


def test_repeated_answer_id_resolves_to_one_tool():
    action = check_action(parse_action(HOSTILE["repeated id in answer"], "search_r1"), CORPUS)
    assert action == Submit(("getWeather",))


def test_unexpected_keys_are_listed_briefly():
    action = parse_action(HOSTILE["many keys"])
    assert isinstance(action, Invalid) and "unexpected key(s) ['k0', 'k1'" in action.reason
    assert "and 2495 more" in action.reason and len(action.reason) < 300


# -- render_call: the inverse of parse_action ---------------------------------------------------
from hypothesis import given, settings, strategies as st  # noqa: E402

from toolgym.envs.syntax import render_call  # noqa: E402

_words = st.text(min_size=1, max_size=40).map(lambda s: " ".join(s.split())).filter(lambda s: s and "\x00" not in s)  # a NUL (even as "\\u0000") is refused
_ids = st.text(min_size=1, max_size=30).filter(lambda s: s.strip() and "\x00" not in s)
_searches = st.builds(Search, _words, st.none() | _words)
_submits = st.lists(_ids, min_size=1, max_size=8, unique=True).map(lambda ids: Submit(tuple(ids)))


@settings(max_examples=300, deadline=None)
@given(action=st.one_of(_searches, _submits))
def test_render_call_round_trips_hermes(action):
    assert parse_action(render_call(action, "hermes"), "hermes") == action


@settings(max_examples=300, deadline=None)
@given(action=st.one_of(_searches, _submits))
def test_render_call_round_trips_search_r1(action):
    try:
        text = render_call(action, "search_r1")
    except ValueError as exc:  # the tag format has no escapes: only tag-like text is refused
        assert "cannot be written" in str(exc)
        return
    parsed = parse_action(text, "search_r1")
    assert parsed == action
    if isinstance(parsed, Submit) and parsed.answer is not None:  # ids with commas re-split against a corpus
        assert tuple(parsed.answer.split(", ")) == action.tool_ids


def test_render_call_forms():
    assert render_call(Search("rain", "Weather")) == (
        '<tool_call>{"name": "search", "arguments": {"query": "rain", "category": "Weather"}}</tool_call>')
    assert render_call(Search("a <b>"), "hermes").count("<") == 2  # only the call's own tags
    assert render_call(Search("rain", "Weather"), "search_r1") == '<search category="Weather">rain</search>'
    assert render_call(Submit(("a", "b")), "search_r1") == "<answer>a, b</answer>"
    assert render_call(Submit(("a, b", "c")), "search_r1") == '<answer>["a, b", "c"]</answer>'
    with pytest.raises(ValueError, match="cannot be written"):
        render_call(Search("x </search> y"), "search_r1")
    with pytest.raises(ValueError):
        render_call(Invalid("no"))
