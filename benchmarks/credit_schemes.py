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
later need no edit here. Not run in CI.

A finished run leaves ``RUN_DIR/run.json`` and is not trained again, so an interrupted benchmark
is continued by running the same command. ``--jobs N`` trains the runs in N processes of
cpus/N threads each: decoding a 135M model uses two cores poorly. Measured here, one decode step
of 32 rows at 300 tokens of context takes 204 ms with 2 threads, and 260 ms in each of two
1-thread processes running at once, so two processes decode ~1.6x as many tokens. An env's results replace that env's earlier
ones in the JSON and the table; the other envs' results stay.

    python benchmarks/credit_schemes.py --warm-start runs/sft_warmstart/model --steps 8 --eval-every 4 \
        --seeds 0 1 --eval-tasks 40 --tasks-per-step 2 --group-size 8 --decompose-schemes --jobs 2 --set grpo.lr=1e-3
    python benchmarks/credit_schemes.py --warm-start W --steps 2 --eval-every 1 --seeds 0 --eval-tasks 4 \
        --toolsearch-schemes grpo_f1 --decompose-schemes counterfactual --no-report   # a smoke run
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
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
SETTING_KEYS = ("warm_start", "steps", "eval_every", "eval_tasks", "eval_batch", "tasks_per_step", "group_size",
                "overrides")


def env_settings(env_name: str, args: argparse.Namespace) -> dict[str, Any]:
    """What every run of one env shares; a run dir trained under other settings is not reused."""
    return {"env_id": ENVS[env_name]["id"], **{k: getattr(args, k) for k in SETTING_KEYS}}


def run_scheme(env_name: str, scheme: str, seed: int, args: argparse.Namespace, warm: dict[str, Any]) -> dict[str, Any]:
    """One run: evaluations at steps 0 (the warm start), eval_every, 2·eval_every, ..., steps."""
    from toolgym.trainers.paired_eval import compare
    from toolgym.trainers.plotting import read_metrics
    from toolgym.trainers.train_cmd import train

    run_dir = Path(args.out) / env_name / f"{scheme}_seed{seed}"
    settings = {**env_settings(env_name, args), "scheme": scheme, "seed": seed}
    for marker in (run_dir / "run.json", run_dir / "settings.json"):
        if marker.exists():
            got = json.loads(marker.read_text())
            if got.get("settings", got) != settings:
                raise SystemExit(f"{run_dir} holds a run with other settings ({marker.name}); pass another --out")
            if marker.name == "run.json":
                return got
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "settings.json").write_text(json.dumps(settings, indent=2))
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
        ev = evaluate(str(run_dir), env_name, args.eval_tasks, run_dir / f"eval_step{step}.json", args.eval_batch)
        points.append({"step": step, "mean": ev["mean"], "rows": ev["rows"]})
    metrics = read_metrics(run_dir / "metrics.jsonl")
    result = {"env": env_name, "scheme": scheme, "seed": seed, "settings": settings, "points": points,
              "gain": compare({"rows": warm["rows"]}, {"rows": points[-1]["rows"]}),
              "zero_variance_share": float(sum(m.get("zero_adv_group_share", 0.0) for m in metrics) / max(len(metrics), 1)),
              "train_invalid_rate": float(sum(m.get("invalid_rate", 0.0) for m in metrics) / max(len(metrics), 1)),
              "train_seconds": float(sum(m.get("step_s", 0.0) for m in metrics))}
    (run_dir / "run.json").write_text(json.dumps(result))
    return result


