"""Hostile runs, settings and env calls (issue 36, items 2-6, 9, 11, 14-16 and part of 17).

Two trainers on one run folder, a full disk under an output, non-finite or absurd settings, a
changed setting on ``--resume``, a negative ``max_tasks``, ten thousand vector sub-envs, lone
surrogates, an unknown retriever option, TRL tool calls Search-R1 tags cannot carry, and bad
types in env calls. Each case fails on the code before the fix (8e83d04). Runs use the tiny
random Llama of ``conftest.trained_tiny_run``; a full disk is a monkeypatched write.
"""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import toolgym.envs  # noqa: F401  (registers the ids)
from toolgym.cli.main import main
from toolgym.data.records import Task, Trajectory, read_rollouts, write_rollouts
from toolgym.trainers import checkpoint as ckpt
from toolgym.data import atomic
from toolgym.trainers import run_lock
from conftest import one_error_line, tiny_run_config

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
TOOLGYM = [PYTHON, "-m", "toolgym.cli.main"]

def _env(**extra):
    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", **extra}


def _cli(*argv, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([*TOOLGYM, *argv], capture_output=True, text=True, timeout=timeout, env=_env(), cwd=REPO)


# -- item 2: one process per run folder -------------------------------------------------------
HOLDER = textwrap.dedent("""
    import sys, time
    from toolgym.trainers.run_lock import run_dir_lock
    with run_dir_lock(sys.argv[1]):
        print("held", flush=True)
        time.sleep(600)
""")


def _hold(run_dir: Path) -> subprocess.Popen:
    proc = subprocess.Popen([PYTHON, "-c", HOLDER, str(run_dir)], stdout=subprocess.PIPE, text=True, env=_env())
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_held_run_dir_refuses_a_second_toolgym_train_and_a_killed_holder_leaves_no_lock(tmp_path):
    """Two `toolgym train` on one run_dir both ran and interleaved metrics.jsonl [0,0,1,1,...]."""
    run_dir = tmp_path / "run"
    holder = _hold(run_dir)
    try:
        second = _cli("train", tiny_run_config(tmp_path, run_dir), "--no-progress")
        assert second.returncode == 2, second.stderr
        line = one_error_line(second.stderr, str(run_dir), "in use", f"pid {holder.pid}")
        assert "another toolgym train" in line
        resume = _cli("train", tiny_run_config(tmp_path, run_dir), "--resume", "--no-progress")
        assert resume.returncode == 2 and "in use" in resume.stderr
        assert not (run_dir / "metrics.jsonl").exists() and not (run_dir / "checkpoints").exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with run_lock.run_dir_lock(run_dir):  # the kernel dropped the killed holder's lock
        pass


def test_run_dir_lock_in_process_refuses_and_cleans_up_a_folder_it_made(tmp_path):
    run_dir = tmp_path / "fresh"
    holder = _hold(run_dir)
    try:
        with pytest.raises(ValueError, match="in use by another toolgym train"):
            with run_lock.run_dir_lock(run_dir):
                pass
    finally:
        holder.kill()
        holder.wait()
    other = tmp_path / "made_here"
    with pytest.raises(RuntimeError):
        with run_lock.run_dir_lock(other):
            raise RuntimeError("config error before anything was written")
    assert not other.exists()  # a failed start leaves no empty folder behind


@pytest.mark.slow
def test_two_real_trainers_then_sigkill_then_a_new_one_trains(tmp_path):
    """The first `toolgym train` really trains (many steps); a second is refused while it runs; after
    SIGKILL of the first, `--resume` starts and finishes."""
    run_dir = tmp_path / "run"
    config = tiny_run_config(tmp_path, run_dir, steps=400, checkpoint_every=1)
    first = subprocess.Popen([*TOOLGYM, "train", config, "--no-progress"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env=_env(), cwd=REPO)
    try:
        deadline = time.time() + 240
        while not ckpt.list_checkpoints(run_dir) and time.time() < deadline:
            time.sleep(0.5)
        assert ckpt.list_checkpoints(run_dir), "the first trainer wrote no checkpoint in 240 s"
        second = _cli("train", config, "--resume", "--no-progress")
        assert second.returncode == 2 and "in use" in second.stderr, second.stderr
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    step = ckpt.read_state(ckpt.latest_checkpoint(run_dir))["step"]
    third = _cli("train", config, "--resume", f"train.steps={step + 1}", "--no-progress")
    assert third.returncode == 0, third.stderr
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps)) and steps[-1] == step  # no interleaving, no repeats


