"""Benchmark loaders, the dataset registry and the bundled copies (toolgym.data.loaders)."""
from __future__ import annotations

import csv
import hashlib
import json
import os
import re
from pathlib import Path

import pytest

from toolgym.data import (
    Dataset,
    DatasetFormatError,
    dataset_names,
    load_api_bank,
    load_corpus_and_tasks,
    load_dataset,
    load_metatool,
    load_metatool_multi,
    load_seal_tools,
    load_stabletoolbench,
    load_ultratool,
    save_corpus_and_tasks,
    seal_tools_split,
    shared_data_dir,
    ultratool_subtask,
)
from toolgym.data.dataset import opaque_task_id
from toolgym.data.loaders import BUNDLED_DIR, bundled_paths
from toolgym.data.records import Task
from toolgym.retrieval.corpus import Tool, ToolCorpus

SHARED = shared_data_dir()
SEAL_HELDOUT_DIGEST = "76b304e92f4f"  # sha256 of the sorted held-out ids, first 12 hex


def _need_shared() -> Path:
    """The raw benchmark files: CI always has them beside the repo, so their absence fails there."""
    if not SHARED.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"shared data folder missing in CI: {SHARED}")
        pytest.skip(f"raw benchmark files not present at {SHARED} (set TOOLGYM_SHARED_DATA)")
    return SHARED


@pytest.fixture(scope="module")
def bundled() -> dict[str, Dataset]:
    return {name: load_dataset(name) for name in dataset_names() if name != "ultratool"}


@pytest.fixture(scope="module")
def ultratool() -> Dataset:
    _need_shared()
    return load_dataset("ultratool")


# -- counts ------------------------------------------------------------------------------
def test_registry_names():
    assert dataset_names() == ["stabletoolbench", "seal_tools", "metatool", "metatool_multi", "api_bank", "ultratool"]


def test_stabletoolbench_counts_and_groups(bundled):
    d = bundled["stabletoolbench"]
    assert len(d.corpus) == 2479
    assert len({tid.split("::")[0] for tid in d.corpus.ids}) == 811
    assert len(d.tasks) == 765
    assert {g: len(ts) for g, ts in d.groups().items()} == {
        "G1_instruction": 163, "G1_category": 153, "G1_tool": 158,
        "G2_instruction": 106, "G2_category": 124, "G3_instruction": 61,
    }
    assert len({t.id for t in d.tasks}) == 765
    assert all(1 <= len(t.gold) <= 6 for t in d.tasks)
    assert sum(1 for t in d.corpus if not t.description) == 214


def test_stabletoolbench_document_text(bundled):
    corpus = bundled["stabletoolbench"].corpus
    tool = corpus["TheClique::Songkick concert"]
    assert tool.category == "Data" and tool.name == "TheClique | Songkick concert"
    assert corpus.text(tool) == "Data | TheClique | Songkick concert: Concert info"
    assert tool.parameters["required"] == ["id_conc"]
    # A key seen with two metadata versions keeps the first (G1_tool, query 26820).
    assert corpus["Currency Converter_v2::Convert"].category == "Financial"


def test_seal_tools_counts(bundled):
    d = bundled["seal_tools"]
    assert len(d.corpus) == 4076 and len(d.corpus.categories) == 146
    assert len(d.tasks) == 700
    assert {g: len(ts) for g, ts in d.groups().items()} == {"easy": 200, "difficult": 500}
    assert sum(len(t.gold) >= 2 for t in d.tasks) == 500
    assert all(t.subtasks is None for t in d.tasks)
    tool = d.corpus["analyzeEvidence"]
    assert tool.category == "Chemical Engineering"  # top level of "Chemical Engineering/Forensic engineering"
    assert sorted(tool.parameters["properties"]) == ["evidence_type", "method", "sample"]


def test_seal_tools_split_is_a_seeded_partition(bundled):
    dev = bundled["seal_tools"].tasks
    train, heldout = load_dataset("seal_tools", "train").tasks, load_dataset("seal_tools", "heldout").tasks
    assert (len(train), len(heldout)) == (600, 100)
    assert {t.id for t in train} | {t.id for t in heldout} == {t.id for t in dev}
    assert not {t.id for t in train} & {t.id for t in heldout}
    assert all(len(t.gold) >= 2 for t in heldout)
    assert {t.split for t in heldout} == {"heldout"} and {t.split for t in train} == {"train"}
    assert [t.id for t in seal_tools_split(dev, "heldout")] == [t.id for t in heldout]
    # Pinned: changing the draw would silently move tasks between training and evaluation.
    digest = hashlib.sha256(",".join(sorted(t.source_id for t in heldout)).encode()).hexdigest()[:12]
    assert digest == SEAL_HELDOUT_DIGEST
    assert seal_tools_split(dev, "dev") == dev
    with pytest.raises(ValueError, match="dev, train or heldout"):
        seal_tools_split(dev, "test")


