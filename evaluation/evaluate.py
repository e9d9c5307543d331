"""One evaluator for scripted agents and token policies, and the policy loading it needs.

:func:`evaluate` runs whole episodes of an actor on an env's tasks and scores each with
:func:`episode_metrics`; the result holds means (rates in percent), standard errors, and
``per_task`` (task id -> reward and metrics) so two evaluations on the same tasks can be compared
pair by pair with :func:`paired_difference`. An actor is either

* a :class:`~toolgym.agents.policy.ChatPolicy` (``HFChatPolicy``): episodes run in batches through
  :func:`~toolgym.agents.rollout.collect_rollouts`, with exact token ids; or
* an agent (``reset(obs, info)`` / ``act(obs, info) -> str``): one episode at a time. It gets
  only what a policy could see: :func:`agent_view` strips the gold-derived parts of ``info``.

``evaluate_agent`` (``toolgym eval --agent``) and ``evaluate_policy`` (``--policy``, the train
loop) are the two front doors, both on :func:`evaluate`.
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

import numpy as np

from toolgym.agents.policy import ChatPolicy
from toolgym.data.records import Task, Trajectory, write_rollouts


# Rates reported in percent; everything else as is.
PERCENT_KEYS = ("F1", "P", "R", "Match", "SRecall", "invalid", "submitted", "N@5", "C@10")
# info keys an env computes from the gold ids (Decompose-v0's NDCG) or that carry the whole record.
GOLD_INFO_KEYS = frozenset({"trajectory", "task", "gold", "ndcg_raw", "ndcg_atom"})


# -- metrics --------------------------------------------------------------------------------
def episode_metrics(trajectory: Trajectory, task: Task) -> dict[str, float]:
    """Metrics of one finished episode, as fractions (``turns``, ``search_turns`` as counts).

    ``F1``/``P``/``R``/``Match`` compare the submitted selection with the gold set (an episode
    that never submitted selects nothing); ``SRecall`` is the share of gold tools any search showed;
    ``invalid`` the share of turns that were invalid actions.
    """
    from toolgym.retrieval.metrics import search_recall, selection_match, selection_prf

    p, r, f1 = selection_prf(trajectory.selection, task.gold)
    return {
        "F1": float(f1), "P": float(p), "R": float(r),
        "Match": float(selection_match(trajectory.selection, task.gold)),
        "SRecall": float(search_recall(trajectory.seen, task.gold)),
        "invalid": trajectory.invalid_actions / max(trajectory.num_turns, 1),
        "submitted": float(trajectory.terminated_by == "submit"),
        "turns": float(trajectory.num_turns),
        "search_turns": float(len(trajectory.events)),
        **(decomposition_metrics(trajectory, task) if trajectory.subtasks is not None else {}),
    }


def decomposition_metrics(trajectory: Trajectory, task: Task) -> dict[str, float]:
    """A decomposition episode's fused list (its ``selection``) as retrieval: ``N@5``, ``C@10``, and
    the number of subtasks it wrote."""
    from toolgym.retrieval.metrics import completeness_at_k, ndcg_at_k

    fused = list(trajectory.selection or [])
    return {"N@5": float(ndcg_at_k(fused, task.gold, 5)), "C@10": float(completeness_at_k(fused, task.gold, 10)),
            "subtasks": float(len(trajectory.subtasks or ()))}


def _stderr(values: Sequence[float]) -> float:
    return float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else 0.0


def summarize(rows: Sequence[dict[str, float]]) -> dict[str, Any]:
    """Means (rates in percent) and standard errors ``<key>_se`` of per-episode rows; ``n`` = rows."""
    out: dict[str, Any] = {}
    for key in rows[0]:
        scale = 100.0 if key in PERCENT_KEYS else 1.0
        values = [scale * row[key] for row in rows]
        out[key] = float(np.mean(values))
        out[f"{key}_se"] = _stderr(values)
    out["n"] = len(rows)
    return out


def paired_gain(before: Sequence[float], after: Sequence[float]) -> dict[str, float]:
    """Mean paired difference and its standard error.

    With ``d_i = after_i - before_i`` over the same ``n`` tasks:
    ``gain = (1/n) Σ d_i``,  ``se = sqrt( Σ (d_i - gain)² / (n - 1) ) / sqrt(n)``  (0 when n < 2).
    ``z = gain / se`` (inf when se is 0 and gain is not, 0 when both are 0).
    """
    b, a = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    if b.shape != a.shape or b.ndim != 1:
        raise ValueError(f"paired_gain needs two equal-length lists, got {b.shape} and {a.shape}")
    if len(b) == 0:
        raise ValueError("paired_gain needs at least one task")
    d = a - b
    gain = float(d.mean())
    se = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else 0.0
    z = gain / se if se > 0 else (math.inf if gain else 0.0) * (1 if gain >= 0 else -1)
    return {"gain": gain, "se": se, "z": float(z), "n": len(d), "before": float(b.mean()), "after": float(a.mean()),
            "exceeds_2se": bool(gain > 2 * se)}


def paired_difference(before: Mapping[str, Any], after: Mapping[str, Any], key: str = "reward") -> tuple[float, float, int]:
    """Mean gain ``after − before`` over the task ids both evaluated, its paired standard error, and n.

    ``d_i = after_i − before_i`` per shared task ``i``; gain ``= mean(d)``, ``SE = std(d, ddof=1) / √n``
    (0 for n = 1). Arguments are :func:`evaluate` results (their ``per_task``) or plain
    ``{task_id: value}`` / ``{task_id: {key: value}}`` mappings.
    """
    def values(side: Mapping[str, Any]) -> dict[str, float]:
        table = side.get("per_task", side) if isinstance(side.get("per_task"), Mapping) else side
        return {str(t): float(v[key] if isinstance(v, Mapping) else v) for t, v in table.items()}

    a, b = values(before), values(after)
    shared = [t for t in a if t in b]
    if not shared:
        raise ValueError("the two evaluations share no task id")
    out = paired_gain([a[t] for t in shared], [b[t] for t in shared])
    return out["gain"], out["se"], out["n"]


# -- what an agent may see ------------------------------------------------------------------
def agent_view(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` without what a policy could not see: gold-derived keys, and the ``first_found`` gold
    ids of the search event (the results themselves stay; they are in the observation)."""
    view = {k: v for k, v in info.items() if k not in GOLD_INFO_KEYS}
    event = view.get("event")
    if event is not None and getattr(event, "first_found", None):
        view["event"] = dataclasses.replace(event, first_found=[])
    return view