# -- item 3: every output atomic; a full disk replaces nothing ------------------------------------
def _task_and_trajectory():
    task = Task(id="t1", query="weather in Oslo", gold={"weather.now"})
    return task, Trajectory(task_id="t1", selection=["weather.now"], terminated_by="submit", num_turns=1)


def _disk_full_after(monkeypatch, module, nbytes: int):
    """Writes through ``module.os.fdopen`` files fail with ENOSPC after ``nbytes`` bytes."""
    real_fdopen = os.fdopen

    def fdopen(fd, mode="r", *args, **kwargs):
        f = real_fdopen(fd, mode, *args, **kwargs)
        real_write, written = f.write, [0]

        def write(data):
            written[0] += len(data)
            if written[0] > nbytes:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_write(data)

        f.write = write
        return f

    monkeypatch.setattr(module.os, "fdopen", fdopen)


def test_write_rollouts_on_a_full_disk_keeps_the_good_file(tmp_path, monkeypatch):
    """`--save-rollouts` onto a full disk replaced an 8,858-byte good file with a partial one."""
    import toolgym.data.atomic as atomic

    path = tmp_path / "rollouts.jsonl"
    task, traj = _task_and_trajectory()
    write_rollouts(path, [(task, [traj])] * 3)
    good = path.read_bytes()
    _disk_full_after(monkeypatch, atomic, 100)
    with pytest.raises(OSError, match="no space left") as info:
        write_rollouts(path, [(task, [traj])] * 50)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    assert path.read_bytes() == good and len(read_rollouts(path)) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rollouts.jsonl"]  # no temp file left


def test_write_rollouts_never_opens_the_destination_for_writing(tmp_path, monkeypatch):
    import builtins

    path = tmp_path / "r.jsonl"
    real_open = builtins.open

    def guarded(file, mode="r", *args, **kwargs):
        assert not (Path(str(file)) == path and "w" in mode), "opened the destination with 'w'"
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded)
    task, traj = _task_and_trajectory()
    assert write_rollouts(path, [(task, [traj])]) == 1
    assert len(read_rollouts(path)) == 1 and oct(path.stat().st_mode & 0o777) != oct(0o600)


def test_a_failed_checkpoint_write_leaves_no_tmp_folder_and_says_no_space(tiny_run, monkeypatch):
    import torch

    run_dir, _ = tiny_run
    before = sorted(p.name for p in (run_dir / "checkpoints").iterdir())

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    model = torch.nn.Linear(2, 2)
    with pytest.raises(OSError) as info:
        ckpt.save_checkpoint(run_dir, 3, model, None, {"config": {}}, keep=2)
    message = str(info.value)
    assert "no space left" in message and "step_000003" in message and "\n" not in message
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == before  # no .tmp_step_*, old kept