def test_metatool_counts(bundled):
    single, multi = bundled["metatool"], bundled["metatool_multi"]
    assert len(single.corpus) == 199 and len(multi.corpus) == 199
    # 20,614 rows = 20,544 distinct (stripped) queries + 70 repeats; 12 queries carry 2+ labels.
    assert single.dropped == {"duplicate_rows": 56, "ambiguous_queries": 12}
    assert len(single.tasks) == 20544 - 12
    assert all(len(t.gold) == 1 for t in single.tasks)
    assert len({t.query for t in single.tasks}) == len(single.tasks)
    assert len(multi.tasks) == 497 and all(len(t.gold) == 2 for t in multi.tasks)


def test_api_bank_counts(bundled):
    d = bundled["api_bank"]
    assert len(d.corpus) == 101 and len(d.corpus.categories) == 11
    assert len(d.tasks) == 406
    assert {g: len(ts) for g, ts in d.groups().items()} == {"level-1-given-desc": 350, "level-2-toolsearcher": 56}
    assert sorted(len(t.gold) for t in d.tasks).count(2) == 55
    assert d.dropped == {"empty_dialogue_files": 1, "toolsearcher_calls": 45}
    assert "ToolSearcher" not in d.corpus
    assert d.corpus["GetUserToken"].category == "Account management"
    assert d.corpus["ImageCaption"].description == "ImageCaption(image: str)"  # its api_info is "."
    assert d.corpus["GetToday"].parameters["properties"] == {}


def test_ultratool_counts(ultratool):
    assert len(ultratool.corpus) == 260 and len(ultratool.tasks) == 2888
    # 29 plans repeat a tool node, so a few gold sets have one tool.
    assert all(1 <= len(t.gold) <= 5 for t in ultratool.tasks) and sum(len(t.gold) >= 2 for t in ultratool.tasks) > 2800
    assert ultratool.corpus["send_sms"].category == "Repair"
    assert ultratool.corpus["send_sms"].parameters["domains"] == ["Repair", "Finance", "Flight", "Train"]


def test_every_gold_id_is_in_its_corpus(bundled, ultratool):
    for d in [*bundled.values(), ultratool]:
        for task in d.tasks:
            assert task.gold and task.gold <= set(d.corpus.ids), (d.name, task.id)


# -- bundle ----------------------------------------------------------------------------------
def test_bundle_equals_fresh_load(bundled):
    root = _need_shared()
    for name, d in bundled.items():
        fresh = load_dataset(name, data_root=root)
        assert [t.to_dict() for t in fresh.corpus] == [t.to_dict() for t in d.corpus], name
        assert [t.to_dict() for t in fresh.tasks] == [t.to_dict() for t in d.tasks], name
        assert fresh.dropped == d.dropped, name


def test_bundle_files_are_what_bundle_py_builds():
    from toolgym.data.bundle import build

    files = build(_need_shared())
    on_disk = {p.relative_to(BUNDLED_DIR).as_posix() for p in BUNDLED_DIR.rglob("*") if p.is_file()}
    assert on_disk == set(files), "stale or extra files in data/bundled: run python data/bundle.py"
    for rel, data in files.items():
        assert (BUNDLED_DIR / rel).read_bytes() == data, f"{rel} is stale: run python data/bundle.py"
    assert sum(len(b) for b in files.values()) < 4_000_000
    assert {"stabletoolbench.LICENSE.txt", "seal_tools.LICENSE.txt", "metatool.LICENSE.txt",
            "api_bank.LICENSE.txt", "NOTICE.txt"} <= {Path(p).name for p in files if p.startswith("LICENSES/")}
    assert not any("ultratool" in p for p in files)  # licence unclear: never vendored


def test_bundled_files_match_package_data_globs():
    # pyproject.toml ships bundled/*.jsonl.gz, bundled/*.json and bundled/LICENSES/*: nothing else.
    for p in BUNDLED_DIR.rglob("*"):
        if p.is_file():
            rel = p.relative_to(BUNDLED_DIR).as_posix()
            assert rel.endswith((".jsonl.gz", ".json")) and "/" not in rel or re.fullmatch(r"LICENSES/[^/]+", rel), rel


# -- registry errors -------------------------------------------------------------------------
def test_unknown_dataset_lists_names():
    with pytest.raises(ValueError, match="known datasets: stabletoolbench, seal_tools"):
        load_dataset("toolbench")