def run_episode(env: Any, agent: Any, task: Task, seed: int | None = None,
                reset_options: dict[str, Any] | None = None) -> tuple[Trajectory, float]:
    """One episode of ``agent`` on ``task``; returns the env's final trajectory and the return."""
    obs, info = env.reset(seed=seed, options={**(reset_options or {}), "task": task})
    agent.reset(obs, agent_view(info))
    total = 0.0
    while True:
        obs, reward, terminated, truncated, info = env.step(agent.act(obs, agent_view(info)))
        total += float(reward)
        if terminated or truncated:
            return info["trajectory"], total


# -- envs and tasks -------------------------------------------------------------------------
def make_envs(env_id: str, kwargs: dict[str, Any], n: int) -> list[Any]:
    """``n`` independent episodes' worth of envs (they share one retrieval index per process).

    A keyword the env does not take is a ``ValueError`` naming it (before any model loads).
    """
    import gymnasium

    from toolgym.envs.registry import require_env_id  # (importing it registers the ids)

    require_env_id(env_id)
    try:
        return [gymnasium.make(env_id, **kwargs) for _ in range(n)]
    except TypeError as exc:
        raise ValueError(f"env kwargs {sorted(kwargs)} for {env_id}: {exc}") from None


def env_tasks(env: Any) -> list[Task]:
    tasks = getattr(env.unwrapped, "tasks", None)
    if not tasks:
        raise ValueError(f"{env.spec.id if env.spec else env}: the env exposes no task list (env.unwrapped.tasks)")
    return list(tasks)


def choose_tasks(env: Any, tasks: Sequence[Task | str | int] | None, limit: int | None) -> list[Task]:
    """Task objects from ids, indices or Tasks (default: all of the env's), the first ``limit`` of them."""
    every = env_tasks(env)
    if tasks is None:
        chosen = every
    else:
        by_id = {t.id: t for t in every}
        chosen = []
        for t in tasks:
            if isinstance(t, Task):
                chosen.append(t)
            elif isinstance(t, int) and not isinstance(t, bool) and 0 <= t < len(every):
                chosen.append(every[t])
            elif str(t) in by_id:
                chosen.append(by_id[str(t)])
            else:
                raise ValueError(f"unknown task id {t!r} for this environment")
    if limit is not None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1 (or None for all tasks), got {limit}")
        chosen = chosen[:limit]
    if not chosen:
        raise ValueError("no task to evaluate")
    return chosen


