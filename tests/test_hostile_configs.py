"""Hostile configs and command lines: values a careless or malicious user types.

An unknown ``model.dtype``, interpolation bombs given as overrides, absurd group sizes, a file
that is not a model as ``model.name``, ``--topk abc``, Ctrl-C. Each is one line on stderr and
exit status 2 (130 for Ctrl-C), checked before any work. Each case fails on the code before the
fix (issue 21)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from toolgym.cli.main import main
from conftest import one_error_line

TINY = {"model": {"name": "tiny-llama"},
        "env": {"id": "toolgym/ToolSearch-v0", "kwargs": {"max_turns": 2}},
        "sampling": {"max_new_tokens": 6}, "grpo": {"lr": 1.0e-3}, "reward": {"name": "toolsearcher"},
        "train": {"steps": 1, "tasks_per_step": 1, "group_size": 2, "checkpoint_every": 1,
                  "skip_zero_advantage": False},
        "eval": {"before": False, "after": False, "num_tasks": 2, "batch_size": 2}}


def _config(tmp_path: Path, **train) -> str:
    cfg = json.loads(json.dumps(TINY))
    cfg["run_dir"] = str(tmp_path / "run")
    cfg["train"].update(train)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _one_line(argv, capsys, *fragments, status=2):
    assert main(argv) == status
    return one_error_line(capsys.readouterr().err, *fragments)


# -- model ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float77", "nn", "load"])
def test_unknown_model_dtype_is_one_line(tmp_path, capsys, dtype):
    _one_line(["train", _config(tmp_path), f"model.dtype={dtype}", "--no-progress"], capsys, "model.dtype", dtype)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("dtype", ["bfloat16", "float64"])
def test_model_dtype_applies_to_tiny_llama_too(dtype):
    import torch

    from toolgym.trainers.config import ModelConfig
    from toolgym.agents.model import build_policy

    policy = build_policy(ModelConfig(name="tiny-llama", dtype=dtype, device="cpu"), {"max_new_tokens": 2})
    assert next(policy.model.parameters()).dtype == getattr(torch, dtype)  # was silently float32


def test_a_file_that_is_not_a_model_says_so(tmp_path, capsys):
    not_a_model = tmp_path / "passwd"
    not_a_model.write_text("root:x:0:0:root:/root:/bin/bash\n")
    line = _one_line(["train", _config(tmp_path), f"model.name={not_a_model}", "--no-progress"], capsys,
                     "not a model", "config.json", ".gguf")
    assert "repo id" not in line.lower()


# -- sizes ---------------------------------------------------------------------------------
@pytest.mark.parametrize("override, key", [("train.tasks_per_step=100000", "train.tasks_per_step"),
                                           ("train.group_size=100000", "train.group_size"),
                                           ("train.group_size=1000", "episodes per step")])
def test_absurd_step_sizes_are_capped_with_one_line(tmp_path, capsys, override, key):
    extra = ["train.tasks_per_step=100"] if override == "train.group_size=1000" else []
    start = time.monotonic()
    _one_line(["train", _config(tmp_path), override, *extra, "--no-progress"], capsys, key, "must be <=")
    assert time.monotonic() - start < 60  # refused before envs are built, not after a MemoryError


# -- interpolation bombs on the command line -----------------------------------------------
BOMB = ["env.kwargs.a0=" + "x" * 10] + [
    f"env.kwargs.a{i}=" + "".join(f"${{env.kwargs.a{i - 1}}}" for _ in range(10)) for i in range(1, 9)]


def test_interpolation_bomb_in_overrides_is_refused_quickly(tmp_path):
    """Run in a subprocess with a timeout: on the old code this hung (past 120 s)."""
    code = ("import sys; from toolgym.cli.main import main; "
            f"sys.exit(main(['train', {_config(tmp_path)!r}, *{BOMB!r}, '--print-config']))")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("an interpolation bomb in the overrides was not refused within 60 s")
    assert out.returncode == 2, out.stderr[-500:]
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "interpolations" in lines[0], out.stderr[-500:]


def test_overrides_and_file_share_the_reference_cap(tmp_path):
    from toolgym.data.readers import MAX_CONFIG_REFERENCES
    from toolgym.trainers.config import load_train_config

    cfg = json.loads(json.dumps(TINY))
    cfg["run_dir"] = str(tmp_path / "run")
    cfg["env"]["kwargs"].update({f"r{i}": "${seed}" for i in range(MAX_CONFIG_REFERENCES - 1)})
    path = tmp_path / "refs.yaml"
    path.write_text(yaml.safe_dump(cfg))
    load_train_config(path, ["env.kwargs.one_more=${seed}"], check_machine=False)  # exactly at the cap
    with pytest.raises(ValueError, match="with the overrides"):
        load_train_config(path, ["env.kwargs.one_more=${seed}", "env.kwargs.two_more=${seed}"], check_machine=False)


# -- retrieval eval arguments, checked before the index is built --------------------------
@pytest.mark.parametrize("topk", ["abc", "0", "-3", "2.5"])
def test_bad_topk_fails_before_any_index_is_built(monkeypatch, capsys, topk):
    import toolgym.retrieval

    built = []
    real = toolgym.retrieval.build_index
    monkeypatch.setattr(toolgym.retrieval, "build_index", lambda *a, **k: built.append(1) or real(*a, **k))
    _one_line(["eval", "--dataset", "seal_tools", "--limit", "3", "--topk", topk], capsys, "--topk")
    assert not built


# -- Ctrl-C ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_ctrl_c_is_one_line_exit_130_and_the_run_resumes(tmp_path):
    config = _config(tmp_path, steps=200)
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "toolgym.cli.main", "train", config, "--no-progress"]
    # A child inherits an ignored SIGINT, and an earlier test of the full suite can leave pytest's
    # SIGINT ignored: the run then never sees the Ctrl-C (it finished 20 steps with exit 0, or ran
    # past the timeout). A user's shell gives the default disposition; so does this.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not list((run / "checkpoints").glob("step_*")):
        time.sleep(0.2)
    assert proc.poll() is None, proc.stderr.read()[-2000:]
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "toolgym train: interrupted (continue with --resume)"
    from toolgym.trainers import checkpoint as ckpt

    done = ckpt.read_state(ckpt.latest_checkpoint(run))["step"]
    out = subprocess.run(cmd + ["--resume", f"train.steps={done + 1}"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and "resuming from" in out.stdout, out.stderr[-2000:]
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(done + 1))
