"""Hostile run folders: what a careless user (or a bad disk) leaves in ``run_dir`` before
``toolgym train`` / ``--resume``.

Metrics of two runs mixed in one file, a ``state.json`` whose step is negative, absurd or not its
folder's, metrics lines without a usable step, repeated or missing steps, a checkpoint without
its weights. Each case fails on the code before the fix (issue 21). One real tiny run (tiny-llama,
two steps, two checkpoints kept: conftest.trained_tiny_run) is trained once and copied into each test."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from toolgym.trainers import checkpoint as ckpt
from toolgym.trainers import metrics as run_metrics
from toolgym.cli.main import main
from conftest import one_error_line, tiny_run_config


def _steps(run_dir: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _one_line(capsys, *fragments: str) -> str:
    return one_error_line(capsys.readouterr().err, *fragments)


# -- a fresh run never appends to another run's metrics --------------------------------------
def test_fresh_run_into_a_folder_with_metrics_but_no_checkpoint_is_refused(tiny_run, capsys):
    run_dir, config = tiny_run
    shutil.rmtree(run_dir / "checkpoints")
    before = (run_dir / "metrics.jsonl").read_text()
    assert main(["train", config, "--no-progress"]) == 2  # it used to append: steps [0, 1, 0, 1]
    _one_line(capsys, "metrics.jsonl", "--resume")
    assert (run_dir / "metrics.jsonl").read_text() == before


def test_resume_without_checkpoint_is_the_explicit_fresh_start(tiny_run, capsys):
    run_dir, config = tiny_run
    shutil.rmtree(run_dir / "checkpoints")
    assert main(["train", config, "--resume", "train.steps=1", "--no-progress"]) == 0
    assert "starting from step 0" in capsys.readouterr().out
    assert _steps(run_dir) == [0]


# -- state.json checked against its folder, train.steps and metrics before anything is touched
@pytest.mark.parametrize("step, fragment", [(-1, "negative"), (10**30, "folder"), (1, "folder"), (True, "integer")])
def test_bad_state_step_is_refused_before_metrics_are_touched(tiny_run, capsys, step, fragment):
    run_dir, config = tiny_run
    state_path = run_dir / "checkpoints" / "step_000002" / ckpt.STATE_FILE
    state = json.loads(state_path.read_text())
    state_path.write_text(json.dumps({**state, "step": step}))
    before = (run_dir / "metrics.jsonl").read_text()
    assert main(["train", config, "--resume", "train.steps=4", "--no-progress"]) == 2
    _one_line(capsys, "state.json", fragment)
    assert (run_dir / "metrics.jsonl").read_text() == before  # a negative step used to empty it


def test_checkpoint_past_train_steps_is_refused_not_a_silent_no_op(tiny_run, capsys):
    run_dir, config = tiny_run
    assert main(["train", config, "--resume", "train.steps=1", "--no-progress"]) == 2
    _one_line(capsys, "step 2", "train.steps=1")
    assert _steps(run_dir) == [0, 1]


# -- metrics lines that cannot be placed: said, the good lines kept --------------------------
def test_metrics_lines_without_a_usable_step_repeats_and_gaps_are_reported(tiny_run, capsys):
    run_dir, config = tiny_run
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    bad = [json.dumps({**first, "step": "zero"}), json.dumps({"reward": 1.0}), lines[0]]  # no int step, no step, repeat
    (run_dir / "metrics.jsonl").write_text("\n".join([lines[0], *bad]) + "\n")  # step 1 missing: a gap
    assert main(["train", config, "--resume", "train.steps=3", "--no-progress"]) == 0  # used to be a TypeError traceback
    err = capsys.readouterr().err
    assert "without a non-negative integer 'step'" in err and "repeated step" in err and "no line for 1 step" in err
    assert "Traceback" not in err
    assert _steps(run_dir) == [0, 2]  # the good line kept, step 2 trained; step 1 stays a hole


def test_plan_metrics_is_linear_and_says_what_it_found(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [{"step": 0}, {"step": "1"}, {"step": 0}, {"step": 3}, {"step": 7}, {}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    plan = run_metrics.plan_metrics(path, 5)
    assert [r["step"] for r in plan.kept] == [0, 3]
    assert len(plan.notes) == 4 and path.read_text() == "".join(json.dumps(r) + "\n" for r in rows)  # untouched


# -- a checkpoint without its weights falls back to the previous intact one ------------------
def test_missing_trainable_pt_falls_back_to_the_previous_checkpoint(tiny_run, capsys):
    run_dir, config = tiny_run
    (run_dir / "checkpoints" / "step_000002" / ckpt.WEIGHTS_FILE).unlink()
    assert main(["train", config, "--resume", "train.steps=2", "--no-progress"]) == 0  # used to be a raw errno
    captured = capsys.readouterr()
    assert "step_000002" in captured.err and "skipped" in captured.err
    assert "at step 1" in captured.out
    assert _steps(run_dir) == [0, 1]  # step 1 redone once, not repeated
    assert ckpt.read_state(ckpt.latest_checkpoint(run_dir))["step"] == 2


def test_missing_trainable_pt_with_nothing_to_fall_back_to_is_one_line(tiny_run, capsys):
    run_dir, config = tiny_run
    shutil.rmtree(run_dir / "checkpoints" / "step_000001")
    (run_dir / "checkpoints" / "step_000002" / ckpt.WEIGHTS_FILE).unlink()
    before = (run_dir / "metrics.jsonl").read_text()
    assert main(["train", config, "--resume", "--no-progress"]) == 2
    _one_line(capsys, "trainable.pt", "no earlier complete checkpoint")
    assert (run_dir / "metrics.jsonl").read_text() == before


def test_checkpoints_sort_by_step_number_not_by_name(tmp_path):
    root = tmp_path / "checkpoints"
    for step in (999_999, 1_000_000):
        folder = root / f"step_{step:06d}"
        folder.mkdir(parents=True)
        (folder / ckpt.STATE_FILE).write_text(json.dumps({"step": step}))
        (folder / ckpt.WEIGHTS_FILE).write_bytes(b"")
    assert ckpt.latest_checkpoint(tmp_path).name == "step_1000000"
