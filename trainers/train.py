"""The local GRPO loop of ``toolgym train``, top to bottom (CleanRL's ``ppo.py`` is the model).

Each step: roll out ``group_size`` episodes of ``tasks_per_step`` tasks (a fixed seeded task
order, so a resumed run sees exactly the tasks it would have seen) -> score each group with the
reward module and spread its credit onto the policy's tokens -> one GRPO update -> log a metrics
line, save the rollouts, checkpoint. Outputs in ``run_dir``: ``metrics.jsonl``,
``rollouts/step_*.jsonl`` (for ``toolgym replay``), ``checkpoints/step_*``, ``curves.png`` and
``eval.json`` (before/after evaluation, per task). ``resume=True`` continues from the newest
checkpoint with no lost or repeated step (:func:`resume_from_checkpoint`).
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from toolgym.trainers.config import TrainConfig, config_dict, load_train_config, strict_dataclass, validate
from toolgym.agents.model import build_policy
from toolgym.evaluation.evaluate import choose_tasks, env_tasks, evaluate, make_envs


def train(cfg: Any, resume: bool = False, progress: bool = True) -> dict[str, Any]:
    """Run (or resume) the GRPO loop described by ``cfg`` (a :class:`TrainConfig`, a YAML path or a
    nested dict, see :func:`load_train_config`); returns a summary dict.

    ``run_dir`` is held by this process for the whole run (:func:`~toolgym.trainers.run_lock.run_dir_lock`):
    a second run on it is refused, and a killed run leaves no stale lock."""
    from toolgym.trainers.run_lock import run_dir_lock

    cfg = as_config(cfg)
    with run_dir_lock(cfg.run_dir):
        return _train(cfg, resume, progress)


def _train(cfg: TrainConfig, resume: bool, progress: bool) -> dict[str, Any]:
    import torch
    from tqdm import tqdm

    from toolgym.agents.hf_policy import apply_lora
    from toolgym.rewards import build_reward
    from toolgym.trainers import checkpoint as ckpt
    from toolgym.trainers.allocator import fix_mmap_threshold
    from toolgym.trainers.grpo import GRPOTrainer

    cfg = as_config(cfg)
    t, seed, run_dir = cfg.train, int(cfg.seed), Path(cfg.run_dir)
    plan = None
    if not resume:
        check_fresh_run_dir(run_dir)
    else:  # every check a resume relies on, before any file is touched or any model is built
        plan = ckpt.plan_resume(run_dir, int(t.steps))
        if plan.checkpoint is not None:
            ckpt.check_resume(plan.checkpoint, config_dict(cfg))  # say what differs, not a tensor-size error
    # Everything a config can get wrong fails here, before the model loads.
    envs = make_envs(cfg.env.id, training_env_kwargs(cfg), t.group_size * t.tasks_per_step)
    tasks = env_tasks(envs[0])[: t.max_tasks or None]
    reward = build_reward(cfg.reward, index=envs[0].unwrapped.index)  # a retrieve over the env's own index
    eval_run = make_evaluation(cfg, progress)
    run_dir.mkdir(parents=True, exist_ok=True)
    if t.malloc_mmap_threshold is not None and not fix_mmap_threshold(t.malloc_mmap_threshold):
        print("note: train.malloc_mmap_threshold has no effect here (the C library is not glibc)")

    torch.manual_seed(seed)
    policy = build_policy(cfg.model, cfg.sampling)
    # step 0's reset options: a curriculum env needs its progress, and its constrained phase has the longest prompt
    check_context_room(policy, envs[0], tasks, t.max_context_tokens, training_reset_options(cfg, envs[0], 0))
    evals = eval_run("before", policy, run_dir, resume)
    policy.model = apply_lora(policy.model, cfg.grpo.lora)  # generate with the adapter being trained
    trainer = GRPOTrainer(policy.model, cfg.grpo, temperature=cfg.sampling.temperature)
    start_step = resume_from_checkpoint(run_dir, trainer, plan) if resume else 0
    if resume and plan is not None and plan.checkpoint is not None:
        # the restored optimiser keeps the checkpoint's lr / weight decay: use (and record) this run's
        for name, (before, now) in ckpt.apply_optimizer_settings(
                trainer.optimizer, {"lr": cfg.grpo.lr, "weight_decay": cfg.grpo.weight_decay}).items():
            print(f"note: grpo.{name} is {now} (the checkpoint trained with {before}); resuming with {now}")
    rollout_fn, backend = rollout_backend(cfg, trainer.model)

    bar = tqdm(total=t.steps, initial=start_step, desc="GRPO", disable=not progress)
    started, done = time.time(), start_step
    for step in range(start_step, t.steps):
        if t.time_budget_s and time.time() - started >= t.time_budget_s:
            print(f"time budget of {t.time_budget_s:.0f}s spent after {step} steps")
            break
        t0 = time.time()
        torch.manual_seed(seed * 1_000_003 + step)  # sampling depends only on (seed, step): resume-stable
        step_tasks = tasks_for_step(tasks, step, t.tasks_per_step, seed)
        groups = rollout_fn(policy, envs, [task.id for task in step_tasks], t.group_size,
                                seed=seed * 1_000_003 + step * t.group_size * t.tasks_per_step,
                                max_context_tokens=t.max_context_tokens,
                                reset_options=training_reset_options(cfg, envs[0], step))
        t_roll = time.time() - t0
        batch, credit_stats = credit_batch(groups, step_tasks, reward, t.skip_zero_advantage)
        t1 = time.time()
        update = trainer.train_on(batch, seed=(seed, step)) if batch.token_ids else {}
        if backend is not None and batch.token_ids:  # Ray workers get the changed weights (the adapter with LoRA)
            update["weights_shipped_bytes"] = float(backend.sync_weights(trainer.model))
        row = step_metrics(step, step_tasks, groups, credit_stats, update, rollout_s=t_roll,
                           update_s=time.time() - t1, step_s=time.time() - t0)
        log_step(run_dir, row, step_tasks, groups, t.save_rollouts)
        done = step + 1
        out_of_time = bool(t.time_budget_s) and time.time() - started >= t.time_budget_s
        if t.checkpoint_every and (done % t.checkpoint_every == 0 or done == t.steps or out_of_time):
            ckpt.save_checkpoint(run_dir, done, trainer.model, trainer.optimizer, {"config": config_dict(cfg)},
                                 keep=t.keep_checkpoints)
        bar.update(1)
        bar.set_postfix(reward=f"{row['reward']:.3f}", kl=f"{row.get('kl', 0):.4f}", tok_s=f"{row['tokens_per_s']:.0f}")
    bar.close()
    if backend is not None:
        backend.shutdown()

    summary: dict[str, Any] = {"run_dir": str(run_dir), "train_seconds": time.time() - started, "steps": done,
                               "metrics": str(run_dir / "metrics.jsonl")}
    if (run_dir / "metrics.jsonl").exists() and (run_dir / "metrics.jsonl").stat().st_size:
        from toolgym.trainers.plotting import plot_curves

        summary["plot"] = str(plot_curves(run_dir / "metrics.jsonl", run_dir / "curves.png",
                                          title=f"{cfg.env.id} / {cfg.reward.name}"))
    policy.model.eval()
    summary["eval"] = eval_run("after", policy, run_dir, True) or evals
    return summary


# -- setup ----------------------------------------------------------------------------------
def as_config(cfg: Any) -> TrainConfig:
    """A validated :class:`TrainConfig` from a ``TrainConfig``, a YAML path (``None``: the defaults) or a nested dict."""
    if isinstance(cfg, (str, Path)) or cfg is None:
        return load_train_config(cfg)
    if not isinstance(cfg, TrainConfig):
        cfg = strict_dataclass(TrainConfig, dict(cfg), "train")
    validate(cfg)
    return cfg


def rollout_backend(cfg: Any, model: Any) -> tuple[Any, Any]:
    """``(rollout_groups-like function, backend or None)`` for ``rollout.backend``; Ray workers
    start from ``model``'s current (possibly resumed) weights."""
    from toolgym.agents.rollout import rollout_groups

    if cfg.rollout.backend == "local":
        return rollout_groups, None
    from toolgym.trainers.ray_rollout import RayRollout

    backend = RayRollout.from_config(cfg.rollout, cfg.model, cfg.sampling, cfg.env.id, training_env_kwargs(cfg))
    backend.sync_weights(model)
    return backend.rollout_groups, backend


