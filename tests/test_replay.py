"""`toolgym replay` end to end on rollouts files written here from hand-made trajectories."""
from __future__ import annotations

import json

import numpy as np
import pytest

from toolgym.data.records import SearchEvent, Task, Trajectory, write_rollouts
from toolgym.cli.main import main

PARSER, ENCODER, TEXT_PARSER = "csv_parser", "json_encoder", "csv_to_text"
FILLER = ["xml_encoder", "yaml_dump", "zip_files", "http_get"]


def make_traj(task_id, searches, selection):
    events = [SearchEvent(turn=t, query=f"q{t}", category=None, results=list(r)) for t, r in enumerate(searches)]
    return Trajectory(task_id=task_id, events=events, selection=selection,
                      terminated_by="submit" if selection is not None else "max_turns",
                      num_turns=len(searches) + int(selection is not None))


def csv_group():
    task = Task(id="csv2json", query="Convert my CSV records to JSON", gold=frozenset({PARSER, ENCODER}))
    p, again, enc, none = [PARSER, TEXT_PARSER] + FILLER[:3], [TEXT_PARSER, PARSER], [ENCODER] + FILLER, FILLER
    trajs = [make_traj(task.id, [p, again, enc], [PARSER, ENCODER]), make_traj(task.id, [p, again, enc], [TEXT_PARSER, ENCODER])]
    trajs += [make_traj(task.id, [p, again, none], [PARSER]) for _ in range(3)]
    return task, trajs


def mastered_group():
    task = Task(id="easy", query="zip some files", gold=frozenset({"zip_files"}))
    return task, [make_traj(task.id, [["zip_files", "http_get"]], ["zip_files"]) for _ in range(5)]


