"""``ToolgymTool``: verl ``BaseTool`` for toolgym's ``search`` and ``submit`` (docs/scale.md).

One class serves both names (the tool YAML lists it twice, ``configs/verl/tool_config.yaml``);
both reach the same toolgym env of their trajectory (:mod:`.episodes`). A call's arguments
are rendered back into the env's own Hermes action text, so the env parses, checks and records
it exactly as in local training: same error observations, same ``SearchEvent``s.

Tool ``config`` keys: ``env_id`` (default ``toolgym/ToolSearch-v0``) and ``env_kwargs``
(passed to ``gymnasium.make``). The task comes from the sample's ``extra_info.task_id`` (or
``tools_kwargs.<name>.create_kwargs.task_id``), which ``toolgym export-verl`` writes.
"""
from __future__ import annotations

import json
from typing import Any, Optional
from uuid import uuid4

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from toolgym.trainers.verl import episodes

DEFAULT_ENV_ID = "toolgym/ToolSearch-v0"
MAX_ARGUMENT_CHARS = 32_768  # the env's own action cap: longer calls get an error observation, unparsed


def _schema_for(name: str) -> OpenAIFunctionToolSchema:
    from toolgym.envs.prompts import search_schema, submit_schema

    schema = {"search": search_schema, "submit": submit_schema}[name]()
    return OpenAIFunctionToolSchema.model_validate(schema)


class ToolgymTool(BaseTool):
    """``search`` or ``submit`` on the trajectory's toolgym env; returns the env's observation text."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None):
        config = dict(config or {})
        if tool_schema is None:
            name = config.get("name")
            if name not in ("search", "submit"):
                raise ValueError("ToolgymTool needs a tool_schema or config.name in {'search', 'submit'}")
            tool_schema = _schema_for(name)
        super().__init__(config, tool_schema)
        if self.name not in ("search", "submit"):
            raise ValueError(f"ToolgymTool serves 'search' and 'submit', not {self.name!r}")
        self.env_id = str(config.get("env_id") or DEFAULT_ENV_ID)
        self.env_kwargs = dict(config.get("env_kwargs") or {})
        self._created: dict[str, dict[str, Any]] = {}

    async def create(self, instance_id: Optional[str] = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        instance_id = instance_id or uuid4().hex
        self._created[instance_id] = dict(kwargs.get("create_kwargs") or {})
        return instance_id, ToolResponse()

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> tuple[ToolResponse, float, dict]:
        agent_data = kwargs.get("agent_data")
        key = getattr(agent_data, "request_id", None) or instance_id
        episode = episodes.get(key)
        if episode is None:
            task_id = episodes.task_id_from(self._created.get(instance_id, {})) or episodes.task_id_from(
                getattr(agent_data, "tools_kwargs", None) or {})
            if task_id is None:
                return ToolResponse(text="Error: this sample carries no toolgym task id (extra_info.task_id)."), 0.0, {}
            episode = episodes.start(key, self.env_id, self.env_kwargs, task_id)
        try:
            action = "<tool_call>" + json.dumps({"name": self.name, "arguments": parameters}, ensure_ascii=False) + "</tool_call>"
        except (TypeError, ValueError) as exc:
            action = f"unserialisable arguments: {exc}"
        if len(action) > MAX_ARGUMENT_CHARS:
            action = action[:MAX_ARGUMENT_CHARS]  # the env then reports the cut call as invalid JSON
        obs, done = episodes.step(episode, action)
        if agent_data is not None:
            episodes.record(episode, agent_data.extra_fields)
        return ToolResponse(text=obs), 0.0, {"episode_done": done, "searches": len(episode.events)}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        episode = episodes.get(instance_id)
        return float(episode.env_return) if episode is not None else 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        # Under verl's agent loops the episode is keyed by the trajectory's request_id, not by
        # this per-call instance, so it lives on until ``toolgym_agent`` ends it (or the LRU
        # evicts it). A caller that keeps one instance per trajectory ends the episode here.
        self._created.pop(instance_id, None)
        episodes.release(instance_id)
