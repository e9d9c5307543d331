"""Do a warm start's GRPO groups disagree? Zero-variance shares of every credit term at the first step.

GRPO learns only from a group whose rollouts differ: a group where every rollout finds the same
gold tools gives ESM nothing, one where every rollout submits the same set gives the outcome
terms nothing. This benchmark samples exactly what the first training step of
``benchmarks/credit_schemes.py`` samples — for each seed, the tasks of step 0
(``toolgym.trainers.train.tasks_for_step``) × ``--group-size`` rollouts, with the trainer's
sampling seeds, the LoRA adapter at its initial (identity) value and ``--temperature`` — for
several seeds and temperatures, and reports per setting: the share of groups with non-zero
variance for ESM, TCA, selection F1 and the valid-action term, how many distinct query
sequences a group sends, searches per episode and the invalid-action rate. No update is made:
the numbers are the warm start's, before any learning.

    python -m benchmarks.group_variance --warm-start runs/sft_toolsearch_multi/model --temperatures 1.0 1.3 --seeds 0 1 2 3 4

Writes ``benchmarks/results/group_variance.json`` and its docs/benchmarks.md section. Not run in CI.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: shared CPUs collapse with spinning threads

from benchmarks._report import ROOT, host_info, markdown_table, weights_fingerprint, write_report  # noqa: E402

ENV_ID = "toolgym/ToolSearch-v0"
ENV_KWARGS = {"max_turns": 4, "min_gold": 2}  # credit_schemes.py's toolsearch_multi
# The credit terms whose group variance decides whether a scheme learns from a group.
TERMS = {"esm": ("toolsearcher", "esm/zero_var"), "tca": ("toolsearcher", "tca/zero_var"),
         "selection_f1": ("grpo_f1", "selection_f1/zero_var"), "valid_actions": ("toolsearcher_valid", "valid_actions/zero_var")}


def sample_first_step(policy: Any, envs: list[Any], tasks: list[Any], seed: int, tasks_per_step: int, group_size: int,
                      max_context_tokens: int) -> tuple[list[Any], list[list[Any]]]:
    """The tasks and rollout groups of step 0 of a GRPO run with ``seed`` (the trainer's task order and seeds)."""
    import torch

    from toolgym.agents.rollout import rollout_groups
    from toolgym.trainers.train import tasks_for_step

    torch.manual_seed(seed * 1_000_003)
    step_tasks = tasks_for_step(tasks, 0, tasks_per_step, seed)
    groups = rollout_groups(policy, envs, [t.id for t in step_tasks], group_size, seed=seed * 1_000_003,
                            max_context_tokens=max_context_tokens)
    return step_tasks, groups


def group_stats(task: Any, group: list[Any]) -> dict[str, float]:
    """One group: non-zero variance per credit term (1.0 / 0.0), distinct query sequences, searches, invalid rate."""
    from toolgym.rewards import get_reward

    trajs = [r.trajectory for r in group]
    row: dict[str, float] = {}
    for term, (scheme, key) in TERMS.items():
        comps = get_reward(scheme).score_group(trajs, task).components
        row[term] = 1.0 - float(comps[key])
    queries = {tuple(" ".join(e.query.lower().split()) for e in t.events) for t in trajs}
    row["distinct_query_sequences"] = float(len(queries))
    row["searches"] = sum(len(t.events) for t in trajs) / len(trajs)
    row["invalid_rate"] = sum(t.invalid_actions / max(t.num_turns, 1) for t in trajs) / len(trajs)
    row["srecall"] = sum(len(set(task.gold) & t.seen) / len(task.gold) for t in trajs) / len(trajs)
    return row


def measure(warm_start: str, temperature: float, seeds: list[int], tasks_per_step: int, group_size: int,
            threads: int | None = None) -> dict[str, Any]:
    """Every seed's first-step groups at ``temperature``: per-group rows and their means."""
    import numpy as np
    import torch

    from toolgym.agents.hf_policy import apply_lora
    from toolgym.agents.model import build_policy
    from toolgym.evaluation.evaluate import env_tasks, make_envs
    from toolgym.trainers.config import load_train_config

    if threads:
        torch.set_num_threads(threads)
    cfg = load_train_config(ROOT / "configs" / "learning_grpo.yaml", check_machine=False)
    cfg.model.name = warm_start
    cfg.sampling.temperature = temperature
    envs = make_envs(ENV_ID, {**ENV_KWARGS, **dict(cfg.env.train_kwargs)}, tasks_per_step * group_size)
    tasks = env_tasks(envs[0])
    rows = []
    started = time.time()
    for seed in seeds:
        torch.manual_seed(seed)  # as train(): the adapter's initial weights
        policy = build_policy(cfg.model, cfg.sampling)
        policy.model = apply_lora(policy.model, cfg.grpo.lora)
        step_tasks, groups = sample_first_step(policy, envs, tasks, seed, tasks_per_step, group_size,
                                               int(cfg.train.max_context_tokens))
        rows += [{"seed": seed, "task_id": t.id, **group_stats(t, g)} for t, g in zip(step_tasks, groups)]
    keys = [k for k in rows[0] if k not in ("seed", "task_id")]
    return {"temperature": temperature, "seeds": seeds, "groups": len(rows), "group_size": group_size,
            "seconds": time.time() - started, "mean": {k: float(np.mean([r[k] for r in rows])) for k in keys},
            "rows": rows}


def report_body(payload: dict[str, Any]) -> str:
    """The docs/benchmarks.md section of a results payload (re-rendered from the JSON alone with ``--report``)."""
    runs = payload["runs"]
    g = runs[0]["group_size"]
    table = markdown_table(
        ["temperature", "groups", "non-zero ESM", "non-zero TCA", "non-zero F1", "non-zero valid-action",
         "distinct query sequences (of G)", "searches / episode", "invalid rate", "SRecall", "seconds"],
        [[r["temperature"], r["groups"], f"{r['mean']['esm']:.0%}", f"{r['mean']['tca']:.0%}",
          f"{r['mean']['selection_f1']:.0%}", f"{r['mean']['valid_actions']:.0%}",
          f"{r['mean']['distinct_query_sequences']:.1f} / {g}", f"{r['mean']['searches']:.2f}",
          f"{r['mean']['invalid_rate']:.1%}", f"{r['mean']['srecall']:.3f}", f"{r['seconds']:.0f}"] for r in runs])
    seeds = runs[0]["seeds"]
    per_step = len(runs[0]["rows"]) // max(len(seeds), 1)
    return (f"Warm start `{payload['warm_start']}` (`{payload['fingerprint'][:19]}…`), `{payload['env_id']}` "
            f"{payload['env_kwargs']} training split: for seeds {seeds}, the tasks of GRPO step 0 "
            f"({per_step} per seed) × {g} rollouts, sampled as the trainer samples them "
            "(LoRA at its identity start). A group counts for a term when the term's rewards are not all equal "
            "(for ESM: some gold tool found by some rollouts but not all).\n\n" + table)


def main(argv: list[str] | None = None) -> int:
    import json

    from benchmarks._report import RESULTS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warm-start", help="warm-start model folder (`toolgym sft` RUN_DIR/model)")
    ap.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 1.3])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--tasks-per-step", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--name", default="group_variance", help="results file name (benchmarks/results/NAME.json)")
    ap.add_argument("--report", action="store_true", help="only re-render the docs section from benchmarks/results/NAME.json")
    args = ap.parse_args(argv)
    title = "First-step group variance of a ToolSearch warm start"
    if args.report:
        payload = json.loads((RESULTS / f"{args.name}.json").read_text())
        write_report(args.name, payload, title, report_body(payload),  # its own machine and date stay
                     script=f"group_variance.py --name {args.name}")
        return 0
    if not args.warm_start:
        ap.error("--warm-start is required (except with --report)")
    if args.tasks_per_step < 1 or args.group_size < 2 or any(not 0 < t <= 5 for t in args.temperatures):
        ap.error("--tasks-per-step >= 1, --group-size >= 2 and temperatures in (0, 5]")
    runs = [measure(args.warm_start, t, args.seeds, args.tasks_per_step, args.group_size) for t in args.temperatures]
    payload = {"warm_start": args.warm_start, "fingerprint": weights_fingerprint(args.warm_start), "env_id": ENV_ID,
               "env_kwargs": ENV_KWARGS, "host": host_info(), "runs": runs}
    body = report_body(payload)
    write_report(args.name, payload, title, body, script=f"group_variance.py --name {args.name}")
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