def test_unknown_split_is_refused():
    with pytest.raises(ValueError, match=r"splits \['dev', 'train', 'heldout'\]"):
        load_dataset("seal_tools", "test")


def test_ultratool_without_shared_data_says_where(monkeypatch, tmp_path):
    monkeypatch.setenv("TOOLGYM_SHARED_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="TOOLGYM_SHARED_DATA"):
        load_dataset("ultratool")


# -- API-Bank turns and UltraTool subtasks -------------------------------------------------------
def test_api_bank_messages_exclude_the_answer_turn(bundled):
    d = bundled["api_bank"]
    t = d.task("level-1-given-desc/AddAgenda-level-1-1#5")
    assert t.query == "Sure, my username is foo and my password is bar"
    assert t.gold == {"GetUserToken", "AddAgenda"}
    assert len(t.messages) == 8
    assert t.messages[0] == {"role": "user", "content": "Hi, can you help me add a new schedule for my meeting tomorrow at 2pm? Today is 2021-09-27"}
    assert t.messages[-1]["content"].startswith("Got it, I need to authenticate")
    for task in d.tasks:
        assert {m["role"] for m in task.messages} <= {"user", "assistant"}
        user_turns = [m["content"] for m in task.messages if m["role"] == "user"]
        # messages = the turns before the query's user turn: never the query, never the reply
        assert len(user_turns) == int(task.source_id.rsplit("#", 1)[1]) - 1
        assert all(g not in m["content"] for m in task.messages for g in ("API-Request", "param_dict"))


def test_api_bank_reply_text_is_not_in_messages(bundled):
    # The AI text of the calling reply ("Thank you, I have retrieved your token...") comes after the query.
    d = bundled["api_bank"]
    contents = [m["content"] for m in d.task("level-1-given-desc/AddAgenda-level-1-1#5").messages]
    assert not any("retrieved your token" in c for c in contents)


def test_ultratool_subtasks_do_not_name_their_gold(ultratool):
    any_tool = re.compile(
        r"(?<![\w-])(?:" + "|".join(sorted(map(re.escape, ultratool.corpus.ids), key=len, reverse=True)) + r")(?![\w-])"
    )
    for task in ultratool.tasks:
        assert task.subtasks
        for step in task.subtasks:
            assert not re.match(r"(?i)step\s*\d", step), step
            assert not any(g in step for g in task.gold), (task.id, step)  # own gold, even inside a word
            assert not any_tool.search(step), (task.id, step)  # nor any other tool id as a word
    assert ultratool.task("403").subtasks == (
        "Search for a direct flight from Beijing to New York on the morning of next Monday (2023-08-14)",
        "Book the flight for passenger Li Lei",
        "Set a reminder to check in for the boarding pass the day before departure",
    )


@pytest.mark.parametrize(
    "step, expected",
    [
        ("Step 1 Call flight_search to check available flights", "Check available flights"),
        ("Step 2Call bank_balance_query to check the balance", "Check the balance"),
        ("Step 4 Call foreign_currency_query again to confirm the yen balance", "Confirm the yen balance"),
        ("Step 1 Call account_login for logging in with account ID 123456", "Logging in with account ID 123456"),
        ("Step 3 Call the service personnel at 12345678", "Call the service personnel at 12345678"),
        ("1.2 Create and save new financial report file", "Create and save new financial report file"),
        ("After successful booking, call conference_room_cancelling to cancel it", "After successful booking, cancel it"),
        ("Step 2 Use it to pay", "Use it to pay"),
    ],
)
def test_ultratool_subtask_strips_prefix_and_tool(step, expected):
    assert ultratool_subtask(step) == expected


# -- loaders read other files of the same format --------------------------------------------------
def test_seal_tools_loader_reads_any_split_file(tmp_path):
    root = _need_shared() / "seal_tools" / "Seal-Tools_Dataset"
    split = tmp_path / "test.jsonl"
    split.write_text(
        json.dumps({"id": "test-difficult-7", "query": "q", "calling": [{"api": "getWaterQuality"}, {"api": "findShelter"}]}) + "\n"
    )
    d = load_seal_tools(split, root / "tool.jsonl")
    corpus, tasks = d.corpus, d.tasks
    assert len(corpus) == 4076
    assert tasks == [Task(id=opaque_task_id("seal_tools", "test-difficult-7"), query="q", gold=frozenset({"getWaterQuality", "findShelter"}),
                      split="test", group="difficult", source_id="test-difficult-7")]


def test_stabletoolbench_loader_reads_one_file():
    f = _need_shared() / "stabletoolbench" / "solvable_queries" / "test_instruction" / "G3_instruction.json"
    d = load_stabletoolbench(f)
    corpus, tasks = d.corpus, d.tasks
    assert len(tasks) == 61 and {t.group for t in tasks} == {"G3_instruction"}
    assert all(t.gold <= set(corpus.ids) for t in tasks)


def test_api_bank_loader_reads_one_dialogue():
    f = _need_shared() / "api_bank" / "api-bank" / "lv1-lv2-samples" / "level-1-given-desc" / "AddAgenda-level-1-1.jsonl"
    d = load_api_bank(f)
    corpus, tasks = d.corpus, d.tasks
    assert len(corpus) == 101 and [t.source_id for t in tasks] == ["level-1-given-desc/AddAgenda-level-1-1#5"]


def test_toolgym_jsonl_round_trip(tmp_path):
    corpus = ToolCorpus([Tool("a", "A", "does a", "X", {"type": "object"}), Tool("b", "B", "does b")], name="mini")
    tasks = [Task(id="t1", query="do a", gold=frozenset({"a"}), messages=({"role": "user", "content": "hi"},), subtasks=("a",))]
    for suffix in (".jsonl", ".jsonl.gz"):
        save_corpus_and_tasks(corpus, tasks, tmp_path / f"c{suffix}", tmp_path / f"t{suffix}")
        d = load_corpus_and_tasks(tmp_path / f"c{suffix}", tmp_path / f"t{suffix}")
        c2, t2 = d.corpus, d.tasks
        assert [t.to_dict() for t in c2] == [t.to_dict() for t in corpus] and t2 == tasks


# -- bad input: one error naming the file and the line ---------------------------------------------
def _copy_truncated(src: Path, dst: Path, keep_lines: int) -> Path:
    lines = src.read_text(encoding="utf-8").splitlines(keepends=True)[:keep_lines]
    lines[-1] = lines[-1][: len(lines[-1]) // 2]  # cut the last kept line mid-record
    dst.write_text("".join(lines), encoding="utf-8")
    return dst


def test_truncated_jsonl_names_file_and_line(tmp_path):
    root = _need_shared() / "seal_tools" / "Seal-Tools_Dataset"
    bad = _copy_truncated(root / "dev.jsonl", tmp_path / "dev.jsonl", keep_lines=5)
    with pytest.raises(DatasetFormatError, match=re.escape(f"{bad}:5: malformed JSON")):
        load_seal_tools(bad, root / "tool.jsonl")
    bad_tools = _copy_truncated(root / "tool.jsonl", tmp_path / "tool.jsonl", keep_lines=12)
    with pytest.raises(DatasetFormatError, match=re.escape(f"{bad_tools}:12:")):
        load_seal_tools(root / "dev.jsonl", bad_tools)


def test_truncated_json_names_file_and_line(tmp_path):
    src = _need_shared() / "stabletoolbench" / "solvable_queries" / "test_instruction" / "G3_instruction.json"
    text = src.read_text(encoding="utf-8")
    bad = tmp_path / "G3_instruction.json"
    bad.write_text(text[: len(text) // 3], encoding="utf-8")
    with pytest.raises(DatasetFormatError, match=re.escape(str(bad)) + r":\d+: malformed JSON"):
        load_stabletoolbench(bad)


def test_truncated_csv_names_file_and_line(tmp_path):
    src = _need_shared() / "api_bank" / "api-bank" / "data" / "all_apis.csv"
    text = src.read_text(encoding="utf-8")
    cut = text.index("Add a reminder API")  # inside a quoted multi-line api_info field
    bad = tmp_path / "all_apis.csv"
    bad.write_text(text[:cut], encoding="utf-8")
    dialogue = src.parent.parent / "lv1-lv2-samples" / "level-1-given-desc" / "AddAgenda-level-1-1.jsonl"
    with pytest.raises(DatasetFormatError, match=re.escape(str(bad)) + r":\d+: malformed CSV"):
        load_api_bank(dialogue, bad)


def test_csv_row_with_extra_field_names_its_line(tmp_path):
    root = _need_shared() / "metatool" / "dataset"
    bad = tmp_path / "queries.csv"
    bad.write_text("Query,Tool\nWhat is the weather?,WeatherTool\nStock price?,FinanceTool,extra\n", encoding="utf-8")
    with pytest.raises(DatasetFormatError, match=re.escape(f"{bad}:3: expected 2 fields")):
        load_metatool(bad, root / "plugin_des.json")


def test_truncated_dialogue_names_file_and_line(tmp_path):
    src = _need_shared() / "api_bank" / "api-bank"
    folder = tmp_path / "lv1-lv2-samples" / "level-1-given-desc"
    folder.mkdir(parents=True)
    bad = _copy_truncated(src / "lv1-lv2-samples" / "level-1-given-desc" / "AddAgenda-level-1-1.jsonl", folder / "x.jsonl", 10)
    with pytest.raises(DatasetFormatError, match=re.escape(f"{bad}:10: malformed JSON")):
        load_api_bank(bad, src / "data" / "all_apis.csv")


def test_truncated_gzip_names_file(tmp_path):
    corpus_path, tasks_path = bundled_paths("api_bank")
    bad = tmp_path / "api_bank.tasks.jsonl.gz"
    data = tasks_path.read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetFormatError, match=re.escape(str(bad))):
        load_corpus_and_tasks(corpus_path, bad)


def test_toolgym_jsonl_missing_field_names_line(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "a", "name": "A", "description": "d"}) + "\n")
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"id": "1", "query": "q", "gold": ["a"]}) + "\n\n" + json.dumps({"id": "2", "gold": ["a"]}) + "\n")
    with pytest.raises(DatasetFormatError, match=re.escape(f"{tasks}:3: missing field 'query'")):
        load_corpus_and_tasks(corpus, tasks)