@pytest.fixture()
def rollouts_file(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    write_rollouts(path, [csv_group(), mastered_group()])
    return path


def test_replay_two_schemes_end_to_end(rollouts_file, tmp_path, capsys):
    out = tmp_path / "report"
    rc = main(["replay", str(rollouts_file), "--scheme", "toolsearcher", "--scheme", "grpo_match", "--out", str(out)])
    assert rc == 0
    report = json.loads((out / "replay.json").read_text())
    assert (out / "replay.png").stat().st_size > 1000 and (out / "replay.png").read_bytes()[:4] == b"\x89PNG"
    md = (out / "replay.md").read_text()
    assert "toolsearcher vs grpo_match" in md and "| tca/zero_var |" in md
    assert "toolsearcher" in capsys.readouterr().out

    ts, gm = report["schemes"]["toolsearcher"], report["schemes"]["grpo_match"]
    assert report["groups"] == 2 and report["rollouts"] == 10
    # the mastered group has equal rewards everywhere: half the groups are zero-variance
    assert gm["zero_variance_share"]["selection_match"] == 0.5
    assert ts["zero_variance_share"]["esm"] == 0.5 and ts["zero_variance_share"]["tca"] == 0.5
    assert ts["components"]["tca/match"] == pytest.approx((0.2 + 1.0) / 2)

    # Per-turn cells, by hand. csv group (20 cells): toolsearcher r0 [0, 0, +z, +], r1 [0, 0, +z, -], r2-4 zeros;
    # grpo_match broadcasts Match advantages [+, -, -, -, -] over 4 turns -> signs agree on 2 + 1 = 3 cells.
    # mastered group (10 cells): both schemes give 0 everywhere -> 10 agreements.
    (cmp,) = report["comparisons"]
    assert cmp["cells"] == 30
    assert cmp["sign_agreement"] == pytest.approx(13 / 30)
    assert cmp["sign_agreement_nonzero"] == pytest.approx(3 / 20)
    z = 0.6 / (np.sqrt(0.24) + 1e-6)
    d = 0.4 + 1e-6
    ts_cells = [0, 0, z, 0.8 / d, 0, 0, z, -0.2 / d] + [0] * 12 + [0] * 10
    gm_cells = [0.8 / d] * 4 + [-0.2 / d] * 16 + [0] * 10
    from scipy.stats import spearmanr

    assert cmp["spearman"] == pytest.approx(spearmanr(ts_cells, gm_cells).statistic)


def test_replay_with_a_yaml_config_scheme(rollouts_file, tmp_path):
    cfg = tmp_path / "gated.yaml"
    cfg.write_text("reward:\n  modules:\n    - {module: esm, weight: 1.0}\n    - {module: tca, weight: 1.0, gate_group: gated}\n")
    out = tmp_path / "r"
    assert main(["replay", str(rollouts_file), "--scheme", "toolsearcher", "--scheme", str(cfg), "--out", str(out)]) == 0
    report = json.loads((out / "replay.json").read_text())
    assert set(report["schemes"]) == {"toolsearcher", "gated"}
    assert report["comparisons"][0]["schemes"] == ["toolsearcher", "gated"]


def test_replay_errors_are_one_clear_line(rollouts_file, tmp_path, capsys):
    assert main(["replay", str(rollouts_file), "--scheme", "magicselector", "--out", str(tmp_path / "x")]) == 2
    assert "--dataset" in capsys.readouterr().err
    assert main(["replay", str(rollouts_file), "--scheme", "nope", "--out", str(tmp_path / "x")]) == 2
    assert "unknown reward scheme" in capsys.readouterr().err


CORPUS = [
    {"id": "flight_search", "name": "search flights", "description": "Find flights between two airports on a date", "category": "travel"},
    {"id": "hotel_book", "name": "book hotel", "description": "Book a hotel room in a city for given nights", "category": "travel"},
    {"id": "weather", "name": "weather forecast", "description": "Get the weather forecast for a city", "category": "weather"},
    {"id": "currency", "name": "convert currency", "description": "Convert an amount between two currencies", "category": "finance"},
    {"id": "translate", "name": "translate text", "description": "Translate text into another language", "category": "language"},
    {"id": "news", "name": "top news", "description": "Latest news headlines for a country", "category": "news"},
]


@pytest.mark.slow  # loads MiniLM for the reference preference scorer (~13 s on 2 shared cores)
def test_replay_magicselector_with_a_bm25_corpus(tmp_path):
    corpus = tmp_path / "tools.jsonl"
    corpus.write_text("\n".join(json.dumps(t) for t in CORPUS) + "\n")
    task = Task(id="trip", query="and book a hotel there, and tell me the weather", gold=frozenset({"hotel_book", "weather", "flight_search"}),
                messages=({"role": "user", "content": "I need a flight to Lisbon"},),
                subtasks=("Find flights to Lisbon", "Book a hotel in Lisbon", "Get the weather forecast for Lisbon"))
    rollouts = [
        Trajectory("trip", subtasks=["Find flights to Lisbon", "Book a hotel room in Lisbon", "Weather forecast for Lisbon"], num_turns=1, terminated_by="submit"),
        Trajectory("trip", subtasks=["Book a hotel there", "Book a hotel there"], num_turns=1, terminated_by="submit"),
        Trajectory("trip", subtasks=["Translate text"], num_turns=1, terminated_by="submit"),
    ]
    no_reference = Task(id="bare", query="weather in Oslo", gold=frozenset({"weather"}))
    path = tmp_path / "decomp.jsonl"
    write_rollouts(path, [(task, rollouts), (no_reference, [Trajectory("bare", subtasks=["weather Oslo"], num_turns=1)] * 2)])
    out = tmp_path / "ms"
    rc = main(["replay", str(path), "--scheme", "magicselector", "--scheme", "grpo_f1", "--corpus", str(corpus), "--out", str(out)])
    assert rc == 0
    report = json.loads((out / "replay.json").read_text())
    ms = report["schemes"]["magicselector"]
    assert ms["groups_scored"] == 1 and ms["groups_skipped"] == 1
    assert "no reference decomposition" in ms["skip_reasons"][0]
    assert ms["components"]["monitors/duplicate_subtask_rate"] == pytest.approx(1 / 6)
    # the faithful decomposition retrieves all three gold tools in the top 10 of a 6-tool corpus
    assert ms["components"]["counterfactual/full_atom"] >= 1 / 3
    assert 0.0 < ms["components"]["preference/r_pref"] <= 0.5 + 1e-6
