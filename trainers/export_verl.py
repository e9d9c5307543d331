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

Writes ``DIR/<split>.parquet`` and prints the row count.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

MAX_ENV_KWARGS_CHARS = 65_536  # a few gymnasium.make keywords; longer input is refused unparsed
AGENT_NAME = "toolgym_agent"  # toolgym.trainers.verl.agent_loop.AGENT_NAME (not imported: verl is heavy)


def export_rows(env_id: str, split: str | None = None, env_kwargs: dict[str, Any] | None = None,
                max_tasks: int | None = None) -> list[dict[str, Any]]:
    """verl dataset rows for the tasks of ``env_id`` built with ``split`` (and ``env_kwargs``)."""
    import gymnasium

    import toolgym.envs  # noqa: F401  (registers the ids)

    if env_id not in gymnasium.registry:
        raise KeyError(f"unknown env id {env_id!r}; see `toolgym envs`")
    kwargs = dict(env_kwargs or {})
    if split is not None:
        kwargs["split"] = split
    env = gymnasium.make(env_id, **kwargs)
    tasks = list(env.unwrapped.tasks)
    if split is not None:
        tasks = [t for t in tasks if t.split == split] or tasks
    if max_tasks:
        tasks = tasks[: int(max_tasks)]
    rows = []
    for index, task in enumerate(tasks):
        _, info = env.reset(seed=index, options={"task": task.id})
        schemas = info.get("tool_schemas") or []
        names = [s["function"]["name"] for s in schemas]
        gold = sorted(task.gold)
        extra: dict[str, Any] = {
            "index": index,
            "split": split or task.split,
            "task_id": task.id,
            "gold": gold,
            "env_id": env_id,
            "env_kwargs": json.dumps(kwargs, sort_keys=True),
            "tools": json.dumps(schemas),
        }
        if names:  # parquet cannot store an empty struct: envs without tools leave the key out
            extra["tools_kwargs"] = {name: {"create_kwargs": {"task_id": task.id}} for name in names}
        rows.append({
            "data_source": env_id,
            "prompt": [{"role": m["role"], "content": m["content"]} for m in info["messages"]],
            "ability": "tool_search" if schemas else "decomposition",
            "reward_model": {"style": "rule", "ground_truth": json.dumps(gold)},
            "agent_name": AGENT_NAME,
            "extra_info": extra,
        })
    env.close()
    return rows


def write_parquet(rows: list[dict[str, Any]], path: str | Path) -> Path:
    import pandas as pd

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("env_id", help="a registered env id (toolgym envs), e.g. toolgym/ToolSearch-StableToolBench-v0")
    parser.add_argument("--split", default="train", help="task split to export (default: train)")
    parser.add_argument("--out", required=True, help="output folder; writes <split>.parquet there")
    parser.add_argument("--max-tasks", type=int, default=None, help="export only the first N tasks")
    parser.add_argument("--env-kwargs", default="{}", help='JSON object of gymnasium.make keyword arguments, e.g. \'{"max_turns": 6}\'')


def run(args: argparse.Namespace) -> int:
    if len(args.env_kwargs) > MAX_ENV_KWARGS_CHARS:
        raise ValueError(f"--env-kwargs is longer than {MAX_ENV_KWARGS_CHARS} characters")
    try:
        env_kwargs = json.loads(args.env_kwargs)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--env-kwargs is not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise ValueError("--env-kwargs is nested too deeply") from None
    if not isinstance(env_kwargs, dict):
        raise ValueError("--env-kwargs must be a JSON object")
    rows = export_rows(args.env_id, args.split, env_kwargs, args.max_tasks)
    if not rows:
        raise ValueError(f"{args.env_id} has no tasks in split {args.split!r}")
    path = write_parquet(rows, Path(args.out) / f"{args.split}.parquet")
    print(f"wrote {len(rows)} rows to {path}")
    return 0