def training_env_kwargs(cfg: Any) -> dict[str, Any]:
    return {**cfg.env.kwargs, **cfg.env.train_kwargs}


def evaluation_env_kwargs(cfg: Any) -> dict[str, Any]:
    """Evaluation searches globally: a ``curriculum`` in ``env.kwargs`` is dropped unless
    ``env.eval_kwargs`` sets one (or a ``category_mode``) itself."""
    kwargs = {k: v for k, v in cfg.env.kwargs.items() if k != "curriculum"}
    return {**kwargs, **cfg.env.eval_kwargs}


def training_reset_options(cfg: Any, env: Any, step: int) -> dict[str, Any]:
    """``env.reset_options``, plus ``progress = step / steps`` for an env with a curriculum (resume-stable)."""
    from toolgym.envs.curriculum import curriculum_reset_options, training_progress

    return {**dict(cfg.env.reset_options), **curriculum_reset_options(env, training_progress(step, int(cfg.train.steps)))}


def check_context_room(policy: Any, env: Any, tasks: Sequence[Any], max_context_tokens: int,
                       options: dict[str, Any] | None = None) -> None:
    """``max_context_tokens`` must leave room for one turn after the (first task's) prompt, reset with
    ``options`` (a training reset's: an env with a category curriculum needs its ``progress``)."""
    _, info = env.reset(seed=0, options={**(options or {}), "task": tasks[0].id})
    prompt = len(policy.encode_prompt(info["messages"]))
    need = prompt + int(policy.sampling.max_new_tokens)
    if need > max_context_tokens:
        raise ValueError(f"train.max_context_tokens={max_context_tokens} is below the prompt ({prompt} tokens for task "
                         f"{tasks[0].id!r}) plus one turn (sampling.max_new_tokens={policy.sampling.max_new_tokens})")


