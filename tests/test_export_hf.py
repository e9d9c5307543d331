"""``toolgym export-hf``: a datasets-loadable folder; ``eval --tasks DIR`` reads it back; ``export-verl``
shares its row builder and refuses a ``--max-tasks`` that is not a count."""
import json

import pandas as pd
import pytest

from toolgym.cli.main import main
from toolgym.trainers.export_hf import TOOLS_HEADER, export_hf, load_export, task_rows
from toolgym.trainers.export_verl import export_rows


def test_export_folder_loads_with_datasets_and_round_trips_tasks(tmp_path):
    import datasets
    import gymnasium as gym

    counts = export_hf("toolgym/ToolSearch-v0", tmp_path, ["train", "heldout"], {"max_turns": 4}, max_tasks=3)
    assert counts == {"train": 3, "heldout": 3}
    tasks = datasets.load_dataset(str(tmp_path), "tasks", split="heldout")
    corpus = datasets.load_dataset(str(tmp_path), "corpus", split="train")
    assert len(tasks) == 3 and len(corpus) > 1000
    row = tasks[0]
    assert row["env_id"] == "toolgym/ToolSearch-v0" and json.loads(row["env_kwargs"]) == {"max_turns": 4, "split": "heldout"}
    assert [s["function"]["name"] for s in json.loads(row["tools"])] == ["search", "submit"]
    # prompt: the env's chat without the schema block (a chat template renders `tools`); env_prompt: the env's own
    assert TOOLS_HEADER in row["env_prompt"][0]["content"] and TOOLS_HEADER not in row["prompt"][0]["content"]
    assert row["env_prompt"][0]["content"].startswith(row["prompt"][0]["content"])
    assert row["prompt"][1:] == row["env_prompt"][1:]
    env = gym.make("toolgym/ToolSearch-v0", split="heldout", max_turns=4)
    _, info = env.reset(seed=0, options={"task": row["task_id"]})
    assert row["env_prompt"] == [{"role": m["role"], "content": m["content"]} for m in info["messages"]]
    assert row["gold"] == sorted(env.unwrapped.episode.task.gold)
    card = (tmp_path / "README.md").read_text()
    assert "license: apache-2.0" in card and "| `heldout` | 3 |" in card and "How the tasks were derived" in card
    loaded_corpus, loaded = load_export(tmp_path, split="heldout")
    by_id = {t.id: t for t in env.unwrapped.tasks}
    assert [t.id for t in loaded] == list(tasks["task_id"])
    assert all(t == by_id[t.id] for t in loaded)
    assert len(loaded_corpus) == len(env.unwrapped.corpus)


def test_decompose_export_has_no_tools_and_keeps_the_prompt():
    rows = task_rows("toolgym/Decompose-v0", max_tasks=2)
    assert len(rows) == 2 and all(json.loads(r["tools"]) == [] for r in rows)
    assert all(r["prompt"] == r["env_prompt"] for r in rows)


def test_eval_reads_an_export_folder(tmp_path, capsys):
    assert main(["export-hf", "toolgym/ToolSearch-v0", "--out", str(tmp_path / "x"), "--split", "heldout", "--max-tasks", "4"]) == 0
    assert "wrote 4 tasks" in capsys.readouterr().out
    assert main(["eval", "--tasks", str(tmp_path / "x"), "--json", str(tmp_path / "m.json")]) == 0
    assert json.loads((tmp_path / "m.json").read_text())["n"] == 4
    assert main(["eval", "--env", "toolgym/ToolSearch-v0", "--agent", "raw", "--tasks", str(tmp_path / "x"),
                 "--split", "heldout"]) == 0
    assert main(["eval", "--tasks", str(tmp_path / "x"), "--split", "nosuch"]) == 2
    assert "no split 'nosuch'" in capsys.readouterr().err


def test_export_verl_uses_the_same_rows():
    hf = task_rows("toolgym/ToolSearch-v0", "heldout", max_tasks=2)
    verl = export_rows("toolgym/ToolSearch-v0", "heldout", max_tasks=2)
    assert [r["prompt"] for r in verl] == [r["env_prompt"] for r in hf]
    assert [r["extra_info"]["task_id"] for r in verl] == [r["task_id"] for r in hf]
    assert [r["extra_info"]["tools"] for r in verl] == [r["tools"] for r in hf]


@pytest.mark.parametrize("command", ["export-verl", "export-hf"])
@pytest.mark.parametrize("value", ["-3", "0", "-1"])
def test_max_tasks_below_one_is_one_line_exit_2(command, value, tmp_path, capsys):
    out = tmp_path / "out"
    assert main([command, "toolgym/ToolSearch-v0", "--out", str(out), "--max-tasks", value]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"toolgym {command}: error: --max-tasks must be a positive integer, got {value}"
    assert not out.exists()  # refused before any work


def test_export_verl_max_tasks_counts(tmp_path, capsys):
    assert main(["export-verl", "toolgym/ToolSearch-v0", "--split", "heldout", "--out", str(tmp_path), "--max-tasks", "3"]) == 0
    assert len(pd.read_parquet(tmp_path / "heldout.parquet")) == 3
