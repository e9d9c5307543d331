"""``toolgym train CONFIG [key=value ...]``: local GRPO on a toolgym env from an omegaconf YAML.

Each step samples ``tasks_per_step`` tasks (a fixed seeded order, so a resumed run sees exactly
the tasks it would have seen), runs ``group_size`` rollouts of each with exact token ids, scores
every group with the configured reward module, spreads per-turn advantages onto the policy's
tokens and does one GRPO update. Outputs in ``run_dir``: ``metrics.jsonl`` (one line per step),
``rollouts/step_*.jsonl`` (for ``toolgym replay``), ``checkpoints/step_*``, ``curves.png``,
``eval.json`` (before/after evaluation when enabled). ``--resume`` continues from the newest
checkpoint with no lost or repeated step.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

DEFAULTS: dict[str, Any] = {
    "run_dir": "runs/train",
    "seed": 0,
    "env": {
        "id": "toolgym/ToolSearch-v0",
        "kwargs": {},  # passed to gymnasium.make for train and eval envs
        "train_kwargs": {"split": "train"},
        "eval_kwargs": {"split": "heldout"},
        "reset_options": {},
    },
    "reward": {"name": "grpo_f1", "options": {}},
    "model": {"name": "smollm2", "dtype": None, "device": None},
    "sampling": {"max_new_tokens": 128, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "stop_strings": ["</tool_call>"]},
    "grpo": {"lr": 1e-6, "clip_eps": 0.2, "kl_coef": 0.001, "micro_batch_size": 4, "mini_batch_size": None,
             "epochs": 1, "max_grad_norm": 1.0, "weight_decay": 0.0, "logprob_chunk": 1024, "lora": None,
             "gradient_checkpointing": False},
    "train": {"steps": 10, "tasks_per_step": 2, "group_size": 4, "max_context_tokens": 4096,
              "checkpoint_every": 5, "keep_checkpoints": 1, "save_rollouts": True, "skip_zero_advantage": True,
              "max_tasks": None, "time_budget_s": None},
    "eval": {"before": False, "after": False, "num_tasks": 20, "batch_size": 8, "temperature": 0.0},
}


# -- config ---------------------------------------------------------------------------------
def load_config(path: str | Path | None, overrides: Sequence[str] = ()) -> Any:
    """DEFAULTS <- YAML file <- ``key=value`` overrides (omegaconf dot-list); unknown keys are an error."""
    from omegaconf import OmegaConf

    base = OmegaConf.create(DEFAULTS)
    OmegaConf.set_struct(base, False)
    layers = [base]
    if path is not None:
        if not Path(path).exists():
            raise FileNotFoundError(f"config file not found: {path}")
        layers.append(OmegaConf.load(path))
    bad = [o for o in overrides if "=" not in o or o.startswith("-")]
    if bad:
        raise ValueError(f"overrides must look like key=value, got {bad}")
    layers.append(OmegaConf.from_dotlist(list(overrides)))
    cfg = OmegaConf.merge(*layers)
    known_sections = set(DEFAULTS)
    unknown = [k for k in cfg if k not in known_sections]
    if unknown:
        raise ValueError(f"unknown config section(s) {unknown}; known: {sorted(known_sections)}")
    for section in ("train", "eval", "sampling"):
        extra = set(cfg[section]) - set(DEFAULTS[section])
        if extra:
            raise ValueError(f"unknown key(s) in {section}: {sorted(extra)}; known: {sorted(DEFAULTS[section])}")
    return cfg


def to_plain(node: Any) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(node, resolve=True) if node is not None and not isinstance(node, (dict, list, str, int, float)) else node


# -- building blocks ------------------------------------------------------------------------
def pick_device(requested: str | None) -> str:
    import torch

    if requested:
        return requested
    return "cuda" if torch.cuda.is_available() else "cpu"


def build_policy(model_cfg: dict[str, Any], sampling: dict[str, Any]) -> Any:
    from toolgym.agents.hf_policy import HFChatPolicy

    return HFChatPolicy.from_pretrained(model_cfg["name"], sampling=sampling, dtype=model_cfg.get("dtype"),
                                        device=pick_device(model_cfg.get("device")))


def make_envs(env_id: str, kwargs: dict[str, Any], n: int) -> list[Any]:
    """``n`` independent episodes' worth of envs (they share one retrieval index per process)."""
    import gymnasium

    import toolgym.envs  # noqa: F401  (registers the ids)

    if env_id not in gymnasium.registry:
        raise KeyError(f"unknown env id {env_id!r}; see `toolgym envs`")
    return [gymnasium.make(env_id, **kwargs) for _ in range(n)]


