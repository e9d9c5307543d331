"""toolgym's envs as a verifiers environment (``verifiers==0.4.0``, its ``verifiers.v1`` stack).

verifiers 0.4 has no ``ToolEnv`` / ``MultiTurnEnv`` / ``Rubric`` any more (those were 0.1's). An
environment is now a **taskset** (config in, typed ``Task`` s out, each task's ``@vf.reward`` /
``@vf.metric`` methods scoring its ``Trace``), a **harness** (the agent program: it talks to the
model only through the rollout's interception endpoint, which records every call on the trace and
applies the run's model and sampling) and an ``Env`` that plays them (``SingleAgentEnv`` for a plain
taskset). Plugins are found by id: ``vf.load_environment(EnvConfig(taskset={"id": ID}))`` imports
the top-level module ``ID`` (``-`` -> ``_``) and takes the ``Taskset`` (and, by default, the
``Harness``) subclass its ``__all__`` exports. This module is that plugin:

* :class:`ToolgymTaskset`: the rows of :func:`toolgym.trainers.export_hf.task_rows` (the
  ``toolgym export-hf`` row builder) as :class:`ToolgymTask` s: ``prompt`` is the env's system
  prompt without its ``# Tools`` block plus the request (the tools travel as OpenAI ``tools``),
  ``id`` the toolgym task id; the task also carries its env id/kwargs, schemas, gold and reward.
* :class:`ToolgymHarness`: an in-process chat loop (verifiers' harness contract allows one, "as
  long as every model call goes through ``endpoint`` + ``secret``"). One toolgym env per rollout
  (``gymnasium.make(env_id, **env_kwargs)``, reset on the task); it offers the env's own
  ``search`` / ``submit`` schemas as ``tools``, and every tool call the model makes steps the env
  with the Hermes text a local rollout would send (:func:`toolgym.envs.render_call`), so searches,
  errors, the turn budget and ``SearchEvent`` s are the local env's. A call the env rejects (an
  unknown tool, bad arguments, arguments that are not JSON) comes back as the env's own error
  message and counts in ``invalid_actions``, as locally. The episode ends when the env ends it
  (``submit`` or the turn budget), or when the model answers without a tool call
  (``terminated_by = "no_call"``, as in the TRL and verl integrations); for a Decompose env that
  answer is the decomposition and steps the env. The finished ``Trajectory`` is written to
  ``trace.info["toolgym"]``.
* The rubric: :class:`ToolgymTask`'s ``@vf.reward`` is the configured toolgym outcome module's
  score of that trajectory (``get_reward(reward).score_group([trajectory], task).rewards[0]``),
  recorded under the scheme's name; ``@vf.metric`` s record the toolgym metrics (F1 of the
  selection, recall of the searches, invalid actions, turns). Per-turn credit (ESM, TCA,
  ``toolsearcher``) is refused when the env is built, exactly as in :mod:`toolgym.integrations.trl`:
  verifiers scores a trace with scalars, there is no per-turn advantage to carry it.

Use::

    from toolgym.integrations.verifiers import load_environment, run_episodes
    env = load_environment("toolgym/ToolSearch-v0", {"max_turns": 4}, reward="grpo_f1", num_tasks=8)
    episodes = await run_episodes(env, vf.EvalClientConfig(base_url="http://localhost:8000/v1"), "my-model")

``import toolgym.integrations.verifiers`` also registers the module as the top-level plugin
``toolgym_verifiers`` (verifiers' loader imports ids as top-level modules only).
"""
from __future__ import annotations

import json
import sys
from typing import Any

from pydantic import Field

import verifiers.v1 as vf

from toolgym.data.records import Task as ToolgymTaskRecord
from toolgym.data.records import Trajectory
from toolgym.envs.actions import Search, Submit
from toolgym.envs.syntax import render_call
from toolgym.integrations.trl import outcome_reward

__all__ = ["ToolgymTaskset", "ToolgymHarness"]  # verifiers' plugin exports: one Taskset, one Harness

