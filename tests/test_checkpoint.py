"""Checkpoint and run-file safety: no code runs from a crafted ``.pt``, JSON and metrics files
survive a kill at any moment, and a resume with a shape- or order-changing setting says what differs."""
from __future__ import annotations

import json
import os

import pytest
import torch

from toolgym.trainers import checkpoint as ckpt
from toolgym.data import atomic
from toolgym.trainers import metrics as run_metrics


class WritesAFile:
    """A pickle payload: unpickling it calls ``open(path, "w")``, creating the file."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _tiny_model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(5, 3)).pow(2).sum().backward()
    opt.step()
    return model, opt


def test_crafted_optimizer_pickle_is_refused_and_runs_nothing(tmp_path):
    model, opt = _tiny_model_and_optimizer()
    folder = ckpt.save_checkpoint(tmp_path / "run", 1, model, opt, {"config": {}})
    marker = tmp_path / "pwned"
    torch.save({"state": WritesAFile(marker), "param_groups": []}, folder / ckpt.OPTIMIZER_FILE)
    with pytest.raises(ValueError, match="optimizer.pt: refused to load"):
        ckpt.load_optimizer(folder, opt)
    assert not marker.exists()
    # the payload is live: the old weights_only=False load would have run it
    torch.load(folder / ckpt.OPTIMIZER_FILE, weights_only=False)
    assert marker.exists()


def test_crafted_weights_pickle_is_refused(tmp_path):
    model, opt = _tiny_model_and_optimizer()
    folder = ckpt.save_checkpoint(tmp_path / "run", 1, model, opt, {"config": {}})
    marker = tmp_path / "pwned"
    torch.save({"0.weight": WritesAFile(marker)}, folder / ckpt.WEIGHTS_FILE)
    with pytest.raises(ValueError, match="trainable.pt: refused to load"):
        ckpt.load_weights(folder, model)
    assert not marker.exists()


def test_optimizer_state_round_trips_with_weights_only(tmp_path):
    model, opt = _tiny_model_and_optimizer()
    folder = ckpt.save_checkpoint(tmp_path / "run", 3, model, opt, {"config": {}})
    model2 = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    opt2 = torch.optim.AdamW(model2.parameters(), lr=1e-2)
    ckpt.load_weights(folder, model2)
    ckpt.load_optimizer(folder, opt2)
    for p, q in zip(model.parameters(), model2.parameters()):
        assert torch.equal(p, q)
        assert torch.equal(opt.state[p]["exp_avg"], opt2.state[q]["exp_avg"])
    assert ckpt.read_state(folder)["step"] == 3


def test_weights_of_another_shape_name_the_tensor(tmp_path):
    model, opt = _tiny_model_and_optimizer()
    folder = ckpt.save_checkpoint(tmp_path / "run", 1, model, opt, {"config": {}})
    wider = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Linear(8, 2))
    with pytest.raises(ValueError, match=r"0\.weight has shape \(4, 3\) but the model's is \(8, 3\)"):
        ckpt.load_weights(folder, wider)


def test_truncated_pt_file_names_the_file(tmp_path):
    model, opt = _tiny_model_and_optimizer()
    folder = ckpt.save_checkpoint(tmp_path / "run", 1, model, opt, {"config": {}})
    path = folder / ckpt.OPTIMIZER_FILE
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ValueError, match="optimizer.pt: damaged"):
        ckpt.load_optimizer(folder, opt)


# -- JSON files ---------------------------------------------------------------------------
def test_write_json_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "eval.json"
    atomic.write_json(path, {"before": {"reward": 0.5}})
    loop: dict = {}
    loop["self"] = loop  # json cannot encode a cycle: the write fails midway
    with pytest.raises(ValueError):
        atomic.write_json(path, loop)
    assert atomic.read_json(path) == {"before": {"reward": 0.5}}
    assert [p.name for p in tmp_path.iterdir()] == ["eval.json"]  # no temp file left behind


def test_truncated_json_names_the_file_and_position(tmp_path):
    path = tmp_path / "eval.json"
    path.write_text('{"before": {"reward": 0.5')
    with pytest.raises(ValueError, match=r"eval\.json: not valid JSON .* line 1 column 26"):
        atomic.read_json(path)


def test_read_state_names_a_damaged_state_file(tmp_path):
    (tmp_path / ckpt.STATE_FILE).write_text('{"step": 3, "conf')
    with pytest.raises(ValueError, match="state.json: not valid JSON"):
        ckpt.read_state(tmp_path)


# -- metrics.jsonl ------------------------------------------------------------------------
def test_read_metrics_drops_only_a_half_written_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    for step in range(3):
        run_metrics.append_metrics_line(path, {"step": step, "reward": step / 10})
    with open(path, "a") as f:
        f.write('{"step": 3, "rew')  # killed mid-write
    assert [r["step"] for r in run_metrics.read_metrics(path)] == [0, 1, 2]
    # a complete last line without its newline is kept
    path.write_text('{"step": 0}\n{"step": 1}')
    assert [r["step"] for r in run_metrics.read_metrics(path)] == [0, 1]


@pytest.mark.parametrize("body, line", [
    ('{"step": 0}\n{"step": 1, "re\n{"step": 2}\n', 2),  # damage in the middle is not a kill
    ('{"step": 0}\n[1, 2]\n', 2),  # not an object
    ('{"step": 0}\n' + "[" * 100_000 + "\n", 2),  # hostile nesting
    ('{"step": 0, "x": "' + "a" * (run_metrics.MAX_METRICS_LINE_CHARS + 1) + '"}\n', 1),  # huge
])
def test_read_metrics_names_file_and_line_of_a_bad_line(tmp_path, body, line):
    path = tmp_path / "metrics.jsonl"
    path.write_text(body)
    with pytest.raises(ValueError, match=rf"metrics\.jsonl:{line}: not a metrics line"):
        run_metrics.read_metrics(path)


def test_keep_metrics_before_rewrites_atomically(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s}) + "\n" for s in range(5)) + '{"step": 5, "x')
    original = path.read_text()

    class Killed(BaseException):
        pass

    def killed(*_args, **_kwargs):
        raise Killed  # a kill between writing the new file and putting it in place

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(Killed):
        run_metrics.keep_metrics_before(path, 3)
    assert path.read_text() == original  # steps 0-4 all still there
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]
    monkeypatch.undo()
    kept = run_metrics.keep_metrics_before(path, 3)
    assert [r["step"] for r in kept] == [0, 1, 2]
    assert path.read_text() == "".join(json.dumps({"step": s}) + "\n" for s in range(3))


# -- resuming with a changed config -------------------------------------------------------
BASE = {
    "run_dir": "runs/x", "seed": 0,
    "model": {"name": "tiny-llama", "dtype": None},
    "env": {"id": "toolgym/ToolSearch-v0", "kwargs": {"max_turns": 2}, "train_kwargs": {"split": "train"},
            "eval_kwargs": {"split": "heldout"}},
    "grpo": {"lr": 1e-3, "lora": {"r": 16, "alpha": 32, "target_modules": ["q_proj", "v_proj"]}},
    "train": {"steps": 10, "tasks_per_step": 2, "group_size": 4, "max_tasks": None},
    "eval": {"num_tasks": 20},
}


def _changed(**dotted):
    cfg = json.loads(json.dumps(BASE))
    for key, value in dotted.items():
        node = cfg
        *parents, last = key.split("__")
        for p in parents:
            node = node[p]
        node[last] = value
    return cfg


@pytest.mark.parametrize("change, differ", [
    ({}, []),
    ({"train__steps": 50}, []),  # a run may grow
    ({"grpo__lr": 5e-4, "train__group_size": 8, "eval__num_tasks": 5, "run_dir": "elsewhere"}, []),
    ({"grpo__lora__alpha": 8}, []),  # scales the update, same tensor shapes
    ({"grpo__lora__r": 8}, ["grpo.lora.r"]),
    ({"grpo__lora__target_modules": ["q_proj"]}, ["grpo.lora.target_modules"]),
    ({"grpo__lora": None}, ["grpo.lora", "grpo.lora.r", "grpo.lora.target_modules"]),
    ({"model__name": "smollm2"}, ["model.name"]),
    ({"seed": 1, "train__tasks_per_step": 4}, ["seed", "train.tasks_per_step"]),
    ({"env__train_kwargs": {"split": "heldout"}, "env__kwargs": {"max_turns": 2, "dataset": "ultratool"}},
     ["env.kwargs.dataset", "env.train_kwargs.split"]),
])
def test_check_resume_config_lists_only_shape_and_order_keys(change, differ):
    assert ckpt.check_resume_config(BASE, _changed(**change)) == differ


def test_check_resume_says_what_differs(tmp_path):
    folder = tmp_path / "checkpoints" / "step_000002"
    folder.mkdir(parents=True)
    (folder / ckpt.STATE_FILE).write_text(json.dumps({"config": BASE, "step": 2}))
    assert ckpt.check_resume(folder, _changed(train__steps=20))["step"] == 2
    with pytest.raises(ValueError, match=r"grpo\.lora\.r: 16 in the checkpoint, 8 now"):
        ckpt.check_resume(folder, _changed(grpo__lora__r=8))


def test_a_ctrl_c_during_the_write_lands_after_the_checkpoint_is_whole(tmp_path):
    """SIGINT inside ``torch.save`` used to surface as torch's zip-writer RuntimeError (a traceback, exit 1)."""
    import signal

    model, opt = _tiny_model_and_optimizer()

    class InterruptedWhileSaved:
        def state_dict(self):
            os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C, mid-write
            return opt.state_dict()

    # Python's own Ctrl-C handler, whatever this process inherited: a shell starts background jobs
    # (`make test &`, nohup) with SIGINT ignored, and an ignored SIGINT rightly stays ignored.
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            ckpt.save_checkpoint(tmp_path / "run", 2, model, InterruptedWhileSaved(), {"config": {}})
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is restored
    finally:
        signal.signal(signal.SIGINT, inherited)
    folder = ckpt.latest_checkpoint(tmp_path / "run")
    assert folder.name == "step_000002" and ckpt.read_state(folder)["step"] == 2
    assert sorted(p.name for p in folder.iterdir()) == sorted([ckpt.OPTIMIZER_FILE, ckpt.STATE_FILE, ckpt.WEIGHTS_FILE])


def test_sigint_deferred_keeps_an_ignored_sigint_ignored():
    import signal

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with ckpt.sigint_deferred():
            os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
