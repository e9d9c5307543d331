"""Hostile rollout files for ``toolgym replay``: the file's gold decides every reward, so a forged
gold, a made-up task or made-up result ids must not be scored when a dataset is given, and the
output must say when the file's gold is simply trusted. Each case fails on the code before the
fix (issue 21)."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from toolgym.data import load_dataset
from toolgym.data.records import SearchEvent, Trajectory, write_rollouts
from toolgym.cli.main import main


@pytest.fixture(scope="module")
def seal():
    return load_dataset("seal_tools")


def _task(seal):
    return next(t for t in seal.tasks if len(t.gold) == 2)


def _filler(seal, task, n=4):
    return [t.id for t in seal.corpus if t.id not in task.gold][:n]


def _group(seal, task, gold_shown=None):
    """Two rollouts: both see and submit one of the two gold tools (F1 2/3 each against the real gold)."""
    first = sorted(task.gold)[0]
    results = [first] + _filler(seal, task)
    trajs = [Trajectory(task_id=task.id, events=[SearchEvent(0, "q", None, results)], selection=[first],
                        terminated_by="submit", num_turns=2) for _ in range(2)]
    return (replace(task, gold=frozenset(gold_shown)) if gold_shown else task), trajs


def _replay(tmp_path, groups, *extra, scheme="grpo_f1"):
    path = tmp_path / "rollouts.jsonl"
    write_rollouts(path, groups)
    out = tmp_path / "report"
    rc = main(["replay", str(path), "--scheme", scheme, "--out", str(out), *extra])
    report = json.loads((out / "replay.json").read_text()) if (out / "replay.json").exists() else None
    return rc, report


def test_forged_gold_is_refused_with_a_dataset_and_said_on_stdout(seal, tmp_path, capsys):
    task = _task(seal)
    honest = _group(seal, task)
    forged = _group(seal, task, gold_shown={sorted(task.gold)[0]})  # the one tool they found: F1 1.0
    rc, report = _replay(tmp_path, [honest, forged], "--dataset", "seal_tools")
    assert rc == 0
    assert report["schemes"]["grpo_f1"]["reward_mean"] == pytest.approx(2 / 3)  # was 5/6: the forged group scored 1
    assert report["groups"] == 1 and list(report["groups_refused"]) == ["2"]
    out = capsys.readouterr().out
    assert "refused group 2" in out and "gold" in out and "1 refused" in out


def test_forged_gold_cannot_raise_toolsearcher_either(seal, tmp_path, capsys):
    task = _task(seal)
    rc, _ = _replay(tmp_path, [_group(seal, task, gold_shown={sorted(task.gold)[0]})], "--dataset", "seal_tools",
                    scheme="toolsearcher")
    assert rc == 2  # every group refused: one line, no report
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "refused" in err and "gold" in err


def test_unknown_task_and_unknown_result_ids_are_refused(seal, tmp_path, capsys):
    task = _task(seal)
    made_up = replace(_group(seal, task)[0], id="no-such-task")
    ghost_results = _group(seal, task)
    ghost_results[1][0].events[0].results.append("tool_that_does_not_exist")
    rc, report = _replay(tmp_path, [_group(seal, task), (made_up, _group(seal, task)[1]), ghost_results],
                         "--dataset", "seal_tools")
    assert rc == 0 and report["groups"] == 1
    reasons = report["groups_refused"]
    assert "not a task of dataset 'seal_tools'" in reasons["2"] and "not in corpus" in reasons["3"]
    out = capsys.readouterr().out
    assert "refused group 2" in out and "refused group 3" in out


def test_trajectories_of_another_task_are_refused(seal, tmp_path):
    task = _task(seal)
    task_b, trajs = _group(seal, task)
    trajs[0] = replace(trajs[0], task_id=seal.tasks[0].id if seal.tasks[0].id != task.id else seal.tasks[1].id)
    rc, report = _replay(tmp_path, [_group(seal, task), (task_b, trajs)], "--dataset", "seal_tools")
    assert rc == 0 and "another task" in report["groups_refused"]["2"]


def test_without_a_dataset_the_output_says_gold_is_trusted(seal, tmp_path, capsys):
    task = _task(seal)
    rc, report = _replay(tmp_path, [_group(seal, task, gold_shown={sorted(task.gold)[0]})])
    assert rc == 0 and report["gold_trusted"] is True
    out = capsys.readouterr().out
    assert "trusted" in out and "--dataset" in out
    assert "trusted" in (tmp_path / "report" / "replay.md").read_text()


def test_skipped_groups_are_said_on_stdout(tmp_path, capsys):
    """A scheme that cannot score a group (magicselector's preference term needs reference
    subtasks; an env_return scheme needs env_reward) used to say so only in replay.json."""
    from toolgym.data.records import Task

    task = Task(id="t", query="zip files", gold=frozenset({"zip"}))
    trajs = [Trajectory(task_id="t", events=[SearchEvent(0, "q", None, ["zip"])], selection=["zip"],
                        terminated_by="submit", num_turns=2) for _ in range(2)]
    cfg = tmp_path / "env.yaml"
    cfg.write_text("reward:\n  modules:\n    - {module: env_return, weight: 1.0}\n")
    rc, _ = _replay(tmp_path, [(task, trajs)], scheme=str(cfg))
    assert rc == 1  # the scheme scored nothing
    out = capsys.readouterr().out
    assert "skipped 1 of 1 groups" in out and "env_reward" in out


def test_reward_config_files_get_the_config_caps(tmp_path):
    """A --scheme YAML is read like every toolgym config: size, aliases and nesting are capped first."""
    from toolgym.data.readers import MAX_CONFIG_BYTES, MAX_CONFIG_REFERENCES
    from toolgym.evaluation.replay import build_scheme

    bombs = {
        "huge.yaml": ("# " + "x" * MAX_CONFIG_BYTES + "\n", "larger than"),
        "aliases.yaml": ("a: &a [1]\n" + "".join(f"b{i}: *a\n" for i in range(MAX_CONFIG_REFERENCES + 1)), "aliases"),
        "deep.yaml": ("reward: " + "[" * 40 + "]" * 40 + "\n", "nests deeper"),
    }
    for name, (text, message) in bombs.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(ValueError, match=message):
            build_scheme(str(tmp_path / name))