PLUGIN_ID = "toolgym-verifiers"       # the taskset / harness id verifiers resolves
PLUGIN_MODULE = "toolgym_verifiers"   # ... to this top-level module name
INFO_KEY = "toolgym"                  # trace.info[INFO_KEY]: the episode's toolgym record


# -- the taskset ----------------------------------------------------------------------------------
class ToolgymTasksetConfig(vf.TasksetConfig):
    env_id: str = "toolgym/ToolSearch-v0"
    """A registered toolgym env id (`toolgym envs`)."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """`gymnasium.make` keywords (the split is added from `split`)."""
    reward: Any = "grpo_f1"
    """A toolgym outcome module or scheme name, or a reward config (`toolgym.rewards.get_reward`)."""
    split: str | None = "heldout"
    num_tasks: int | None = None


class ToolgymData(vf.TaskData):
    task_id: str
    env_id: str
    env_kwargs: dict[str, Any]
    reward: Any
    tools: list[dict[str, Any]]
    gold: list[str]
    task: dict[str, Any]
    """The whole toolgym `Task` (`Task.to_dict()`), what the reward module scores against."""


def _num(value: Any) -> float:
    return float(value)


class ToolgymTask(vf.Task[ToolgymData, vf.State, vf.TaskConfig]):
    """One toolgym task; its reward and metrics read the episode the harness left on the trace."""

    @property
    def key(self) -> str:
        return f"{self.data.env_id}:{self.data.task_id}"

    def _episode(self, trace: vf.Trace) -> Trajectory:
        record = trace.info.get(INFO_KEY)
        if not record or "trajectory" not in record:
            raise vf.TaskError(f"task {self.data.task_id}: the trace holds no toolgym episode (trace.info[{INFO_KEY!r}])")
        return Trajectory.from_dict(record["trajectory"])

    @vf.reward
    async def toolgym(self, task: ToolgymData, trace: vf.Trace) -> dict[str, float]:
        """The toolgym outcome module's score of this rollout, under the scheme's name."""
        module = _reward_module(task.env_id, task.env_kwargs, task.reward)
        trajectory = self._episode(trace)
        value = float(module.score_group([trajectory], ToolgymTaskRecord.from_dict(task.task)).rewards[0])
        return {_reward_name(task.reward, module): value}

    @vf.metric
    async def toolgym_metrics(self, task: ToolgymData, trace: vf.Trace) -> dict[str, float]:
        """Selection F1 / exact match, search recall, invalid actions and turns (toolgym's metrics)."""
        trajectory = self._episode(trace)
        gold = set(task.gold)
        chosen = set(trajectory.selection or ())
        hit = len(chosen & gold)
        precision = hit / len(chosen) if chosen else 0.0
        recall = hit / len(gold) if gold else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {"selection_f1": f1, "exact_match": float(bool(gold) and chosen == gold),
                "search_recall": len(trajectory.seen & gold) / len(gold) if gold else 0.0,
                "invalid_actions": _num(trajectory.invalid_actions), "num_turns": _num(trajectory.num_turns),
                "submitted": float(trajectory.terminated_by == "submit")}


_MODULES: dict[tuple[str, str, str], Any] = {}  # one reward module per (env id, kwargs, config) in this process


def _reward_module(env_id: str, env_kwargs: dict[str, Any], reward: Any) -> Any:
    """``outcome_reward`` (TRL's: per-turn credit refused, ``counterfactual`` on the env's own index), cached."""
    key = (env_id, json.dumps(env_kwargs, sort_keys=True, default=str), json.dumps(reward, sort_keys=True, default=str))
    if key not in _MODULES:
        env = _make_env(env_id, env_kwargs)
        try:
            _MODULES[key] = outcome_reward(reward, env=env)
        finally:
            env.close()
    return _MODULES[key]


def _reward_name(reward: Any, module: Any) -> str:
    return reward if isinstance(reward, str) else str(getattr(module, "name", "toolgym"))


def _make_env(env_id: str, env_kwargs: dict[str, Any]) -> Any:
    import gymnasium

    from toolgym.envs.registry import require_env_id  # (importing it registers the ids)

    require_env_id(env_id)
    return gymnasium.make(env_id, **env_kwargs)


class ToolgymTaskset(vf.Taskset[ToolgymTask, ToolgymTasksetConfig]):
    """The env's tasks in ``split``, one row each from ``toolgym export-hf``'s row builder."""

    def load(self):
        from toolgym.trainers.export_hf import task_rows

        config = self.config
        kwargs = {**config.env_kwargs, **({"split": config.split} if config.split is not None else {})}
        _reward_module(config.env_id, kwargs, config.reward)  # per-turn credit is refused before any rollout
        rows = task_rows(config.env_id, config.split, config.env_kwargs, config.num_tasks)
        if not rows:
            raise ValueError(f"{config.env_id} has no tasks in split {config.split!r}")
        for row in rows:
            yield ToolgymTask(ToolgymData(
                id=row["task_id"], name=f"{config.env_id}:{row['task_id']}", prompt=row["prompt"],
                task_id=row["task_id"], env_id=config.env_id, env_kwargs=json.loads(row["env_kwargs"]),
                reward=config.reward, tools=json.loads(row["tools"]), gold=list(row["gold"]),
                task=json.loads(row["task"])), config.task)


# -- the harness ----------------------------------------------------------------------------------
class ToolgymHarnessConfig(vf.HarnessConfig):
    id: str = PLUGIN_ID
    max_model_calls: int = 64
    """A guard only: the toolgym env's own `max_turns` ends an episode first."""


def _action_text(env: Any, name: str, arguments: str) -> str:
    """The text a local rollout sends for this call: ``render_call`` for a well-formed search/submit, else the
    same Hermes call written as is, so the env (not this loop) judges and reports what is wrong with it."""
    protocol = env.unwrapped.protocol
    try:
        args = json.loads(arguments) if arguments else {}
    except (json.JSONDecodeError, RecursionError):
        args = None
    if isinstance(args, dict):
        try:
            if name == "search" and set(args) <= {"query", "category"} and isinstance(args.get("query"), str) \
                    and isinstance(args.get("category"), (str, type(None))):
                return render_call(Search(query=args["query"], category=args.get("category")), protocol)
            if name == "submit" and set(args) == {"tools"} and isinstance(args["tools"], list):
                return render_call(Submit(tool_ids=tuple(str(t) for t in args["tools"])), protocol)
        except (ValueError, TypeError):
            pass
    body = json.dumps({"name": name, "arguments": args if args is not None else arguments}, ensure_ascii=False)
    return "<tool_call>" + body.replace("<", "\\u003c") + "</tool_call>"


def _wire_messages(prompt: Any) -> list[dict[str, Any]]:
    out = []
    for m in prompt or []:
        d = m.model_dump(exclude_none=True) if hasattr(m, "model_dump") else dict(m)
        out.append({"role": d["role"], "content": d.get("content") or ""})
    return out


class ToolgymHarness(vf.Harness[ToolgymHarnessConfig]):
    """The chat loop over one toolgym env per rollout (see the module docstring)."""

    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url=None):
        from openai import AsyncOpenAI

        if not isinstance(data, ToolgymData):
            data = ToolgymData.model_validate(data.model_dump())
        env = _make_env(data.env_id, data.env_kwargs)
        try:
            _, info = env.reset(seed=data.idx or 0, options={"task": data.task_id})
            tools = info.get("tool_schemas") or []
            system, prompt = self.resolve_prompt(data)
            messages = ([{"role": "system", "content": system}] if system else []) + (
                [{"role": "user", "content": prompt}] if isinstance(prompt, str) else _wire_messages(prompt))
            client = AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0)
            final: Trajectory | None = None
            try:
                for _ in range(self.config.max_model_calls):
                    kwargs: dict[str, Any] = {"model": ctx.model, "messages": messages}
                    if tools:
                        kwargs["tools"] = tools
                    completion = await client.chat.completions.create(**kwargs)
                    message = completion.choices[0].message
                    calls = list(message.tool_calls or [])
                    messages.append(message.model_dump(exclude_none=True))
                    if not calls:
                        if not tools:  # Decompose: the answer is the reply text
                            final = self._step(env, message.content or "")[1] or final
                        break
                    for call in calls:
                        if final is not None:  # the episode ended earlier in this turn
                            obs = "The episode is over."
                        else:
                            obs, final = self._step(env, _action_text(env, call.function.name, call.function.arguments or ""))
                        messages.append({"role": "tool", "tool_call_id": call.id, "content": obs})
                    if final is not None:
                        break
            finally:
                await client.close()
            trajectory = final if final is not None else self._unfinished(env)
            trace.info[INFO_KEY] = {"env_id": data.env_id, "task_id": data.task_id, "trajectory": trajectory.to_dict()}
            trace.stop(f"toolgym_{trajectory.terminated_by}")
        finally:
            env.close()
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")

    @staticmethod
    def _step(env: Any, action: str) -> tuple[str, Trajectory | None]:
        obs, _, terminated, truncated, info = env.step(action)
        return obs, (info["trajectory"] if terminated or truncated else None)

    @staticmethod
    def _unfinished(env: Any) -> Trajectory:
        trajectory = env.unwrapped.trajectory()
        trajectory.terminated_by = "no_call"
        return trajectory


