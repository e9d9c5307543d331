"""benchmarks/credit_schemes.py: pooled gains, cached runs, the first results format, the table."""
import argparse
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import credit_schemes  # noqa: E402


def _rows(rewards):
    return [{"task_id": f"t{i}", "reward": r} for i, r in enumerate(rewards)]


def _run(scheme, seed, steps_rewards, zero_var=0.5):
    points = [{"step": 3 * i, "mean": {"reward": sum(r) / len(r), "invalid_rate": 0.0, "search_turns": 1.0},
               "rows": _rows(r)} for i, r in enumerate(steps_rewards)]
    return {"env": "toolsearch", "scheme": scheme, "seed": seed, "points": points, "zero_variance_share": zero_var,
            "gain": {"gain": 0.0, "se": 0.0}}


def _args(tmp_path, **kw):
    base = dict(warm_start="W", steps=6, eval_every=3, eval_tasks=3, eval_batch=20, tasks_per_step=2, group_size=8,
                overrides=["grpo.lr=1e-3"], out=str(tmp_path), no_progress=True)
    return argparse.Namespace(**{**base, **kw})


def test_pooled_gain_averages_the_seeds_per_task_before_pairing():
    # warm [0, .5, 1]; seeds' finals [1, .5, 1] and [0, 1, 1] -> per-task mean [.5, .75, 1]
    # d = [.5, .25, 0]: gain .25, se = std([.5, .25, 0], ddof=1) / sqrt(3) = .25 / sqrt(3)
    runs = [_run("s", 0, [[0, .5, 1], [1, .5, 1]]), _run("s", 1, [[0, .5, 1], [0, 1, 1]])]
    got = credit_schemes.pooled_gain(runs)
    assert got["gain"] == pytest.approx(0.25) and got["se"] == pytest.approx(0.25 / math.sqrt(3))
    runs[1]["points"][-1]["rows"] = runs[1]["points"][-1]["rows"][::-1]
    with pytest.raises(ValueError, match="tasks"):
        credit_schemes.pooled_gain(runs)


def test_a_finished_run_is_reused_and_a_run_dir_of_other_settings_is_refused(tmp_path):
    args = _args(tmp_path)
    run_dir = tmp_path / "toolsearch" / "grpo_f1_seed0"
    run_dir.mkdir(parents=True)
    settings = {**credit_schemes.env_settings("toolsearch", args), "scheme": "grpo_f1", "seed": 0}
    done = {"settings": settings, "points": [], "marker": "cached"}
    (run_dir / "run.json").write_text(json.dumps(done))
    assert credit_schemes.run_scheme("toolsearch", "grpo_f1", 0, args, warm={})["marker"] == "cached"
    with pytest.raises(SystemExit, match="other settings"):  # same dir, one more step: not silently mixed
        credit_schemes.run_scheme("toolsearch", "grpo_f1", 0, _args(tmp_path, steps=7), warm={})


def test_results_of_the_first_format_keep_their_env_and_settings(tmp_path, monkeypatch):
    old = {"date": "2026-11-30T15:39:57+00:00", "args": {
        "warm_start": "W", "steps": 3, "eval_every": 3, "eval_tasks": 20, "tasks_per_step": 4, "group_size": 8,
        "overrides": ["sampling.temperature=1.2"], "decompose_env": "toolgym/Decompose-Dialogue-v0"},
        "runs": {"decompose": [_run("counterfactual", 0, [[0, 1], [1, 1]])]}}
    (tmp_path / "credit_schemes.json").write_text(json.dumps(old))
    monkeypatch.setattr(credit_schemes, "RESULTS", tmp_path)
    got = credit_schemes.previous_results()
    assert got["decompose"]["settings"]["env_id"] == "toolgym/Decompose-Dialogue-v0"
    assert got["decompose"]["settings"]["steps"] == 3 and got["decompose"]["settings"]["eval_batch"] is None
    body = credit_schemes.report_body(got)
    assert "**toolgym/Decompose-Dialogue-v0** (2026-11-30)" in body and "4 tasks × 8 rollouts" in body


def test_the_table_gives_the_mean_over_seeds_at_every_evaluation(tmp_path):
    runs = [_run("esm_only", 0, [[0, 0], [0, 1], [1, 1]], zero_var=0.25),
            _run("esm_only", 1, [[0, 0], [0, 0], [0, 1]], zero_var=0.75)]
    envs = {"toolsearch": {"settings": credit_schemes.env_settings("toolsearch", _args(tmp_path)),
                           "date": "2026-12-01T00:00:00+00:00", "runs": runs}}
    row = next(line for line in credit_schemes.report_body(envs).splitlines() if "| esm_only |" in line)
    assert "0.000 → 0.250 → 0.750" in row  # step means over seeds: (0+0)/2, (.5+0)/2, (1+.5)/2
    assert "+0.750 ± 0.250" in row  # pooled: per task [.5, 1] - [0, 0]
    assert row.rstrip(" |").endswith("0.50")  # zero-variance share, mean over seeds
