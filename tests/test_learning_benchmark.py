"""benchmarks/learning.py builds valid structured train configs for every run it knows."""
from pathlib import Path

import pytest

from benchmarks import learning
from toolgym.trainers.train import as_config

ROOT = Path(__file__).resolve().parent.parent


def test_every_learning_run_config_validates(tmp_path):
    for run, (env_name, reward) in learning.RUNS.items():
        cfg = as_config(learning.grpo_config(env_name, reward, "tiny-llama", tmp_path / run, 60.0))
        assert cfg.reward.name == reward["name"] and dict(cfg.reward.options) == dict(reward.get("options") or {})
        assert cfg.env.id == learning.ENVS[env_name]["id"] and cfg.model.name == "tiny-llama"
        assert not cfg.eval.before and not cfg.eval.after and cfg.train.time_budget_s == 60.0


def test_evaluation_cache_is_reused_only_for_the_same_settings(tmp_path, monkeypatch):
    import toolgym.evaluation.paired as paired
    import toolgym.trainers.checkpoint as checkpoint

    calls, shown = [], []

    def fake_eval(policy, env_id, env_kwargs, num_tasks, batch_size, max_new_tokens, progress):
        calls.append(max_new_tokens)
        shown.append(progress)
        return {"num_tasks": num_tasks, "rows": [{"task_id": "t", "reward": 1.0}], "mean": {"reward": 1.0}}

    monkeypatch.setattr(paired, "evaluate_per_task", fake_eval)
    monkeypatch.setattr(checkpoint, "load_policy", lambda model, sampling: object())
    cache = tmp_path / "eval.json"
    learning.evaluate("m", "decompose", 1, cache)
    learning.evaluate("m", "decompose", 1, cache)
    assert calls == [128]  # same model, tasks, settings: the cache answers
    monkeypatch.setitem(learning.ENVS, "decompose", {**learning.ENVS["decompose"], "max_new_tokens": 64})
    learning.evaluate("m", "decompose", 1, cache)
    learning.evaluate("other", "decompose", 1, cache)
    assert calls == [128, 64, 64]  # another token budget, another model: evaluated again
    learning.evaluate("third", "decompose", 1, cache, progress=False)
    assert shown == [True, True, True, False]  # --no-progress reaches the evaluation's bars


def test_task_rows_keep_old_layout_and_gains_come_from_rows(tmp_path):
    import json

    old = tmp_path / "old.json"
    old.write_text(json.dumps({"decompose/base": [{"task_id": "a", "reward": 0.0}]}))
    assert learning.load_task_runs(old) == {"runs": {}, "legacy": {"decompose/base": [{"task_id": "a", "reward": 0.0}]}}
    assert learning.load_task_runs(tmp_path / "none.json") == {"runs": {}}
    rows = lambda *r: [{"task_id": str(i), "reward": v, "submitted": True} for i, v in enumerate(r)]  # noqa: E731
    stages = {"base": rows(0.0, 0.0, 0.0), "warm_start": rows(1.0, 0.0, 0.5), "grpo": rows(1.0, 1.0, 0.5)}
    assert learning.stage_means(stages["warm_start"]) == {"reward": 0.5}  # bools are not metrics
    gains = learning.gains_from_rows(stages)
    # d = (1, 0, 0.5): mean 0.5, sd 0.5, se 0.5 / sqrt(3); d = (0, 1, 0): mean 1/3
    assert gains["sft_gain"]["gain"] == pytest.approx(0.5) and gains["sft_gain"]["se"] == pytest.approx(0.5 / 3 ** 0.5)
    assert gains["grpo_gain"]["gain"] == pytest.approx(1 / 3) and gains["total_gain"]["gain"] == pytest.approx(5 / 6)
    assert learning.gains_from_rows({"warm_start": stages["warm_start"]}) == {}


def test_a_rerun_keeps_the_earlier_row_under_its_tasks_key():
    results = {"a": {"tasks_key": "a@1"}, "b": {"tasks_key": "b@1"}}
    learning.add_result(results, "a", {"tasks_key": "a@2"})
    assert results == {"b": {"tasks_key": "b@1"}, "a@1": {"tasks_key": "a@1"}, "a": {"tasks_key": "a@2"}}
    learning.add_result(results, "a", {"tasks_key": "a@2", "redone": True})  # the same invocation: replaced
    assert results["a"] == {"tasks_key": "a@2", "redone": True} and len(results) == 3