@pytest.mark.slow
def test_full_disk_during_a_cli_train_is_one_line_and_leaves_no_tmp(tmp_path):
    """The CLI in a subprocess, its checkpoint write failing with ENOSPC (patched in that process)."""
    run_dir = tmp_path / "run"
    script = textwrap.dedent("""
        import errno, sys, torch
        def full(*a, **k):
            raise OSError(errno.ENOSPC, "No space left on device")
        torch.save = full
        from toolgym.cli.main import main
        sys.exit(main(sys.argv[1:]))
    """)
    proc = subprocess.run([PYTHON, "-c", script, "train", tiny_run_config(tmp_path, run_dir), "--no-progress"],
                          capture_output=True, text=True, timeout=300, env=_env(), cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    one_error_line(proc.stderr, "no space left", "step_000001")
    assert not [p for p in (run_dir / "checkpoints").iterdir()]


def test_plots_and_json_outputs_go_through_a_temp_file(tmp_path, monkeypatch):
    import toolgym.data.atomic as atomic
    from toolgym.trainers.plotting import plot_curves

    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps({"step": s, "reward": 0.1 * s}) + "\n" for s in range(3)))
    png = plot_curves(metrics, tmp_path / "curves.png")
    good = png.read_bytes()
    _disk_full_after(monkeypatch, atomic, 10)
    with pytest.raises(OSError, match="no space left"):
        plot_curves(metrics, tmp_path / "curves.png")
    assert png.read_bytes() == good
    with pytest.raises(OSError, match="no space left"):
        atomic.write_json(tmp_path / "eval.json", {"x": "y" * 100})
    assert not (tmp_path / "eval.json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


# -- item 4 and 17 (seed): every float setting finite and in range at the door ---------------------
@pytest.mark.parametrize("override, key", [
    ("grpo.lr=.inf", "grpo.lr"), ("grpo.lr=.nan", "grpo.lr"), ("grpo.clip_eps=.inf", "grpo.clip_eps"),
    ("grpo.kl_coef=.nan", "grpo.kl_coef"), ("grpo.max_grad_norm=.inf", "grpo.max_grad_norm"),
    ("grpo.weight_decay=-0.1", "grpo.weight_decay"), ("grpo.tis_cap=.inf", "grpo.tis_cap"),
    ("grpo.lora={r: 2, alpha: .nan}", "grpo.lora.alpha"), ("grpo.lora={r: 2, lora_alpha: .inf}", "grpo.lora.lora_alpha"),
    ("grpo.lora={r: 2, alpha: -4}", "grpo.lora.alpha"), ("grpo.lora={r: 2, lora_dropout: 1.0}", "grpo.lora.lora_dropout"),
    ("sampling.temperature=.nan", "sampling.temperature"), ("sampling.top_p=.nan", "sampling.top_p"),
    ("eval.temperature=.inf", "eval.temperature"), ("train.time_budget_s=.inf", "train.time_budget_s"),
    ("rollout.worker_cpus=.nan", "rollout.worker_cpus"), ("rollout.worker_gpus=-1", "rollout.worker_gpus"),
    ("seed=100000000000000000000000", "seed"), ("seed=-1", "seed"),
])
def test_non_finite_or_out_of_range_settings_are_one_line_before_any_work(tmp_path, capsys, override, key):
    run_dir = tmp_path / "run"
    assert main(["train", tiny_run_config(tmp_path, run_dir), override, "--no-progress"]) == 2
    one_error_line(capsys.readouterr().err, key)
    assert not run_dir.exists()


def test_section_checks_live_in_post_init(tmp_path):
    from toolgym.trainers.config import EvalConfig, GRPOConfig, RolloutConfig, TrainConfig, TrainLoopConfig, validate

    with pytest.raises(ValueError, match="grpo.lr=inf"):
        GRPOConfig(lr=float("inf"))
    with pytest.raises(ValueError, match="grpo.lora.alpha=nan"):
        GRPOConfig(lora={"r": 2, "alpha": float("nan")})
    with pytest.raises(ValueError, match="train.time_budget_s"):
        TrainLoopConfig(time_budget_s=float("nan"))
    with pytest.raises(ValueError, match="eval.temperature"):
        EvalConfig(temperature=float("-inf"))
    with pytest.raises(ValueError, match="rollout.worker_cpus"):
        RolloutConfig(worker_cpus=float("nan"))
    with pytest.raises(ValueError, match="seed"):
        TrainConfig(seed=10**23)
    cfg = TrainConfig()
    cfg.grpo.lr = float("inf")  # set after construction: validate runs the same checks
    with pytest.raises(ValueError, match="grpo.lr=inf"):
        validate(cfg, check_machine=False)


def test_sft_float_settings_are_finite_too():
    from toolgym.trainers.sft import load_sft_config

    for override in ("train.lr=.inf", "train.warmup_ratio=.nan", "train.max_grad_norm=.inf"):
        with pytest.raises(ValueError, match=override.split("=")[0] + "=(inf|nan): must be a finite number"):
            load_sft_config(None, [override])


# -- item 5: --resume with a changed optimiser setting applies it, and says so --------------------
def test_resume_with_a_changed_lr_applies_it_and_records_it(tiny_run, capsys, monkeypatch):
    from toolgym.trainers import train as train_module

    run_dir, config = tiny_run
    seen = {}
    real = train_module.resume_from_checkpoint

    def spy(run_dir_, trainer, plan=None):
        step = real(run_dir_, trainer, plan)
        seen["trainer"] = trainer
        return step

    monkeypatch.setattr(train_module, "resume_from_checkpoint", spy)
    assert main(["train", config, "--resume", "train.steps=3", "grpo.lr=0.0005", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "grpo.lr is 0.0005 (the checkpoint trained with 0.001)" in out
    assert {g["lr"] for g in seen["trainer"].optimizer.param_groups} == {0.0005}  # it kept 1e-3 before
    state = ckpt.read_state(ckpt.latest_checkpoint(run_dir))
    assert state["step"] == 3 and state["config"]["grpo"]["lr"] == 0.0005
    saved = ckpt.load_tensors(ckpt.latest_checkpoint(run_dir) / ckpt.OPTIMIZER_FILE)
    assert {g["lr"] for g in saved["param_groups"]} == {0.0005}  # the record and the optimiser agree


# -- item 6: a negative max_tasks is refused everywhere -------------------------------------------
@pytest.mark.parametrize("value", [-1, -500, 0, 2.5, True, "3"])
def test_env_kwargs_max_tasks_must_be_a_positive_integer(value):
    with pytest.raises(ValueError, match="max_tasks"):
        gym.make("toolgym/ToolSearch-v0", max_tasks=value)
    with pytest.raises(ValueError, match="max_tasks"):
        gym.make("toolgym/Decompose-v0", max_tasks=value)


def test_max_tasks_negative_in_export_hf_and_train_env_kwargs(tmp_path, capsys):
    assert main(["export-hf", "toolgym/ToolSearch-v0", "--out", str(tmp_path / "hf"),
                 "--env-kwargs", '{"max_tasks": -1}']) == 2
    one_error_line(capsys.readouterr().err, "max_tasks", "-1")
    assert not (tmp_path / "hf" / "tasks").exists()
    run_dir = tmp_path / "run"
    assert main(["train", tiny_run_config(tmp_path, run_dir), "env.kwargs.max_tasks=-1", "--no-progress"]) == 2
    one_error_line(capsys.readouterr().err, "max_tasks", "-1")
    assert not (run_dir / "metrics.jsonl").exists()


# -- item 9 and 16: make_vec's num_envs --------------------------------------------------------
def test_make_vec_caps_num_envs_with_a_clear_error():
    from toolgym.envs.vector import MAX_NUM_ENVS

    for n in (10**5, 10**7, MAX_NUM_ENVS + 1):
        with pytest.raises(ValueError, match=f"num_envs={n}: must be <= {MAX_NUM_ENVS}"):
            gym.make_vec("toolgym/ToolSearch-v0", num_envs=n)


def test_make_vec_of_a_huge_num_envs_fails_fast_in_a_subprocess():
    """10**5 sub-envs used 7 GB in 105 s; 10**7 was killed by the OS."""
    script = ("import gymnasium as gym, toolgym.envs\n"
              "gym.make_vec('toolgym/ToolSearch-v0', num_envs=10**7)\n")
    started = time.time()
    proc = subprocess.run([PYTHON, "-c", script], capture_output=True, text=True, timeout=120, env=_env())
    assert proc.returncode == 1 and time.time() - started < 120
    assert "ValueError: num_envs=10000000: must be <= 16384" in proc.stderr


@pytest.mark.parametrize("n", [1.5, "2", None, True, float("nan")])
def test_make_vec_num_envs_of_a_wrong_type_is_a_value_error(n):
    with pytest.raises(ValueError, match="num_envs"):
        gym.make_vec("toolgym/ToolSearch-v0", num_envs=n)


def test_vector_step_none_and_reset_split_list_are_value_errors():
    vec = gym.make_vec("toolgym/ToolSearch-v0", num_envs=2)
    vec.reset(seed=0)
    for bad in (None, 5, object()):
        with pytest.raises(ValueError, match="one per sub-env"):
            vec.step(bad)
    with pytest.raises(ValueError, match=r"options\['split'\]"):
        vec.reset(options={"split": ["dev"]})
    env = gym.make("toolgym/ToolSearch-v0")
    for bad in (["dev"], {"a": 1}, 3):
        with pytest.raises(ValueError, match=r"options\['split'\] must be a split name"):
            env.reset(options={"split": bad})
    env = gym.make("toolgym/Decompose-v0")
    with pytest.raises(ValueError, match=r"options\['split'\]"):
        env.reset(options={"split": ["dev"]})


# -- item 11: lone surrogates with dense / hybrid retrieval ----------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("retriever", ["dense", "hybrid"])
def test_decompose_step_with_a_lone_surrogate_is_an_error_observation(retriever):
    env = gym.make("toolgym/Decompose-v0", retriever=retriever)
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step("weather \ud800\nflight")
    assert "lone surrogate" in obs and terminated and reward == 0.0 and info["invalid_actions"] == 1


def test_decompose_step_with_a_lone_surrogate_is_an_error_observation_bm25():
    env = gym.make("toolgym/Decompose-v0")
    env.reset(seed=0)
    obs, _, terminated, _, info = env.step("weather \ud800\nflight")
    assert "lone surrogate" in obs and terminated and info["invalid_actions"] == 1 and info["subtasks"] == []


def test_index_refuses_a_lone_surrogate_query_with_a_value_error(seal):
    from toolgym.retrieval import build_index

    index = build_index(seal.corpus, "bm25")
    with pytest.raises(ValueError, match="lone surrogate"):
        index.search("weather \ud800 flight")
    with pytest.raises(ValueError, match="lone surrogate"):
        index.search_batch(["fine", "bad \udc00"])


def test_task_with_a_lone_surrogate_is_refused_at_load_and_eval_retrieval_is_one_line(tmp_path, capsys):
    with pytest.raises(ValueError, match="task 'q1': query is not valid Unicode text"):
        Task(id="q1", query="weather \ud800", gold={"a"})
    with pytest.raises(ValueError, match=r"messages\[0\] content"):
        Task(id="q1", query="weather", gold={"a"}, messages=({"role": "user", "content": "x\udfff"},))
    corpus = tmp_path / "tools.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "name": i, "description": f"tool {i} weather", "category": "c"})
                              + "\n" for i in ("a", "b")))
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "q1", "query": "weather \ud800 now", "gold": ["a"]}) + "\n")
    assert main(["eval", "retrieval", "--tasks", str(tasks), "--corpus", str(corpus), "--retriever", "dense"]) == 2
    one_error_line(capsys.readouterr().err, "surrogate")


