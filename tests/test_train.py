"""`toolgym train`: strict config layering and bad values, resume-stable task order, curriculum
progress, credit batches, a real (tiny) run, kill + resume."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from toolgym.trainers import checkpoint as ckpt
from toolgym.agents.model import model_source
from toolgym.trainers.config import TrainLoopConfig, load_train_config
from toolgym.evaluation.evaluate import evaluate_policy
from toolgym.trainers.policy_loading import load_policy
from toolgym.trainers.train import tasks_for_step, train

TINY = {
    "model": {"name": "tiny-llama"},
    "env": {"id": "toolgym/ToolSearch-v0", "kwargs": {"max_turns": 2}},
    "sampling": {"max_new_tokens": 6},
    "grpo": {"lr": 1.0e-3},
    "reward": {"name": "toolsearcher"},
    "train": {"steps": 2, "tasks_per_step": 1, "group_size": 2, "checkpoint_every": 1, "skip_zero_advantage": False},
    "eval": {"before": False, "after": False, "num_tasks": 2, "batch_size": 2},
}


def _write_config(path: Path, run_dir: Path, **train) -> Path:
    import yaml  # pyyaml comes with omegaconf

    cfg = json.loads(json.dumps(TINY))
    cfg["run_dir"] = str(run_dir)
    cfg["train"].update(train)
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_config_layers_defaults_file_and_overrides(tmp_path):
    path = _write_config(tmp_path / "c.yaml", tmp_path / "run")
    cfg = load_train_config(path, ["train.steps=7", "grpo.lr=0.5", "reward.name=grpo_match"])
    assert cfg.train.steps == 7 and cfg.grpo.lr == 0.5 and cfg.reward.name == "grpo_match"
    assert cfg.train.group_size == 2 and cfg.grpo.clip_eps == 0.2 and cfg.grpo.kl_coef == 0.001  # defaults kept
    with pytest.raises(ValueError, match="unknown key"):
        load_train_config(path, ["train.stepz=3"])
    with pytest.raises(ValueError, match="key=value"):
        load_train_config(path, ["steps"])
    with pytest.raises(FileNotFoundError):
        load_train_config(tmp_path / "missing.yaml")


@pytest.mark.parametrize("override, key", [
    ("train.tasks_per_step=0", "train.tasks_per_step"),
    ("grpo.lr=abc", "grpo.lr"),
    ("train.steps=-1", "train.steps"),
    ("train.max_context_tokens=6", "train.max_context_tokens"),  # not even one turn of max_new_tokens=6
    ("train.max_tasks=-1", "train.max_tasks"),
    ("eval.num_tasks=0", "eval.num_tasks"),
    ("model.device=cuda:999", "model.device"),
    ("model.revision=main", "model.revision"),
    ("env.name=x", "env.name"),
    ("reward.weights=1", "reward.weights"),
    ("sampling.temprature=0.5", "sampling.temprature"),
    ("grpo.lora={r: 2, alfa: 4}", "alfa"),
])
def test_bad_config_values_fail_at_load_naming_the_key(tmp_path, override, key):
    path = _write_config(tmp_path / "c.yaml", tmp_path / "run")
    with pytest.raises(ValueError) as err:
        load_train_config(path, [override])
    assert key in str(err.value) and "\n" not in str(err.value)


def test_bad_config_files_and_model_paths_are_one_clear_line(tmp_path, capsys):
    from toolgym.cli.main import main

    (tmp_path / "bad.yaml").write_text("train: [1, 2\n")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    for path, message in ((tmp_path, "not a file"), (tmp_path / "bad.yaml", "not valid YAML"),
                          (tmp_path / "list.yaml", "mapping"), (tmp_path / "missing.yaml", "not found")):
        assert main(["train", str(path)]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    good = _write_config(tmp_path / "c.yaml", tmp_path / "run")
    assert main(["train", str(good), f"model.name={tmp_path / 'no-such-model'}"]) == 2
    assert "model.name" in capsys.readouterr().err
    assert main(["train", str(good), f"model.init_from={tmp_path}"]) == 2
    assert "model.init_from" in capsys.readouterr().err
    # env kwargs are a free dict for gymnasium.make: a bad one fails before the model loads or a step runs
    assert main(["train", str(good), "env.kwargs.foo=1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "foo" in err and "Traceback" not in err and not (tmp_path / "run" / "metrics.jsonl").exists()
    assert main(["train", str(good), "reward.options.nonsense=1", "--no-progress"]) == 2
    assert "nonsense" in capsys.readouterr().err
    # room for a turn but not for the prompt: rejected once the prompt is tokenised, before step 0
    assert main(["train", str(good), "train.max_context_tokens=10", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "train.max_context_tokens=10" in err and "prompt" in err and not (tmp_path / "run" / "metrics.jsonl").exists()


def test_hostile_config_files_fail_fast_and_clearly(tmp_path):
    refs = "".join(f"b{i}: &b{i} [*b{i - 1}, *b{i - 1}, *b{i - 1}]\n" for i in range(1, 12))
    cases = {
        "huge": ("train:\n  steps: 1\n" + "# padding\n" * 200_000, "larger than"),
        "deep": ("train: " + "[" * 10_000 + "]" * 10_000 + "\n", "nests deeper"),
        "alias_bomb": ("b0: &b0 [x, x, x]\n" + refs, "aliases"),
        "interpolation_bomb": ("".join(f"k{i}: [${{k{i - 1}}}, ${{k{i - 1}}}]\n" for i in range(1, 12)), "interpolations"),
        "unclosed": ("train: {steps: 1\n", "not valid YAML"),
        "repeated_key": ("train:\n  steps: 1\n  steps: 2\n", "not valid YAML"),
    }
    for name, (text, message) in cases.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        with pytest.raises(ValueError, match=message):
            load_train_config(path)
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00train")
    with pytest.raises(ValueError, match="UTF-8"):
        load_train_config(tmp_path / "binary.yaml")


def test_null_means_all_and_defaults_are_the_dataclasses(tmp_path):
    cfg = load_train_config(_write_config(tmp_path / "c.yaml", tmp_path / "run"), ["eval.num_tasks=null", "train.max_tasks=null"])
    assert cfg.eval.num_tasks is None and cfg.train.max_tasks is None
    assert load_train_config(None).sampling.max_new_tokens == 256  # one default, SamplingConfig's
    assert TrainLoopConfig().skip_zero_advantage is False and load_train_config(None).train.skip_zero_advantage is False


def test_shipped_configs_load(tmp_path):
    root = Path(__file__).resolve().parent.parent / "configs"
    quick = load_train_config(root / "quickstart.yaml")
    assert quick.grpo.lora["lora_alpha"] == 32
    for name in ("toolsearcher_stb.yaml", "magicselector_decompose.yaml"):  # GPU recipes: model and device not here
        cfg = load_train_config(root / name, check_machine=False)
        assert cfg.train.steps > 0
    stb = load_train_config(root / "toolsearcher_stb.yaml", check_machine=False)
    assert stb.env.train_kwargs["curriculum"]["required_fraction"] == 0.3


def test_init_from_a_model_folder_or_an_sft_run_dir(tmp_path, tokenizer, tiny):
    from types import SimpleNamespace

    import torch

    from toolgym.trainers.config import ModelConfig
    from toolgym.agents.model import build_policy

    run = tmp_path / "sft_run"
    tiny.save_pretrained(run / "model")
    tokenizer.save_pretrained(run / "model")
    assert model_source(SimpleNamespace(name="smollm2", init_from=str(run))) == str(run / "model")
    assert model_source(SimpleNamespace(name="smollm2", init_from=str(run / "model"))) == str(run / "model")
    policy = build_policy(ModelConfig(name="smollm2", init_from=str(run), device="cpu"), {"max_new_tokens": 4})
    for (name, a), (_, b) in zip(tiny.named_parameters(), policy.model.named_parameters()):
        assert torch.equal(a, b), name
    with pytest.raises(FileNotFoundError, match="model.init_from"):
        model_source(SimpleNamespace(name="smollm2", init_from=str(tmp_path / "nothing")))


def test_old_lora_key_names_still_load():
    from toolgym.agents.hf_policy import lora_config

    old = lora_config({"r": 2, "alpha": 4, "dropout": 0.1})
    assert (old.r, old.lora_alpha, old.lora_dropout) == (2, 4, 0.1)
    assert lora_config({"r": 2, "lora_alpha": 4}).lora_alpha == 4


def test_curriculum_progress_reaches_training_resets_and_not_evaluation():
    from toolgym.evaluation.evaluate import make_envs
    from toolgym.trainers.train import evaluation_env_kwargs, training_env_kwargs, training_reset_options

    root = Path(__file__).resolve().parent.parent / "configs"
    cfg = load_train_config(root / "toolsearcher_stb.yaml", ["train.steps=10"], check_machine=False)
    env = make_envs(cfg.env.id, training_env_kwargs(cfg), 1)[0]
    modes = []
    for step in (0, 2, 3, 9):
        options = training_reset_options(cfg, env, step)
        assert options["progress"] == step / 10
        modes.append(env.reset(options={**options, "task": 0})[1]["category_mode"])
    assert modes == ["required", "required", "off", "off"]  # required for the first 30% of steps
    eval_env = make_envs(cfg.env.id, evaluation_env_kwargs(cfg), 1)[0]
    assert eval_env.unwrapped.curriculum is None and eval_env.reset(options={"task": 0})[1]["category_mode"] == "off"
    plain = make_envs("toolgym/Decompose-v0", {}, 1)[0]  # no curriculum: no progress option (its reset rejects one)
    assert "progress" not in training_reset_options(cfg, plain, 3)


def test_a_run_with_a_category_curriculum_trains_in_the_constrained_phase_then_globally(tmp_path):
    # the room check before training once reset the env without `progress`, which a curriculum without
    # total_episodes refuses: every `toolgym train` with a curriculum failed before its first step
    cfg = load_train_config(_write_config(tmp_path / "c.yaml", tmp_path / "run", steps=3), [
        "env.train_kwargs={split: train, curriculum: {required_fraction: 0.3, constrained_mode: required, after_mode: 'off'}}"])
    train(cfg, progress=False)
    from toolgym.data.records import read_rollouts

    prompts = []
    for step in range(3):
        (_, trajs), = read_rollouts(tmp_path / "run" / "rollouts" / f"step_{step:06d}.jsonl")
        prompts.append(trajs[0].messages[0]["content"])
    # step 0 (progress 0) is in the constrained phase, steps 1 and 2 (1/3, 2/3) search globally
    assert ["category from the schema" in p for p in prompts] == [True, False, False]


def test_zero_advantage_rollouts_stay_in_the_batch_by_default():
    import numpy as np

    from toolgym.data.records import Task, Trajectory
    from toolgym.rewards.base import GroupCredit
    from toolgym.agents.rollout import Rollout
    from toolgym.trainers.train import credit_batch

    class Flat:  # a group where every rollout scored the same: all advantages 0
        def score_group(self, trajs, task):
            return GroupCredit(np.zeros(len(trajs)), np.zeros(len(trajs)))

    def rollout():
        return Rollout(Trajectory(task_id="t", token_ids=[1, 2, 3, 4], loss_mask=[0, 1, 1, 0], turn_spans=[(1, 3)]), 0.0, 2)

    task = Task(id="t", query="q", gold=frozenset({"a"}))
    batch, stats = credit_batch([[rollout(), rollout()]], [task], Flat())
    assert len(batch.token_ids) == 2 and stats["zero_groups"] == 1 and stats["trained_sequences"] == 2
    batch, stats = credit_batch([[rollout(), rollout()]], [task], Flat(), skip_zero_advantage=True)
    assert len(batch.token_ids) == 0 and stats["trained_sequences"] == 0


def test_task_order_is_a_seeded_permutation_per_epoch():
    tasks = list(range(10))
    first_epoch = [t for s in range(5) for t in tasks_for_step(tasks, s, 2, seed=3)]
    assert sorted(first_epoch) == tasks and first_epoch != tasks
    assert tasks_for_step(tasks, 4, 2, seed=3) == tasks_for_step(tasks, 4, 2, seed=3)
    assert sorted(t for s in range(5, 10) for t in tasks_for_step(tasks, s, 2, seed=3)) == tasks


@pytest.mark.slow
def test_tiny_run_writes_metrics_rollouts_checkpoints_and_plot(tmp_path):
    from omegaconf import OmegaConf

    cfg = load_train_config(_write_config(tmp_path / "c.yaml", tmp_path / "run"),
                      ["grpo.lora={r: 2, alpha: 4}", "eval.after=true", "train.keep_checkpoints=2"])
    summary = train(cfg, progress=False)
    run = tmp_path / "run"
    rows = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    for key in ("reward", "kl", "clip_frac", "tokens_per_s", "search_turns", "invalid_rate", "adv_abs", "reward/tca/match"):
        assert key in rows[0], key
    assert rows[0]["trained_sequences"] == 2 and rows[0]["policy_tokens"] > 0
    assert Path(summary["plot"]).stat().st_size > 1000
    from toolgym.data.records import read_rollouts

    (task, trajs), = read_rollouts(run / "rollouts" / "step_000001.jsonl")
    assert task.id == rows[1]["task_ids"][0] and len(trajs) == 2 and trajs[0].token_ids and trajs[0].turn_spans
    assert [p.name for p in ckpt.list_checkpoints(run)] == ["step_000001", "step_000002"]
    assert summary["eval"]["after"]["num_tasks"] == 2
    # a checkpoint evaluates through the same entry point `toolgym eval --policy` uses
    result = evaluate_policy(load_policy(str(run)), "toolgym/ToolSearch-v0", split="heldout", num_tasks=2, env_kwargs={"max_turns": 2},
                             max_new_tokens=6, progress=False)
    assert result["num_tasks"] == 2 and {"reward", "reward_se", "F1", "Match", "SRecall"} <= set(result)
    assert set(result["per_task"]) == set(summary["eval"]["after"]["per_task"])  # same tasks: comparable pair by pair
    with pytest.raises(ValueError, match="--resume"):
        train(cfg, progress=False)


@pytest.mark.slow
def test_killed_run_resumes_without_lost_or_repeated_steps(tmp_path):
    run = tmp_path / "run"
    config = _write_config(tmp_path / "c.yaml", run, steps=6, checkpoint_every=1)
    cmd = [sys.executable, "-m", "toolgym.cli.main", "train", str(config), "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    metrics = run / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = ckpt.read_state(ckpt.latest_checkpoint(run))["step"]
    logged = len(metrics.read_text().splitlines())
    # the kill may land between logging a step and checkpointing it: that step must be redone once
    assert 2 <= killed_at <= logged and killed_at < 6
    out = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"resuming from" in out.stdout and f"at step {killed_at}" in out.stdout
    rows = [json.loads(l) for l in metrics.read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(6))
    from toolgym.evaluation.evaluate import env_tasks, make_envs

    tasks = env_tasks(make_envs("toolgym/ToolSearch-v0", {"split": "train", "max_turns": 2}, 1)[0])
    assert [r["task_ids"] for r in rows] == [[t.id for t in tasks_for_step(tasks, s, 1, 0)] for s in range(6)]
    assert ckpt.read_state(ckpt.latest_checkpoint(run))["step"] == 6


@pytest.mark.slow
def test_time_budget_stops_after_the_running_step_and_checkpoints_it(tmp_path):
    cfg = load_train_config(_write_config(tmp_path / "c.yaml", tmp_path / "run", steps=50, checkpoint_every=10),
                      ["train.time_budget_s=0.001"])
    summary = train(cfg, progress=False)
    assert summary["steps"] == 1
    assert ckpt.read_state(ckpt.latest_checkpoint(tmp_path / "run"))["step"] == 1


def test_reward_modules_config_builds_the_composite(tmp_path):
    """``reward.modules`` (the rewards package's config shape) reaches build_reward as a composite."""
    import gymnasium

    from toolgym.rewards.composite import CompositeReward
    from toolgym.trainers.config import load_train_config
    from toolgym.rewards import build_reward

    cfg = load_train_config(None, ["env.id=toolgym/Decompose-v0", "reward.modules=[{module: env_return, weight: 1.0}, {module: monitors, weight: 0.0}]"],
                      check_machine=False)
    env = gymnasium.make("toolgym/Decompose-v0")
    reward = build_reward(cfg.reward, index=env.unwrapped.index)  # what train() builds
    assert isinstance(reward, CompositeReward)
    assert [(m.key, m.weight) for m in reward.modules] == [("env_return", 1.0), ("monitors", 0.0)]