def make_evaluation(cfg: Any, progress: bool) -> Any:
    """``run(phase, policy, run_dir, reuse) -> evals``: evaluate for ``eval.before`` / ``eval.after``
    into ``eval.json`` (kept across a resume). The eval env is built now, so bad kwargs fail early."""
    e = cfg.eval
    env_kwargs = evaluation_env_kwargs(cfg)
    envs = make_envs(cfg.env.id, env_kwargs, 1) if (e.before or e.after) else []
    tasks = choose_tasks(envs[0], None, e.num_tasks) if envs else []

    def run(phase: str, policy: Any, run_dir: Path, reuse: bool) -> dict[str, Any]:
        from toolgym.data.atomic import read_json, write_json

        path = run_dir / "eval.json"
        evals = read_json(path) if reuse and path.exists() else {}
        if not getattr(e, phase) or phase in evals:
            return evals
        from dataclasses import replace

        while len(envs) < min(e.batch_size, len(tasks)):
            envs.extend(make_envs(cfg.env.id, env_kwargs, 1))
        saved = policy.sampling
        policy.sampling = replace(saved, temperature=e.temperature)
        try:
            evals[phase] = evaluate(policy, envs, tasks, max_context_tokens=cfg.train.max_context_tokens,
                                    reset_options=dict(cfg.env.reset_options), progress=progress)
        finally:
            policy.sampling = saved
        evals[phase].update(env_id=cfg.env.id, num_tasks=evals[phase]["tasks"])
        write_json(path, evals)  # atomic: a kill never leaves a truncated eval.json
        return evals

    return run


