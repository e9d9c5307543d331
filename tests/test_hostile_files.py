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
    """``--print-config``: on the old code the same command without it started a full default run."""
    from toolgym.trainers.config import load_train_config

    config = tmp_path / "empty.yaml"
    config.write_text(text)
    with pytest.raises(ValueError, match="empty.yaml holds no settings"):
        load_train_config(config, [f"run_dir={tmp_path / 'run'}"], check_machine=False)
    assert main(["train", str(config), "--print-config"]) == 2
    one_error_line(capsys.readouterr().err, "empty.yaml", "no settings")
    assert not (tmp_path / "run").exists()


# -- item 1: an export folder is read from its own files only ---------------------------------
def _write_export(root: Path, tasks: list[Task] | None = None, *, task_cells: list | None = None,
                  tools: list[Tool] | None = None, split: str = "dev", readme: str | None = None) -> Path:
    """An export-hf folder written by hand (what ``toolgym export-hf`` writes, minus the prompts)."""
    import pandas as pd

    from toolgym.trainers.export_hf import corpus_rows

    corpus = ToolCorpus(tools or TOOLS, name="x")
    (root / "corpus").mkdir(parents=True, exist_ok=True)
    (root / "tasks").mkdir(exist_ok=True)
    pd.DataFrame(corpus_rows(corpus)).to_parquet(root / "corpus" / "tools.parquet", index=False)
    cells = task_cells if task_cells is not None else [json.dumps(t.to_dict()) for t in (tasks or TASKS)]
    pd.DataFrame({"task_id": [f"r{i}" for i in range(len(cells))], "task": cells}).to_parquet(
        root / "tasks" / f"{split}.parquet", index=False)
    if readme is not None:
        (root / "README.md").write_text(readme)
    return root


def _card(tasks_path: str, corpus_path: str = "corpus/tools.parquet", split: str = "dev") -> str:
    return ("---\nconfigs:\n- config_name: tasks\n  data_files:\n"
            f"  - split: {split}\n    path: {json.dumps(tasks_path)}\n"
            "- config_name: corpus\n  data_files:\n  - split: train\n"
            f"    path: {json.dumps(corpus_path)}\n---\n# export\n")


EVIL = [Task("evil", "Convert money please", frozenset({"currency_convert"}), split="dev")]


class _Server:
    """A loopback HTTP server that serves one parquet file and counts every request."""

    def __init__(self, body: bytes):
        seen = self.requests = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                seen.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_HEAD = do_GET  # noqa: N815

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.timeout = 5
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


@pytest.fixture
def evil_parquet(tmp_path):
    outside = _write_export(tmp_path / "elsewhere", EVIL)
    return outside / "tasks" / "dev.parquet"


def _card_cases(tmp_path: Path, evil: Path, port: int) -> dict[str, str]:
    return {
        "url": _card(f"http://127.0.0.1:{port}/tasks/test.parquet"),
        "absolute": _card(str(evil)),
        "parent": _card("../elsewhere/tasks/dev.parquet"),
        "glob": _card("tasks/dev.parquet", corpus_path="/etc/**"),
    }


@pytest.mark.parametrize("case", ["url", "absolute", "parent", "glob"])
def test_export_card_data_files_are_never_followed(tmp_path, evil_parquet, case):
    """The card named a URL (toolgym sent ``GET /tasks/test.parquet``), an absolute path, ``../``
    or ``/etc/**``; datasets followed it. Now only the folder's own parquet files are read."""
    from toolgym.trainers.export_hf import load_export

    with _Server(evil_parquet.read_bytes()) as server:
        folder = _write_export(tmp_path / "export", readme=_card_cases(tmp_path, evil_parquet, server.port)[case])
        corpus, tasks = load_export(folder, split="dev")
    assert server.requests == []
    assert [t.id for t in tasks] == ["u1", "u2", "u3"]
    assert corpus.ids == [t.id for t in TOOLS]


