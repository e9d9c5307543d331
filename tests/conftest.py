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