# -- item 14: retriever_options with an unknown key -----------------------------------------------
@pytest.mark.parametrize("options", [{"bogus": 1}, {"k1": 1.2}, ["model"]])
def test_unknown_retriever_options_are_a_value_error_naming_them(options):
    with pytest.raises(ValueError, match="retriever_options"):
        gym.make("toolgym/ToolSearch-v0", retriever_options=options)
    with pytest.raises(ValueError, match="retriever_options"):
        gym.make("toolgym/Decompose-v0", retriever="dense", retriever_options=options)


# -- item 15: TRL tool methods under Search-R1 --------------------------------------------------
@pytest.mark.parametrize("query, reason", [(5, "must be a string"), ("rain </search> x", "cannot be written"),
                                           ("a\x00b", "NUL"), (None, "must be a string")])
def test_trl_search_r1_tool_arguments_tags_cannot_carry_are_error_observations(query, reason):
    from toolgym.integrations.trl import environment_factory

    factory = environment_factory("toolgym/ToolSearch-v0", {"protocol": "search_r1", "max_turns": 5})
    env = factory()
    env.reset(seed=0)
    obs = env.search(query=query)
    assert obs.startswith("<information>Error") and reason in obs
    episode = env._env.unwrapped.episode
    assert episode.invalid == 1 and not episode.done
    assert env.search(query="weather").startswith("<information>")  # the episode goes on
    assert "must be a list" in env.submit(tools=5)


