"""Does the policy learn? Paired held-out comparisons: base model -> warm start -> GRPO.

For every run (an env + a reward scheme): greedy evaluation of the base model and of the warm
start (``toolgym sft`` output) on the first ``--eval-tasks`` held-out tasks, GRPO from the warm
start for ``--budget-min`` minutes of CPU wall time (LoRA), greedy evaluation again on the same
tasks. Every task's numbers are saved (``benchmarks/results/learning_tasks.json``, one entry per
run and invocation, ``<run>@<date>``, appended: a later invocation never replaces an earlier one's
rows, and each report row names its entry as ``tasks_key``), and each
comparison is reported as the paired gain ± its paired standard error
(:func:`toolgym.evaluation.paired.paired_gain`); a gain counts when it exceeds 2 se.
For the decomposer it also reports held-out retrieval C@10 / N@5 of its subtasks against the
clause splitter and the raw request (same BM25 index, same tasks). Not run in CI.

    python -m benchmarks.learning --warm-start runs/sft_warmstart/model --budget-min 12 --eval-tasks 30
    python -m benchmarks.learning --warm-start W --runs decompose_counterfactual --budget-min 4
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: shared CPUs collapse with spinning threads

from benchmarks._report import RESULTS, markdown_table, write_report  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# The env settings are those the demonstrations were recorded with (configs/sft_warmstart.yaml).
ENVS = {
    "toolsearch": {"id": "toolgym/ToolSearch-v0", "kwargs": {"max_turns": 4}, "max_new_tokens": 96,
                   "stop_strings": ["</tool_call>"], "eval_split": "heldout"},
    # 128: the clause-splitter demonstrations fit (at 64, 84 % of them were cut; the warm start scored C@10 0.32, not 0.89)
    "decompose": {"id": "toolgym/Decompose-v0", "kwargs": {"k": 10}, "max_new_tokens": 128, "stop_strings": [],
                  "eval_split": "heldout"},
    # generated multi-turn dialogues over Seal-Tools: tasks carry reference subtasks (magicselector's R_pref)
    "dialogue": {"id": "toolgym/Decompose-Dialogue-v0", "kwargs": {"k": 10}, "max_new_tokens": 128, "stop_strings": [],
                 "eval_split": "test"},
}
# Seal-Tools tool search on its multi-tool tasks only (>= 2 gold tools, each findable by its own
# search; benchmarks/credit_schemes.py --toolsearch-env toolsearch_multi): first-discovery credit has
# several tools to discover, and TCA's full-retrieval gate opens only for a rollout that found them all
# (with the one-search warm start: 1 rollout in 96, docs/learning.md). Same prompts and turn limit as
# ToolSearch-v0, so the ToolSearch warm start applies unchanged.
ENVS["toolsearch_multi"] = {**ENVS["toolsearch"], "kwargs": {"max_turns": 4, "min_gold": 2}}
# the same tasks with an optional category argument on search (the schema lists Seal-Tools' categories):
# the env of a warm start whose demonstrations name categories (clauses_top1_cat...), where the
# category curriculum (toolsearcher+curriculum) asks for something the policy can write
ENVS["toolsearch_multi_cat"] = {**ENVS["toolsearch"], "kwargs": {"max_turns": 4, "min_gold": 2, "category_mode": "optional"}}
# every source of the retriever's training mixture, each task searched in its own library: the
# decomposer must learn when splitting pays (multi-intent sources) and when it does not (single-intent)
ENVS["mixture"] = {"id": "toolgym/Decompose-Mixture-v0", "kwargs": {"k": 10}, "max_new_tokens": 128,
                   "stop_strings": [], "eval_split": "heldout"}
DECOMPOSITION_ENVS = ("decompose", "dialogue", "mixture")
RUNS = {
    "toolsearch_toolsearcher": ("toolsearch", {"name": "toolsearcher", "options": {}}),
    "decompose_counterfactual": ("decompose", {"name": "counterfactual", "options": {"k": 10}}),
    "toolsearch_grpo_f1": ("toolsearch", {"name": "grpo_f1", "options": {}}),
    "dialogue_counterfactual": ("dialogue", {"name": "counterfactual", "options": {"k": 10}}),
    "dialogue_magicselector": ("dialogue", {"name": "magicselector", "options": {}}),
}


def grpo_config(env_name: str, reward: dict[str, Any], model: str, run_dir: Path, budget_s: float | None, seed: int = 0,
                tasks_per_step: int | None = None, group_size: int | None = None, config: str | Path | None = None,
                overrides: list[str] | None = None) -> Any:
    """The GRPO config of one learning run (LoRA on the warm start, fixed time budget, no built-in eval):
    ``config`` (default ``configs/learning_grpo.yaml``) with this run's env, reward, model and budget."""
    from omegaconf import OmegaConf

    from toolgym.trainers.config import load_train_config

    env = ENVS[env_name]
    cfg = load_train_config(config or ROOT / "configs" / "learning_grpo.yaml", check_machine=False)  # model set below
    cfg.env.id = env["id"]
    cfg.env.kwargs = OmegaConf.create(env["kwargs"])  # replace, not merge: the envs take different kwargs
    cfg.reward.name = reward["name"]  # a structured section: set its fields, not the section
    cfg.reward.options = OmegaConf.create(dict(reward.get("options") or {}))
    cfg.sampling.max_new_tokens = env["max_new_tokens"]
    cfg.sampling.stop_strings = env["stop_strings"]
    cfg.model.name = model
    cfg.run_dir = str(run_dir)
    cfg.seed = seed
    cfg.eval.before = cfg.eval.after = False  # evaluated per task here instead
    cfg.train.time_budget_s = budget_s
    if tasks_per_step is not None:
        cfg.train.tasks_per_step = tasks_per_step
    if group_size is not None:
        cfg.train.group_size = group_size
    if overrides:  # key=value, as on the `toolgym train` command line (validated by the structured config)
        cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(list(overrides)))
    return cfg


