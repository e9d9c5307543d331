"""`toolgym train` prints the paired held-out gain (after − before) under its eval table."""
from __future__ import annotations

import argparse
import math

from toolgym.cli import train as train_cmd
from toolgym.evaluation.paired import paired_summary


def evals(before: dict[str, float], after: dict[str, float]) -> dict:
    def side(rows: dict[str, float]) -> dict:
        mean = sum(rows.values()) / len(rows)
        return {"reward": mean, "reward_se": 0.0, "per_task": {t: {"reward": r} for t, r in rows.items()}}

    return {"before": side(before), "after": side(after)}


def test_paired_summary_on_hand_computed_numbers():
    # d = [0.2, 0.4, 0.0, 0.2]: gain 0.2, std(ddof=1) = sqrt(0.08 / 3) = 0.16330, se = 0.08165 -> 0.2 > 2 se
    line = paired_summary(evals({"a": 0.0, "b": 0.1, "c": 0.5, "d": 0.3},
                                          {"a": 0.2, "b": 0.5, "c": 0.5, "d": 0.5}))
    se = math.sqrt(0.08 / 3) / 2
    assert f"+0.200 ± {se:.3f}" == "+0.200 ± 0.082"
    assert "paired over 4 tasks: +0.200 ± 0.082" in line and "0.225 -> 0.425" in line and "above 2 se" in line


def test_paired_summary_verdicts_and_missing_sides():
    # d = [-0.1, 0.1]: gain 0, se 0.1 -> within 2 se; d = [-0.5, -0.4, -0.6]: gain -0.5, se 0.0577 -> a loss
    assert "within 2 se" in paired_summary(evals({"a": 0.5, "b": 0.5}, {"a": 0.4, "b": 0.6}))
    assert "+0.000 ± 0.100" in paired_summary(evals({"a": 0.5, "b": 0.5}, {"a": 0.4, "b": 0.6}))
    loss = paired_summary(evals({"a": 1.0, "b": 1.0, "c": 1.0}, {"a": 0.5, "b": 0.6, "c": 0.4}))
    assert "-0.500 ± 0.058" in loss and "below -2 se" in loss
    only_before = evals({"a": 0.5}, {"a": 0.5})
    del only_before["after"]
    assert paired_summary(only_before) is None
    # only the tasks both sides scored are paired
    partial = evals({"a": 0.0, "b": 1.0, "c": 0.0}, {"a": 0.5, "c": 0.5})
    assert "paired over 2 tasks: +0.500 ± 0.000" in paired_summary(partial)


def test_train_command_prints_the_paired_line(monkeypatch, tmp_path, capsys):
    summary = {"eval": evals({"a": 0.0, "b": 0.1, "c": 0.5, "d": 0.3}, {"a": 0.2, "b": 0.5, "c": 0.5, "d": 0.5}),
               "metrics": str(tmp_path / "metrics.jsonl")}
    monkeypatch.setattr(train_cmd, "train", lambda cfg, resume, progress: summary)
    args = argparse.Namespace(config="configs/quickstart.yaml", overrides=[f"run_dir={tmp_path / 'run'}"],
                              resume=False, no_progress=True, print_config=False)
    assert train_cmd.run(args) == 0
    out = capsys.readouterr().out.splitlines()
    table_end = next(i for i, line in enumerate(out) if line.startswith("reward"))
    assert "paired over 4 tasks: +0.200 ± 0.082" in out[table_end + 1]
    assert out[-1] == f"metrics: {tmp_path / 'metrics.jsonl'}"


def test_eval_table_shows_decomposition_retrieval_when_present():
    from toolgym.evaluation.evaluate import format_eval_table

    table = format_eval_table({"before": {"reward": 0.25, "C@10": 81.25, "C@10_se": 5.0, "subtasks": 4.9375},
                               "after": {"reward": 0.25, "C@10": 87.5, "C@10_se": 4.0, "subtasks": 5.0}})
    rows = {line.split()[0]: line for line in table.splitlines()[1:]}
    assert "81.250 ± 5.000" in rows["C@10"] and "87.500 ± 4.000" in rows["C@10"]
    assert "4.938 ± 0.000" in rows["subtasks"] and "N@5" not in rows  # only the keys the evaluations have
