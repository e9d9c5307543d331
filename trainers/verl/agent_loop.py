"""The verl agent loop and agent-loop manager of the toolgym plugin (docs/scale.md).

``toolgym_agent`` (:class:`ToolgymAgentLoop`) is verl's own ``ToolAgentLoop`` plus three
things: it starts the trajectory's toolgym env before the first turn (with the batch's
training progress, for an env with a category curriculum, whose prompt it then uses), records
each assistant turn's response span, and at the end writes the trajectory (``SearchEvent``s
included) into ``extra_fields`` and ends the episode. Token handling is verl's: generated
tokens get response mask 1, tool observations and chat-template glue get 0.

:class:`ToolgymAgentLoopManager` (set ``actor_rollout_ref.rollout.agent.agent_loop_manager_class``
to it) writes the batch's training progress (verl's global step over the total) into a column
the agent loops read, runs verl's manager, then scores every GRPO group (rows sharing a
``uid``) with the configured toolgym reward module and writes the turn-span credit layout into
``rm_scores`` (:mod:`.credit`); the ``toolgym_turn_credit`` estimator turns it into per-token
advantages. Validation batches keep verl's own per-sample score.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np

from verl.experimental.agent_loop.agent_loop import AgentLoopManager, AgentLoopOutput, register
from verl.experimental.agent_loop.tool_agent_loop import AgentState, ToolAgentLoop
from verl.protocol import DataProto
from verl.utils.ray_utils import auto_await

from toolgym.data.records import Trajectory
from toolgym.trainers.verl import episodes
from toolgym.trainers.verl.credit import score_groups, turn_span_scores
from toolgym.trainers.verl.tool import DEFAULT_ENV_ID, ToolgymTool

AGENT_NAME = "toolgym_agent"
MAX_ENV_KWARGS_CHARS = 65_536  # a sample's env kwargs are a few keys; anything longer is ignored unparsed


@register(AGENT_NAME)
class ToolgymAgentLoop(ToolAgentLoop):
    """verl's tool agent loop with a toolgym episode per trajectory and per-turn response spans."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        self._toolgym_spans: list[tuple[int, int]] = []
        self._toolgym_agent_data: Any = None
        self._toolgym_task_id = episodes.task_id_from(kwargs)
        if self._toolgym_task_id is None:
            for value in (kwargs.get("tools_kwargs") or {}).values():
                self._toolgym_task_id = self._toolgym_task_id or episodes.task_id_from(value if isinstance(value, dict) else {})
        # the sample names its env (``toolgym export-verl`` writes both); else the tool YAML's
        extra = kwargs.get("extra_info") if isinstance(kwargs.get("extra_info"), dict) else {}
        tool = self._toolgym_tool()
        self._toolgym_env_id = str(extra.get("env_id") or (tool.env_id if tool else DEFAULT_ENV_ID))
        env_kwargs = extra.get("env_kwargs")
        if isinstance(env_kwargs, str) and len(env_kwargs) <= MAX_ENV_KWARGS_CHARS:  # parquet carries it as JSON
            try:
                env_kwargs = json.loads(env_kwargs)
            except (json.JSONDecodeError, RecursionError):
                env_kwargs = None
        self._toolgym_env_kwargs = dict(env_kwargs) if isinstance(env_kwargs, dict) else (dict(tool.env_kwargs) if tool else {})
        self._toolgym_progress = episodes.progress_from(kwargs.get(episodes.PROGRESS_KEY))  # the manager's column
        try:
            output = await super().run(sampling_params, **kwargs)
            self._finish(output)
        finally:
            if self._toolgym_agent_data is not None:
                episodes.release(self._toolgym_agent_data.request_id)
        return output

    def _toolgym_tool(self) -> ToolgymTool | None:
        return next((t for t in self.tools.values() if isinstance(t, ToolgymTool)), None)

    async def _handle_pending_state(self, agent_data: Any, sampling_params: dict[str, Any]) -> AgentState:
        self._toolgym_agent_data = agent_data
        if self._toolgym_task_id is not None:
            episode = episodes.start(agent_data.request_id, self._toolgym_env_id, self._toolgym_env_kwargs,
                                     self._toolgym_task_id, progress=self._toolgym_progress)
            episodes.record(episode, agent_data.extra_fields)
            if episode.curriculum and episode.prompt:
                # the curriculum chose this episode's category mode: the prompt is the env's, as in a
                # local rollout (the exported row holds the schema of one mode only)
                agent_data.messages = [dict(m) for m in episode.prompt]
        # The env's system prompt (the sample's first message) already lists the tool schemas, as
        # in local rollouts; rendering them again through the chat template would describe them twice.
        agent_data._active_tool_schemas = None
        return await super()._handle_pending_state(agent_data, sampling_params)

    async def _handle_generating_state(self, agent_data: Any, sampling_params: dict[str, Any],
                                       ignore_termination: bool = False) -> AgentState:
        start = len(agent_data.response_mask)
        state = await super()._handle_generating_state(agent_data, sampling_params, ignore_termination)
        self._toolgym_spans.append((start, len(agent_data.response_mask)))
        return state

    async def _handle_processing_tools_state(self, agent_data: Any) -> AgentState:
        state = await super()._handle_processing_tools_state(agent_data)
        episode = episodes.get(agent_data.request_id)
        if episode is not None and episode.done:
            # the env ended the episode (submit or turn budget): no further turn, as in local rollouts
            return AgentState.TERMINATED
        return state

    def _finish(self, output: AgentLoopOutput) -> None:
        """Put the trajectory, its turn spans and the env's return into ``output.extra_fields``."""
        width = self.response_length
        spans = [(min(s, width), min(e, width)) for s, e in self._toolgym_spans]
        spans = [(s, e) for s, e in spans if e > s]
        fields = output.extra_fields
        agent_data = self._toolgym_agent_data
        episode = episodes.get(agent_data.request_id) if agent_data is not None else None
        if episode is not None and not episode.done and self._toolgym_spans and episodes.takes_text(episode):
            # an env without tools (Decompose) takes the whole final answer as its one action
            start, end = self._toolgym_spans[-1]
            answer = self.tokenizer.decode([t for t, m in zip(output.response_ids[start:end], output.response_mask[start:end]) if m],
                                           skip_special_tokens=True)
            episodes.step(episode, answer)
        if episode is not None:
            episodes.record(episode, fields)
            traj = fields[episodes.TRAJECTORY_KEY]
            if not episode.done:
                # the env did not end it: cut by the response budget, or the model answered without a call
                cut = len(agent_data.response_mask) >= width
                traj["terminated_by"] = "context" if cut else "no_call"
        else:
            traj = Trajectory(task_id=str(self._toolgym_task_id or ""), terminated_by="error").to_dict()
            fields[episodes.TRAJECTORY_KEY] = traj
            fields.setdefault(episodes.EVENTS_KEY, [])
            fields.setdefault(episodes.RETURN_KEY, 0.0)
        traj["turn_spans"] = [list(s) for s in spans]
        fields[episodes.SPANS_KEY] = [list(s) for s in spans]


