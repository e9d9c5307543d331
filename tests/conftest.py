"""Fixtures shared by several test modules: the bundled Seal-Tools data and its BM25 index,
loaded once per session, and helpers several modules call."""
import importlib.util
import sys
from pathlib import Path

import pytest

from toolgym.data import load_dataset
from toolgym.retrieval import build_index


def load_script(path: str):
    """A script of the repository that is not a package module (``examples/x.py``), imported once by path."""
    name = "script_" + path.replace("/", "_").removesuffix(".py")
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent.parent / path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def seal():
    return load_dataset("seal_tools")


@pytest.fixture(scope="session")
def bm25(seal):
    return build_index(seal.corpus, "bm25")


# -- policies over the SmolLM2 tokenizer (test_grpo, test_rollout, test_policy, test_evaluate) --
@pytest.fixture(scope="session")
def tokenizer():
    from toolgym.agents.hf_policy import load_tokenizer

    return load_tokenizer("smollm2")


@pytest.fixture(scope="session")
def tiny(tokenizer):
    """A tiny random Llama over the SmolLM2 vocabulary (never trained in place: copy it to train)."""
    from toolgym.agents.hf_policy import tiny_causal_lm

    return tiny_causal_lm(tokenizer, seed=0)


def tool_call(name, **args):
    """One Hermes tool call as the policy would write it."""
    import json

    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


@pytest.fixture(scope="session")
def scripted_policy():
    """``scripted_policy(model, tokenizer, script)``: an HFChatPolicy whose turns are ``script``.

    The real tokenizer and template glue with scripted text, so the env sees real searches. Each
    turn's text is tokenised into the ids a model would have sampled; every prompt the "model" is
    given is recorded in ``seen_prompts``.
    """
    from toolgym.agents.hf_policy import HFChatPolicy
    from toolgym.agents.policy import Generation

    class ScriptedTokenPolicy(HFChatPolicy):
        def __init__(self, model, tokenizer, script, max_new_tokens=64):
            super().__init__(model, tokenizer, {"max_new_tokens": max_new_tokens})
            self.script = script
            self.seen_prompts: list[list[int]] = []
            self.turn = 0

        def generate_batch(self, prompts, max_new_tokens=None):
            out = []
            for p in prompts:
                self.seen_prompts.append(list(p))
                text = self.script[min(self.turn, len(self.script) - 1)]
                ids = self.tokenizer.encode(text, add_special_tokens=False) + ([self.end_ids[0]] if "submit" in text else [])
                out.append(Generation(text, ids, "stop"))
            self.turn += 1
            return out

    return ScriptedTokenPolicy


def one_error_line(err: str, *fragments: str) -> str:
    """The single non-empty line of a command's stderr, with no traceback, holding every fragment
    (case-insensitive): how every input error is reported."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment.lower() in lines[0].lower(), lines[0]
    return lines[0]


# A finished two-step tiny-llama GRPO run (checkpoints step_000001 and step_000002), trained once per
# session and copied into each test that damages one (tests/test_hostile_runs.py, test_hostile_checkpoints.py).
TINY_RUN_CONFIG = {"model": {"name": "tiny-llama"},
                   "env": {"id": "toolgym/ToolSearch-v0", "kwargs": {"max_turns": 2}},
                   "sampling": {"max_new_tokens": 6}, "grpo": {"lr": 1.0e-3, "lora": {"r": 2, "alpha": 4}},
                   "reward": {"name": "toolsearcher"},
                   "train": {"steps": 2, "tasks_per_step": 1, "group_size": 2, "checkpoint_every": 1,
                             "keep_checkpoints": 2, "skip_zero_advantage": False},
                   "eval": {"before": False, "after": False, "num_tasks": 2, "batch_size": 2}}


def tiny_run_config(folder, run_dir, **train) -> str:
    """``folder/c.yaml``: :data:`TINY_RUN_CONFIG` writing to ``run_dir``, ``train`` keys overridden."""
    import copy

    import yaml

    cfg = copy.deepcopy(TINY_RUN_CONFIG)
    cfg["train"].update(train)
    path = Path(folder) / "c.yaml"
    path.write_text(yaml.safe_dump({**cfg, "run_dir": str(run_dir)}))
    return str(path)


@pytest.fixture(scope="session")
def trained_tiny_run(tmp_path_factory):
    """The run folder of a finished :data:`TINY_RUN_CONFIG` run: metrics steps [0, 1], checkpoints
    step_000001 and step_000002. Copy it (:func:`tiny_run`) before changing anything in it."""
    from toolgym.cli.main import main
    from toolgym.trainers import checkpoint as ckpt

    folder = tmp_path_factory.mktemp("trained")
    run = folder / "run"
    assert main(["train", tiny_run_config(folder, run), "--no-progress"]) == 0
    assert [p.name for p in ckpt.list_checkpoints(run)] == ["step_000001", "step_000002"]
    return run


@pytest.fixture
def tiny_run(trained_tiny_run, tmp_path):
    """``(run_dir, config)``: a copy of the trained tiny run, and a config pointing at the copy."""
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(trained_tiny_run, copy)
    return copy, tiny_run_config(tmp_path, copy)