def check_fresh_run_dir(run_dir: Path) -> None:
    """A run without ``--resume`` must not mix with an earlier one: no checkpoint, no metrics lines."""
    from toolgym.trainers import checkpoint as ckpt

    if ckpt.latest_checkpoint(run_dir) is not None or ckpt.incomplete_checkpoints(run_dir):
        raise ValueError(f"{run_dir} already holds checkpoints: pass --resume to continue, or choose another run_dir")
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists() and (not metrics.is_file() or metrics.stat().st_size):
        raise ValueError(f"{metrics} already holds an earlier run's metrics (and no checkpoint): a new run would "
                         "append to them; choose another run_dir, delete the file, or pass --resume to start "
                         "again from step 0 (its lines are dropped)")


def resume_from_checkpoint(run_dir: Path, trainer: Any, plan: Any = None) -> int:
    """Load the newest complete checkpoint's weights and optimiser into ``trainer``; drop metric
    lines of steps after it (a run killed between logging and saving redoes them once) and lines
    that cannot be placed, saying so. ``plan``: :func:`~toolgym.trainers.checkpoint.plan_resume`'s,
    made before anything was touched. Returns the next step."""
    from toolgym.trainers import checkpoint as ckpt
    from toolgym.trainers.metrics import keep_metrics_before

    plan = plan if plan is not None else ckpt.plan_resume(run_dir)
    for folder in plan.skipped:
        reason = plan.reasons.get(folder, f"no {ckpt.WEIGHTS_FILE} (an incomplete checkpoint)")
        print(f"warning: {folder}: {reason}; skipped", file=sys.stderr)
    if plan.checkpoint is None:
        print(f"no checkpoint in {run_dir}: starting from step 0")
    else:
        ckpt.load_weights(plan.checkpoint, trainer.model)
        ckpt.load_optimizer(plan.checkpoint, trainer.optimizer)
        print(f"resuming from {plan.checkpoint} at step {plan.step}")
    keep_metrics_before(run_dir / "metrics.jsonl", plan.step, plan.metrics)  # atomic rewrite
    return plan.step