def env_tasks(env: Any) -> list[Any]:
    tasks = getattr(env.unwrapped, "tasks", None)
    if not tasks:
        raise ValueError(f"{env.spec.id if env.spec else env}: the env exposes no task list (env.unwrapped.tasks)")
    return list(tasks)


def make_retrieve(env: Any) -> Any:
    """``retrieve(queries, k) -> ranked (id, score) lists`` over the env's own index.

    Scores ride along so the counterfactual reward's ``max_score`` fusion works too.
    """
    index = env.unwrapped.index

    def retrieve(queries: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
        return [list(zip(r.ids, r.scores)) for r in index.search_batch(list(queries), None, k)]

    return retrieve


def build_reward(reward_cfg: dict[str, Any], env: Any) -> Any:
    from toolgym.rewards import get_reward

    options = dict(reward_cfg.get("options") or {})
    return get_reward(reward_cfg["name"], retrieve=make_retrieve(env), **options)


def task_order(num_tasks: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(num_tasks)


def tasks_for_step(tasks: list[Any], step: int, per_step: int, seed: int) -> list[Any]:
    """The tasks of ``step``: consecutive slices of seeded per-epoch permutations (resume-stable)."""
    out = []
    for j in range(step * per_step, (step + 1) * per_step):
        epoch, pos = divmod(j, len(tasks))
        out.append(tasks[int(task_order(len(tasks), seed, epoch)[pos])])
    return out


# -- evaluation -----------------------------------------------------------------------------
def _selection_metrics(traj: Any, task: Any) -> dict[str, float]:
    from toolgym.retrieval.metrics import search_recall, selection_match, selection_prf

    _, _, f1 = selection_prf(traj.selection, task.gold)
    return {"f1": float(f1), "match": float(selection_match(traj.selection, task.gold)),
            "search_recall": float(search_recall(traj.seen, task.gold))}


def _stderr(values: Sequence[float]) -> float:
    return float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else 0.0


def evaluate_policy(policy_or_checkpoint: Any, env_id: str = "toolgym/ToolSearch-v0", tasks: Sequence[Any] | None = None,
                    split: str | None = "heldout", num_tasks: int | None = 20, env_kwargs: dict[str, Any] | None = None,
                    batch_size: int = 8, temperature: float = 0.0, max_new_tokens: int | None = None,
                    max_context_tokens: int = 4096, reset_options: dict[str, Any] | None = None,
                    progress: bool = True) -> dict[str, Any]:
    """Mean episode reward (± standard error) and selection metrics of a policy on an env's tasks.

    ``policy_or_checkpoint``: an :class:`HFChatPolicy`, a model name/path (``smollm2``, a folder,
    a ``.gguf``), or a ``toolgym train`` checkpoint folder (``runs/x/checkpoints/step_000010``)
    or run folder (its newest checkpoint). ``tasks``: task ids or indices; else the first
    ``num_tasks`` tasks of the env built with ``split``. One greedy episode per task (set
    ``temperature`` to sample).
    """
    from toolgym.trainers.rollout import collect_rollouts

    policy = load_policy(policy_or_checkpoint)
    saved = policy.sampling
    from dataclasses import replace

    policy.sampling = replace(saved, temperature=temperature,
                              max_new_tokens=int(max_new_tokens or saved.max_new_tokens))
    kwargs = dict(env_kwargs or {})
    if split is not None:
        kwargs.setdefault("split", split)
    probe = make_envs(env_id, kwargs, 1)[0]
    all_tasks = env_tasks(probe)
    by_id = {t.id: t for t in all_tasks}
    if tasks is None:
        chosen = all_tasks[: num_tasks or len(all_tasks)]
    else:
        chosen = [all_tasks[r] if isinstance(r, int) else by_id[str(r)] for r in tasks]
    envs = [probe] + make_envs(env_id, kwargs, max(0, min(batch_size, len(chosen)) - 1))
    rows: list[dict[str, float]] = []
    started = time.time()
    gen_tokens = 0
    try:
        from tqdm import tqdm

        bar = tqdm(total=len(chosen), desc=f"eval {env_id}", disable=not progress, leave=False)
        for start in range(0, len(chosen), batch_size):
            chunk = chosen[start:start + batch_size]
            rollouts = collect_rollouts(policy, envs[: len(chunk)], [t.id for t in chunk], seeds=[start + i for i in range(len(chunk))],
                                        max_context_tokens=max_context_tokens, reset_options=reset_options)
            for task, r in zip(chunk, rollouts):
                traj = r.trajectory
                row = {"reward": r.env_return, "search_turns": float(len(traj.events)),
                       "invalid_rate": traj.invalid_actions / max(traj.num_turns, 1),
                       "submitted": float(traj.terminated_by == "submit")}
                if traj.subtasks is None:
                    row.update(_selection_metrics(traj, task))
                rows.append(row)
                gen_tokens += r.generated_tokens
            bar.update(len(chunk))
        bar.close()
    finally:
        policy.sampling = saved
    result: dict[str, Any] = {"env_id": env_id, "split": split, "num_tasks": len(rows)}
    for key in rows[0] if rows else []:
        vals = [r[key] for r in rows if key in r]
        result[key] = float(np.mean(vals))
        result[f"{key}_se"] = _stderr(vals)
    result["seconds"] = time.time() - started
    result["generated_tokens"] = gen_tokens
    return result


def load_policy(policy_or_checkpoint: Any, sampling: dict[str, Any] | None = None, device: str | None = None) -> Any:
    """An :class:`HFChatPolicy` from a policy object, a model name/path, or a ``toolgym train`` checkpoint/run folder."""
    from toolgym.agents.hf_policy import HFChatPolicy
    from toolgym.trainers import checkpoint as ckpt

    if not isinstance(policy_or_checkpoint, (str, Path)):
        return policy_or_checkpoint
    path = Path(policy_or_checkpoint)
    if (path / "checkpoints").is_dir() and not (path / ckpt.STATE_FILE).exists():
        latest = ckpt.latest_checkpoint(path)
        if latest is None:
            raise FileNotFoundError(f"{path} has no complete checkpoint")
        path = latest
    if (path / ckpt.STATE_FILE).exists():
        state = ckpt.read_state(path)
        cfg = state["config"]
        policy = build_policy({**cfg["model"], "device": device or cfg["model"].get("device")}, sampling or cfg["sampling"])
        if (cfg.get("grpo") or {}).get("lora"):
            from toolgym.trainers.grpo import GRPOTrainer

            policy.model = GRPOTrainer(policy.model, {**cfg["grpo"], "kl_coef": 0.0}).model  # same LoRA wrapping
        ckpt.load_weights(path, policy.model)
        policy.model.eval()
        return policy
    return HFChatPolicy.from_pretrained(str(policy_or_checkpoint), sampling=sampling, device=pick_device(device))


# -- training -------------------------------------------------------------------------------
def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else 0.0


def train(cfg: Any, resume: bool = False, progress: bool = True) -> dict[str, Any]:
    """Run (or resume) the GRPO loop described by ``cfg``; returns a summary dict."""
    import torch
    from tqdm import tqdm

    from toolgym.data.records import write_rollouts
    from toolgym.trainers import checkpoint as ckpt
    from toolgym.trainers.grpo import GRPOTrainer, TokenBatch, trajectory_token_advantages
    from toolgym.trainers.plotting import plot_curves
    from toolgym.trainers.rollout import rollout_groups

    plain = to_plain(cfg)
    run_dir = Path(plain["run_dir"])
    run_dir.mkdir(parents=True, exist_ok=True)
    tcfg, ecfg, envcfg = plain["train"], plain["eval"], plain["env"]
    seed = int(plain["seed"])
    metrics_path = run_dir / "metrics.jsonl"

    start_step = 0
    latest = ckpt.latest_checkpoint(run_dir) if resume else None
    if resume and latest is None:
        print(f"no checkpoint in {run_dir}: starting from step 0")
    if not resume and ckpt.latest_checkpoint(run_dir) is not None:
        raise ValueError(f"{run_dir} already holds checkpoints: pass --resume to continue, or choose another run_dir")
    if latest is not None:
        ckpt.check_resume(latest, plain)  # before any model is built: say what differs, not a tensor-size error

    eval_path = run_dir / "eval.json"
    evals: dict[str, Any] = ckpt.read_json(eval_path) if resume and eval_path.exists() else {}

    torch.manual_seed(seed)
    policy = build_policy(plain["model"], plain["sampling"])
    summary: dict[str, Any] = {"run_dir": str(run_dir)}
    eval_kwargs = {**envcfg["kwargs"], **envcfg["eval_kwargs"]}
    eval_args = dict(env_kwargs=eval_kwargs, split=None, num_tasks=ecfg["num_tasks"], batch_size=ecfg["batch_size"],
                     temperature=ecfg["temperature"], max_context_tokens=tcfg["max_context_tokens"],
                     reset_options=envcfg["reset_options"], progress=progress)
    if ecfg["before"] and "before" not in evals:
        evals["before"] = evaluate_policy(policy, envcfg["id"], **eval_args)
        ckpt.write_json(eval_path, evals)

    trainer = GRPOTrainer(policy.model, plain["grpo"])
    policy.model = trainer.model  # generate with the adapter when LoRA wraps the model
    if latest is not None:
        state = ckpt.read_state(latest)
        ckpt.load_weights(latest, trainer.model)
        ckpt.load_optimizer(latest, trainer.optimizer)
        start_step = int(state["step"])
        print(f"resuming from {latest} at step {start_step}")
    # Drop metric lines of steps after the checkpoint (run killed between logging and saving).
    ckpt.keep_metrics_before(metrics_path, start_step)

    G, per_step = int(tcfg["group_size"]), int(tcfg["tasks_per_step"])
    train_kwargs = {**envcfg["kwargs"], **envcfg["train_kwargs"]}
    envs = make_envs(envcfg["id"], train_kwargs, G * per_step)
    tasks = env_tasks(envs[0])
    if tcfg["max_tasks"]:
        tasks = tasks[: int(tcfg["max_tasks"])]
    reward = build_reward(plain["reward"], envs[0])
    steps = int(tcfg["steps"])
    if tcfg["save_rollouts"]:
        (run_dir / "rollouts").mkdir(exist_ok=True)
    bar = tqdm(total=steps, initial=start_step, desc="GRPO", disable=not progress)
    budget = float(tcfg["time_budget_s"]) if tcfg["time_budget_s"] else math.inf
    loop_start = time.time()
    last_done = start_step
    for step in range(start_step, steps):
        if time.time() - loop_start >= budget:
            print(f"time budget of {budget:.0f}s spent after {step} steps")
            break
        t0 = time.time()
        torch.manual_seed(seed * 1_000_003 + step)  # sampling depends only on (seed, step): resume-stable
        step_tasks = tasks_for_step(tasks, step, per_step, seed)
        groups = rollout_groups(policy, envs, [t.id for t in step_tasks], G, seed=seed * 1_000_003 + step * G * per_step,
                                max_context_tokens=int(tcfg["max_context_tokens"]), reset_options=envcfg["reset_options"])
        t_roll = time.time() - t0
        seqs, masks, advs = [], [], []
        comps: dict[str, list[float]] = {}
        rewards, adv_abs, zero_groups = [], [], 0
        for task, group in zip(step_tasks, groups):
            trajs = [r.trajectory for r in group]
            credit = reward.score_group(trajs, task)
            rewards += [float(x) for x in credit.rewards]
            for k, v in (credit.components or {}).items():
                if isinstance(v, (int, float)) and math.isfinite(float(v)):
                    comps.setdefault(k, []).append(float(v))
            group_adv = [trajectory_token_advantages(t, credit, i) for i, t in enumerate(trajs)]
            if all(not np.any(a) for a in group_adv):
                zero_groups += 1
            for t, a in zip(trajs, group_adv):
                m = np.asarray(t.loss_mask)
                if m.any():
                    adv_abs.append(float(np.abs(a[m == 1]).mean()))
                if tcfg["skip_zero_advantage"] and not np.any(a):
                    continue  # no policy-gradient signal; only the tiny KL term would remain
                seqs.append(t.token_ids)
                masks.append(t.loss_mask)
                advs.append(a)
        t1 = time.time()
        upd = trainer.train_on(TokenBatch(seqs, masks, advs)) if seqs else {}
        t_upd = time.time() - t1
        flat = [r for g in groups for r in g]
        gen_tokens = sum(r.generated_tokens for r in flat)
        row: dict[str, Any] = {
            "step": step,
            "reward": _mean(rewards),
            "reward_std": float(np.std(rewards)) if rewards else 0.0,
            "env_return": _mean([r.env_return for r in flat]),
            "adv_abs": _mean(adv_abs),
            "zero_adv_group_share": zero_groups / max(len(groups), 1),
            "trained_sequences": len(seqs),
            "search_turns": _mean([len(r.trajectory.events) for r in flat]),
            "invalid_rate": _mean([r.trajectory.invalid_actions / max(r.trajectory.num_turns, 1) for r in flat]),
            "submit_rate": _mean([float(r.trajectory.terminated_by == "submit") for r in flat]),
            "generated_tokens": gen_tokens,
            "tokens_per_s": gen_tokens / max(t_roll, 1e-9),
            "rollout_s": t_roll,
            "update_s": t_upd,
            "step_s": time.time() - t0,
            "task_ids": [t.id for t in step_tasks],
        }
        row.update({k: v for k, v in upd.items()})
        row.update({f"reward/{k}": _mean(v) for k, v in comps.items()})
        if tcfg["save_rollouts"]:
            write_rollouts(run_dir / "rollouts" / f"step_{step:06d}.jsonl",
                           [(task, [r.trajectory for r in g]) for task, g in zip(step_tasks, groups)])
        ckpt.append_metrics_line(metrics_path, row)
        done = last_done = step + 1
        out_of_time = time.time() - loop_start >= budget
        if tcfg["checkpoint_every"] and (done % int(tcfg["checkpoint_every"]) == 0 or done == steps or out_of_time):
            ckpt.save_checkpoint(run_dir, done, trainer.model, trainer.optimizer, {"config": plain},
                                 keep=int(tcfg["keep_checkpoints"]))
        bar.update(1)
        bar.set_postfix(reward=f"{row['reward']:.3f}", kl=f"{row.get('kl', 0):.4f}", tok_s=f"{row['tokens_per_s']:.0f}")
    bar.close()
    summary["train_seconds"] = time.time() - loop_start

    if metrics_path.exists() and metrics_path.stat().st_size:
        summary["plot"] = str(plot_curves(metrics_path, run_dir / "curves.png", title=f"{envcfg['id']} / {plain['reward']['name']}"))
    if ecfg["after"]:
        policy.model.eval()
        evals["after"] = evaluate_policy(policy, envcfg["id"], **eval_args)
        ckpt.write_json(eval_path, evals)
    summary["eval"] = evals
    summary["metrics"] = str(metrics_path)
    summary["steps"] = last_done
    return summary


def format_eval_table(evals: dict[str, Any]) -> str:
    keys = [k for k in ("reward", "f1", "match", "search_recall", "search_turns", "invalid_rate", "submitted")
            if any(k in v for v in evals.values())]
    lines = [f"{'metric':<16}" + "".join(f"{name:>20}" for name in evals)]
    for k in keys:
        cells = []
        for v in evals.values():
            cells.append(f"{v[k]:.3f} ± {v.get(k + '_se', 0):.3f}" if k in v else "-")
        lines.append(f"{k:<16}" + "".join(f"{c:>20}" for c in cells))
    return "\n".join(lines)


# -- CLI ------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config (configs/quickstart.yaml); key=value pairs after it override it")
    parser.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in run_dir")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--print-config", action="store_true", help="print the merged config and exit")


def run(args: argparse.Namespace) -> int:
    # Spinning OpenMP threads collapse throughput (20x measured) on a CPU shared with other
    # jobs; passive waiting costs nothing when the machine is idle. Must precede torch's import.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from omegaconf import OmegaConf

    cfg = load_config(args.config, getattr(args, "overrides", None) or [])
    from toolgym.trainers.cli import check_output_dir

    check_output_dir(cfg.run_dir, "run_dir")
    if args.print_config:
        print(OmegaConf.to_yaml(cfg))
        return 0
    threads = os.environ.get("TOOLGYM_THREADS")
    if threads:
        import torch

        torch.set_num_threads(int(threads))
    summary = train(cfg, resume=args.resume, progress=not args.no_progress)
    if summary.get("eval"):
        print(format_eval_table(summary["eval"]))
    print(f"metrics: {summary['metrics']}")
    if summary.get("plot"):
        print(f"plot: {summary['plot']}")
    return 0