def pooled_gain(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Paired gain of the seeds' mean final reward per task over the warm start (one number per scheme)."""
    from toolgym.trainers.paired_eval import paired_gain

    ids = [r["task_id"] for r in runs[0]["points"][0]["rows"]]
    if any([r["task_id"] for r in run["points"][-1]["rows"]] != ids for run in runs):
        raise ValueError("pooled_gain needs every seed evaluated on the warm start's tasks, in its order")
    before = [r["reward"] for r in runs[0]["points"][0]["rows"]]
    finals = [[r["reward"] for r in run["points"][-1]["rows"]] for run in runs]
    return paired_gain(before, [sum(col) / len(col) for col in zip(*finals)])


def plot(env_id: str, runs: list[dict[str, Any]], out_png: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6, 4))
    for scheme in dict.fromkeys(r["scheme"] for r in runs):
        mine = [r for r in runs if r["scheme"] == scheme]
        steps = [p["step"] for p in mine[0]["points"]]
        vals = np.array([[p["mean"]["reward"] for p in r["points"]] for r in mine])
        ax.plot(steps, vals.mean(0), marker="o", label=f"{scheme} (n={len(mine)} seeds)")
        ax.fill_between(steps, vals.min(0), vals.max(0), alpha=0.2)  # spread over seeds
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("held-out reward (greedy)")
    ax.set_title(f"{env_id}: credit schemes, one warm start", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png


def previous_results() -> dict[str, dict[str, Any]]:
    """The envs of ``benchmarks/results/credit_schemes.json``, each ``{"settings", "date", "runs"}``."""
    path = RESULTS / "credit_schemes.json"
    if not path.exists():
        return {}
    got = json.loads(path.read_text())
    if "envs" in got:
        return got["envs"]
    # the first format: one argument block for every env
    a = got["args"]
    return {env: {"settings": {"env_id": a.get("decompose_env") if env == "decompose" and a.get("decompose_env")
                               else ENVS[env]["id"], **{k: a.get(k) for k in SETTING_KEYS}},
                  "date": got["date"], "runs": runs} for env, runs in got["runs"].items()}


def report_body(envs: dict[str, dict[str, Any]]) -> str:
    paragraphs, rows = [], []
    for env_name, entry in envs.items():
        s, runs = entry["settings"], entry["runs"]
        seeds = sorted({r["seed"] for r in runs})
        paragraphs.append(
            f"**{s['env_id']}** ({entry['date'][:10]}): warm start `{s['warm_start']}`, {s['steps']} GRPO steps per run "
            f"({s['tasks_per_step']} tasks × {s['group_size']} rollouts; overrides {' '.join(s['overrides'] or []) or 'none'}), "
            f"seeds {seeds}, greedy held-out evaluation on {s['eval_tasks']} tasks every {s['eval_every']} steps.")
        for scheme in dict.fromkeys(r["scheme"] for r in runs):
            mine = [r for r in runs if r["scheme"] == scheme]
            last = [r["points"][-1]["mean"] for r in mine]
            by_step = " → ".join(f"{sum(r['points'][i]['mean']['reward'] for r in mine) / len(mine):.3f}"
                                 for i in range(len(mine[0]["points"])))
            pooled = pooled_gain(mine)
            rows.append([s["env_id"], scheme, len(mine), by_step,
                         " / ".join(f"{r['gain']['gain']:+.3f} ± {r['gain']['se']:.3f}" for r in mine),
                         f"{pooled['gain']:+.3f} ± {pooled['se']:.3f}",
                         f"{sum(m.get('invalid_rate', 0) for m in last) / len(last):.3f}",
                         f"{sum(m.get('search_turns', 0) for m in last) / len(last):.2f}",
                         f"{sum(r['zero_variance_share'] for r in mine) / len(mine):.2f}"])
    legend = ("Held-out reward by step: the mean over seeds at each evaluation (the first is the warm start). "
              "Final gain over the warm start ± paired se, one per seed; pooled: the seeds' mean reward per task "
              "against the warm start. Invalid rate and search turns of the final held-out evaluation; zero-var = "
              "training groups whose advantages were all 0. Curves: `benchmarks/results/credit_schemes_<env>.png`.")
    table = markdown_table(["env", "scheme", "seeds", "held-out reward by step", "final gain ± se (per seed)",
                            "pooled gain ± se", "invalid rate", "search turns", "zero-var share"], rows)
    return "\n\n".join(paragraphs + [legend, table])


def run_shards(jobs: int, argv: list[str], out: Path) -> None:
    """Train the runs in ``jobs`` processes (``--shard k/jobs``) of cpus/jobs threads each; logs in ``out``."""
    threads = max(1, (os.cpu_count() or 1) // jobs)
    out.mkdir(parents=True, exist_ok=True)
    procs = []
    for k in range(jobs):
        log = open(out / f"shard{k}.log", "w")
        procs.append((subprocess.Popen([sys.executable, __file__, *argv, "--jobs", "1", "--shard", f"{k}/{jobs}",
                                        "--no-progress"], stdout=log, stderr=subprocess.STDOUT,
                                       env={**os.environ, "OMP_NUM_THREADS": str(threads)}), log))
    failed = []
    for k, (proc, log) in enumerate(procs):
        if proc.wait() != 0:
            failed.append(k)
        log.close()
    if failed:
        raise SystemExit(f"shard(s) {failed} failed: see {out}/shard<k>.log")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warm-start", required=True, help="warm-start model folder (`toolgym sft` RUN_DIR/model)")
    ap.add_argument("--steps", type=int, default=6, help="GRPO steps per run (the same budget for every scheme)")
    ap.add_argument("--eval-every", type=int, default=2)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--eval-tasks", type=int, default=16)
    ap.add_argument("--eval-batch", type=int, default=20, help="episodes generated together in an evaluation")
    ap.add_argument("--tasks-per-step", type=int, default=2)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--toolsearch-schemes", nargs="*", default=DEFAULT_SCHEMES["toolsearch"])
    ap.add_argument("--decompose-schemes", nargs="*", default=DEFAULT_SCHEMES["decompose"])
    ap.add_argument("--decompose-env", default=None, help="another decomposition env id (e.g. Decompose-Dialogue-v0)")
    ap.add_argument("--decompose-eval-split", default=None, help="its held-out split (e.g. test), default heldout")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", dest="overrides",
                    help="GRPO config overrides for every run, e.g. sampling.temperature=1.2 grpo.lr=2e-3")
    ap.add_argument("--out", default="runs/credit_schemes")
    ap.add_argument("--jobs", type=int, default=1, help="train the runs in this many processes (cpus/jobs threads each)")
    ap.add_argument("--shard", default=None, metavar="K/N", help=argparse.SUPPRESS)  # set by --jobs
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--no-report", action="store_true", help="print only; leave benchmarks/results and docs alone")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.eval_every < 1 or args.jobs < 1:
        ap.error("--steps, --eval-every and --jobs must be >= 1")
    shard = None
    if args.shard is not None:
        k, _, n = args.shard.partition("/")
        if not (k.isdigit() and n.isdigit() and int(k) < int(n)):
            ap.error("--shard takes K/N with 0 <= K < N")
        shard = (int(k), int(n))
    if args.decompose_env:
        ENVS["decompose"] = {**ENVS["decompose"], "id": args.decompose_env}
    if args.decompose_eval_split:
        ENVS["decompose"] = {**ENVS["decompose"], "eval_split": args.decompose_eval_split}
    from toolgym.rewards import get_reward, reward_names, scheme_names

    known = set(reward_names()) | set(scheme_names())
    wanted = {env: schemes for env, schemes in
              {"toolsearch": args.toolsearch_schemes, "decompose": args.decompose_schemes}.items() if schemes}
    missing = sorted({s for v in wanted.values() for s in v} - known)
    if missing:
        ap.error(f"unknown reward scheme(s) {missing} on this branch; known: {sorted(known)}")
    assert get_reward  # imported to register every scheme before the check above
    plan = [(env, s, seed) for env, schemes in wanted.items() for s in schemes for seed in args.seeds]
    warms = {env: evaluate(args.warm_start, env, args.eval_tasks, Path(args.out) / env / "eval_warm.json",
                           args.eval_batch) for env in wanted}
    if shard is not None:
        for i, (env, scheme, seed) in enumerate(plan):
            if i % shard[1] == shard[0]:
                run_scheme(env, scheme, seed, args, warms[env])
        return 0
    if args.jobs > 1:
        run_shards(args.jobs, argv, Path(args.out))
    runs = [run_scheme(env, scheme, seed, args, warms[env]) for env, scheme, seed in plan]  # all cached after shards
    from datetime import datetime, timezone

    date = datetime.now(timezone.utc).isoformat(timespec="seconds")
    fresh = {env: {"settings": env_settings(env, args), "date": date, "runs": [r for r in runs if r["env"] == env]}
             for env in wanted}
    for env, entry in fresh.items():
        plot(entry["settings"]["env_id"], entry["runs"],
             (Path(args.out) if args.no_report else RESULTS) / f"credit_schemes_{env}.png")
    if args.no_report:
        print(report_body(fresh))
        return 0
    envs = {**previous_results(), **fresh}
    body = report_body(envs)
    write_report("credit_schemes", {"envs": envs}, "Credit schemes: held-out reward against step from one warm start",
                 body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