def run_grpo(run: str, warm_start: str, run_dir: Path, budget_s: float, config: str | None = None,
             overrides: list[str] | None = None) -> dict[str, Any]:
    """GRPO for one run, once: a finished run (``grpo_done.json``) is not trained again."""
    from toolgym.trainers.train import train

    marker = run_dir / "grpo_done.json"
    if marker.exists():
        return json.loads(marker.read_text())
    env_name, reward = RUNS[run]
    cfg = grpo_config(env_name, reward, warm_start, run_dir, budget_s, config=config, overrides=overrides)
    started = time.time()
    summary = train(cfg, resume=(run_dir / "checkpoints").is_dir(), progress=True)
    done = {"steps": summary["steps"], "seconds": time.time() - started, "budget_s": budget_s}
    marker.write_text(json.dumps(done))
    return done


def evaluate(model_or_policy: Any, env_name: str, n: int, cache: Path | None, batch_size: int = 8,
             progress: bool = True) -> dict[str, Any]:
    """Per-task greedy evaluation, cached as JSON (an evaluation is the costly part on CPU).

    The cache is reused only for the same model, task count and generation settings (a cache of
    another token budget once stood in for a new one's rows)."""
    from toolgym.evaluation.paired import evaluate_per_task
    from toolgym.trainers.checkpoint import load_policy

    env = ENVS[env_name]
    settings = {"model": str(model_or_policy), "max_new_tokens": env["max_new_tokens"],
                "stop_strings": list(env["stop_strings"]), "env_kwargs": dict(env["kwargs"])}
    if cache is not None and cache.exists():
        got = json.loads(cache.read_text())
        if got["num_tasks"] == n and got.get("settings") == settings:
            return got
    policy = load_policy(model_or_policy, sampling={"max_new_tokens": env["max_new_tokens"],
                                                     "stop_strings": env["stop_strings"]})
    result = evaluate_per_task(policy, env["id"], {**env["kwargs"], "split": env.get("eval_split", "heldout")}, num_tasks=n,
                               batch_size=batch_size, max_new_tokens=env["max_new_tokens"], progress=progress)
    result["settings"] = settings
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(result, indent=2))
    return result


