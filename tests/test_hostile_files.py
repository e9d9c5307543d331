"""Hostile files, third round (issue 36): export folders that name URLs or paths outside themselves,
export cells of the wrong shape, unbounded gzip input, deep nesting, poisoned embedding caches,
crafted weight files, and inputs whose error named no file.

Each case fails on the code before its fix (8e83d04); the CLI cases run ``toolgym`` in a subprocess
and read its one stderr line."""
from __future__ import annotations

import gzip
import http.server
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from toolgym.cli.main import main
from toolgym.data import DatasetFormatError
from toolgym.data.records import Task
from toolgym.retrieval.corpus import Tool, ToolCorpus
from conftest import one_error_line

TOOLGYM = str(Path(sys.executable).with_name("toolgym"))
TOOLS = [
    Tool("weather_now", "weather_now", "Current weather, temperature and wind for a city."),
    Tool("flight_search", "flight_search", "Search flights between two airports on a date."),
    Tool("currency_convert", "currency_convert", "Convert an amount of money between two currencies."),
]
TASKS = [
    Task("u1", "What is the weather in Oslo and how much is 100 euros in dollars?",
         frozenset({"weather_now", "currency_convert"}), split="dev"),
    Task("u2", "Find me a flight from Paris to Rome.", frozenset({"flight_search"}), split="dev"),
    Task("u3", "Is it windy in Bergen?", frozenset({"weather_now"}), split="dev"),
]


def _cli(*argv: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {**os.environ, "OMP_NUM_THREADS": "1", "TOOLGYM_DEBUG": ""}
    return subprocess.run([TOOLGYM, *argv], capture_output=True, text=True, timeout=timeout, env={**base, **(env or {})})


def _user_files(tmp_path: Path) -> tuple[str, str]:
    corpus = tmp_path / "tools.jsonl"
    corpus.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in TOOLS))
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in TASKS))
    return str(corpus), str(tasks)


# -- item 8: a gzip of newlines is capped by line count (and decompressed size) -----------------
def _newline_bomb(path: Path, lines: int) -> Path:
    with gzip.open(path, "wb", compresslevel=9) as f:
        chunk = b"\n" * (1 << 20)
        for _ in range(lines >> 20):
            f.write(chunk)
        f.write(b"\n" * (lines % (1 << 20)))
    return path


def test_gzip_of_newlines_stops_at_the_line_cap(tmp_path):
    from toolgym.data.readers import MAX_JSONL_LINES, iter_jsonl

    bomb = _newline_bomb(tmp_path / "tasks.jsonl.gz", MAX_JSONL_LINES + 10)
    assert bomb.stat().st_size < 64 * 1024
    start = time.monotonic()
    with pytest.raises(DatasetFormatError, match=rf"tasks.jsonl.gz:{MAX_JSONL_LINES + 1}: more than .* lines"):
        list(iter_jsonl(bomb))
    assert time.monotonic() - start < 30


def test_jsonl_decompressed_size_is_capped(tmp_path, monkeypatch):
    from toolgym.data import readers

    monkeypatch.setattr(readers, "MAX_JSONL_CHARS", 1000)
    path = tmp_path / "t.jsonl.gz"
    with gzip.open(path, "wt") as f:
        for i in range(100):
            f.write(json.dumps({"id": str(i), "pad": "x" * 20}) + "\n")
    with pytest.raises(DatasetFormatError, match=r"t.jsonl.gz:\d+: larger than 1,000 characters \(after decompression\)"):
        list(readers.iter_jsonl(path))


def test_csv_of_blank_lines_stops_at_the_line_cap(tmp_path, monkeypatch):
    from toolgym.data import readers

    monkeypatch.setattr(readers, "MAX_JSONL_LINES", 50)
    path = tmp_path / "m.csv"
    path.write_text("Query,Tool\n" + "\n" * 100)
    with pytest.raises(DatasetFormatError, match=r"m.csv:51: more than 50 lines"):
        list(readers.iter_csv_numbered(path))


def test_cli_gzip_newline_bomb_as_tasks_is_one_line_exit_2(tmp_path):
    from toolgym.data.readers import MAX_JSONL_LINES

    corpus, _ = _user_files(tmp_path)
    bomb = _newline_bomb(tmp_path / "bomb.jsonl.gz", MAX_JSONL_LINES + 10)
    start = time.monotonic()
    out = _cli("eval", "retrieval", "--tasks", str(bomb), "--corpus", corpus, "--retriever", "bm25")
    assert out.returncode == 2, out.stderr[-2000:]
    assert time.monotonic() - start < 60
    one_error_line(out.stderr, "bomb.jsonl.gz", "lines")


# -- item 10: nesting-depth caps on override keys and values ----------------------------------
@pytest.mark.parametrize("override, fragment", [
    ("a" + ".a" * 9999 + "=1", "10000 dotted parts"),
    ("seed=" + "[" * 20000 + "]" * 20000, "nests deeper"),
    ("run_dir=" + "{a: " * 5000 + "1" + "}" * 5000, "nests deeper"),
])
def test_deep_override_key_or_value_is_one_line(override, fragment):
    from toolgym.trainers.config import load_train_config

    with pytest.raises(ValueError, match=fragment):
        load_train_config(None, [override], check_machine=False)


# -- item 17: a read that fails under the reader names the file -------------------------------
@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="needs /proc")
def test_proc_self_mem_as_tasks_names_the_file(tmp_path, capsys):
    corpus, _ = _user_files(tmp_path)
    assert main(["eval", "retrieval", "--tasks", "/proc/self/mem", "--corpus", corpus, "--retriever", "bm25"]) == 2
    one_error_line(capsys.readouterr().err, "/proc/self/mem", "unreadable")


# -- item 17: an empty config file is refused, not a silent default run -----------------------
@pytest.mark.parametrize("text", ["", "# only a comment\n", "\n\n"])
def test_empty_config_file_is_refused(tmp_path, capsys, text):
    config = tmp_path / "empty.yaml"
    config.write_text(text)
    assert main(["train", str(config), f"run_dir={tmp_path / 'run'}"]) == 2
    one_error_line(capsys.readouterr().err, "empty.yaml", "no settings")
    assert not (tmp_path / "run").exists()