def test_gold_missing_from_corpus_is_an_error_or_a_counted_drop(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "a", "name": "A", "description": "d"}) + "\n")
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(
        json.dumps({"id": "1", "query": "q", "gold": ["a", "zz"]}) + "\n" + json.dumps({"id": "2", "query": "q", "gold": ["zz"]}) + "\n"
    )
    with pytest.raises(DatasetFormatError, match=re.escape(f"{tasks}:1: gold tool id(s) ['zz'] of task '1'")):
        load_corpus_and_tasks(corpus, tasks)
    kept = load_corpus_and_tasks(corpus, tasks, missing_gold="drop").tasks
    assert [(t.id, t.gold) for t in kept] == [("1", frozenset({"a"}))]


def test_metatool_multi_unknown_tool_is_named(tmp_path):
    root = _need_shared() / "metatool" / "dataset"
    bad = tmp_path / "multi.json"
    bad.write_text(json.dumps([{"query": "q", "tool": ["FinanceTool", "NoSuchTool"]}]))
    with pytest.raises(DatasetFormatError, match=re.escape(f"{bad}: record 1: gold tool id(s) ['NoSuchTool']")):
        load_metatool_multi(bad, root / "plugin_des.json")


def test_ultratool_missing_field_names_line(tmp_path):
    root = _need_shared() / "ultratool_plans"
    bad = tmp_path / "data.jsonl"
    lines = (root / "data.jsonl").read_text(encoding="utf-8").splitlines()[:3]
    rec = json.loads(lines[2])
    del rec["task_nodes"]
    bad.write_text("\n".join(lines[:2] + [json.dumps(rec)]) + "\n")
    with pytest.raises(DatasetFormatError, match=re.escape(f"{bad}:3: missing field 'task_nodes'")):
        load_ultratool(bad, root / "tool_desc.json")