def retrieval_baselines(env_name: str, n: int, keep_rows: dict[str, Any] | None = None) -> dict[str, dict[str, float]]:
    """C@10 / N@5 on the first ``n`` evaluation tasks of a decomposition env: the raw request (or
    dialogue context), the clause splitter, and the reference subtasks where the tasks carry them.
    ``keep_rows``, when given, receives each baseline's per-task rows (``task_id``, ``c10``, ``ndcg5``)."""
    import numpy as np

    from toolgym.agents.demonstrators import ReferenceSubtaskDemonstrator
    from toolgym.agents.scripted import ClauseSplitAgent
    from toolgym.retrieval.metrics import completeness_at_k, ndcg_at_k
    from toolgym.evaluation.evaluate import run_episode
    from toolgym.evaluation.evaluate import env_tasks, make_envs

    spec = ENVS[env_name]
    env = make_envs(spec["id"], {**spec["kwargs"], "split": spec.get("eval_split", "heldout")}, 1)[0]
    tasks = env_tasks(env)[:n]
    index = env.unwrapped.index
    raw = [list(r.ids) for r in index.search_batch([t.context_text() for t in tasks], None, 10)]
    agents = [("clause splitter", ClauseSplitAgent())]
    if all(t.subtasks for t in tasks):
        agents.append(("reference subtasks", ReferenceSubtaskDemonstrator(tasks)))
    baselines = [("raw request", raw)] + [(name, [run_episode(env, agent, t)[0].selection or [] for t in tasks])
                                          for name, agent in agents]
    out = {}
    for name, rankings in baselines:
        rows = [{"task_id": t.id, "c10": completeness_at_k(r, t.gold, 10), "ndcg5": ndcg_at_k(r, t.gold, 5)}
                for r, t in zip(rankings, tasks)]
        out[name] = {"c10": float(np.mean([r["c10"] for r in rows])), "ndcg5": float(np.mean([r["ndcg5"] for r in rows]))}
        if keep_rows is not None:
            keep_rows[name] = rows
    return out


def load_task_runs(path: Path) -> dict[str, Any]:
    """``learning_tasks.json`` as ``{"runs": {key: entry}}``; a file in the old layout (flat
    ``"<env>/<stage>"`` / ``"<run>/grpo"`` keys, overwritten per env) is kept under ``"legacy"``."""
    if not path.exists():
        return {"runs": {}}
    got = json.loads(path.read_text())
    if isinstance(got.get("runs"), dict):
        return got
    return {"runs": {}, "legacy": got}


