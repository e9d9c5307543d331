"""Bad input through ``toolgym.cli.main.main``: exit status 2, one line on stderr, nothing
lost; real bugs keep their traceback. Also: ``toolgym eval --tasks/--corpus`` with an agent or
a policy runs on the user's own data."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolgym.data.records import Task, read_rollouts
from toolgym.retrieval.corpus import Tool
from toolgym.trainers import checkpoint as ckpt
from toolgym.data import atomic
from toolgym.trainers import metrics as run_metrics
from toolgym.cli.main import is_user_error, main

TOOLS = [
    Tool("weather_now", "weather_now", "Current weather, temperature and wind for a city."),
    Tool("flight_search", "flight_search", "Search flights between two airports on a date."),
    Tool("currency_convert", "currency_convert", "Convert an amount of money between two currencies."),
    Tool("hotel_booking", "hotel_booking", "Book a hotel room in a city for given nights."),
    Tool("translate_text", "translate_text", "Translate text from one language into another."),
]
TASKS = [
    Task("u1", "What is the weather in Oslo and how much is 100 euros in dollars?",
         frozenset({"weather_now", "currency_convert"})),
    Task("u2", "Find me a flight from Paris to Rome and book a hotel there.",
         frozenset({"flight_search", "hotel_booking"})),
    Task("u3", "Translate this sentence into German.", frozenset({"translate_text"})),
]


def _jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture
def user_data(tmp_path):
    corpus = _jsonl(tmp_path / "tools.jsonl", [t.to_dict() for t in TOOLS])
    tasks = _jsonl(tmp_path / "tasks.jsonl", [t.to_dict() for t in TASKS])
    return str(corpus), str(tasks)


def _fails_with_one_line(argv: list[str], capsys, *fragments: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("toolgym") and ": error: " in lines[0] and "Traceback" not in err
    for fragment in fragments:
        assert fragment.lower() in lines[0].lower(), lines[0]
    return lines[0]


# -- outputs checked before any work -------------------------------------------------------
def test_json_output_that_is_a_folder_or_under_a_file(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("keep me")
    _fails_with_one_line(["eval", "--dataset", "seal_tools", "--json", str(tmp_path)], capsys, "--json", "is a folder")
    _fails_with_one_line(["eval", "--dataset", "seal_tools", "--json", str(blocker / "m.json")], capsys,
                         "--json", "is a file, not a folder")
    assert blocker.read_text() == "keep me"


def test_save_rollouts_that_is_a_folder_or_under_a_file(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    base = ["eval", "--env", "toolgym/ToolSearch-v0", "--agent", "raw", "--save-rollouts"]
    _fails_with_one_line(base + [str(tmp_path)], capsys, "--save-rollouts", "is a folder")
    _fails_with_one_line(base + [str(blocker / "r.jsonl")], capsys, "--save-rollouts", "is a file")


def test_replay_out_that_is_a_file_or_under_a_file(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    rollouts = tmp_path / "r.jsonl"
    rollouts.write_text("")
    base = ["replay", str(rollouts), "--scheme", "grpo_f1", "--out"]
    _fails_with_one_line(base + [str(blocker)], capsys, "--out", "is a file")
    _fails_with_one_line(base + [str(blocker / "report")], capsys, "--out", "is a file, not a folder")


def _train_config(tmp_path: Path, run_dir: Path, **grpo) -> str:
    import yaml

    cfg = {"run_dir": str(run_dir), "model": {"name": "tiny-llama"},
           "env": {"id": "toolgym/ToolSearch-v0", "kwargs": {"max_turns": 2}},
           "sampling": {"max_new_tokens": 6}, "grpo": {"lr": 1.0e-3, **grpo}, "reward": {"name": "toolsearcher"},
           "train": {"steps": 1, "tasks_per_step": 1, "group_size": 2, "checkpoint_every": 1,
                     "skip_zero_advantage": False},
           "eval": {"before": False, "after": False, "num_tasks": 2, "batch_size": 2}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_train_run_dir_that_is_a_file_or_under_a_file(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("keep me")
    _fails_with_one_line(["train", _train_config(tmp_path, blocker)], capsys, "run_dir", "is a file")
    _fails_with_one_line(["train", _train_config(tmp_path, blocker / "run")], capsys, "run_dir", "is a file, not a folder")
    assert blocker.read_text() == "keep me"


# -- bad arguments -------------------------------------------------------------------------
@pytest.mark.parametrize("env_id, fragment", [
    ("toolgym/Nope-v0", "unknown env id"),
    ("toolgym/ToolSearch-v9", "did you mean 'toolgym/ToolSearch-v0'"),
    ("a/b/c", "unknown env id"),  # malformed: gymnasium raises its own error type
    ("", "unknown env id"),
    ("CartPole-v1", "unknown env id"),  # a gymnasium id, but not a toolgym environment
])
def test_unknown_or_malformed_env_id(env_id, fragment, capsys):
    _fails_with_one_line(["eval", "--env", env_id, "--agent", "raw"], capsys, fragment)


@pytest.mark.parametrize("argv, fragments", [
    (["eval", "--env", "toolgym/ToolSearch-v0", "--agent", "raw", "--seed", "-1"], ["--seed", ">= 0"]),
    (["eval", "--dataset", "seal_tools", "--limit", "-1"], ["--limit", "positive"]),
    (["eval", "--dataset", "seal_tools", "--limit", "0"], ["--limit", "positive"]),
    (["eval", "--env", "toolgym/ToolSearch-v0", "--policy", "tiny-llama", "--limit", "-1"], ["--limit", "positive"]),
    (["eval", "--dataset", "seal_tools", "--limit", "ten"], ["--limit", "integer"]),
    (["eval", "--env", "toolgym/ToolSearch-v0", "--agent", "raw", "--group-size", "0"], ["--group-size"]),
    (["eval", "--dataset", "seal_tools", "--candidates", "-5"], ["--candidates"]),
    (["eval", "--dataset", "seal_tools", "--no-such-flag"], ["unrecognized arguments"]),
    (["nope"], ["unknown command"]),
    (["eval", "--env", "toolgym/ToolSearch-v0", "--policy", "no/such/checkpoint"], ["--policy", "no such checkpoint"]),
    (["eval", "--env", "toolgym/ToolSearch-v0", "--policy", "tiny-llama", "--save-rollouts", "r.jsonl"],
     ["unrecognized arguments", "--save-rollouts"]),  # only `eval agent` saves rollouts
    (["eval", "--dataset", "seal_tools", "--save-rollouts", "r.jsonl"], ["unrecognized arguments", "--save-rollouts"]),
])
def test_bad_arguments_are_one_line(argv, fragments, capsys):
    _fails_with_one_line(argv, capsys, *fragments)


def test_duplicate_task_ids_are_rejected_naming_the_id(tmp_path, user_data, capsys):
    corpus, _ = user_data
    dup = _jsonl(tmp_path / "dup.jsonl", [TASKS[0].to_dict(), TASKS[1].to_dict(), TASKS[0].to_dict()])
    for mode in ([], ["--env", "toolgym/ToolSearch-v0", "--agent", "raw"]):
        _fails_with_one_line(["eval", "--tasks", str(dup), "--corpus", corpus, *mode], capsys,
                             "duplicate task id 'u1'", "dup.jsonl")


def test_user_tasks_need_their_corpus_in_episode_mode(user_data, capsys):
    _, tasks = user_data
    _fails_with_one_line(["eval", "--tasks", tasks, "--env", "toolgym/ToolSearch-v0", "--agent", "raw"], capsys,
                         "--corpus")


def test_train_with_a_missing_model_path_is_one_line(tmp_path, capsys):
    config = _train_config(tmp_path, tmp_path / "run")
    _fails_with_one_line(["train", config, "model.name=/no/such/model", "--no-progress"], capsys, "/no/such/model")


# -- resume --------------------------------------------------------------------------------
def _fake_checkpoint(run_dir: Path, config_path: str, step: int = 1) -> Path:
    """A checkpoint folder whose state.json holds the config that ``config_path`` merges to."""
    from toolgym.trainers.config import config_dict, load_train_config

    folder = run_dir / "checkpoints" / f"step_{step:06d}"
    folder.mkdir(parents=True)
    atomic.write_json(folder / ckpt.STATE_FILE, {"config": config_dict(load_train_config(config_path)), "step": step})
    import torch

    torch.save({}, folder / ckpt.WEIGHTS_FILE)  # a complete checkpoint has its weights file
    return folder


def test_resume_with_another_lora_rank_says_what_differs(tmp_path, capsys):
    run = tmp_path / "run"
    _fake_checkpoint(run, _train_config(tmp_path, run, lora={"r": 16, "alpha": 32}))
    line = _fails_with_one_line(["train", str(tmp_path / "c.yaml"), "--resume", "grpo.lora.r=8", "--no-progress"],
                                capsys, "cannot resume", "grpo.lora.r: 16 in the checkpoint, 8 now")
    assert "size mismatch" not in line


def test_resume_with_a_truncated_eval_json_names_the_file(tmp_path, capsys):
    run = tmp_path / "run"
    _fake_checkpoint(run, _train_config(tmp_path, run))
    (run / "eval.json").write_text('{"before": {"reward": 0.1')
    _fails_with_one_line(["train", str(tmp_path / "c.yaml"), "--resume", "--no-progress"], capsys,
                         "eval.json: not valid JSON")
    assert (run / "eval.json").read_text() == '{"before": {"reward": 0.1'  # nothing lost


@pytest.mark.slow
def test_resume_refuses_a_crafted_optimizer_and_survives_a_half_written_metrics_line(tmp_path, capsys):
    """End to end on a real (tiny) checkpoint: the crafted optimizer.pt is refused before it runs;
    with the real one back, a half-written last metrics line is dropped and the run resumes."""
    import torch

    run = tmp_path / "run"
    config = _train_config(tmp_path, run, lora={"r": 2, "alpha": 4})
    assert main(["train", config, "--no-progress"]) == 0
    folder = ckpt.latest_checkpoint(run)
    real = (folder / ckpt.OPTIMIZER_FILE).read_bytes()
    marker = tmp_path / "pwned"

    class WritesAFile:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    torch.save({"state": WritesAFile(), "param_groups": []}, folder / ckpt.OPTIMIZER_FILE)
    capsys.readouterr()
    _fails_with_one_line(["train", config, "--resume", "train.steps=2", "--no-progress"], capsys,
                         "optimizer.pt: refused to load")
    assert not marker.exists()

    (folder / ckpt.OPTIMIZER_FILE).write_bytes(real)
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 1, "rew')  # a kill mid-write
    assert main(["train", config, "--resume", "train.steps=2", "--no-progress"]) == 0
    assert [r["step"] for r in run_metrics.read_metrics(run / "metrics.jsonl")] == [0, 1]
    assert (run / "metrics.jsonl").read_text().endswith("}\n")


# -- the error rule ------------------------------------------------------------------------
def test_user_errors_versus_bugs(monkeypatch, capsys):
    import gymnasium
    import yaml
    from omegaconf.errors import ConfigKeyError

    from toolgym.envs.registry import UnknownEnvIdError
    from toolgym.trainers.config import UnknownConfigKeyError

    for exc in (ValueError("x"), FileNotFoundError("x"), IsADirectoryError("x"), UnknownEnvIdError("x"),
                UnknownConfigKeyError("x"), json.JSONDecodeError("x", "", 0), gymnasium.error.NameNotFound("x"),
                ConfigKeyError("x"), yaml.YAMLError("x")):
        assert is_user_error(exc), exc
    # a bare KeyError is a bug in toolgym: user-given names are looked up with a ValueError on failure
    for exc in (KeyError("x"), TypeError("x"), AttributeError("x"), IndexError("x"), RuntimeError("x"),
                ZeroDivisionError()):
        assert not is_user_error(exc), exc

    import toolgym.cli.envs as envs_cmd

    def buggy(args):
        raise TypeError("a bug: keep the traceback")

    monkeypatch.setattr(envs_cmd, "run", buggy)
    with pytest.raises(TypeError, match="a bug"):
        main(["envs"])

    def bad_input(args):
        raise gymnasium.error.Error("multi\nline\nmessage")

    monkeypatch.setattr(envs_cmd, "run", bad_input)
    assert _fails_with_one_line(["envs"], capsys) == "toolgym envs: error: multi line message"
    monkeypatch.setenv("TOOLGYM_DEBUG", "1")
    with pytest.raises(gymnasium.error.Error):
        main(["envs"])


# -- the user's own data in agent and policy mode ------------------------------------------
def test_agent_runs_on_the_users_own_tasks_and_corpus(tmp_path, user_data, capsys):
    corpus, tasks = user_data
    rollouts, out = tmp_path / "r.jsonl", tmp_path / "m.json"
    argv = ["eval", "--env", "toolgym/ToolSearch-v0", "--tasks", tasks, "--corpus", corpus,
            "--save-rollouts", str(rollouts), "--json", str(out)]
    assert main(argv + ["--agent", "oracle"]) == 0
    metrics = json.loads(out.read_text())
    assert metrics["tasks"] == 3 and metrics["F1"] == pytest.approx(100.0)
    assert [task.id for task, _ in read_rollouts(rollouts)] == ["u1", "u2", "u3"]
    assert "user:tasks.jsonl" in capsys.readouterr().out

    assert main(argv + ["--agent", "raw", "--limit", "2"]) == 0
    groups = read_rollouts(rollouts)
    assert [task.id for task, _ in groups] == ["u1", "u2"]
    ours = {t.id for t in TOOLS}
    seen = {tid for _, trajs in groups for t in trajs for tid in t.seen}
    assert seen and seen <= ours  # it searched the user's corpus, not Seal-Tools


@pytest.mark.slow
def test_policy_runs_on_the_users_own_tasks_and_corpus(tmp_path, user_data):
    corpus, tasks = user_data
    out = tmp_path / "nested" / "p.json"
    # Decompose episodes are one turn (a multi-turn tool search at 128 tokens a turn takes minutes on CPU)
    assert main(["eval", "--env", "toolgym/Decompose-v0", "--policy", "tiny-llama", "--tasks", tasks,
                 "--corpus", corpus, "--json", str(out)]) == 0
    metrics = json.loads(out.read_text())
    assert metrics["n"] == 2 and metrics["env_id"] == "toolgym/Decompose-v0"  # u1, u2: the two multi-tool tasks


def test_a_closed_pipe_ends_the_command_quietly():
    """`toolgym envs | head -1`: no error line once the reader has gone."""
    import subprocess
    import sys

    run = subprocess.run(f"{sys.executable} -m toolgym.cli.main envs | head -c 1", shell=True, capture_output=True,
                         text=True, timeout=120)
    assert "Broken pipe" not in run.stderr and "error" not in run.stderr, run.stderr


def test_a_broken_pipe_that_is_not_stdout_is_an_error_not_a_silent_exit_0(monkeypatch):
    """A BrokenPipeError from elsewhere (a worker's pipe, a socket) once ended a 34-minute `toolgym sft` with
    exit 0 and no model: only stdout's reader leaving is a quiet exit."""
    from toolgym.cli import main as cli_main

    def boom(args):
        raise BrokenPipeError("a worker's pipe")

    monkeypatch.setattr("toolgym.cli.envs.run", boom)
    with pytest.raises(BrokenPipeError):
        cli_main.main(["envs"])