# -- one step ---------------------------------------------------------------------------------
def task_order(num_tasks: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(num_tasks)


def tasks_for_step(tasks: list[Any], step: int, per_step: int, seed: int) -> list[Any]:
    """The tasks of ``step``: consecutive slices of seeded per-epoch permutations (resume-stable)."""
    out = []
    for j in range(step * per_step, (step + 1) * per_step):
        epoch, pos = divmod(j, len(tasks))
        out.append(tasks[int(task_order(len(tasks), seed, epoch)[pos])])
    return out


def credit_batch(groups: Sequence[Sequence[Any]], tasks: Sequence[Any], reward: Any,
                 skip_zero_advantage: bool = False) -> tuple[Any, dict[str, Any]]:
    """Score every group with ``reward`` and spread its credit onto tokens: the ``TokenBatch`` to train on
    and credit statistics (rewards, reward components, |advantage| per rollout, all-zero groups)."""
    from toolgym.trainers.grpo import TokenBatch, trajectory_token_advantages

    seqs, masks, advs, allowed, sampled = [], [], [], [], []
    stats: dict[str, Any] = {"rewards": [], "adv_abs": [], "zero_groups": 0, "components": {}}
    for task, group in zip(tasks, groups):
        trajs = [r.trajectory for r in group]
        credit = reward.score_group(trajs, task)
        stats["rewards"] += [float(x) for x in credit.rewards]
        for k, v in (credit.components or {}).items():
            if isinstance(v, (int, float)) and math.isfinite(float(v)):
                stats["components"].setdefault(k, []).append(float(v))
        group_adv = [trajectory_token_advantages(traj, credit, i) for i, traj in enumerate(trajs)]
        stats["zero_groups"] += all(not np.any(a) for a in group_adv)
        for rollout, traj, adv in zip(group, trajs, group_adv):
            mask = np.asarray(traj.loss_mask)
            if mask.any():
                stats["adv_abs"].append(float(np.abs(adv[mask == 1]).mean()))
            if skip_zero_advantage and not np.any(adv):
                continue
            seqs.append(traj.token_ids)
            masks.append(traj.loss_mask)
            advs.append(adv)
            allowed.append(getattr(rollout, "allowed", None))
            sampled.append(sampler_logprobs(traj.loss_mask, getattr(rollout, "sampling_logprobs", None)))
    stats["trained_sequences"] = len(seqs)
    # constrained rollouts carry their samples' allowed sets; unconstrained batches stay as before
    return TokenBatch(seqs, masks, advs, allowed=allowed if any(a for a in allowed) else None,
                      sampling_logprobs=sampled if any(x is not None for x in sampled) else None), stats


def sampler_logprobs(loss_mask: Sequence[int], by_position: dict[int, float] | None) -> Any:
    """The sampler's log-probs at the masked-in positions, in order (a tensor), or None unless every
    policy token has one."""
    import torch

    positions = [p for p, m in enumerate(loss_mask) if m]
    if not by_position or any(p not in by_position for p in positions):
        return None
    return torch.tensor([by_position[p] for p in positions], dtype=torch.float32)


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else 0.0


def step_metrics(step: int, tasks: Sequence[Any], groups: Sequence[Sequence[Any]], credit_stats: dict[str, Any],
                 update: dict[str, float], rollout_s: float, update_s: float, step_s: float) -> dict[str, Any]:
    """The ``metrics.jsonl`` line of one step."""
    flat = [r for g in groups for r in g]
    rewards = credit_stats["rewards"]
    generated = sum(r.generated_tokens for r in flat)
    row: dict[str, Any] = {
        "step": step,
        "reward": _mean(rewards),
        "reward_std": float(np.std(rewards)) if rewards else 0.0,
        "env_return": _mean([r.env_return for r in flat]),
        "adv_abs": _mean(credit_stats["adv_abs"]),
        "zero_adv_group_share": credit_stats["zero_groups"] / max(len(groups), 1),
        "trained_sequences": credit_stats["trained_sequences"],
        "search_turns": _mean([len(r.trajectory.events) for r in flat]),
        "invalid_rate": _mean([r.trajectory.invalid_actions / max(r.trajectory.num_turns, 1) for r in flat]),
        "submit_rate": _mean([float(r.trajectory.terminated_by == "submit") for r in flat]),
        "context_cut_rate": _mean([float(r.trajectory.terminated_by == "context") for r in flat]),
        "generated_tokens": generated,
        "tokens_per_s": generated / max(rollout_s, 1e-9),
        "rollout_s": rollout_s,
        "update_s": update_s,
        "step_s": step_s,
        "task_ids": [task.id for task in tasks],
    }
    row.update(update)
    row.update({f"reward/{k}": _mean(v) for k, v in credit_stats["components"].items()})
    return row


def log_step(run_dir: Path, row: dict[str, Any], tasks: Sequence[Any], groups: Sequence[Sequence[Any]],
             save_rollouts: bool) -> None:
    """Append the metrics line; write the step's rollouts (for ``toolgym replay``)."""
    if save_rollouts:
        from toolgym.data.records import write_rollouts

        (run_dir / "rollouts").mkdir(exist_ok=True)
        write_rollouts(run_dir / "rollouts" / f"step_{row['step']:06d}.jsonl",
                       [(task, [r.trajectory for r in g]) for task, g in zip(tasks, groups)])
    from toolgym.trainers.metrics import append_metrics_line

    append_metrics_line(run_dir / "metrics.jsonl", row)