def stage_means(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Mean of every numeric per-task field (what an evaluation's ``mean`` reports)."""
    keys = [k for k, v in rows[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return {k: sum(float(r[k]) for r in rows) / len(rows) for k in keys}


GAINS = {"sft_gain": ("base", "warm_start"), "grpo_gain": ("warm_start", "grpo"), "total_gain": ("base", "grpo")}


def gains_from_rows(stages: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """The report's paired gains, recomputed from one entry's per-task rows."""
    from toolgym.evaluation.paired import compare

    return {name: compare({"rows": stages[a]}, {"rows": stages[b]})
            for name, (a, b) in GAINS.items() if a in stages and b in stages}


def add_result(results: dict[str, Any], run: str, row: dict[str, Any]) -> None:
    """``results[run] = row``; a row of an earlier invocation of the same run stays, under its ``tasks_key``."""
    earlier = results.pop(run, None)
    if earlier is not None and earlier.get("tasks_key") != row.get("tasks_key"):
        results[earlier.get("tasks_key") or f"{run}@earlier"] = earlier
    results[run] = row


def main(argv: list[str] | None = None) -> int:
    from datetime import datetime, timezone

    from toolgym.evaluation.paired import compare

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warm-start", required=True, help="warm-start model folder (`toolgym sft` RUN_DIR/model)")
    ap.add_argument("--base", default="smollm2", help="the base model (default smollm2)")
    ap.add_argument("--budget-min", type=float, default=12.0, help="GRPO wall minutes per run (default 12)")
    ap.add_argument("--eval-tasks", type=int, default=30, help="held-out tasks evaluated at every stage")
    ap.add_argument("--runs", nargs="+", default=["toolsearch_toolsearcher", "decompose_counterfactual"], choices=list(RUNS))
    ap.add_argument("--grpo", nargs="*", default=None, metavar="RUN",
                    help="the runs that also get GRPO (default: all of --runs; none: only base -> warm start)")
    ap.add_argument("--out", default="runs/learning", help="run folders and cached evaluations")
    ap.add_argument("--config", default=None, help="GRPO config the runs start from (default configs/learning_grpo.yaml)")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", dest="overrides",
                    help="GRPO config overrides for every run, e.g. train.group_size=8 grpo.lr=5e-4")
    ap.add_argument("--eval-batch", type=int, default=8, help="episodes generated together in an evaluation")
    ap.add_argument("--skip-base", action="store_true",
                    help="do not evaluate the base model (on ToolSearch-v0 it writes no valid call and every turn "
                         "runs to the token limit, the costliest evaluation of all)")
    ap.add_argument("--no-report", action="store_true", help="print only; leave benchmarks/results and docs alone")
    args = ap.parse_args(argv)
    out = Path(args.out)
    tasks_path = RESULTS / "learning_tasks.json"
    task_runs = load_task_runs(tasks_path)
    invoked = datetime.now(timezone.utc).isoformat(timespec="seconds")
    # runs measured earlier from the same warm start stay in the report (one invocation per run is
    # how runs with different --set overrides share a table)
    previous = json.loads((RESULTS / "learning.json").read_text()) if (RESULTS / "learning.json").exists() else {}
    results: dict[str, Any] = dict(previous.get("results", {})) if previous.get("warm_start") == args.warm_start else {}
    n = args.eval_tasks
    for run in args.runs:
        env_name, reward = RUNS[run]
        base = None if args.skip_base else evaluate(args.base, env_name, n, out / f"eval_base_{env_name}.json",
                                                    args.eval_batch)
        warm = evaluate(args.warm_start, env_name, n, out / f"eval_warm_{env_name}.json", args.eval_batch)
        stages = {"base": base["rows"]} if base is not None else {}
        stages["warm_start"] = warm["rows"]
        row: dict[str, Any] = {"env_id": ENVS[env_name]["id"], "reward_scheme": reward["name"], "eval_tasks": n,
                               "max_new_tokens": ENVS[env_name]["max_new_tokens"],
                               "base": base["mean"] if base else None, "warm_start": warm["mean"],
                               "sft_gain": compare(base, warm) if base else None}
        if args.grpo is None or run in args.grpo:
            run_dir = out / run
            done = run_grpo(run, args.warm_start, run_dir, args.budget_min * 60, args.config, args.overrides)
            row["grpo_steps"], row["grpo_seconds"] = done["steps"], done["seconds"]
            row["grpo_overrides"] = list(args.overrides)
            row["grpo_budget_min"] = args.budget_min
            after = evaluate(str(run_dir), env_name, n, out / f"eval_grpo_{run}.json", args.eval_batch)
            stages["grpo"] = after["rows"]
            row["grpo"] = after["mean"]
            row["grpo_gain"] = compare(warm, after)
            row["total_gain"] = compare(base, after) if base else None
        baseline_rows: dict[str, Any] = {}
        if env_name in DECOMPOSITION_ENVS:
            row["retrieval_baselines"] = retrieval_baselines(env_name, n, baseline_rows)
        row["tasks_key"] = key = f"{run}@{invoked}"
        task_runs["runs"][key] = {"run": run, "env": env_name, "env_id": ENVS[env_name]["id"], "date": invoked,
                                  "eval_tasks": n, "max_new_tokens": ENVS[env_name]["max_new_tokens"],
                                  "overrides": list(args.overrides), "stages": stages, "baselines": baseline_rows}
        add_result(results, run, row)
    body = report_body(results, args)
    if args.no_report:
        print(body)
        return 0
    tasks_path.write_text(json.dumps(task_runs, indent=1) + "\n")
    write_report("learning", {"base": args.base, "warm_start": args.warm_start, "budget_min": args.budget_min,
                              "config": args.config, "results": results}, "Learning: base -> warm start -> GRPO (paired, held out)",
                 body)
    print(json.dumps({k: {s: v.get(s) for s in ("sft_gain", "grpo_gain", "total_gain")} for k, v in results.items()},
                     indent=2))
    return 0


def _pm(g: dict[str, float] | None) -> str:
    if not g:
        return "-"
    return f"{g['gain']:+.3f} ± {g['se']:.3f}" + (" ✔" if g["exceeds_2se"] else "")


def report_args(payload: dict[str, Any]) -> argparse.Namespace:
    """The arguments :func:`report_body` reads, from a ``learning.json`` payload (to re-render its section)."""
    return argparse.Namespace(base=payload["base"], warm_start=payload["warm_start"],
                              budget_min=payload["budget_min"], config=payload.get("config"))


def report_body(results: dict[str, Any], args: argparse.Namespace) -> str:
    rows = []
    for name, r in results.items():
        base = r["base"] or {}
        rows.append([r["env_id"], r["reward_scheme"], r["eval_tasks"], r.get("max_new_tokens", "-"),
                     f"{base['reward']:.3f}" if base else "-",
                     f"{r['warm_start']['reward']:.3f}", f"{r['grpo']['reward']:.3f}" if "grpo" in r else "-",
                     _pm(r["sft_gain"]), _pm(r.get("grpo_gain")), _pm(r.get("total_gain")),
                     f"{r['grpo_steps']} in {r.get('grpo_budget_min', args.budget_min):g} min" if "grpo_steps" in r else "-",
                     " ".join(f"`{o}`" for o in r.get("grpo_overrides", [])) or "-",
                     (f"{base.get('invalid_rate', 0):.2f} → " if base else "")
                     + f"{r['warm_start'].get('invalid_rate', 0):.2f}"
                     + (f" → {r['grpo'].get('invalid_rate', 0):.2f}" if "grpo" in r else "")])
    body = (
        f"Base `{args.base}`, warm start `{args.warm_start}` (a `toolgym sft` run), GRPO with LoRA from the warm start "
        f"for a fixed wall-clock budget (`{args.config or 'configs/learning_grpo.yaml'}` with the overrides shown). "
        "Greedy episodes on the "
        "first held-out tasks; mean env reward per stage; gains are paired over the same tasks (± paired standard "
        "error; ✔ = gain > 2 se). Per-task rows: `benchmarks/results/learning_tasks.json`, entry `tasks_key` of "
        "each row of `learning.json`.\n\n"
        + markdown_table(["env", "reward", "tasks", "new tokens", "base", "warm start", "GRPO", "base→warm", "warm→GRPO",
                          "base→GRPO", "GRPO steps", "overrides", "invalid rate"], rows)
    )
    for name, r in results.items():
        if "retrieval_baselines" in r:
            lines = [[k, f"{v['c10']:.3f}", f"{v['ndcg5']:.3f}"] for k, v in r["retrieval_baselines"].items()]
            for stage in ("base", "warm_start", "grpo"):
                if r.get(stage) and "c10" in r[stage]:
                    lines.append([f"policy: {stage}", f"{r[stage]['c10']:.3f}", f"{r[stage]['ndcg5']:.3f}"])
            body += (f"\n\nDecomposer retrieval, run `{name}`, on the same {r['eval_tasks']} held-out tasks (BM25, fused top 10):\n\n"
                     + markdown_table(["subtasks from", "C@10", "N@5"], lines))
    return body


if __name__ == "__main__":
    sys.exit(main())