def test_trl_hermes_tool_calls_are_unchanged():
    from toolgym.integrations.trl import environment_factory

    env = environment_factory("toolgym/ToolSearch-v0", {"max_turns": 5})()
    env.reset(seed=0)
    assert 'the search "query" must be a string' in env.search(query=5)
    assert env.search(query="rain </search> x").startswith('Top 5 tools for "rain </search> x"')


# -- item 17: a truncated trainable.pt; a damaged state.json under eval policy ----------------------
def test_resume_with_a_truncated_weights_file_names_it_and_falls_back(tiny_run, capsys):
    run_dir, config = tiny_run
    newest = run_dir / "checkpoints" / "step_000002" / ckpt.WEIGHTS_FILE
    newest.write_bytes(newest.read_bytes()[:200])
    assert main(["train", config, "--resume", "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "resuming from" in captured.out and "step_000001" in captured.out
    assert "step_000002" in captured.err and "cut short" in captured.err
    assert ckpt.read_state(ckpt.latest_checkpoint(run_dir))["step"] == 2
    assert ckpt.checkpoint_problem(ckpt.latest_checkpoint(run_dir)) is None


def test_resume_with_every_weights_file_truncated_is_one_line(tiny_run, capsys):
    run_dir, config = tiny_run
    for folder in ckpt.list_checkpoints(run_dir):
        (folder / ckpt.WEIGHTS_FILE).write_bytes(b"PK\x03\x04" + b"\0" * 30)
    assert main(["train", config, "--resume", "--no-progress"]) == 2
    one_error_line(capsys.readouterr().err, "step_000002", ckpt.WEIGHTS_FILE, "no earlier complete checkpoint")


def test_load_tensors_names_a_truncated_file(tmp_path, trained_tiny_run):
    path = tmp_path / "trainable.pt"
    path.write_bytes((ckpt.latest_checkpoint(trained_tiny_run) / ckpt.WEIGHTS_FILE).read_bytes()[:300])
    with pytest.raises(ValueError, match="trainable.pt: damaged"):
        ckpt.load_tensors(path)


@pytest.mark.parametrize("config, part", [
    ("missing", "config"), ([1, 2], "config"), ({"model": [["a", "b", "c"]]}, "config.model"),
    ({"model": "tiny"}, "config.model"), ({"model": {"name": "tiny-llama"}, "grpo": [1]}, "config.grpo"),
])
def test_eval_policy_on_a_damaged_state_json_is_one_line_naming_it(tiny_run, capsys, config, part):
    run_dir, _ = tiny_run
    state_path = ckpt.latest_checkpoint(run_dir) / ckpt.STATE_FILE
    state = json.loads(state_path.read_text())
    if config == "missing":
        del state["config"]
    else:
        state["config"] = config
    state_path.write_text(json.dumps(state))
    assert main(["eval", "policy", "--policy", str(run_dir), "--env", "toolgym/ToolSearch-v0", "--limit", "1"]) == 2
    one_error_line(capsys.readouterr().err, str(state_path), part)
