"""Hostile data files: what a careless or malicious user can hand toolgym as a dataset.

Task ids that leak the gold tools, special files (a FIFO) as inputs, tool ids that cannot be
encoded. Each case fails on the code before its fix (issue 21)."""
from __future__ import annotations

import json
import os
import re
import threading
import time

import gymnasium
import pytest

import toolgym.envs  # noqa: F401  (registers the env ids)
from toolgym.data import DatasetFormatError, load_dataset
from toolgym.data.loaders import DATASETS
from toolgym.data.records import Task
from toolgym.retrieval.corpus import Tool
from toolgym.cli.main import main
from toolgym.evaluation.evaluate import agent_view
from conftest import one_error_line

BUNDLED = [name for name, spec in DATASETS.items() if spec.bundled]
TOOLS = [
    Tool("weather_now", "weather_now", "Current weather, temperature and wind for a city."),
    Tool("flight_search", "flight_search", "Search flights between two airports on a date."),
    Tool("currency_convert", "currency_convert", "Convert an amount of money between two currencies."),
]
TASKS = [
    Task("u1", "What is the weather in Oslo and how much is 100 euros in dollars?",
         frozenset({"weather_now", "currency_convert"})),
    Task("u2", "Find me a flight from Paris to Rome.", frozenset({"flight_search"})),
    Task("u3", "Is it windy in Bergen?", frozenset({"weather_now"})),
]


# -- task ids carry no label ----------------------------------------------------------------
@pytest.mark.parametrize("name", BUNDLED)
def test_no_bundled_task_id_names_a_gold_tool(name):
    """API-Bank ids were dialogue file names listing the APIs called (375 of 406 named a gold tool)."""
    from toolgym.data.dataset import opaque_task_id

    dataset = load_dataset(name)
    corpus = dataset.corpus
    for task in dataset.tasks:
        tid = task.id.lower()
        for gold in task.gold:
            tool = corpus[gold]
            for label in {gold, tool.name}:
                assert label.lower() not in tid, (task.id, label)
        # opaque and stable: a hash of the benchmark's own id, which stays as metadata
        assert re.fullmatch(rf"{re.escape(name)}-[0-9a-f]{{12}}", task.id), task.id
        assert task.source_id and task.id == opaque_task_id(name, task.source_id)


def test_api_bank_env_info_task_id_names_no_gold_tool():
    """What a scripted agent gets (``agent_view(info)``) holds the task id: it must not name gold."""
    env = gymnasium.make("toolgym/ToolSearch-APIBank-v0")
    for task in load_dataset("api_bank").tasks:
        _, info = env.reset(options={"task": task.id})
        shown = agent_view(info)["task_id"].lower()
        assert not [g for g in task.gold if g.lower() in shown], shown
    env.close()


def test_seal_tools_heldout_split_is_unchanged_by_opaque_ids():
    """The held-out draw is over the Seal-Tools ids, so the same 100 tasks stay held out."""
    heldout = load_dataset("seal_tools", "heldout").tasks
    assert all(t.source_id.startswith("dev-difficult-") for t in heldout)
    assert load_dataset("seal_tools").task(heldout[0].source_id) == heldout[0].__class__(
        **{**heldout[0].__dict__, "split": "dev"})


# -- special files as inputs: refused at once, never read (a FIFO would block forever) -------
@pytest.fixture
def fifo(tmp_path):
    """A FIFO, and a watchdog that opens its write end after a few seconds so a reader stuck on
    it (the bug) gets EOF and the test fails instead of hanging."""
    path = tmp_path / "pipe.jsonl"
    os.mkfifo(path)
    done = threading.Event()

    def unblock() -> None:
        deadline = time.monotonic() + 60
        while not done.wait(0.2) and time.monotonic() < deadline:
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # ENXIO while nobody reads
            except OSError:
                continue
            if done.wait(WATCHDOG_S):
                return

    timer = threading.Timer(WATCHDOG_S, unblock)
    timer.daemon = True
    timer.start()
    yield path
    done.set()
    timer.cancel()


WATCHDOG_S = 3.0


def _one_line_error(argv, capsys, *fragments):
    start = time.monotonic()
    assert main(argv) == 2
    assert time.monotonic() - start < WATCHDOG_S, "blocked on the special file"
    return one_error_line(capsys.readouterr().err, *fragments)


def _user_files(tmp_path):
    corpus = tmp_path / "tools.jsonl"
    corpus.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in TOOLS))
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in TASKS))
    return str(corpus), str(tasks)


def test_fifo_as_tasks_or_corpus_is_refused_in_one_line(tmp_path, fifo, capsys):
    corpus, tasks = _user_files(tmp_path)
    for mode in ([], ["--env", "toolgym/ToolSearch-v0", "--agent", "raw"]):
        _one_line_error(["eval", "--tasks", str(fifo), "--corpus", corpus, *mode], capsys, "pipe.jsonl", "FIFO")
        _one_line_error(["eval", "--tasks", tasks, "--corpus", str(fifo), *mode], capsys, "pipe.jsonl", "FIFO")


def test_fifo_as_replay_input_is_refused_in_one_line(tmp_path, fifo, capsys):
    _one_line_error(["replay", str(fifo), "--scheme", "grpo_f1"], capsys, "pipe.jsonl", "FIFO")


@pytest.mark.parametrize("reader", ["iter_jsonl", "read_json", "iter_csv_numbered", "csv_header"])
def test_every_reader_refuses_a_fifo(fifo, reader):
    from toolgym.data import readers

    start = time.monotonic()
    with pytest.raises(DatasetFormatError, match="FIFO"):
        out = getattr(readers, reader)(fifo)
        list(out) if not isinstance(out, list) else out
    assert time.monotonic() - start < WATCHDOG_S


def test_a_symlink_to_a_regular_file_still_reads(tmp_path):
    _, tasks = _user_files(tmp_path)
    link = tmp_path / "link.jsonl"
    link.symlink_to(tasks)
    from toolgym.data.readers import read_jsonl

    assert [r["id"] for r in read_jsonl(link)] == ["u1", "u2", "u3"]


# -- tool ids that are not valid Unicode -----------------------------------------------------
def test_lone_surrogate_tool_id_is_refused_at_load_in_both_modes(tmp_path, capsys):
    """JSON "\\ud800" decodes to a lone surrogate: env construction died on an encode error naming
    no file, while retrieval eval accepted it. Both now refuse it at load, naming file and line."""
    corpus = tmp_path / "tools.jsonl"
    records = [t.to_dict() for t in TOOLS]
    records[1]["id"] = "flight\ud800search"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records))  # json.dumps escapes it as \ud800
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(TASKS[0].to_dict()) + "\n")
    lines = []
    for mode in ([], ["--env", "toolgym/ToolSearch-v0", "--agent", "raw"]):
        lines.append(_one_line_error(["eval", "--tasks", str(tasks), "--corpus", str(corpus), *mode], capsys,
                                     "tools.jsonl:2", "surrogate"))
    assert lines[0] == lines[1]


@pytest.mark.parametrize("field", ["name", "description", "category"])
def test_lone_surrogates_in_other_tool_text_are_refused_too(field):
    from toolgym.data.dataset import make_tool

    with pytest.raises(DatasetFormatError, match=rf"f.jsonl:7: .*{field} is not valid Unicode"):
        make_tool("f.jsonl:7", **{"id": "t", "name": "t", "description": "d", field: "bad\udfff"})
