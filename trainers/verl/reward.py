"""``compute_score`` for verl's reward loop (``reward.custom_reward_function``): the env's own return.

verl's reward loop scores one sample at a time; toolgym's group credit is applied afterwards by
``ToolgymAgentLoopManager`` for training batches. This per-sample score is what validation
reports and what the trainer logs as ``score``: the toolgym env's episode return (selection F1
for ToolSearch), read from the ``toolgym_env_return`` field the tools recorded.
"""
from __future__ import annotations

from typing import Any

RETURN_KEY = "toolgym_env_return"  # same as episodes.RETURN_KEY; kept import-free for verl's file loader


def compute_score(data_source: Any = None, solution_str: Any = None, ground_truth: Any = None,
                  extra_info: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, float]:
    """``{"score": env return, "searches": number of search calls}`` of one verl sample."""
    info = extra_info or {}
    value = info.get(RETURN_KEY)
    score = float(value) if isinstance(value, (int, float)) else 0.0
    events = info.get("toolgym_events")
    return {"score": score, "searches": float(len(events)) if isinstance(events, (list, tuple)) else 0.0}