# -- the document text reproduces the BM25 reference numbers ------------------------------------------
@pytest.mark.parametrize("name, n1, c10", [("stabletoolbench", 63.1, 58.0), ("seal_tools", 81.3, 59.3)])
def test_bm25_on_the_corpus_text_matches_reference(bundled, name, n1, c10):
    """bm25s defaults + English stopwords + Snowball English stemmer on ``ToolCorpus.texts()``:
    the reference numbers (N@1 ~63 / C@10 ~58 and ~81 / ~59) only come out with the right text."""
    import bm25s
    import Stemmer

    from toolgym.retrieval.metrics import completeness_at_k, ndcg_at_k

    d = bundled[name]
    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(d.corpus.texts(), stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    queries = bm25s.tokenize([t.query for t in d.tasks], stopwords="en", stemmer=stemmer, show_progress=False)
    results, _ = retriever.retrieve(queries, k=10, show_progress=False, n_threads=1)
    ids = d.corpus.ids
    rankings = [[ids[i] for i in row] for row in results]
    got_n1 = 100 * sum(ndcg_at_k(r, t.gold, 1) for r, t in zip(rankings, d.tasks)) / len(d.tasks)
    got_c10 = 100 * sum(completeness_at_k(r, t.gold, 10) for r, t in zip(rankings, d.tasks)) / len(d.tasks)
    assert got_n1 == pytest.approx(n1, abs=1.0) and got_c10 == pytest.approx(c10, abs=1.0)



def test_csv_with_byte_order_mark_keeps_its_header(tmp_path):
    root = _need_shared() / "metatool" / "dataset"
    f = tmp_path / "queries.csv"
    f.write_bytes("\ufeffQuery,Tool\nWhat is the weather?,WeatherTool\n".encode("utf-8"))
    d = load_metatool(f, root / "plugin_des.json")
    tasks, dropped = d.tasks, d.dropped
    assert [(t.source_id, t.query, t.gold) for t in tasks] == [("metatool-2", "What is the weather?", frozenset({"WeatherTool"}))]
    assert dropped == {"duplicate_rows": 0, "ambiguous_queries": 0}


# -- loader holes: each ends in one DatasetFormatError naming the file and line (or record) ---------
def _write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _mini_corpus(tmp_path: Path) -> Path:
    return _write_jsonl(tmp_path / "c.jsonl", [{"id": "a", "name": "A", "description": "does a"}])


@pytest.mark.parametrize("category", [["Travel"], 3, {"x": 1}])
def test_tool_category_that_is_not_a_string_names_the_line(tmp_path, category):
    corpus = _write_jsonl(tmp_path / "c.jsonl", [{"id": "a", "name": "A", "description": "d"},
                                                 {"id": "b", "name": "B", "description": "d", "category": category}])
    tasks = _write_jsonl(tmp_path / "t.jsonl", [{"id": "1", "query": "q", "gold": ["a"]}])
    with pytest.raises(DatasetFormatError, match=re.escape(f"{corpus}:2: bad tool") + ".*category must be a string"):
        load_corpus_and_tasks(corpus, tasks)


@pytest.mark.parametrize("category", [["Travel"], 3, {"x": 1}])
def test_task_category_that_is_not_a_string_names_the_line(tmp_path, category):
    tasks = _write_jsonl(tmp_path / "t.jsonl", [{"id": "1", "query": "q", "gold": ["a"], "category": category}])
    with pytest.raises(DatasetFormatError, match=re.escape(f"{tasks}:1: bad task") + ".*category must be a string"):
        load_corpus_and_tasks(_mini_corpus(tmp_path), tasks)


def test_a_directory_given_as_the_corpus_file_is_a_clear_error(tmp_path):
    tasks = _write_jsonl(tmp_path / "t.jsonl", [{"id": "1", "query": "q", "gold": ["a"]}])
    with pytest.raises(DatasetFormatError, match=re.escape(f"{tmp_path}: is a directory, expected a file")):
        load_corpus_and_tasks(tmp_path, tasks)
    with pytest.raises(DatasetFormatError, match="is a directory"):
        load_corpus_and_tasks(_mini_corpus(tmp_path), tmp_path)


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, "[" * 100_000, '{"a":' * 100_000 + "1" + "}" * 100_000])
def test_deeply_nested_jsonl_line_is_refused_before_parsing(tmp_path, text):
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"id": "1", "query": "q", "gold": ["a"]}) + "\n" + text + "\n", encoding="utf-8")
    with pytest.raises(DatasetFormatError, match=re.escape(f"{tasks}:2: JSON nested deeper than 100 levels")):
        load_corpus_and_tasks(_mini_corpus(tmp_path), tasks)


