"""Which credit scheme learns fastest from the same warm start? Held-out reward against step.

Every (env, scheme, seed) run starts from the same warm start (``--warm-start``, a ``toolgym sft``
RUN_DIR/model), trains the same number of GRPO steps on the same task order (the seed fixes
order and sampling, so scheme A and scheme B see the same tasks at every step for a given
seed), and is evaluated greedily on the same held-out tasks every ``--eval-every`` steps (the
run is continued with ``--resume`` between evaluations, which is exact). Outputs:
``benchmarks/results/credit_schemes.json`` (every evaluation's per-task rewards),
``benchmarks/results/credit_schemes_<env>.png`` (mean ± spread over seeds against step) and a
table in docs/benchmarks.md: final gain over the warm start ± paired se, invalid rate, search
turns, zero-variance group share. Scheme names come from the command line, so schemes added
later (``esm_only``, ``tca_only``) need no edit here. Not run in CI.

    python benchmarks/credit_schemes.py --warm-start runs/sft_warmstart/model --steps 6 --eval-every 2 \
        --seeds 0 1 --eval-tasks 16
    python benchmarks/credit_schemes.py --warm-start W --steps 2 --eval-every 1 --seeds 0 --eval-tasks 4 \
        --toolsearch-schemes grpo_f1 --decompose-schemes counterfactual     # a smoke run
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: shared CPUs collapse with spinning threads

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import RESULTS, markdown_table, write_report  # noqa: E402
from learning import ENVS, evaluate, grpo_config  # noqa: E402

DEFAULT_SCHEMES = {
    "toolsearch": ["toolsearcher", "esm_only", "tca_only", "grpo_f1"],
    # magicselector's preference term needs reference subtasks (Task.subtasks): Seal-Tools has none,
    # so pass --decompose-env toolgym/Decompose-Dialogue-v0 --decompose-eval-split test to include it.
    "decompose": ["counterfactual", "grpo_match"],
}


def run_scheme(env_name: str, scheme: str, seed: int, args: argparse.Namespace, warm: dict[str, Any]) -> dict[str, Any]:
    """One run: evaluations at steps 0 (the warm start), eval_every, 2·eval_every, ..., steps."""
    from toolgym.trainers.paired_eval import compare
    from toolgym.trainers.plotting import read_metrics
    from toolgym.trainers.train_cmd import train

    run_dir = Path(args.out) / env_name / f"{scheme}_seed{seed}"
    points = [{"step": 0, "mean": warm["mean"], "rows": warm["rows"]}]
    step = 0
    while step < args.steps:
        step = min(step + args.eval_every, args.steps)
        cfg = grpo_config(env_name, {"name": scheme, "options": {}}, args.warm_start, run_dir, budget_s=None,
                          seed=seed, tasks_per_step=args.tasks_per_step, group_size=args.group_size,
                          overrides=args.overrides)
        cfg.train.steps = step
        cfg.train.time_budget_s = None
        train(cfg, resume=(run_dir / "checkpoints").is_dir(), progress=not args.no_progress)
        ev = evaluate(str(run_dir), env_name, args.eval_tasks, run_dir / f"eval_step{step}.json")
        points.append({"step": step, "mean": ev["mean"], "rows": ev["rows"]})
    metrics = read_metrics(run_dir / "metrics.jsonl")
    final = {"step": step, "mean": points[-1]["mean"], "rows": points[-1]["rows"]}
    return {"env": env_name, "scheme": scheme, "seed": seed, "points": points,
            "gain": compare({"rows": warm["rows"]}, {"rows": final["rows"]}),
            "zero_variance_share": float(sum(m.get("zero_adv_group_share", 0.0) for m in metrics) / max(len(metrics), 1)),
            "train_invalid_rate": float(sum(m.get("invalid_rate", 0.0) for m in metrics) / max(len(metrics), 1))}


def plot(env_name: str, runs: list[dict[str, Any]], out_png: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6, 4))
    for scheme in dict.fromkeys(r["scheme"] for r in runs):
        mine = [r for r in runs if r["scheme"] == scheme]
        steps = [p["step"] for p in mine[0]["points"]]
        vals = np.array([[p["mean"]["reward"] for p in r["points"]] for r in mine])
        mean = vals.mean(0)
        ax.plot(steps, mean, marker="o", label=f"{scheme} (n={len(mine)} seeds)")
        ax.fill_between(steps, vals.min(0), vals.max(0), alpha=0.2)  # spread over seeds
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("held-out reward (greedy)")
    ax.set_title(f"{ENVS[env_name]['id']}: credit schemes from one warm start")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warm-start", required=True, help="warm-start model folder (`toolgym sft` RUN_DIR/model)")
    ap.add_argument("--steps", type=int, default=6, help="GRPO steps per run (the same budget for every scheme)")
    ap.add_argument("--eval-every", type=int, default=2)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--eval-tasks", type=int, default=16)
    ap.add_argument("--tasks-per-step", type=int, default=2)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--toolsearch-schemes", nargs="*", default=DEFAULT_SCHEMES["toolsearch"])
    ap.add_argument("--decompose-schemes", nargs="*", default=DEFAULT_SCHEMES["decompose"])
    ap.add_argument("--decompose-env", default=None, help="another decomposition env id (e.g. Decompose-Dialogue-v0)")
    ap.add_argument("--decompose-eval-split", default=None, help="its held-out split (e.g. test), default heldout")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", dest="overrides",
                    help="GRPO config overrides for every run, e.g. sampling.temperature=1.2 grpo.lr=2e-3")
    ap.add_argument("--out", default="runs/credit_schemes")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--no-report", action="store_true", help="print only; leave benchmarks/results and docs alone")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.eval_every < 1:
        ap.error("--steps and --eval-every must be >= 1")
    if args.decompose_env:
        ENVS["decompose"] = {**ENVS["decompose"], "id": args.decompose_env}
    if args.decompose_eval_split:
        ENVS["decompose"] = {**ENVS["decompose"], "eval_split": args.decompose_eval_split}
    from toolgym.rewards import get_reward, reward_names, scheme_names

    known = set(reward_names()) | set(scheme_names())
    wanted = {"toolsearch": args.toolsearch_schemes, "decompose": args.decompose_schemes}
    missing = sorted({s for v in wanted.values() for s in v} - known)
    if missing:
        ap.error(f"unknown reward scheme(s) {missing} on this branch; known: {sorted(known)}")
    assert get_reward  # imported to register every scheme before the check above
    all_runs: dict[str, list[dict[str, Any]]] = {}
    for env_name, schemes in wanted.items():
        if not schemes:
            continue
        warm = evaluate(args.warm_start, env_name, args.eval_tasks, Path(args.out) / env_name / "eval_warm.json")
        runs = [run_scheme(env_name, s, seed, args, warm) for s in schemes for seed in args.seeds]
        all_runs[env_name] = runs
        plot(env_name, runs, (Path(args.out) if args.no_report else RESULTS) / f"credit_schemes_{env_name}.png")
    rows = []
    for env_name, runs in all_runs.items():
        for scheme in dict.fromkeys(r["scheme"] for r in runs):
            mine = [r for r in runs if r["scheme"] == scheme]
            gains = [r["gain"] for r in mine]
            last = [r["points"][-1]["mean"] for r in mine]
            rows.append([ENVS[env_name]["id"], scheme, len(mine),
                         " / ".join(f"{g['gain']:+.3f} ± {g['se']:.3f}" for g in gains),
                         f"{sum(m.get('invalid_rate', 0) for m in last) / len(last):.3f}",
                         f"{sum(m.get('search_turns', 0) for m in last) / len(last):.2f}",
                         f"{sum(r['zero_variance_share'] for r in mine) / len(mine):.2f}"])
    body = (f"Same warm start (`{args.warm_start}`), {args.steps} GRPO steps per run ({args.tasks_per_step} tasks × "
            f"{args.group_size} rollouts; overrides {' '.join(args.overrides) or 'none'}), seeds {args.seeds}, "
            f"greedy held-out evaluation on {args.eval_tasks} tasks "
            f"every {args.eval_every} steps. Final gain over the warm start ± paired se, one per seed; invalid rate and "
            "search turns of the final held-out evaluation; zero-variance share = training groups whose advantages "
            "were all 0. Curves: `benchmarks/results/credit_schemes_<env>.png`.\n\n"
            + markdown_table(["env", "scheme", "seeds", "final gain ± se (per seed)", "invalid rate", "search turns",
                              "zero-var share"], rows))
    if args.no_report:
        print(body)
        return 0
    write_report("credit_schemes", {"warm_start": args.warm_start, "args": vars(args), "runs": all_runs},
                 "Credit schemes: held-out reward against step from one warm start", body)
    print(markdown_table(["env", "scheme", "seeds", "final gain ± se", "invalid", "turns", "zero-var"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
