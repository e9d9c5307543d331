"""Tool-text construction: identifier splitting (BM25 and the corpus text) and the parameter summary."""
import re

import pytest

from toolgym.retrieval import Tool, ToolCorpus, build_index
from toolgym.retrieval.text import IDENTIFIER_MODES, MAX_PARAMETER_TEXT, parameter_text, split_identifiers


@pytest.mark.parametrize("text, split, both", [
    ("getWeatherForecast", "get Weather Forecast", "getWeatherForecast get Weather Forecast"),
    ("check_flight_status now", "check flight status now", "check_flight_status check flight status now"),
    ("HTTPServer", "HTTP Server", "HTTPServer HTTP Server"),
    ("convert mp3 to 2fa", "convert mp 3 to 2 fa", "convert mp3 mp 3 to 2fa 2 fa"),
    ("re-run a plain sentence.", "re run a plain sentence.", "re-run re run a plain sentence."),
    ("plain words only", "plain words only", "plain words only"),
    ("", "", ""),
])
def test_split_identifiers_hand_examples(text, split, both):
    assert split_identifiers(text) == split
    assert split_identifiers(text, keep_whole=True) == both


@pytest.mark.parametrize("hostile", ["aB" * 200_000, "a_" * 200_000, "1a" * 200_000, "-a" * 200_000,
                                     "x" * 400_000, "_" * 400_000, ("getX " * 80_000)])
def test_split_identifiers_on_huge_repetitive_input(hostile):
    """Linear regexes (fixed-width look-arounds): a 400 kB word or a run of separators is fine."""
    out = split_identifiers(hostile)
    assert len(out) <= 2 * len(hostile)
    assert re.sub(r"[\W_]", "", out) == re.sub(r"[\W_]", "", hostile)  # only separators change


def test_parameter_text_names_descriptions_and_cap():
    params = {"type": "object", "properties": {"city_name": {"description": "The city", "type": "str"},
                                                "days": {"type": "int"}}}
    assert parameter_text(params) == "city_name: The city; days"
    assert parameter_text({}) == "" and parameter_text(None) == "" and parameter_text({"properties": [1]}) == ""
    huge = {"properties": {f"p{i}": {"description": "d" * 500} for i in range(10_000)}}
    assert len(parameter_text(huge)) <= MAX_PARAMETER_TEXT


def _corpus(**kw):
    tools = [Tool("getWeatherForecast", "getWeatherForecast", "Forecast for a place", "Weather",
                  {"properties": {"zip_code": {"description": "postal code"}}}),
             Tool("check_flight_status", "check_flight_status", "Is a flight on time", "Travel"),
             Tool("bookHotel", "bookHotel", "Reserve a room", "Travel")]
    return ToolCorpus(tools, name="t", **kw)


def test_corpus_text_options():
    plain = _corpus()
    assert plain.text(plain["getWeatherForecast"]) == "Weather | getWeatherForecast: Forecast for a place"
    split = plain.with_text(split_identifiers=True)
    assert split.text(split["check_flight_status"]) == "Travel | check flight status: Is a flight on time"
    params = plain.with_text("{name}: {description} | {parameters}")
    assert params.text(params["getWeatherForecast"]) == "getWeatherForecast: Forecast for a place | zip_code: postal code"
    assert params.text(params["bookHotel"]) == "bookHotel: Reserve a room"  # no parameters: the separator goes
    # Another text is another embedding-cache key; the tools are the same objects.
    assert len({plain.content_hash, split.content_hash, params.content_hash}) == 3
    assert split.tools == plain.tools and split.name == plain.name


def test_bm25_identifier_modes():
    corpus = _corpus(text_template="{name}")  # the identifier is the only text
    whole = build_index(corpus, "bm25", identifiers="whole")
    split = build_index(corpus, "bm25", identifiers="split")
    both = build_index(corpus, "bm25", identifiers="both")
    assert whole.search("flight status", k=3).ids == ()  # one token "check_flight_status": no shared term
    assert split.search("flight status", k=3).ids == ("check_flight_status",)
    assert both.search("flight status", k=3).ids == ("check_flight_status",)
    # Queries go through the same split, so naming the identifier still finds it.
    assert split.search("call getWeatherForecast", k=1).ids == ("getWeatherForecast",)
    assert whole.search("call getWeatherForecast", k=1).ids == ("getWeatherForecast",)
    assert both.search("getweatherforecast", k=1).ids == ("getWeatherForecast",)  # the whole word is kept too
    assert split.search("getweatherforecast", k=1).ids == ()  # lowercased: nothing to split, no whole token
    for bad in ("none", "", None, "SPLIT"):
        with pytest.raises(ValueError, match="identifiers"):
            build_index(corpus, "bm25", identifiers=bad)
    assert set(IDENTIFIER_MODES) == {"whole", "split", "both"}