class TurnCreditScorer:
    """Scores verl rollout batches with a toolgym reward module into the turn-span layout (by the recorded spans)."""

    def __init__(self, env_id: str = DEFAULT_ENV_ID, env_kwargs: dict[str, Any] | None = None, reward: Any = None):
        from toolgym.rewards import build_reward

        env = episodes._make_env(env_id, dict(env_kwargs or {}))
        self.tasks = {t.id: t for t in env.unwrapped.tasks}
        # every shape `toolgym train` takes (a name, {name, options}, {modules}); None = the same default
        self.reward = build_reward(reward, index=env.unwrapped.index)

    @classmethod
    def from_config(cls, config: Any) -> "TurnCreditScorer":
        """From the ``toolgym`` section of a verl config (``+toolgym.env_id=... +toolgym.reward.name=...``)."""
        from omegaconf import OmegaConf

        section = config.get("toolgym") if hasattr(config, "get") else None
        plain = OmegaConf.to_container(section, resolve=True) if section is not None and not isinstance(section, dict) else dict(section or {})
        return cls(plain.get("env_id", DEFAULT_ENV_ID), plain.get("env_kwargs"), plain.get("reward"))

    def task(self, task_id: str) -> Any:
        try:
            return self.tasks[task_id]
        except KeyError:
            raise KeyError(f"task {task_id!r} is not in the scorer's env (check toolgym.env_kwargs.split)") from None

    def score(self, data: DataProto, group_keys: Any) -> dict[str, Any]:
        """``rm_scores`` in the turn-span layout plus per-row rewards and component means."""
        nt = data.non_tensor_batch
        if episodes.TRAJECTORY_KEY not in nt:
            raise ValueError(f"the batch has no {episodes.TRAJECTORY_KEY!r} column: run the '{AGENT_NAME}' agent loop")
        trajs = []
        for d in nt[episodes.TRAJECTORY_KEY]:
            if not isinstance(d, dict):
                raise ValueError("a row has no toolgym trajectory (was its agent_name 'toolgym_agent'?)")
            trajs.append(Trajectory.from_dict(d))
        spans = [[tuple(s) for s in (row or [])] for row in nt[episodes.SPANS_KEY]]
        values, rewards, comps = score_groups(trajs, list(group_keys), self.task, self.reward, [len(s) for s in spans])
        rm = turn_span_scores(data.batch["response_mask"], spans, values)
        return {"rm_scores": rm, "rewards": rewards, "components": comps}


