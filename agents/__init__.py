"""toolgym.agents: policies for the environments.

Scripted baselines are exported here; the model-backed policies (``toolgym.agents.hf_policy``,
``toolgym.agents.openai_policy``) are imported from their modules so this package stays light.
``toolgym.agents.policy`` holds what the trainer needs to know of a policy (``ChatPolicy``,
``Generation``, ``SamplingConfig``) without importing torch.
"""
if __name__ != "toolgym.agents":  # the checkout folder imported by its own name: every module would load twice
    raise ImportError(f"this folder is the package toolgym.agents: import toolgym.agents (after `pip install -e .` or `make install`), not {__name__!r}")
from toolgym.agents.scripted import (
    SCRIPTED_AGENTS,
    Agent,
    ClauseSplitAgent,
    OracleAgent,
    RandomAgent,
    RawQueryAgent,
    format_search,
    format_submit,
    make_agent,
    make_scripted_agent,
)

__all__ = [
    "Agent",
    "ClauseSplitAgent",
    "OracleAgent",
    "RandomAgent",
    "RawQueryAgent",
    "SCRIPTED_AGENTS",
    "format_search",
    "format_submit",
    "make_agent",
    "make_scripted_agent",
]

# Model-backed policies import torch/transformers: load them on first attribute access.
_LAZY = {
    "HFChatPolicy": "toolgym.agents.hf_policy",
    "ChatPolicy": "toolgym.agents.policy",
    "Generation": "toolgym.agents.policy",
    "SamplingConfig": "toolgym.agents.policy",
    "apply_lora": "toolgym.agents.hf_policy",
    "smollm2_gguf_path": "toolgym.agents.hf_policy",
    "load_causal_lm": "toolgym.agents.hf_policy",
    "load_tokenizer": "toolgym.agents.hf_policy",
    "tiny_causal_lm": "toolgym.agents.hf_policy",
    "OpenAICompatPolicy": "toolgym.agents.openai_policy",
    "OpenAICompatError": "toolgym.agents.openai_policy",
}
__all__ += sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'toolgym.agents' has no attribute {name!r}")

