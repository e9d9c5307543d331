"""toolgym.agents: policies for the environments.

Scripted baselines are exported here; the model-backed policies (``toolgym.agents.hf_policy``,
``toolgym.agents.openai_policy``) are imported from their modules so this package stays light.
"""
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
