"""``toolgym export-verl ENV_ID --split SPLIT --out DIR``: the parquet dataset verl's ``RLHFDataset`` reads.

One row per task of the env's split, in verl's column layout:

* ``prompt``: the chat messages the env starts an episode with (system prompt with the tool
  schemas and call format, prior dialogue, the request) — what a local rollout's prompt holds;
* ``data_source``: the env id; ``ability``: ``tool_search`` or ``decomposition``;
* ``reward_model``: ``{"style": "rule", "ground_truth": <gold ids as JSON>}``;
* ``agent_name``: ``toolgym_agent``;
* ``extra_info``: ``task_id``, ``gold``, ``split``, ``index``, ``env_id``, ``env_kwargs``,
  ``tools`` (the OpenAI schemas as JSON, empty for envs without tools) and ``tools_kwargs``
  (``create_kwargs.task_id`` for each tool; absent without tools).

The rows are built by :func:`toolgym.trainers.export_hf.task_rows`, the same builder as
``toolgym export-hf`` (one place for the prompt). Writes ``DIR/<split>.parquet`` and prints the
row count; ``--max-tasks`` below 1 is an error (exit 2), not "all" or "all but N".
"""
from __future__ import annotations

import json
from typing import Any

from toolgym.trainers.export_hf import task_rows

AGENT_NAME = "toolgym_agent"  # toolgym.trainers.verl.agent_loop.AGENT_NAME (not imported: verl is heavy)


def export_rows(env_id: str, split: str | None = None, env_kwargs: dict[str, Any] | None = None,
                max_tasks: int | None = None) -> list[dict[str, Any]]:
    """verl dataset rows for the tasks of ``env_id`` built with ``split`` (and ``env_kwargs``).

    The rows come from :func:`toolgym.trainers.export_hf.task_rows` (the one row builder; verl's
    prompt is its ``env_prompt``), laid out in verl's columns. ``max_tasks`` must be None or >= 1.
    """
    rows = []
    for row in task_rows(env_id, split, env_kwargs, max_tasks):
        schemas = json.loads(row["tools"])
        names = [s["function"]["name"] for s in schemas]
        extra: dict[str, Any] = {
            "index": row["index"],
            "split": row["split"],
            "task_id": row["task_id"],
            "gold": row["gold"],
            "env_id": env_id,
            "env_kwargs": row["env_kwargs"],
            "tools": row["tools"],
        }
        if names:  # parquet cannot store an empty struct: envs without tools leave the key out
            extra["tools_kwargs"] = {name: {"create_kwargs": {"task_id": row["task_id"]}} for name in names}
        rows.append({
            "data_source": env_id,
            "prompt": row["env_prompt"],
            "ability": "tool_search" if schemas else "decomposition",
            "reward_model": {"style": "rule", "ground_truth": json.dumps(row["gold"])},
            "agent_name": AGENT_NAME,
            "extra_info": extra,
        })
    return rows