def _select(config: Any, dotted: str) -> Any:
    node = config
    for key in dotted.split("."):
        node = node.get(key) if hasattr(node, "get") else None
        if node is None:
            return None
    return node


def batch_progress(meta_info: dict[str, Any], config: Any) -> float | None:
    """The training progress of a batch for the category curriculum: ``(global_steps − 1) / total``
    (verl counts steps from 1, so its first step is progress 0 as the local trainer's step 0),
    ``total`` = ``trainer.total_training_steps`` or the one verl's trainer writes into
    ``actor_rollout_ref.actor.optim.total_training_steps``. A validation batch is 1: it searches
    in the curriculum's final mode (the local evaluation drops the curriculum). None when the
    batch names no step or the config no total."""
    from toolgym.envs.curriculum import training_progress

    if meta_info.get("validate", False):
        return 1.0
    step = meta_info.get("global_steps")
    total = _select(config, "trainer.total_training_steps") or _select(config, "actor_rollout_ref.actor.optim.total_training_steps")
    if step is None or total is None or int(step) < 1 or int(total) < 1:
        return None
    return training_progress(int(step) - 1, int(total))


def add_progress(prompts: DataProto, config: Any) -> float | None:
    """Write the batch's training progress into its ``PROGRESS_KEY`` column (each agent loop hands it
    to its episode's reset); returns it, or None (then no column: envs fall back to their own rule)."""
    progress = batch_progress(prompts.meta_info, config)
    if progress is not None:
        prompts.non_tensor_batch[episodes.PROGRESS_KEY] = np.full(len(prompts), progress, dtype=np.float64)
    return progress


class ToolgymAgentLoopManager(AgentLoopManager):
    """verl's agent-loop manager that passes training progress to the episodes, then toolgym group
    credit in ``rm_scores`` for training batches."""

    @auto_await
    async def generate_sequences(self, prompts: DataProto) -> DataProto:
        add_progress(prompts, self.config)
        output = await super().generate_sequences(prompts)
        if prompts.meta_info.get("validate", False):
            return output
        if not hasattr(self, "_toolgym_scorer"):
            self._toolgym_scorer = TurnCreditScorer.from_config(self.config)
        keys = prompts.non_tensor_batch.get("uid")
        if keys is None:  # no uid: rows of one prompt are adjacent (verl repeats with interleave)
            n = int(self.rollout_config.n)
            keys = np.arange(len(output)) // max(n, 1)
        scored = self._toolgym_scorer.score(output, keys)
        output.batch["rm_scores"] = scored["rm_scores"].to(output.batch["response_mask"].device)
        output.non_tensor_batch["toolgym_reward"] = scored["rewards"].astype(np.float32)
        extra = list(output.meta_info.get("reward_extra_keys") or [])
        output.meta_info["reward_extra_keys"] = extra + ["toolgym_reward"]
        output.meta_info["toolgym_components"] = scored["components"]
        return output