# -- the evaluator --------------------------------------------------------------------------
def evaluate(actor: Any, envs: Sequence[Any], tasks: Sequence[Task], *, group_size: int = 1, seed: int = 0,
             max_context_tokens: int = 4096, reset_options: dict[str, Any] | None = None, progress: bool = True,
             save_rollouts: str | Path | None = None) -> dict[str, Any]:
    """Run ``group_size`` episodes of ``actor`` on each task; metrics, their standard errors, ``per_task``.

    ``actor`` is a :class:`ChatPolicy` (at most ``len(envs)`` episodes at once) or an agent (one
    episode at a time in ``envs[0]``). Episode ``g`` of task ``j`` resets with seed
    ``seed + j * group_size + g``. ``per_task[task_id]`` holds the task's mean reward and metrics
    (fractions), over its ``group_size`` episodes.
    """
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    mode: Literal["policy", "agent"] = "policy" if isinstance(actor, ChatPolicy) else "agent"
    jobs = [(task, j * group_size + g) for j, task in enumerate(tasks) for g in range(group_size)]
    episodes: list[tuple[Trajectory, float]] = []
    generated = 0
    started = time.time()
    from tqdm import tqdm

    bar = tqdm(total=len(jobs), desc="episodes", unit="ep", disable=not progress, leave=False)
    if mode == "policy":
        from toolgym.agents.rollout import collect_rollouts

        # at most len(envs) episodes at once; a finished episode's env takes the next task
        rollouts = collect_rollouts(actor, envs, [t.id for t, _ in jobs], seeds=[seed + k for _, k in jobs],
                                    max_context_tokens=max_context_tokens, reset_options=reset_options,
                                    on_episode=bar.update)
        episodes += [(r.trajectory, r.env_return) for r in rollouts]
        generated += sum(r.generated_tokens for r in rollouts)
    else:
        if hasattr(actor, "bind_env"):  # the oracle reads gold from the env, by design
            actor.bind_env(envs[0].unwrapped)
        for task, k in jobs:
            episodes.append(run_episode(envs[0], actor, task, seed=seed + k, reset_options=reset_options))
            bar.update(1)
    bar.close()

    rows, by_task, by_group = [], defaultdict(list), defaultdict(list)
    for (task, _), (trajectory, ret) in zip(jobs, episodes):
        row = {"reward": float(ret), **episode_metrics(trajectory, task)}
        rows.append(row)
        by_task[task.id].append(row)
        if task.group:
            by_group[task.group].append(row)
    result = summarize(rows)
    result["tasks"] = len(tasks)
    result["per_task"] = {tid: {k: float(np.mean([r[k] for r in rs])) for k in rs[0]} for tid, rs in by_task.items()}
    if by_group:
        result["groups"] = {name: summarize(group_rows) for name, group_rows in sorted(by_group.items())}
    result["seconds"] = time.time() - started
    if mode == "policy":
        result["generated_tokens"] = generated
    if save_rollouts:
        grouped: dict[str, list[Trajectory]] = defaultdict(list)
        for (task, _), (trajectory, _) in zip(jobs, episodes):
            grouped[task.id].append(trajectory)
        write_rollouts(save_rollouts, [(task, grouped[task.id]) for task in tasks])
    return result


def evaluate_policy(policy_or_model: Any, env_id: str = "toolgym/ToolSearch-v0", tasks: Sequence[Any] | None = None,
                    split: str | None = "heldout", num_tasks: int | None = 20, env_kwargs: dict[str, Any] | None = None,
                    batch_size: int = 8, temperature: float = 0.0, max_new_tokens: int | None = None,
                    max_context_tokens: int = 4096, reset_options: dict[str, Any] | None = None,
                    progress: bool = True, constrained: str | None = None) -> dict[str, Any]:
    """:func:`evaluate` of a policy: one episode per task, greedy unless ``temperature`` > 0.

    ``policy_or_model``: a :class:`ChatPolicy` or a model name/folder (a ``toolgym train`` run or
    checkpoint folder loads with :func:`toolgym.trainers.policy_loading.load_policy`). ``tasks``: ids or indices; else the first
    ``num_tasks`` (``None`` = all) of the env built with ``split``. Besides :func:`evaluate`'s keys
    the result has ``env_id``, ``split``, ``num_tasks`` and ``invalid_rate`` (a fraction; kept for
    older readers). ``constrained="toolsearch"`` decodes with
    :class:`~toolgym.agents.constrained.ConstrainedToolSearchPolicy` (a checkpoint trained with
    ``model.constrained`` already does).
    """
    from toolgym.agents.constrained import ConstrainedToolSearchPolicy, constrain_policy

    policy = as_policy(policy_or_model)
    if not isinstance(policy, ConstrainedToolSearchPolicy):
        policy = constrain_policy(policy, constrained)
    kwargs = dict(env_kwargs or {})
    if split is not None:
        kwargs.setdefault("split", split)
    probe = make_envs(env_id, kwargs, 1)[0]
    chosen = choose_tasks(probe, tasks, num_tasks)
    envs = [probe] + make_envs(env_id, kwargs, max(0, min(batch_size, len(chosen)) - 1))
    saved = policy.sampling
    policy.sampling = dataclasses.replace(saved, temperature=temperature, max_new_tokens=int(max_new_tokens or saved.max_new_tokens))
    try:
        result = evaluate(policy, envs, chosen, max_context_tokens=max_context_tokens, reset_options=reset_options,
                          progress=progress)
    finally:
        policy.sampling = saved
    result.update(env_id=env_id, split=split, num_tasks=result["tasks"], invalid_rate=result["invalid"] / 100.0)
    return result