def test_cli_export_card_url_is_not_fetched(tmp_path, evil_parquet):
    """From the command line: the folder's own 3 tasks are scored, the server sees no request."""
    with _Server(evil_parquet.read_bytes()) as server:
        folder = _write_export(tmp_path / "export", readme=_card(f"http://127.0.0.1:{server.port}/tasks/test.parquet"))
        out = _cli("eval", "retrieval", "--tasks", str(folder), "--retriever", "bm25", "--json", str(tmp_path / "r.json"),
                   env={"HF_DATASETS_OFFLINE": "0", "HF_HUB_OFFLINE": "0"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert server.requests == []
    assert json.loads((tmp_path / "r.json").read_text())["n"] == 3


@pytest.mark.parametrize("case", ["absolute", "parent", "glob"])
def test_cli_export_card_paths_outside_are_not_read(tmp_path, evil_parquet, case):
    folder = _write_export(tmp_path / "export", readme=_card_cases(tmp_path, evil_parquet, 9)[case])
    out = _cli("eval", "retrieval", "--tasks", str(folder), "--retriever", "bm25", "--json", str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads((tmp_path / "r.json").read_text())["n"] == 3  # EVIL has 1 task


@pytest.mark.parametrize("what", ["tasks file", "tasks folder", "corpus file"])
def test_export_symlink_leading_outside_is_refused(tmp_path, evil_parquet, what):
    folder = _write_export(tmp_path / "export")
    if what == "tasks file":
        (folder / "tasks" / "dev.parquet").unlink()
        (folder / "tasks" / "dev.parquet").symlink_to(evil_parquet)
    elif what == "tasks folder":
        import shutil

        shutil.rmtree(folder / "tasks")
        (folder / "tasks").symlink_to(evil_parquet.parent)
    else:
        (folder / "corpus" / "tools.parquet").unlink()
        (folder / "corpus" / "tools.parquet").symlink_to(evil_parquet.parent.parent / "corpus" / "tools.parquet")
    from toolgym.trainers.export_hf import load_export

    with pytest.raises(DatasetFormatError, match="leads outside the export folder"):
        load_export(folder)


def test_cli_export_symlink_outside_is_one_line(tmp_path, evil_parquet):
    folder = _write_export(tmp_path / "export")
    (folder / "tasks" / "dev.parquet").unlink()
    (folder / "tasks" / "dev.parquet").symlink_to(evil_parquet)
    out = _cli("eval", "retrieval", "--tasks", str(folder), "--retriever", "bm25")
    assert out.returncode == 2
    one_error_line(out.stderr, "dev.parquet", "outside the export folder")


def test_export_fifo_is_refused(tmp_path):
    from toolgym.trainers.export_hf import load_export

    folder = _write_export(tmp_path / "export")
    (folder / "tasks" / "dev.parquet").unlink()
    os.mkfifo(folder / "tasks" / "dev.parquet")
    with pytest.raises(DatasetFormatError, match="FIFO"):
        load_export(folder)


# -- item 12: export cells of the wrong shape name the file and row ---------------------------
@pytest.mark.parametrize("cells, fragment", [
    ([7, 8], r"dev.parquet row 1: column 'task' must be a string, got int"),
    ([None], r"dev.parquet row 1: column 'task' must be a string, got null"),
    (['[1, 2]'], r"dev.parquet row 1: column 'task' must hold a JSON object \(a Task\), got a list"),
    ([["a", "b"]], r"dev.parquet row 1: column 'task' must be a string, got list"),
    (['{"id": "x", "query": "q", '], r"dev.parquet row 1 column 'task': not valid JSON"),
    (['{"id": "x", "gold": ["weather_now"]}'], r"dev.parquet row 1: the task has no 'query' field"),
    (['{"id": "x", "query": "", "gold": ["weather_now"]}'], r"dev.parquet row 1: task 'x': query is empty"),
    (["[" * 100_000 + "]" * 100_000], r"dev.parquet row 1 column 'task': JSON nested deeper than 100 levels"),
    ([json.dumps({**TASKS[0].to_dict(), "gold": ["no_such_tool"]})],
     r"dev.parquet row 1: gold tool ids not in corpus/tools.parquet: \['no_such_tool'\]"),
])
def test_export_bad_task_cells_name_file_and_row(tmp_path, cells, fragment):
    from toolgym.trainers.export_hf import load_export

    folder = _write_export(tmp_path / "export", task_cells=cells)
    with pytest.raises(DatasetFormatError, match=fragment):
        load_export(folder)


def test_export_zero_rows_and_missing_column(tmp_path):
    import pandas as pd

    from toolgym.trainers.export_hf import load_export

    folder = _write_export(tmp_path / "export")
    pd.DataFrame({"task": pd.Series([], dtype=str)}).to_parquet(folder / "tasks" / "dev.parquet", index=False)
    with pytest.raises(DatasetFormatError, match="dev.parquet: has no rows"):
        load_export(folder)
    pd.DataFrame({"task_id": ["a"]}).to_parquet(folder / "tasks" / "dev.parquet", index=False)
    with pytest.raises(DatasetFormatError, match=r"dev.parquet: no column 'task' \(columns: task_id\)"):
        load_export(folder)
    pd.DataFrame({"id": ["a"]}).to_parquet(folder / "corpus" / "tools.parquet", index=False)
    with pytest.raises(DatasetFormatError, match=r"tools.parquet: no column 'name', 'description'"):
        load_export(folder)
    (folder / "corpus" / "tools.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(DatasetFormatError, match=r"tools.parquet: not a readable parquet file"):
        load_export(folder)


def test_export_bad_corpus_cells_name_file_and_row(tmp_path):
    import pandas as pd

    from toolgym.trainers.export_hf import load_export

    folder = _write_export(tmp_path / "export")
    rows = [{"id": "weather_now", "name": "w", "description": "d", "category": None, "parameters": "{}"},
            {"id": " ", "name": "w", "description": "d", "category": None, "parameters": "{}"}]
    pd.DataFrame(rows).to_parquet(folder / "corpus" / "tools.parquet", index=False)
    with pytest.raises(DatasetFormatError, match=r"tools.parquet row 2: tool id must be"):
        load_export(folder)
    rows[1] = {"id": "t2", "name": "w", "description": "d", "category": None, "parameters": "[[["}
    pd.DataFrame(rows).to_parquet(folder / "corpus" / "tools.parquet", index=False)
    with pytest.raises(DatasetFormatError, match=r"tools.parquet row 2 column 'parameters': not valid JSON"):
        load_export(folder)


def test_export_without_readme_reads(tmp_path):
    """The card is documentation: without it the folder still reads ("BuilderConfig 'corpus' not found")."""
    from toolgym.trainers.export_hf import load_export

    folder = _write_export(tmp_path / "export")
    assert not (folder / "README.md").exists()
    corpus, tasks = load_export(folder)
    assert len(corpus) == 3 and [t.id for t in tasks] == ["u1", "u2", "u3"]


def test_export_gold_missing_is_refused_in_retrieval_mode(tmp_path, capsys):
    """Retrieval mode scored such tasks silently (agent mode refused them)."""
    cells = [json.dumps(TASKS[0].to_dict()), json.dumps({**TASKS[1].to_dict(), "gold": ["ghost_tool"]})]
    folder = _write_export(tmp_path / "export", task_cells=cells)
    assert main(["eval", "retrieval", "--tasks", str(folder), "--retriever", "bm25"]) == 2
    one_error_line(capsys.readouterr().err, "dev.parquet row 2", "ghost_tool")


# -- item 17: --split with --tasks/--corpus, NUL as a JSON escape, number ids, blank tool ids ---
def test_eval_retrieval_split_is_applied_to_user_files(tmp_path, capsys):
    corpus, tasks = _user_files(tmp_path)
    assert main(["eval", "retrieval", "--tasks", tasks, "--corpus", corpus, "--split", "nope", "--retriever", "bm25"]) == 2
    one_error_line(capsys.readouterr().err, "--split 'nope'", "tasks.jsonl", "['dev']")
    records = [dict(t.to_dict(), split="test" if t.id == "u2" else "dev") for t in TASKS]
    Path(tasks).write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "r.json"
    assert main(["eval", "retrieval", "--tasks", tasks, "--corpus", corpus, "--split", "dev", "--retriever", "bm25",
                 "--json", str(out)]) == 0
    assert json.loads(out.read_text())["n"] == 2


@pytest.mark.parametrize("protocol, text", [
    ("hermes", '<tool_call>{"name": "search", "arguments": {"query": "weather\\u0000 Oslo"}}</tool_call>'),
    ("hermes", '<tool_call>{"name": "search", "arguments": {"query": "weather", "category": "W\\u0000"}}</tool_call>'),
    ("hermes", '<tool_call>{"name": "submit", "arguments": {"tools": ["weather_now\\u0000"]}}</tool_call>'),
    ("hermes", '<tool_call>{"name": "submit", "arguments": "{\\"tools\\": [\\"a\\\\u0000\\"]}"}</tool_call>'),
    ("search_r1", '<answer>["weather_now\\u0000"]</answer>'),
])
def test_nul_as_json_escape_is_an_invalid_action(protocol, text):
    from toolgym.envs.syntax import Invalid, parse_action

    assert "\x00" not in text
    action = parse_action(text, protocol)
    assert isinstance(action, Invalid) and "NUL" in action.reason, action


def test_nul_as_json_escape_in_the_env_is_an_error_observation():
    import gymnasium

    import toolgym.envs  # noqa: F401

    env = gymnasium.make("toolgym/ToolSearch-v0")
    env.reset(seed=0)
    obs, _, _, _, info = env.step('<tool_call>{"name": "search", "arguments": {"query": "weather\\u0000"}}</tool_call>')
    assert "NUL" in obs and info["invalid"] == 1
    env.close()


@pytest.mark.parametrize("raw, fragment", [
    ("1e999", "task id must be a string or an integer, got float inf"),
    ("NaN", "task id must be a string or an integer, got float nan"),
    ("1e20", "task id must be a string or an integer, got float 1e\\+20"),
    ("true", "field 'id' should be|task id must be"),
    ("null", "task id must be a string or an integer, got null"),
])
def test_number_task_ids_are_refused_not_stringified(tmp_path, raw, fragment):
    from toolgym.data.toolgym_format import load_corpus_and_tasks

    corpus, tasks = _user_files(tmp_path)
    Path(tasks).write_text(f'{{"id": {raw}, "query": "Is it windy?", "gold": ["weather_now"]}}\n')
    with pytest.raises(ValueError, match=rf"tasks.jsonl:1: .*({fragment})"):
        load_corpus_and_tasks(corpus, tasks)
    assert Task.from_dict({"id": 7, "query": "q", "gold": ["a"]}).id == "7"  # integers stay ids


def test_number_ids_in_record_from_dict():
    with pytest.raises(ValueError, match="task id must be a string or an integer, got float inf"):
        Task.from_dict(json.loads('{"id": 1e999, "query": "q", "gold": ["a"]}'))
    with pytest.raises(ValueError, match="tool id must be a string or an integer, got float nan"):
        Tool.from_dict(json.loads('{"id": NaN, "name": "n"}'))


@pytest.mark.parametrize("tool_id", [" ", "\t", "\u3000  "])
def test_blank_tool_id_is_refused(tmp_path, tool_id, capsys):
    """A blank id could never be submitted (the parser refuses an empty submitted id)."""
    with pytest.raises(ValueError, match="tool id must be a non-blank string"):
        Tool(tool_id, "n", "d")
    corpus, tasks = _user_files(tmp_path)
    records = [t.to_dict() for t in TOOLS] + [Tool("x", "blank", "A tool with a blank id").to_dict() | {"id": tool_id}]
    Path(corpus).write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["eval", "retrieval", "--tasks", tasks, "--corpus", corpus, "--retriever", "bm25"]) == 2
    one_error_line(capsys.readouterr().err, "tools.jsonl:4", "non-blank")


# -- item 7: a poisoned embedding cache is rebuilt, never searched ----------------------------
def _fake_npy_header(path: Path, shape: tuple[int, int]) -> None:
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": shape})
        f.write(b"\0" * 64)


@pytest.fixture(scope="module")
def dense_cache(tmp_path_factory):
    from toolgym.retrieval import build_index

    corpus = ToolCorpus(TOOLS, name="three")
    cache = tmp_path_factory.mktemp("emb")
    index = build_index(corpus, "dense", cache_dir=cache)
    good = index.tool_embeddings().copy()
    return corpus, cache, index.embedding_cache_path, good


@pytest.mark.parametrize("poison", ["nan", "inf", "huge header", "wrong dim", "truncated", "not unit", "no stamp",
                                    "other stamp"])
def test_poisoned_embedding_cache_is_rebuilt(dense_cache, poison):
    from toolgym.retrieval import build_index

    corpus, cache, path, good = dense_cache
    stamp = path.with_suffix(".json")
    path.unlink(missing_ok=True)
    if poison in ("nan", "inf"):
        np.save(path, np.full_like(good, np.nan if poison == "nan" else np.inf))
    elif poison == "huge header":  # 10^9 x 384 floats claimed: _ArrayMemoryError on np.load
        _fake_npy_header(path, (10**9, 384))
    elif poison == "wrong dim":
        np.save(path, np.ones((len(TOOLS), 7), dtype=np.float32) / np.sqrt(7))
    elif poison == "truncated":
        np.save(path, good)
        path.write_bytes(path.read_bytes()[:-40])
    elif poison == "not unit":
        np.save(path, good * 3)
    elif poison == "no stamp":  # right shape, unit rows, finite: someone else's matrix
        np.save(path, np.roll(good, 1, axis=0))
        stamp.unlink(missing_ok=True)
    else:  # a stamp that is not this matrix's
        np.save(path, np.roll(good, 1, axis=0))
        stamp.write_text(json.dumps({"corpus": "x", "model": "y", "shape": list(good.shape), "sha256": "0"}))
    index = build_index(corpus, "dense", cache_dir=cache)
    start = time.monotonic()
    emb = index.tool_embeddings()
    assert time.monotonic() - start < 60
    np.testing.assert_allclose(emb, good, atol=1e-5)
    assert list(index.search("wind in Bergen", k=1).ids) == ["weather_now"]
    # rebuilt in place, with its stamp: the next index reads it without encoding
    warm = build_index(corpus, "dense", cache_dir=cache)
    np.testing.assert_allclose(warm.tool_embeddings(), good, atol=1e-5)
    assert warm._encoder is None


# -- item 13: a crafted pytorch_model.bin is refused in one line, its payload never run --------
class _Payload:
    """Unpickling this would create ``path`` (what a crafted weights file's code could do)."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.fixture(scope="module")
def crafted_model(tmp_path_factory):
    import torch

    from toolgym.agents.hf_policy import load_tokenizer, tiny_causal_lm

    folder = tmp_path_factory.mktemp("crafted") / "model"
    tok = load_tokenizer("smollm2")
    model = tiny_causal_lm(tok)
    model.config.save_pretrained(folder)
    tok.save_pretrained(folder)
    sentinel = folder.parent / "PAYLOAD_RAN"
    torch.save({"model.embed_tokens.weight": _Payload(str(sentinel))}, folder / "pytorch_model.bin")
    return folder, sentinel


def _check_refused(err: str, folder: Path, sentinel: Path) -> None:
    one_error_line(err, str(folder / "pytorch_model.bin"), "weights_only=True")
    assert not sentinel.exists(), "the crafted pickle's payload ran"


def test_crafted_weights_via_policy_dir(crafted_model, capsys):
    folder, sentinel = crafted_model
    assert main(["eval", "policy", "--env", "toolgym/ToolSearch-v0", "--policy", str(folder), "--limit", "1"]) == 2
    _check_refused(capsys.readouterr().err, folder, sentinel)


def test_crafted_weights_via_state_json(crafted_model, tmp_path, capsys):
    folder, sentinel = crafted_model
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "state.json").write_text(json.dumps({"step": 1, "config": {"model": {"init_from": str(folder)}}}))
    assert main(["eval", "policy", "--env", "toolgym/ToolSearch-v0", "--policy", str(checkpoint), "--limit", "1"]) == 2
    _check_refused(capsys.readouterr().err, folder, sentinel)


def test_crafted_weights_via_model_init_from(crafted_model, tmp_path, capsys):
    import yaml

    folder, sentinel = crafted_model
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({
        "run_dir": str(tmp_path / "run"), "model": {"name": "tiny-llama", "init_from": str(folder)},
        "env": {"id": "toolgym/ToolSearch-v0", "kwargs": {"max_turns": 2}}, "sampling": {"max_new_tokens": 4},
        "train": {"steps": 1, "tasks_per_step": 1, "group_size": 2}, "eval": {"before": False, "after": False}}))
    assert main(["train", str(config), "--no-progress"]) == 2
    _check_refused(capsys.readouterr().err, folder, sentinel)