def test_deeply_nested_json_file_is_refused_before_parsing(tmp_path):
    root = _need_shared() / "metatool" / "dataset"
    bad = tmp_path / "multi.json"
    bad.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(DatasetFormatError, match=re.escape(f"{bad}: JSON nested deeper than 100 levels")):
        load_metatool_multi(bad, root / "plugin_des.json")


def test_oversized_jsonl_line_and_json_file_are_refused(tmp_path):
    from toolgym.data.readers import read_json, read_jsonl

    f = tmp_path / "big.jsonl"
    f.write_text('{"a": 1}\n{"a": "' + "x" * 5000 + '"}\n', encoding="utf-8")
    with pytest.raises(DatasetFormatError, match=re.escape(f"{f}:2: line longer than 1000 characters")):
        list(__import__("toolgym.data.readers", fromlist=["x"]).iter_jsonl_numbered(f, max_line_chars=1000))
    assert len(read_jsonl(f)) == 2  # the default cap is far above real files
    g = tmp_path / "big.json"
    g.write_text("[" + ",".join(["1"] * 1000) + "]", encoding="utf-8")
    with pytest.raises(DatasetFormatError, match=re.escape(f"{g}: larger than 100 characters")):
        read_json(g, max_chars=100)


@pytest.mark.parametrize(
    "text, depth",
    [
        ("1", 0),
        ('{"a": "[[[", "b": [1, [2]]}', 3),  # brackets inside strings do not count
        ('["\\"[[", [[]]]', 3),  # an escaped quote does not end the string
        ('["\\\\", [[]]]', 3),  # an escaped backslash does not escape the quote after it
        ("[" + ",".join(["[]"] * 50) + "]", 2),
        ('[{"é": ["ü"]}]', 3),  # multi-byte characters
    ],
)
def test_json_depth_by_hand(text, depth):
    from toolgym.data.readers import json_depth

    assert json_depth(text) == depth
    if depth:
        assert json_depth(text) == max(_depth_of(json.loads(text)), 0)