# -- entry points ---------------------------------------------------------------------------------
def load_environment(env_id: str = "toolgym/ToolSearch-v0", env_kwargs: dict[str, Any] | None = None,
                     reward: Any = "grpo_f1", split: str | None = "heldout", num_tasks: int | None = None,
                     **env_config: Any) -> vf.Env:
    """A verifiers ``Env`` (``SingleAgentEnv``) over ``env_id``'s tasks, built by verifiers' own loader.

    ``env_config``: further ``vf.EnvConfig`` fields (e.g. ``agent={"max_turns": 8}``, ``timeout=...``).
    A per-turn credit scheme (``toolsearcher``, ``esm``, ``tca``...) is a ``ValueError`` here.
    """
    taskset = {"id": PLUGIN_ID, "env_id": env_id, "env_kwargs": dict(env_kwargs or {}), "reward": reward,
               "split": split, "num_tasks": num_tasks}
    kwargs = {**dict(env_kwargs or {}), **({"split": split} if split is not None else {})}
    _reward_module(env_id, kwargs, reward)  # refused now, with the one-line reason, not at the first rollout
    agent = dict(env_config.pop("agent", None) or {})
    # the harness runs in this process, so the agent's runtime is the local one (verifiers' default is a Prime sandbox)
    agent.setdefault("runtime", {"type": "subprocess"})
    config = vf.resolve_env_config({"taskset": taskset, "agent": agent, **env_config})
    return vf.load_environment(config)


async def run_episodes(env: vf.Env, client: Any, model: str, num_rollouts: int = 1,
                       num_tasks: int | None = None, max_concurrent: int | None = None) -> list[vf.Episode]:
    """Run ``num_rollouts`` episodes of each task, as ``vf-eval``'s in-process runner does (``env.serving()``,
    ``env.slots``, ``env.run_slot``), without its output files or platform upload. ``client``: a
    ``vf.EvalClientConfig(base_url=...)`` (an OpenAI-compatible endpoint)."""
    import asyncio

    from verifiers.v1.clients import ModelContext

    tasks = list(env.taskset.take(num_tasks) if num_tasks is not None else env.taskset)
    ctx = ModelContext(client=client, model=model)
    semaphore = asyncio.Semaphore(max_concurrent) if max_concurrent else None
    async with env.serving():
        slots = [slot for task in tasks for slot in env.slots(task, num_rollouts)]
        return list(await asyncio.gather(*(env.run_slot(slot, ctx, semaphore) for slot in slots)))


sys.modules.setdefault(PLUGIN_MODULE, sys.modules[__name__])