def as_policy(policy_or_model: Any, sampling: Any = None, device: str | None = None) -> Any:
    """A policy object as it is; a model name or folder loaded as an :class:`HFChatPolicy`."""
    if not isinstance(policy_or_model, (str, Path)):
        return policy_or_model
    from toolgym.agents.hf_policy import HFChatPolicy
    from toolgym.agents.model import pick_device

    path = Path(policy_or_model)
    if path.is_dir() and not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path}: not a model folder (no config.json); a `toolgym train` run or checkpoint "
                                "folder loads with toolgym.trainers.policy_loading.load_policy")
    return HFChatPolicy.from_pretrained(str(policy_or_model), sampling=sampling, device=pick_device(device))


def evaluate_agent(env_id_or_env: Any, agent: Any, *, dataset: str | None = None, split: str | None = None,
                   tasks: Sequence[Task | str] | None = None, limit: int | None = None, group_size: int = 1,
                   save_rollouts: str | None = None, seed: int = 0, env_kwargs: dict[str, Any] | None = None,
                   progress: bool = True) -> dict[str, Any]:
    """:func:`evaluate` of a scripted agent (``toolgym eval --agent``).

    Args:
        env_id_or_env: a registered id (``toolgym envs``) or an environment object.
        agent: anything with ``reset(obs, info)`` and ``act(obs, info) -> str``; it sees
            :func:`agent_view` of ``info``. An agent with ``bind_env(env)`` (the oracle) is bound
            to the unwrapped env first.
        dataset, split, env_kwargs: passed to ``gymnasium.make`` when an id is given.
        tasks: Task objects or task ids (default: every task of the env); ``limit``: the first N.
        group_size: rollouts per task; save_rollouts: write them for ``toolgym replay``.

    Returns :func:`evaluate`'s metrics plus ``config``.
    """
    own_env = isinstance(env_id_or_env, str)
    if own_env:
        kwargs = dict(env_kwargs or {})
        if dataset is not None:
            kwargs["dataset"] = dataset
        if split is not None:
            kwargs["split"] = split
        env = make_envs(env_id_or_env, kwargs, 1)[0]
    else:
        if dataset is not None or split is not None or env_kwargs:
            raise ValueError("dataset, split and env_kwargs apply to an env id, not to an env object")
        env = env_id_or_env
    try:
        chosen = choose_tasks(env, tasks, limit)
        result = evaluate(agent, [env], chosen, group_size=group_size, seed=seed, progress=progress,
                          save_rollouts=save_rollouts)
    finally:
        if own_env:
            env.close()
    env_name = env_id_or_env if own_env else getattr(getattr(env, "spec", None), "id", type(env.unwrapped).__name__)
    result["config"] = {"env": env_name, "agent": getattr(agent, "name", type(agent).__name__), "dataset": dataset,
                        "split": split, "group_size": group_size, "seed": seed, "limit": limit}
    return result


def format_eval_table(evals: dict[str, Any]) -> str:
    """A plain-text table of evaluations side by side (``{"before": result, "after": result}``), unpaired
    means ± se; ``toolgym train`` prints the paired gain under it (:func:`~toolgym.cli.train.paired_summary`)."""
    keys = [k for k in ("reward", "N@5", "C@10", "subtasks", "F1", "Match", "SRecall", "search_turns", "invalid", "submitted")
            if any(k in v for v in evals.values())]
    lines = [f"{'metric':<16}" + "".join(f"{name:>20}" for name in evals)]
    for k in keys:
        cells = [f"{v[k]:.3f} ± {v.get(k + '_se', 0):.3f}" if k in v else "-" for v in evals.values()]
        lines.append(f"{k:<16}" + "".join(f"{c:>20}" for c in cells))
    return "\n".join(lines)  # the paired gain is one line of its own: evaluation.paired.paired_summary