def _depth_of(value) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth_of(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth_of(v) for v in value), default=0)
    return 0


@pytest.mark.parametrize("spec", ["a string", 7, ["list"]])
def test_seal_tools_parameter_that_is_not_an_object_names_the_line(tmp_path, spec):
    tools = _write_jsonl(tmp_path / "tool.jsonl", [
        {"api_name": "ok", "api_description": "d", "field": "X/Y", "parameters": {"p": {"type": "str"}}},
        {"api_name": "bad", "api_description": "d", "field": "X/Y", "parameters": {"p": spec}},
    ])
    split = _write_jsonl(tmp_path / "dev.jsonl", [{"id": "dev-easy-0", "query": "q", "calling": [{"api": "ok"}]}])
    with pytest.raises(DatasetFormatError, match=re.escape(f"{tools}:2: parameter 'p' should be an object")):
        load_seal_tools(split, tools)


def test_seal_tools_keeps_the_group_of_official_test_ids(tmp_path):
    root = _need_shared() / "seal_tools" / "Seal-Tools_Dataset"
    split = _write_jsonl(tmp_path / "test_in_domain.jsonl", [
        {"id": "test_in_domain-easy-3", "query": "q", "calling": [{"api": "getWaterQuality"}]},
        {"id": "test_out_domain-difficult-12", "query": "q", "calling": [{"api": "findShelter"}]},
    ])
    d = load_seal_tools(split, root / "tool.jsonl")
    assert [(t.group, t.split) for t in d.tasks] == [("easy", "test_in_domain"), ("difficult", "test_in_domain")]


@pytest.mark.parametrize("category", [5, ["Media"], {"x": 1}])
def test_stabletoolbench_category_that_is_not_a_string_names_the_record(tmp_path, category):
    api = {"category_name": category, "tool_name": "T", "api_name": "A", "api_description": "d",
           "required_parameters": [], "optional_parameters": []}
    f = tmp_path / "G1_tool.json"
    f.write_text(json.dumps([{"query_id": 9, "query": "q", "api_list": [api], "relevant APIs": [["T", "A"]]}]))
    with pytest.raises(DatasetFormatError, match=re.escape(f"{f}: query record 1 (query_id 9): 'category_name'")):
        load_stabletoolbench(f)


@pytest.mark.parametrize("literal", ["{[1]: 2}", "{{1}}", "{'a': {['x']: 1}}"])
def test_api_bank_unhashable_literal_names_the_line(tmp_path, literal):
    src = _need_shared() / "api_bank" / "api-bank"
    header = (src / "data" / "all_apis.csv").read_text(encoding="utf-8").splitlines()[0]
    apis = tmp_path / "data" / "all_apis.csv"
    apis.parent.mkdir()
    info = f'description = "d"\ninput_parameters = {literal}'
    with open(apis, "w", encoding="utf-8", newline="") as f:
        f.write(header + "\n")
        csv.writer(f).writerow(["1", "t", "工作相关", "n", "p", "x.py", "Bad", "()", "Bad()", info])
    dialogue = src / "lv1-lv2-samples" / "level-1-given-desc" / "AddAgenda-level-1-1.jsonl"
    # line 3: a CSV row is named by the line where it ends, and this api_info spans two lines
    with pytest.raises(DatasetFormatError, match=re.escape(f"{apis}:3: api_info is not a literal (TypeError")):
        load_api_bank(dialogue, apis)


def test_api_bank_deeply_nested_api_info_is_refused_before_parsing(tmp_path):
    src = _need_shared() / "api_bank" / "api-bank"
    header = (src / "data" / "all_apis.csv").read_text(encoding="utf-8").splitlines()[0]
    apis = tmp_path / "all_apis.csv"
    apis.write_text(header + "\n" + '1,t,工作相关,n,p,x.py,Bad,"()","Bad()","x = ' + "(" * 50_000 + '"\n', encoding="utf-8")
    dialogue = src / "lv1-lv2-samples" / "level-1-given-desc" / "AddAgenda-level-1-1.jsonl"
    with pytest.raises(DatasetFormatError, match=re.escape(f"{apis}:2: api_info has more than")):
        load_api_bank(dialogue, apis)


@pytest.mark.parametrize("domain", ["Travel", [1], [["Travel"]]])
def test_ultratool_domain_that_is_not_a_list_of_strings_names_the_node(tmp_path, domain):
    tools = tmp_path / "tool_desc.json"
    tools.write_text(json.dumps({"nodes": [{"id": "a", "desc": "d", "domain": ["X"]}, {"id": "b", "desc": "d", "domain": domain}]}))
    data = _write_jsonl(tmp_path / "data.jsonl", [{"id": 1, "user_request": "q", "task_nodes": [{"task": "a"}], "task_steps": []}])
    with pytest.raises(DatasetFormatError, match=re.escape(f"{tools}: node 2: 'domain' should be a list of strings")):
        load_ultratool(data, tools)


def test_task_with_empty_gold_is_refused_naming_the_line(tmp_path):
    with pytest.raises(ValueError, match="gold is empty"):
        Task(id="t", query="q", gold=frozenset())
    tasks = _write_jsonl(tmp_path / "t.jsonl", [{"id": "1", "query": "q", "gold": ["a"]}, {"id": "2", "query": "q", "gold": []}])
    with pytest.raises(DatasetFormatError, match=re.escape(f"{tasks}:2: bad task") + ".*gold is empty"):
        load_corpus_and_tasks(_mini_corpus(tmp_path), tasks)


@pytest.mark.parametrize("query", [None, 42, ["q"], "   "])
def test_task_query_that_is_not_text_is_refused_naming_the_line(tmp_path, query):
    with pytest.raises(ValueError, match="query"):
        Task(id="t", query=query, gold=frozenset({"a"}))
    tasks = _write_jsonl(tmp_path / "t.jsonl", [{"id": "1", "query": query, "gold": ["a"]}])
    with pytest.raises(DatasetFormatError, match=re.escape(f"{tasks}:1: bad task") + ".*query"):
        load_corpus_and_tasks(_mini_corpus(tmp_path), tasks)


def test_duplicate_task_ids_name_both_lines(tmp_path):
    tasks = _write_jsonl(tmp_path / "t.jsonl", [{"id": "1", "query": "q", "gold": ["a"]}, {"id": "2", "query": "q", "gold": ["a"]},
                                                {"id": "1", "query": "other", "gold": ["a"]}])
    with pytest.raises(DatasetFormatError, match=re.escape(f"{tasks}:3: duplicate task id '1' (first at {tasks}:1)")):
        load_corpus_and_tasks(_mini_corpus(tmp_path), tasks)


def test_metatool_swapped_columns_are_a_clear_error(tmp_path):
    root = _need_shared() / "metatool" / "dataset"
    swapped = tmp_path / "swapped.csv"
    swapped.write_text("Query,Tool\ntimeport,What time is it in Tokyo?\ncopilot,Write me a poem\n", encoding="utf-8")
    with pytest.raises(DatasetFormatError, match=re.escape(f"{swapped}:2: the Query and Tool columns look swapped")):
        load_metatool(swapped, root / "plugin_des.json")
    headerless = tmp_path / "headerless.csv"
    headerless.write_text("What time is it in Tokyo?,timeport\n", encoding="utf-8")
    with pytest.raises(DatasetFormatError, match=re.escape(f"{headerless}:1: header should name the columns Query and Tool")):
        load_metatool(headerless, root / "plugin_des.json")
    reordered = tmp_path / "reordered.csv"  # the columns in the other order, header and all: fine
    reordered.write_text("Tool,Query\ntimeport,What time is it in Tokyo?\n", encoding="utf-8")
    assert [(t.query, t.gold) for t in load_metatool(reordered, root / "plugin_des.json").tasks] == [
        ("What time is it in Tokyo?", frozenset({"timeport"}))]


def test_every_loader_returns_a_dataset(bundled):
    root = _need_shared()
    for name, spec in __import__("toolgym.data.loaders", fromlist=["DATASETS"]).DATASETS.items():
        d = spec.source(root)
        assert isinstance(d, Dataset) and d.tasks and len(d.corpus), name


def test_retrieval_never_imports_data():
    """data imports retrieval (Tool, ToolCorpus); the reverse would be a cycle."""
    import ast

    root = Path(__file__).resolve().parent.parent / "retrieval"
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            assert not any(n.startswith("toolgym.data") for n in names), path


def test_corpus_save_jsonl_reads_back_with_load_corpus(tmp_path):
    from toolgym.data import load_corpus

    corpus = ToolCorpus([Tool("a", "A", "does a", "X", {"type": "object"}), Tool("b", "B", "does b")], name="mini")
    corpus.save_jsonl(tmp_path / "tools.jsonl")
    back = load_corpus(tmp_path / "tools.jsonl")
    assert back.name == "tools" and [t.to_dict() for t in back] == [t.to_dict() for t in corpus]
