"""Which credit scheme learns fastest from the same warm start? Held-out F1 against step, paired.

Every (env, scheme, seed) run starts from the same warm start (``--warm-start``, a ``toolgym sft``
RUN_DIR/model), trains the same number of GRPO steps on the same task order (the seed fixes
order and sampling, so scheme A and scheme B see the same tasks at every step for a given
seed), and is evaluated greedily on the same held-out tasks every ``--eval-every`` steps (the
run is continued with ``--resume`` between evaluations, which is exact).

A finished run writes its raw per-task results to
``benchmarks/results/credit_schemes/<env>/<scheme>_seed<k>.json`` (commit it), with the sha256
of the warm start's tensors (:func:`_report.weights_fingerprint`): a run whose file exists is never
trained again, and a file from another warm start or other settings is refused, so a comparison
spread over restarts and fresh machines loses nothing and never pools two warm starts.
``--report`` rebuilds everything from those files alone: per scheme the held-out F1 / SRecall /
Match / invalid rate / search turns (mean ± sd over seeds), the pooled gain over the warm start ±
paired se, every pair of schemes paired per task (seed spread apart from task spread), the share
of training groups with non-zero credit per term, the credit per turn type of one set of logged
rollouts scored under every scheme (``<env>/replay_rollouts.jsonl``, made by ``--replay-from
RUN_DIR``), and the figures; it writes them into docs/learning.md between the
``credit_schemes_runs`` markers. Not run in CI.

``--jobs N`` trains the runs in N processes (lanes) of cpus/N threads each: decoding a 135M model
uses two cores poorly (one decode step of 32 rows at 300 tokens of context: 204 ms with 2 threads,
260 ms in each of two 1-thread processes at once, so two processes decode ~1.6x as many tokens).
The lanes share the plan as they go: each walks it in order and trains the next run that no other
process holds (:func:`claimed_runs`, a ``flock`` in the run's folder), so a lane is never idle while
a run is left, however many of the plan's runs earlier sittings finished, and the same command,
re-run each sitting, resumes the rest. Two invocations started side by side share a plan the same way.

    python -m benchmarks.credit_schemes --warm-start runs/sft_toolsearch/model --toolsearch-env toolsearch_multi \
        --steps 3 --eval-every 3 --seeds 0 1 2 --eval-tasks 40 --tasks-per-step 4 --group-size 8 \
        --toolsearch-schemes toolsearcher grpo_f1 --decompose-schemes --out runs/credit_multi --set grpo.lr=1e-3
    python -m benchmarks.credit_schemes --replay-from runs/credit_multi/toolsearch_multi/toolsearcher_seed0 \
        --toolsearch-env toolsearch_multi      # commit its replay_rollouts.jsonl, then report
    python -m benchmarks.credit_schemes --report   # tables and figures from the committed files alone
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from itertools import combinations
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: shared CPUs collapse with spinning threads

from benchmarks._report import RESULTS, host_info, markdown_table, weights_fingerprint  # noqa: E402
from benchmarks.learning import DECOMPOSITION_ENVS, ENVS, evaluate, grpo_config  # noqa: E402
from toolgym.envs.decomposition import SPLIT_RULES  # noqa: E402

TOOLSEARCH_ENVS = ("toolsearch", "toolsearch_multi", "toolsearch_multi_cat")
RUN_FILES = RESULTS / "credit_schemes"  # one committed file per finished (env, scheme, seed) run
RUN_FORMAT = 2
# held-out metrics of tool search per task (evaluate_per_task row keys) and how the tables name them
METRICS = {"f1": "F1", "srecall": "SRecall", "match": "Match", "invalid_rate": "invalid", "search_turns": "turns"}
DECOMPOSE_METRICS = {"reward": "R_cf", "c10": "C@10", "ndcg5": "N@5", "invalid_rate": "invalid", "subtasks": "subtasks"}
TURN_TYPES = ("first_discovery", "repeated_search", "search_nothing", "submit_all_gold_seen", "submit_gold_missing",
              "rejected")
# ToolSearcher's ablation: removing ESM cost 11.9 F1 points on StableToolBench (the paper's largest
# credit effect, one run, no error bar). Each ToolSearch comparison reports the seeds its own seed
# spread would need to detect an effect that size.
PAPER_ESM_EFFECT_F1 = 0.119
MMAP_THRESHOLD = 1 << 20  # bytes: glibc's mmap threshold for training runs (main says why)

REPLAY_SCHEMES = ("toolsearcher", "esm_only", "tca_only", "grpo_f1", "toolsearcher_valid")

DEFAULT_SCHEMES = {
    "toolsearch": list(REPLAY_SCHEMES),  # ESM + TCA, each alone, trajectory-level F1, + the format term
    # magicselector's preference term needs reference subtasks (Task.subtasks): Seal-Tools has none,
    # so pass --decompose-env dialogue (toolgym/Decompose-Dialogue-v0) to include it.
    "decompose": ["counterfactual", "grpo_match"],
}
SETTING_KEYS = ("warm_start", "steps", "eval_every", "eval_tasks", "eval_batch", "tasks_per_step", "group_size",
                "overrides")
# A run named ``SCHEME+VARIANT`` trains SCHEME with this change of the training env and nothing else,
# so it pairs with SCHEME's runs of the same seeds. ``curriculum``: ToolSearcher's category-constrained
# schedule (CCTD: every search confined to one category for the first 30 % of the steps, then the
# env's own search, global; evaluation always searches globally). Its ``after_mode`` is the env's
# ``category_mode`` (``variant_options``): "off" on toolsearch_multi, "optional" on toolsearch_multi_cat,
# so the schema after the constrained phase is the one the warm start learnt and the evaluation uses.
# ``mean``: ESM credits a search that first finds several gold tools with the mean of their z, not the
# max (the paper's choice; rewards.search.esm_turn_advantages): does max aggregation matter?
VARIANTS: dict[str, dict[str, Any]] = {
    "curriculum": {"train_kwargs": {"curriculum": {"required_fraction": 0.3, "constrained_mode": "required",
                                                   "after_mode": "off"}}},
    "mean": {"reward_options": {"aggregate": "mean"}},
}


def variant_options(variant: str, env_name: str) -> dict[str, Any]:
    """``VARIANTS[variant]`` for runs on ``env_name``: the curriculum's ``after_mode`` becomes the env's
    ``category_mode`` (``"off"`` unless the env's kwargs set one)."""
    options = copy.deepcopy(VARIANTS[variant])
    curriculum = options.get("train_kwargs", {}).get("curriculum")
    if curriculum is not None:
        curriculum["after_mode"] = ENVS[env_name]["kwargs"].get("category_mode", "off")
    return options


def split_run_name(name: str) -> tuple[str, str | None]:
    """``"toolsearcher+curriculum"`` -> ``("toolsearcher", "curriculum")``; a plain scheme -> ``(name, None)``."""
    scheme, plus, variant = name.partition("+")
    if not plus:
        return name, None
    if variant not in VARIANTS:
        raise ValueError(f"unknown run variant {variant!r} in {name!r}; variants: {sorted(VARIANTS)}")
    return scheme, variant


def set_decompose_env(args: argparse.Namespace) -> str:
    """The decomposition env's name in ``ENVS``, after applying ``--decompose-env`` (a name there or
    another env id), ``--decompose-eval-split`` and ``--decompose-retriever`` to its entry (training
    and evaluation read the same entry, and a run's settings record it)."""
    name = "decompose"
    if args.decompose_env in DECOMPOSITION_ENVS:
        name = args.decompose_env
    elif args.decompose_env:
        ENVS["decompose"] = {**ENVS["decompose"], "id": args.decompose_env}
    if args.decompose_eval_split:
        ENVS[name] = {**ENVS[name], "eval_split": args.decompose_eval_split}
    if args.decompose_retriever:
        if not Path(args.decompose_retriever).is_dir():
            raise ValueError(f"--decompose-retriever {args.decompose_retriever}: no such model folder")
        ENVS[name] = {**ENVS[name], "kwargs": {**ENVS[name]["kwargs"], "retriever": "hybrid",
                                               "retriever_options": {"model": str(args.decompose_retriever)}}}
    if getattr(args, "decompose_unseen_only", False):
        if name != "mixture" or not args.decompose_retriever:
            raise ValueError("--decompose-unseen-only needs --decompose-env mixture and --decompose-retriever")
        ENVS[name] = {**ENVS[name], "kwargs": {**ENVS[name]["kwargs"], "unseen_by_retriever": True}}
    if getattr(args, "decompose_split_rule", None):
        ENVS[name] = {**ENVS[name], "kwargs": {**ENVS[name]["kwargs"], "split_rule": args.decompose_split_rule}}
    return name


def env_settings(env_name: str, args: argparse.Namespace) -> dict[str, Any]:
    """What every run of one env shares; a run dir trained under other settings is not reused."""
    return {"env_id": ENVS[env_name]["id"], "env_kwargs": ENVS[env_name]["kwargs"],
            **{k: getattr(args, k) for k in SETTING_KEYS}}


def run_scheme(env_name: str, scheme: str, seed: int, args: argparse.Namespace, warm: dict[str, Any]) -> dict[str, Any]:
    """One run: evaluations at steps 0 (the warm start), eval_every, 2·eval_every, ..., steps."""
    from toolgym.evaluation.paired import compare
    from toolgym.trainers.plotting import read_metrics
    from toolgym.trainers.train import train

    run_dir = Path(args.out) / env_name / f"{scheme}_seed{seed}"
    reward_name, variant = split_run_name(scheme)
    settings = {**env_settings(env_name, args), "scheme": scheme, "seed": seed}
    if variant is not None:
        settings["variant"] = variant_options(variant, env_name)
    results_dir = Path(getattr(args, "results_dir", None) or RUN_FILES)
    committed = run_file(env_name, scheme, seed, results_dir)
    if committed.exists() and "fingerprint" in warm:
        return check_run_file(committed, settings, warm["fingerprint"])
    for marker in (run_dir / "run.json", run_dir / "settings.json"):
        if marker.exists():
            got = json.loads(marker.read_text())
            if got.get("settings", got) != settings:
                raise SystemExit(f"{run_dir} holds a run with other settings ({marker.name}); pass another --out")
            if marker.name == "run.json":  # trained; its committed file may be missing (written after a stop)
                if "fingerprint" in warm and not committed.exists():
                    write_run_file(committed, got, warm, read_metrics(run_dir / "metrics.jsonl"), args)
                return got
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "settings.json").write_text(json.dumps(settings, indent=2))
    points = [{"step": 0, "mean": warm["mean"], "rows": warm["rows"]}]
    step = 0
    while step < args.steps:
        step = min(step + args.eval_every, args.steps)
        cfg = grpo_config(env_name, {"name": reward_name, "options": {}}, args.warm_start, run_dir, budget_s=None,
                          seed=seed, tasks_per_step=args.tasks_per_step, group_size=args.group_size,
                          overrides=args.overrides)
        if variant is not None:
            apply_variant(cfg, variant, env_name)
        cfg.train.steps = step
        cfg.train.time_budget_s = None
        cfg.train.save_rollouts = True  # for `toolgym replay` (credit per turn type on the same rollouts)
        train(cfg, resume=(run_dir / "checkpoints").is_dir(), progress=not args.no_progress)
        ev = evaluate(str(run_dir), env_name, args.eval_tasks, run_dir / f"eval_step{step}.json", args.eval_batch,
                      progress=not args.no_progress)
        points.append({"step": step, "mean": ev["mean"], "rows": ev["rows"]})
    metrics = read_metrics(run_dir / "metrics.jsonl")
    result = {"env": env_name, "scheme": scheme, "seed": seed, "settings": settings, "points": points,
              "gain": compare({"rows": warm["rows"]}, {"rows": points[-1]["rows"]}),
              "zero_variance_share": float(sum(m.get("zero_adv_group_share", 0.0) for m in metrics) / max(len(metrics), 1)),
              "train_invalid_rate": float(sum(m.get("invalid_rate", 0.0) for m in metrics) / max(len(metrics), 1)),
              "train_seconds": float(sum(m.get("step_s", 0.0) for m in metrics)), "host": host_info()}
    (run_dir / "run.json").write_text(json.dumps(result))
    if "fingerprint" in warm:  # the committed raw file: what --report pools
        write_run_file(committed, result, warm, metrics, args)
    return result


def write_run_file(path: Path, result: dict[str, Any], warm: dict[str, Any], metrics: list[dict[str, Any]],
                   args: argparse.Namespace) -> None:
    """The committed raw file of one finished run (``result``: its run.json), and with ``--commit`` its commit."""
    from datetime import datetime, timezone

    rows = train_rows(metrics)
    env_name, scheme, seed = result["env"], result["scheme"], result["seed"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "format": RUN_FORMAT, "env": env_name, "env_id": ENVS[env_name]["id"], "scheme": scheme, "seed": seed,
        "settings": result["settings"], "warm_start_fingerprint": warm["fingerprint"],
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "task_set": warm.get("task_set"), "warm": {"mean": warm["mean"], "rows": warm["rows"]},
        "points": result["points"], "train": rows, "credit_nonzero_share": credit_nonzero_share(rows),
        "train_seconds": result["train_seconds"], "host": result.get("host") or host_info()}, indent=1) + "\n")
    if getattr(args, "commit", False):
        commit_file(path, f"credit_schemes: {env_name} {scheme} seed {seed} ({args.steps} steps)")


def commit_file(path: Path, message: str, attempts: int = 20, root: Path | None = None) -> bool:
    """``git add path && git commit`` of that one file (a long comparison commits each run as it finishes, so a
    stopped sitting keeps every finished run). Another lane committing at the same moment holds git's index lock:
    wait and retry. False (and a warning) when git refuses for another reason: the file stays on disk."""
    import time

    root = root or RESULTS.parent.parent
    for attempt in range(attempts):
        step = subprocess.run(["git", "-C", str(root), "add", "--", str(path)], capture_output=True, text=True)
        if step.returncode == 0:
            step = subprocess.run(["git", "-C", str(root), "commit", "-q", "-m", message, "--", str(path)],
                                  capture_output=True, text=True)
            if step.returncode == 0:
                return True
        err = step.stderr + step.stdout
        if "index.lock" not in err:
            print(f"warning: could not commit {path}: {err.strip()[:300]}", file=sys.stderr)
            return False
        time.sleep(1.0 + attempt)
    return False


def seed_counts(items: Sequence[str]) -> dict[str, int]:
    """``["esm_only=3"]`` -> ``{"esm_only": 3}`` (``--seed-count``)."""
    out = {}
    for item in items:
        name, eq, n = item.partition("=")
        if not eq or not name or not n.isdigit() or int(n) < 1:
            raise ValueError(f"--seed-count takes SCHEME=N with N >= 1, got {item!r}")
        out[name] = int(n)
    return out


def run_plan(wanted: dict[str, Sequence[str]], seeds: Sequence[int], counts: dict[str, int]) -> list[tuple[str, str, int]]:
    """Every (env, scheme, seed) to train, seed-major: every scheme's seed 0 before any scheme's seed 1, so a
    comparison stopped part way has whole seeds of every arm (the seed is the unit). ``counts[scheme]``
    limits a scheme to the first N seeds."""
    return [(env, scheme, seed) for i, seed in enumerate(seeds) for env, schemes in wanted.items() for scheme in schemes
            if i < counts.get(scheme, len(seeds))]


CLAIM_LOCK = ".credit_schemes_lane.lock"


def claimed_runs(plan: Sequence[tuple[str, str, int]], out: Path) -> Iterator[tuple[str, str, int]]:
    """The runs of ``plan`` that no other process holds, in order, each held (a ``flock`` on
    ``out/<env>/<scheme>_seed<k>/.credit_schemes_lane.lock``) until the caller asks for the next.

    Lanes walking one plan this way share it dynamically: a run another lane trains is skipped, a
    finished run is passed on (``run_scheme`` returns its file), and the kernel drops the claim of a
    killed lane, so nothing stays claimed."""
    from toolgym.trainers.run_lock import RunDirBusy, run_dir_lock

    for env, scheme, seed in plan:
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(run_dir_lock(out / env / f"{scheme}_seed{seed}", "credit_schemes lane",
                                                lock_file=CLAIM_LOCK))
            except RunDirBusy:  # another lane holds it; any other error (a bad lock file) stops the lane
                continue
            yield env, scheme, seed


def apply_variant(cfg: Any, variant: str, env_name: str) -> Any:
    """Merge ``variant_options(variant, env_name)`` into a GRPO config: ``reward_options`` into
    ``reward.options``, any other section into the training env's (``env.train_kwargs``...)."""
    from omegaconf import OmegaConf

    for section, values in variant_options(variant, env_name).items():
        if section == "reward_options":
            cfg.reward.options = OmegaConf.create({**OmegaConf.to_container(cfg.reward.options), **values})
            continue
        current = getattr(cfg.env, section)
        current = OmegaConf.to_container(current) if OmegaConf.is_config(current) else dict(current)
        setattr(cfg.env, section, OmegaConf.create({**current, **values}))
    return cfg


# -- warm start fingerprint, one file per finished run ------------------------------------------


def run_file(env_name: str, scheme: str, seed: int, root: Path | None = None) -> Path:
    """``benchmarks/results/credit_schemes/<env>/<scheme>_seed<k>.json``: a finished run's raw per-task results."""
    return (root or RUN_FILES) / env_name / f"{scheme}_seed{seed}.json"


def check_run_file(path: Path, settings: dict[str, Any], fingerprint: str) -> dict[str, Any]:
    """The run stored at ``path``, refused (SystemExit) when it came from another warm start or other settings."""
    got = json.loads(path.read_text())
    if got.get("warm_start_fingerprint") != fingerprint:
        raise SystemExit(f"{path} was trained from another warm start ({got.get('warm_start_fingerprint')}, this one "
                         f"is {fingerprint}): runs of different warm starts are never pooled; move it or rebuild "
                         "the warm start with the documented command")
    if got.get("settings") != settings:
        diff = sorted(k for k in set(settings) | set(got.get("settings") or {})
                      if settings.get(k) != (got.get("settings") or {}).get(k))
        raise SystemExit(f"{path} holds a run with other settings (differs in {diff}); pass another --results-dir")
    return got


def task_set_stats(env_name: str) -> dict[str, Any]:
    """Gold tools per task of the env's training and held-out tasks (what first-discovery credit can find)."""
    import numpy as np

    from toolgym.evaluation.evaluate import env_tasks, make_envs

    spec = ENVS[env_name]
    out: dict[str, Any] = {}
    for split in ("train", spec.get("eval_split", "heldout")):
        tasks = env_tasks(make_envs(spec["id"], {**spec["kwargs"], "split": split}, 1)[0])
        gold = np.array([len(t.gold) for t in tasks], dtype=float)
        out[split] = {"tasks": len(tasks), "gold_per_task": float(gold.mean()),
                      "multi_tool_share": float(np.mean(gold >= 2))}
    return out


def train_rows(metrics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The per-step training numbers a run file keeps (the credit terms' zero-variance flags among them)."""
    keep = ("step", "reward", "zero_adv_group_share", "invalid_rate", "search_turns", "generated_tokens", "step_s")
    return [{k: v for k, v in m.items() if k in keep or (k.startswith("reward/") and k.endswith(
                ("/zero_var", "/gate_open", "/multi_tool_discovery_share", "/discovery_events")))}
            for m in metrics]


def credit_nonzero_share(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per credit term, the share of training groups where it was not zero everywhere: 1 − mean ``<term>/zero_var``
    over the steps (every step has the same number of groups)."""
    def key(term: str) -> str:  # a one-module reward logs plain ``reward/zero_var``: its term is ""
        return f"reward/{term}/zero_var" if term else "reward/zero_var"

    terms = sorted({k[len("reward/"):].removesuffix("zero_var").removesuffix("/") for r in rows for k in r
                    if k.startswith("reward/") and k.endswith("zero_var") and k.count("/") <= 2})
    return {t: 1.0 - sum(r.get(key(t), 0.0) for r in rows) / len(rows) for t in terms} if rows else {}


def run_nonzero_share(run: dict[str, Any]) -> dict[str, float]:
    """A run file's stored :func:`credit_nonzero_share`, with a one-module reward's share (term "")
    recomputed from its training rows: files written before its plain ``reward/zero_var`` was read
    stored 1.0 for it."""
    stored = dict(run.get("credit_nonzero_share", {}))
    if "" in stored and run.get("train"):
        stored[""] = credit_nonzero_share(run["train"]).get("", stored[""])
    return stored


def load_run_files(root: Path | None = None) -> dict[str, list[dict[str, Any]]]:
    """Every committed run file, per env; an env whose runs come from two warm starts (or two settings) is refused."""
    root = root or RUN_FILES
    envs: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(root.glob("*/*_seed*.json")):
        run = json.loads(path.read_text())
        run["_file"] = str(path)
        envs.setdefault(run["env"], []).append(run)
    for env, runs in envs.items():
        prints = {r["warm_start_fingerprint"] for r in runs}
        if len(prints) > 1:
            raise SystemExit(f"{env}: run files from {len(prints)} warm starts ({sorted(prints)}); runs of different "
                             "warm starts are never pooled: remove the stale files")
        shared = {json.dumps({k: v for k, v in r["settings"].items() if k not in ("scheme", "seed", "variant")},
                             sort_keys=True)
                  for r in runs}
        if len(shared) > 1:
            raise SystemExit(f"{env}: run files of {len(shared)} different settings; one comparison pools one setting")
    return envs


# -- paired comparisons ---------------------------------------------------------------------------
def unit_of(run: dict[str, Any]) -> Any:
    """The key a run pairs on: its seed; in a pooled report (:func:`load_pooled`) ``(warm start label, seed)``,
    so runs pair only with runs of the same warm start and seed."""
    return run.get("unit", int(run["seed"]))


def final_by_task(runs: Sequence[dict[str, Any]], key: str) -> dict[int, list[float]]:
    """seed -> the final evaluation's per-task ``key`` (every run checked to cover the warm start's tasks, in order)."""
    out = {}
    for run in runs:
        ids = [r["task_id"] for r in run["warm"]["rows"]]
        rows = run["points"][-1]["rows"]
        if [r["task_id"] for r in rows] != ids:
            raise ValueError(f"{run['scheme']} seed {run['seed']}: final evaluation covers other tasks than the warm start")
        out[unit_of(run)] = [float(r[key]) for r in rows]
    return out


def paired_difference_over_seeds(a: dict[int, list[float]], b: dict[int, list[float]]) -> dict[str, Any]:
    """A − B on the seeds both ran: per task the difference of the seeds' means, its mean ± paired se over tasks
    (task-to-task spread); and the per-seed mean differences with their sd over seeds (seed-to-seed spread)."""
    import numpy as np

    seeds = sorted(a.keys() & b.keys())
    if not seeds:
        raise ValueError("no seed in common")
    xa, xb = np.array([a[s] for s in seeds]), np.array([b[s] for s in seeds])
    if xa.shape != xb.shape:
        raise ValueError(f"different task counts {xa.shape} / {xb.shape}")
    d = xa.mean(0) - xb.mean(0)
    per_seed = (xa - xb).mean(1)
    se = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else 0.0
    return {"diff": float(d.mean()), "se": se, "n_tasks": int(len(d)), "seeds": seeds,
            "per_seed": [float(x) for x in per_seed],
            "seed_sd": float(per_seed.std(ddof=1)) if len(seeds) > 1 else None,
            "exceeds_2se": bool(abs(d.mean()) > 2 * se), "seed_level": seed_level(per_seed)}


def seed_level(per_seed: Sequence[float], alpha: float = 0.05, power: float = 0.8) -> dict[str, Any]:
    """The difference with the seed as the unit: each seed's mean difference is one draw of a trained model.

    mean d̄ = (1/n) Σ_s d_s;  se = sd(d_s) / √n;  t = d̄ / se with df = n − 1;  ``clears`` = |d̄| > 2 se
    (the project's bar for a gain; never when every seed gave the same difference, se 0: those seeds ended
    alike, one model drawn three times, not a precise one). ``mde``: the smallest true difference this many seeds detect with
    probability ``power`` in a two-sided t-test at level ``alpha``,
    (t_{1−α/2, n−1} + t_{power, n−1}) · sd / √n (None below 2 seeds). Across seeds the task set is fixed,
    so the task-to-task spread is inside every d_s and the seed-level se covers both.
    """
    import numpy as np
    from scipy import stats

    d = np.asarray(per_seed, dtype=float)
    n = len(d)
    out: dict[str, Any] = {"n": n, "mean": float(d.mean()) if n else float("nan"), "se": None, "t": None,
                           "df": n - 1, "clears": False, "mde": None}
    if n < 2:
        return out
    sd = float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    out.update(sd=sd, se=se, t=float(d.mean()) / se if se > 0 else None,  # None: every seed gave the same difference
               clears=bool(se > 0 and abs(d.mean()) > 2 * se),
               mde=float((stats.t.ppf(1 - alpha / 2, n - 1) + stats.t.ppf(power, n - 1)) * se))
    return out


def seeds_to_detect(effect: float, seed_sd: float, alpha: float = 0.05, power: float = 0.8, most: int = 1000) -> int | None:
    """Seeds at which a true seed-level difference ``effect`` is detected with ``power``:
    the smallest n >= 2 with (t_{1−α/2, n−1} + t_{power, n−1}) · seed_sd / √n <= |effect| (None past ``most``)."""
    from scipy import stats

    if seed_sd <= 0:
        return 2
    for n in range(2, most + 1):
        if (stats.t.ppf(1 - alpha / 2, n - 1) + stats.t.ppf(power, n - 1)) * seed_sd / math.sqrt(n) <= abs(effect):
            return n
    return None


def _pair_label(pair: dict[str, Any]) -> str:
    """A report row's "A − B" cell (the warm start is not a scheme name, so not in code quotes)."""
    b = pair["b"] if pair["b"] == "warm start" else f"`{pair['b']}`"
    return f"`{pair['a']}` − {b}"


def _seeds_for_paper_effect(sl: dict[str, Any]) -> str:
    """The report cell: :func:`seeds_to_detect` of the paper's ESM effect at this pair's seed sd ("-" below
    2 seeds, or when every seed gave the same difference: no spread to scale, e.g. a degenerate arm)."""
    if not sl.get("sd"):
        return "-"
    n = seeds_to_detect(PAPER_ESM_EFFECT_F1, sl["sd"])
    return str(n) if n is not None else "> 1000"


def warm_by_task(runs: Sequence[dict[str, Any]], key: str) -> dict[int, list[float]]:
    """The warm start's per-task ``key`` under every seed of ``runs`` (one evaluation: greedy, so the same)."""
    return {unit_of(r): [float(x[key]) for x in r["warm"]["rows"]] for r in runs}


def pairwise(by_scheme: dict[str, list[dict[str, Any]]], keys: Sequence[str]) -> list[dict[str, Any]]:
    """Every pair of schemes (and each scheme against the warm start): :func:`paired_difference_over_seeds`."""
    out = []
    schemes = list(by_scheme)
    for a in schemes:
        out.append({"a": a, "b": "warm start",
                    **{k: paired_difference_over_seeds(final_by_task(by_scheme[a], k), warm_by_task(by_scheme[a], k))
                       for k in keys}})
    unpaired = set(unpaired_pairs(by_scheme))  # no seed trained both: nothing to pair
    for a, b in combinations(schemes, 2):
        if (a, b) in unpaired:
            continue
        out.append({"a": a, "b": b, **{k: paired_difference_over_seeds(final_by_task(by_scheme[a], k),
                                                                      final_by_task(by_scheme[b], k)) for k in keys}})
    return out


def unpaired_pairs(by_scheme: dict[str, list[dict[str, Any]]]) -> list[tuple[str, str]]:
    """The scheme pairs :func:`pairwise` leaves out: no seed trained both (runs still missing)."""
    seeds = {s: {unit_of(r) for r in runs} for s, runs in by_scheme.items()}
    return [(a, b) for a, b in combinations(list(by_scheme), 2) if not seeds[a] & seeds[b]]


# -- where the credits differ: per turn type, on the same rollouts ----------------------------------
def classify_turns(traj: Any, gold: frozenset[str] | set[str]) -> list[str]:
    """The type of each of ``traj``'s turns (one of :data:`TURN_TYPES`).

    A search is a first discovery when its results hold a gold tool no earlier search showed; a
    repeated search when it finds nothing new but repeats an earlier query or shows gold already
    seen; otherwise it found nothing. The submit turn splits on whether every gold tool had been
    shown before it. Any other turn was rejected by the env (an invalid or cut action).
    """
    events = {e.turn: e for e in traj.events}
    seen: set[str] = set()
    queries: set[str] = set()
    kinds = []
    for turn in range(max(int(traj.num_turns), 0)):
        event = events.get(turn)
        if event is not None:
            query = " ".join(event.query.lower().split())
            if any(r in gold and r not in seen for r in event.results):
                kind = "first_discovery"
            elif query in queries or any(r in gold for r in event.results):
                kind = "repeated_search"
            else:
                kind = "search_nothing"
            seen.update(event.results)
            queries.add(query)
        elif turn == traj.num_turns - 1 and traj.terminated_by == "submit":
            kind = "submit_all_gold_seen" if set(gold) <= seen else "submit_gold_missing"
        else:
            kind = "rejected"
        kinds.append(kind)
    return kinds


def credit_by_turn_type(groups: list[tuple[Any, list[Any]]], schemes: Sequence[str]) -> dict[str, Any]:
    """Score the same rollouts under every scheme; per scheme and turn type: cells, mean advantage and the
    shares of positive / zero / negative advantages; per scheme the share of groups where each credit
    term is non-zero."""
    import numpy as np

    from toolgym.evaluation.replay import build_scheme, score_all, summarise

    kinds = [[classify_turns(t, task.gold) for t in trajs] for task, trajs in groups]
    counts = {k: sum(row.count(k) for g in kinds for row in g) for k in TURN_TYPES}
    out: dict[str, Any] = {"groups": len(groups), "rollouts": sum(len(t) for _, t in groups), "turns": counts,
                           "schemes": {}}
    for name in schemes:
        label, reward = build_scheme(name, None)
        scored = score_all(label, reward, groups)
        cells: dict[str, list[float]] = {k: [] for k in TURN_TYPES}
        for gi, credit in scored.credits.items():
            for i, traj in enumerate(groups[gi][1]):
                adv = credit.rollout_turn_advantages(i, max(int(traj.num_turns), 0))
                for kind, a in zip(kinds[gi][i], adv):
                    cells[kind].append(float(a))
        summary = summarise(scored, groups)
        out["schemes"][label] = {
            "groups_scored": summary["groups_scored"],
            "nonzero_group_share": {k: 1.0 - v for k, v in summary["zero_variance_share"].items()},
            "by_type": {k: ({"cells": len(v), "mean": float(np.mean(v)), "positive": float(np.mean(np.array(v) > 0)),
                             "zero": float(np.mean(np.array(v) == 0)), "negative": float(np.mean(np.array(v) < 0))}
                            if v else {"cells": 0}) for k, v in cells.items()}}
    return out


def strip_rollouts(src: Sequence[Path], dest: Path) -> Path:
    """One rollouts JSONL of ``src`` without messages and token ids (what credit needs: events, selection, turns)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "w") as out:
        for path in src:
            for line in Path(path).read_text().splitlines():
                if not line.strip():
                    continue
                group = json.loads(line)
                for t in group["trajectories"]:
                    for k in ("messages", "token_ids", "loss_mask", "turn_spans"):
                        t.pop(k, None)
                out.write(json.dumps(group) + "\n")
    return dest


# -- the report, from the committed run files alone -------------------------------------------------
LEARNING_DOC = Path(__file__).resolve().parent.parent / "docs" / "learning.md"
SECTION = "credit_schemes_runs"


def _shown(path: Path) -> str:
    """``path`` relative to the repository root when it is inside it."""
    root = RESULTS.parent.parent
    return str(Path(path).resolve().relative_to(root)) if Path(path).resolve().is_relative_to(root) else str(path)


def weighted_terms(scheme: str, shares: dict[str, float]) -> dict[str, float]:
    """The shares of the terms ``scheme`` gives weight (a weight-0 module is logged too, e.g. TCA under
    ``esm_only``); ``outcome`` is the group normalisation of the weighted outcome terms together."""
    from toolgym.rewards.composite import scheme_config

    try:
        weights = {m["module"]: float(m.get("weight", 1.0)) for m in scheme_config(split_run_name(scheme)[0])["modules"]}
    except (KeyError, ValueError):  # not a registered scheme: show every term
        return dict(shares)
    return {t: v for t, v in shares.items() if weights.get(t, 1.0) != 0.0 and t != "monitors"}


def metric_names(env_name: str) -> dict[str, str]:
    return METRICS if env_name in TOOLSEARCH_ENVS else DECOMPOSE_METRICS


def by_scheme(runs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    order = {s: i for i, s in enumerate(("magicselector",) + REPLAY_SCHEMES + tuple(DEFAULT_SCHEMES["decompose"]))}
    out: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(runs, key=lambda r: (order.get(split_run_name(r["scheme"])[0], 99), r["scheme"], r["seed"])):
        out.setdefault(r["scheme"], []).append(r)
    return out


def _mean_sd(values: Sequence[float]) -> str:
    import numpy as np

    v = np.asarray(values, dtype=float)
    return f"{v.mean():.3f}" + (f" ± {v.std(ddof=1):.3f}" if len(v) > 1 else "")


def _seed_pm(sl: dict[str, Any], mark: bool = True) -> str:
    """``mean ± seed se (t, df)`` with ✔ when it clears 2 seed-level se; one seed: the mean alone."""
    if sl["se"] is None:
        return f"{sl['mean']:+.3f} (1 seed)"
    if sl["t"] is None and sl["mean"] == 0:
        return "±0.000 (the same on every seed)"
    if sl["t"] is None:  # a nonzero difference, identical on every seed: the seeds ended alike
        return f"{sl['mean']:+.3f} on every seed (no seed spread: the seeds ended alike)"
    t = f"t {sl['t']:.2f}"
    return f"{sl['mean']:+.3f} ± {sl['se']:.3f}" + (f" ({t}, df {sl['df']})" if mark else "") + (
        " ✔" if mark and sl["clears"] else "")


def degenerate_arms(schemes: dict[str, list[dict[str, Any]]], keys: Sequence[str]) -> list[dict[str, Any]]:
    """Pairs of arms whose final held-out rows are identical on every seed both ran (every metric, every task):
    one arm is then not a result. The cause named: the credit terms only one of the two weights were zero in
    every training group of both (the difference never reached a gradient), or else the updates differed but
    left every greedy output the same."""
    import numpy as np

    out = []
    names = list(schemes)

    def same(x: list[dict[str, Any]], y: list[dict[str, Any]]) -> bool:
        return [[row.get(k) for k in keys] for row in x] == [[row.get(k) for k in keys] for row in y]

    for a in names:  # an arm that never left the warm start
        if all(same(r["points"][-1]["rows"], r["warm"]["rows"]) for r in schemes[a]):
            shares = [float(v) for r in schemes[a] for v in weighted_terms(r["scheme"], run_nonzero_share(r)).values()]
            cause = ("no weighted credit term was non-zero in any training group" if not any(shares) else
                     "its credit was non-zero, yet every greedy held-out output is the warm start's")
            out.append({"a": a, "b": "the warm start", "seeds": sorted(unit_of(r) for r in schemes[a]), "cause": cause})
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            fa = {unit_of(r): r["points"][-1]["rows"] for r in schemes[a]}
            fb = {unit_of(r): r["points"][-1]["rows"] for r in schemes[b]}
            seeds = sorted(fa.keys() & fb.keys())
            if not seeds or not all(same(fa[s], fb[s]) for s in seeds):
                continue
            shares: dict[str, list[float]] = {}
            for r in schemes[a] + schemes[b]:
                for term, v in run_nonzero_share(r).items():
                    shares.setdefault(term or split_run_name(r["scheme"])[0], []).append(float(v))
            mean = {t: float(np.mean(v)) for t, v in shares.items()}
            only = sorted(set(weighted_terms(a, mean)) ^ set(weighted_terms(b, mean)))
            silent = [t for t in only if mean.get(t, 0.0) == 0.0]
            (base_a, var_a), (base_b, var_b) = split_run_name(a), split_run_name(b)
            if base_a == base_b and "mean" in (var_a, var_b):
                multi = [x for r in schemes[a] + schemes[b] for row in r.get("train", [])
                         for k, x in row.items() if k.endswith("esm/multi_tool_discovery_share")]
                cause = ("max and mean aggregation differ only where one search first finds ≥ 2 gold tools: "
                         + (f"{np.mean(multi):.1%} of the training discovery events" if multi else "not logged"))
            elif only and len(silent) == len(only):
                cause = f"the terms only one of them weights ({', '.join(silent)}) were zero in every training group"
            else:
                cause = ("their credit differed, yet every greedy held-out output is the same (updates too small to "
                         "move an argmax)")
            out.append({"a": b, "b": a, "seeds": seeds, "cause": cause})
    return out


def _pm(d: dict[str, Any]) -> str:
    return f"{d['diff']:+.3f} ± {d['se']:.3f}" + (" ✔" if d["exceeds_2se"] else "")


def plot_runs(env_name: str, runs: list[dict[str, Any]], out_png: Path) -> Path:
    """Every held-out metric against step: mean over seeds, band = min..max over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = metric_names(env_name)
    fig, axes = plt.subplots(1, len(names), figsize=(3.3 * len(names), 3.3))
    for scheme, mine in by_scheme(runs).items():
        steps = [p["step"] for p in mine[0]["points"]]
        for ax, (key, label) in zip(axes, names.items()):
            vals = np.array([[p["mean"].get(key, np.nan) for p in r["points"]] for r in mine])
            line, = ax.plot(steps, vals.mean(0), marker="o", label=f"{scheme} ({len(mine)})")
            ax.fill_between(steps, vals.min(0), vals.max(0), alpha=0.15, color=line.get_color())
            ax.set_title(label, fontsize=10)
            ax.set_xlabel("GRPO step")
            ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, title="scheme (seeds)", title_fontsize=7)
    fig.suptitle(f"{ENVS.get(env_name, {}).get('id', env_name)} ({env_name}): held-out, greedy; band = seeds' range",
                 fontsize=10)
    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png


def plot_replay(replay: dict[str, Any], out_png: Path) -> Path:
    """Mean advantage per turn type, one bar per scheme (the label under each group: its cell count)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    types = [k for k in TURN_TYPES if replay["turns"].get(k)]
    schemes = list(replay["schemes"])
    width = 0.8 / max(len(schemes), 1)
    fig, ax = plt.subplots(figsize=(9, 3.8))
    for j, name in enumerate(schemes):
        by = replay["schemes"][name]["by_type"]
        ax.bar(np.arange(len(types)) + j * width, [by[k].get("mean", 0.0) for k in types], width, label=name)
    ax.axhline(0, color="black", lw=0.7)
    ax.set_xticks(np.arange(len(types)) + width * (len(schemes) - 1) / 2)
    ax.set_xticklabels([f"{k.replace('_', ' ')}\n(n={replay['turns'][k]})" for k in types], fontsize=8)
    ax.set_ylabel("mean advantage of the turn")
    ax.set_title(f"Credit per turn type, the same {replay['rollouts']} rollouts scored by every scheme", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png


def replay_table(replay: dict[str, Any]) -> str:
    types = [k for k in TURN_TYPES if replay["turns"].get(k)]
    rows = []
    for name, s in replay["schemes"].items():
        cells = []
        for k in types:
            c = s["by_type"][k]
            cells.append(f"{c['mean']:+.3f} ({c['positive']:.0%} + / {c['negative']:.0%} −)")
        rows.append([f"`{name}`", *cells])
    return markdown_table(["scheme", *[f"{k.replace('_', ' ')} (n={replay['turns'][k]})" for k in types]], rows)


def env_report(env_name: str, runs: list[dict[str, Any]], replay: dict[str, Any] | None, results_dir: Path,
               png_dir: Path | None = None) -> str:
    import numpy as np

    names = metric_names(env_name)
    schemes = by_scheme(runs)
    s = runs[0]["settings"]
    head = runs[0]
    ts = head.get("task_set") or {}
    parts = [f"**{head['env_id']}** (`{env_name}`; env kwargs `{json.dumps(s.get('env_kwargs', ENVS.get(env_name, {}).get('kwargs', {})))}`): "
             f"warm start `{s['warm_start']}` (`{head['warm_start_fingerprint'][:19]}…`), {s['steps']} GRPO steps per run "
             f"of {s['tasks_per_step']} tasks × {s['group_size']} rollouts (overrides "
             f"{' '.join(f'`{o}`' for o in s['overrides'] or []) or 'none'}), greedy evaluation on the first "
             f"{s['eval_tasks']} held-out tasks every {s['eval_every']} steps. Raw files: "
             f"`{_shown(results_dir)}/{env_name}/`."]
    if ts:
        warm = head["warm"]["mean"]
        parts.append("Task set: " + "; ".join(f"{split} {v['tasks']} tasks, {v['gold_per_task']:.2f} gold tools per task "
                                               f"({v['multi_tool_share']:.0%} with ≥ 2)" for split, v in ts.items())
                     + ". Warm start on the held-out tasks: " + ", ".join(f"{label} {warm.get(k, float('nan')):.3f}"
                                                                         for k, label in names.items()) + ".")
    # per scheme: metric by step (mean over seeds), final mean ± sd over seeds, pooled gain
    key0 = next(iter(names))
    rows = []
    for scheme, mine in schemes.items():
        by_step = " → ".join(f"{np.mean([r['points'][i]['mean'][key0] for r in mine]):.3f}"
                             for i in range(min(len(r["points"]) for r in mine)))
        gain = paired_difference_over_seeds(final_by_task(mine, key0), warm_by_task(mine, key0))
        finals = [_mean_sd([r["points"][-1]["mean"].get(k, float("nan")) for r in mine]) for k in list(names)[1:]]
        nz: dict[str, list[float]] = {}
        first: dict[str, list[float]] = {}
        for r in mine:
            for term, v in run_nonzero_share(r).items():
                # a one-module reward logs plain ``reward/zero_var``: its term is the reward itself
                nz.setdefault(term or split_run_name(scheme)[0], []).append(v)
            for term, v in credit_nonzero_share(r.get("train", [])[:1]).items():  # the warm start's own groups
                first.setdefault(term or split_run_name(scheme)[0], []).append(v)

        def shares(by_term: dict[str, list[float]]) -> str:
            return " ".join(f"{t} {v:.2f}" for t, v in weighted_terms(scheme, {t: float(np.mean(v)) for t, v in by_term.items()}).items())

        step0_invalid = np.mean([r["train"][0].get("invalid_rate", 0.0) for r in mine if r.get("train")] or [float("nan")])
        rows.append([f"`{scheme}`", ", ".join(str(r["seed"]) for r in mine), by_step, _seed_pm(gain["seed_level"]),
                     f"{gain['se']:.3f}", *finals, shares(first), f"{step0_invalid:.3f}", shares(nz)])
    parts.append(markdown_table(["scheme", "seeds", f"held-out {names[key0]} by step (mean over seeds)",
                                 f"{names[key0]} gain over the warm start, mean ± seed se (t, df)", "task-paired se",
                                 *[f"final {v} (mean ± sd over seeds)" for v in list(names.values())[1:]],
                                 "first step: groups with non-zero credit, per weighted term",
                                 "first step: training invalid rate",
                                 "all steps: groups with non-zero credit, per weighted term"], rows))
    best = max(schemes, key=lambda sc: paired_difference_over_seeds(final_by_task(schemes[sc], key0),
                                                                   warm_by_task(schemes[sc], key0))["diff"])
    g = paired_difference_over_seeds(final_by_task(schemes[best], key0), warm_by_task(schemes[best], key0))
    sl = g["seed_level"]
    if g["diff"] <= 0:  # a tie at zero is no "best scheme"
        parts.append(f"No scheme's {names[key0]} gain over the warm start is positive (the largest: "
                     f"{_seed_pm(sl)} over seeds {g['seeds']}, `{best}`, {g['n_tasks']} tasks).")
    else:
        parts.append(f"Largest {names[key0]} gain over the warm start: `{best}`, {_seed_pm(sl)} over seeds "
                     f"{g['seeds']} ({g['n_tasks']} tasks; {'clears' if sl['clears'] else 'does not clear'} 2 "
                     "seed-level se" + (f"; these seeds detect {sl['mde']:.3f} with 80 % power" if sl["mde"] else "")
                     + "). More held-out tasks shrink only the task-paired se; the seed term shrinks with seeds.")
    # scheme against scheme, the seed as the unit
    keys = [key0] + (["srecall", "search_turns"] if env_name in TOOLSEARCH_ENVS else ["c10"])
    pairs = pairwise(schemes, keys)
    degenerate = degenerate_arms(schemes, list(names))
    pair_rows = []
    paper_column = env_name in TOOLSEARCH_ENVS
    for p in pairs:
        sl = p[key0]["seed_level"]
        pair_rows.append([_pair_label(p),
                          len(p[key0]["seeds"]),
                          " / ".join(f"{x:+.3f}" for x in p[key0]["per_seed"]),
                          _seed_pm(sl), f"{p[key0]['se']:.3f}",
                          *[_seed_pm(p[k]["seed_level"], mark=False) for k in keys[1:]],
                          f"{sl['mde']:.3f}" if sl["mde"] is not None else "-",
                          *([_seeds_for_paper_effect(sl)] if paper_column else [])])
    parts.append(f"Scheme against scheme, **the seed as the unit**: each seed's mean {names[key0]} difference over the "
                 "held-out tasks is one draw (a trained model); their mean ± seed-level se with t and df, ✔ when it "
                 "clears 2 seed-level se. The task-paired se beside it (the task-to-task spread of the seed-pooled "
                 "difference) holds for these particular models only and marks nothing. Detectable: the smallest "
                 "true difference these seeds find with 80 % power (two-sided t-test, α = 0.05)."
                 + (f" Seeds for {PAPER_ESM_EFFECT_F1:.3f}: how many seeds, at this pair's seed sd, detect the paper's "
                    f"ESM ablation effect ({PAPER_ESM_EFFECT_F1 * 100:.1f} F1 points) with 80 % power."
                    if paper_column else "") + "\n\n"
                 + markdown_table(["A − B", "seeds", f"Δ {names[key0]} per seed",
                                   f"Δ {names[key0]} mean ± seed se (t, df)", "task-paired se",
                                   *[f"Δ {names.get(k, k)} ± seed se" for k in keys[1:]],
                                   f"detectable Δ {names[key0]} (80 %)",
                                   *([f"seeds for {PAPER_ESM_EFFECT_F1:.3f}"] if paper_column else [])], pair_rows))
    unpaired = unpaired_pairs(schemes)
    if unpaired:
        parts.append("Not compared (no seed trained both): " + ", ".join(f"`{a}` / `{b}`" for a, b in unpaired) + ".")
    if degenerate:
        parts.append("Degenerate arms (not results): " + "; ".join(
            f"`{d['a']}` equals {d['b'] if d['b'] == 'the warm start' else '`' + d['b'] + '`'} on every seed "
            f"({d['seeds']}): {d['cause']}" for d in degenerate) + ".")
    png = plot_runs(env_name, runs, (png_dir or results_dir) / f"{env_name}.png")
    parts.append(f"![held-out metrics against step]({os.path.relpath(png, LEARNING_DOC.parent)})")
    if replay is not None:
        rpng = plot_replay(replay, (png_dir or results_dir) / f"{env_name}_replay.png")
        parts.append(f"Where the credits differ, on the same rollouts (`{replay['source']}`: {replay['groups']} groups, "
                     f"{replay['rollouts']} rollouts, scored by every scheme with `toolgym replay`'s scorer): mean "
                     "advantage per turn type (share of positive / negative cells).\n\n" + replay_table(replay)
                     + "\n\nGroups with non-zero credit in these rollouts, per term: "
                     + "; ".join(f"`{n}` " + ", ".join(f"{t} {v:.2f}"
                                                       for t, v in weighted_terms(n, sc["nonzero_group_share"]).items())
                                 for n, sc in replay["schemes"].items())
                     + f".\n\n![credit per turn type]({os.path.relpath(rpng, LEARNING_DOC.parent)})")
    return "\n\n".join(parts)


def load_replay(env_name: str, results_dir: Path, schemes: Sequence[str]) -> dict[str, Any] | None:
    """Credit per turn type of the env's committed rollouts (``<env>/replay_rollouts.jsonl``), if there are any."""
    from toolgym.data.records import read_rollouts

    path = results_dir / env_name / "replay_rollouts.jsonl"
    if not path.exists():
        return None
    got = credit_by_turn_type(read_rollouts(path), schemes)
    got["source"] = _shown(path)
    return got


def doc_section(results_dir: Path) -> str:
    """The docs/learning.md block of a results folder: ``credit_schemes_runs`` for the default one,
    ``credit_schemes_runs_<folder name>`` for another (e.g. a longer step budget, whose runs never pool
    with the default's)."""
    return SECTION if Path(results_dir).resolve() == RUN_FILES.resolve() else f"{SECTION}_{Path(results_dir).name}"


def write_doc_section(body: str, doc: Path = LEARNING_DOC, section: str = SECTION, command: str = "--report") -> None:
    """Replace the ``section`` block of docs/learning.md (appended when absent)."""
    import re

    block = (f"<!-- {section}:start -->\n_Written by `python -m benchmarks.credit_schemes {command}` from the run files "
             f"alone._\n\n{body.strip()}\n<!-- {section}:end -->")
    text = doc.read_text()
    pattern = re.compile(rf"<!-- {re.escape(section)}:start -->.*?<!-- {re.escape(section)}:end -->", re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    doc.write_text(text)


def report(results_dir: Path | None = None, write: bool = True, png_dir: Path | None = None) -> str:
    """Tables, pairwise differences, replay credit and figures from the committed run files alone
    (``write=False``: the markdown only, figures under ``png_dir``, docs and summary left alone)."""
    results_dir = results_dir or RUN_FILES
    envs = load_run_files(results_dir)
    if not envs:
        raise SystemExit(f"no run files under {results_dir}")
    bodies = []
    summary = {}
    for env_name, runs in envs.items():
        # turn types are tool-search turns; a decomposition episode is one turn
        replay = load_replay(env_name, results_dir, REPLAY_SCHEMES) if env_name in TOOLSEARCH_ENVS else None
        bodies.append(env_report(env_name, runs, replay, results_dir, png_dir))
        others = warm_starts_elsewhere(env_name, runs, results_dir)
        if others:
            bodies.append(warm_start_table(env_name, runs, others))
        keys = list(metric_names(env_name))
        summary[env_name] = {"pairwise": pairwise(by_scheme(runs), keys[:2] if env_name in TOOLSEARCH_ENVS else keys[:1]),
                             "replay": replay, "runs": [r["_file"] for r in runs]}
    body = "\n\n".join(bodies)
    if write:
        (results_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        section = doc_section(results_dir)
        command = "--report" if section == SECTION else f"--report --results-dir {_shown(results_dir)}"
        write_doc_section(body, section=section, command=command)
    return body



# -- several warm starts of one recipe, pooled ------------------------------------------------------
POOLED_SECTION = "credit_schemes_pooled"


def load_pooled(folders: Sequence[Path]) -> tuple[dict[str, list[dict[str, Any]]], dict[str, dict[str, Any]]]:
    """The run files of several results folders, each one warm start of the same recipe, as one set whose
    unit is (warm start, seed): every run gets ``unit = (label, seed)``, label ``W1``, ``W2``, … in the order
    given, so a comparison pairs runs of the same warm start and seed only. Each folder must pass
    :func:`load_run_files` (one warm start, one setting); across folders the settings (warm-start path aside)
    and the held-out tasks must be the same, and no warm start may appear twice. Returns
    (env -> runs, label -> {folder, fingerprint, warm mean})."""
    envs: dict[str, list[dict[str, Any]]] = {}
    warm_starts: dict[str, dict[str, Any]] = {}
    settings: dict[str, tuple[str, str]] = {}
    seen: dict[str, str] = {}
    for i, folder in enumerate(folders, 1):
        label = f"W{i}"
        for env, runs in load_run_files(Path(folder)).items():
            head = runs[0]
            fingerprint = head["warm_start_fingerprint"]
            if seen.setdefault(f"{env} {fingerprint}", str(folder)) != str(folder):
                raise SystemExit(f"{env}: {folder} and {seen[f'{env} {fingerprint}']} hold the same warm start "
                                 f"({fingerprint[:19]}…): pool distinct warm starts, or merge the folders")
            key = json.dumps({**{k: v for k, v in head["settings"].items()
                                 if k not in ("scheme", "seed", "variant", "warm_start")},
                              "tasks": [r["task_id"] for r in head["warm"]["rows"]]}, sort_keys=True)
            if env in settings and settings[env][0] != key:
                raise SystemExit(f"{env}: {folder} ran other settings or held-out tasks than {settings[env][1]}; "
                                 "only runs of one setting pool")
            settings.setdefault(env, (key, str(folder)))
            for run in runs:
                run["unit"] = (label, int(run["seed"]))
            envs.setdefault(env, []).extend(runs)
            warm_starts.setdefault(label, {"folder": _shown(Path(folder)), "fingerprint": fingerprint, "warm": {}})
            warm_starts[label]["warm"][env] = head["warm"]["mean"]
    return envs, warm_starts


def pooled_report(folders: Sequence[Path], write: bool = True, doc: Path | None = None) -> str:
    """Scheme against the warm start and against scheme over the units of :func:`load_pooled`: per unit the
    mean difference over the held-out tasks; their mean ± unit-level se (t, df = units − 1); beside it each
    warm start's own mean. Units that share a warm start are not independent draws of the recipe (they
    share it), and two or three warm starts cannot estimate that term apart from the seeds, so ✔ asks for
    both: the mean clears 2 unit-level se, and every warm start's mean has its sign."""
    import numpy as np

    envs, warm_starts = load_pooled(folders)
    parts = ["Warm starts pooled (one SFT build each of the same recipe and demonstrations; units are "
             "(warm start, seed)):\n\n" + markdown_table(
                 ["label", "folder", "fingerprint", "warm start on the held-out tasks"],
                 [[label, f"`{w['folder']}`", f"`{w['fingerprint'][:19]}…`",
                   "; ".join(", ".join(f"{lab} {m.get(k, float('nan')):.3f}" for k, lab in metric_names(env).items())
                             for env, m in w["warm"].items())] for label, w in warm_starts.items()])]
    summary: dict[str, Any] = {"warm_starts": warm_starts, "envs": {}}
    for env_name, runs in envs.items():
        names = metric_names(env_name)
        key0 = next(iter(names))
        pairs = pairwise(by_scheme(runs), [key0])
        paper_column = env_name in TOOLSEARCH_ENVS
        rows, out = [], []
        for p in pairs:
            d = p[key0]
            units = d["seeds"]
            sl = d["seed_level"]
            per_warm = {}
            for u, x in zip(units, d["per_seed"]):
                per_warm.setdefault(u[0], []).append(x)
            means = {w: float(np.mean(v)) for w, v in per_warm.items()}
            agree = sl["mean"] != 0 and all(np.sign(m) == np.sign(sl["mean"]) for m in means.values())
            clears = bool(sl["clears"] and agree)
            cell = _seed_pm({**sl, "clears": False})  # the mark is set below, on both conditions
            rows.append([_pair_label(p),
                         f"{len(units)} ({', '.join(f'{w}: {len(v)}' for w, v in per_warm.items())})",
                         " / ".join(f"{w}s{s} {x:+.3f}" for (w, s), x in zip(units, d["per_seed"])),
                         cell + (" ✔" if clears else ""),
                         ", ".join(f"{w} {m:+.3f}" for w, m in means.items()),
                         f"{sl['mde']:.3f}" if sl["mde"] is not None else "-",
                         *([_seeds_for_paper_effect(sl)] if paper_column else [])])
            out.append({"a": p["a"], "b": p["b"], "units": [list(u) for u in units], "per_unit": d["per_seed"],
                        "seed_level": sl, "per_warm_start": means, "warm_starts_agree": bool(agree), "clears": clears})
        parts.append(f"**{runs[0]['env_id']}** (`{env_name}`), {names[key0]} on the first {runs[0]['settings']['eval_tasks']} "
                     "held-out tasks, **the unit is (warm start, seed)**: each unit's mean difference over the tasks is one "
                     "draw; mean ± unit-level se (t, df); ✔ when it clears 2 unit-level se *and* every warm start's own "
                     "mean has its sign (units of one warm start share it, so the se alone would overstate what "
                     "two or three warm starts show). Detectable: the smallest true difference these units find with "
                     "80 % power." + (f" Units for {PAPER_ESM_EFFECT_F1:.3f}: units needed at this spread for the paper's "
                                     "ESM ablation effect." if paper_column else "") + "\n\n"
                     + markdown_table(["A − B", "units (per warm start)", f"Δ {names[key0]} per unit",
                                       f"Δ {names[key0]} mean ± unit se (t, df)", "mean per warm start",
                                       f"detectable Δ {names[key0]} (80 %)",
                                       *([f"units for {PAPER_ESM_EFFECT_F1:.3f}"] if paper_column else [])], rows))
        summary["envs"][env_name] = out
    body = "\n\n".join(parts)
    if write:
        (RESULTS / f"{POOLED_SECTION}.json").write_text(json.dumps(summary, indent=1) + "\n")
        write_doc_section(body, doc=doc or LEARNING_DOC, section=POOLED_SECTION,
                          command="--report --pool " + " ".join(_shown(Path(f)) for f in folders))
    return body


TRAINING_ONLY_KWARGS = {"unseen_by_retriever"}  # env kwargs that change the training tasks, not the evaluation


def eval_kwargs_differences(run: dict[str, Any], here: dict[str, Any]) -> dict[str, Any]:
    """The env kwargs of ``run`` that change its evaluation from ``here``'s: name -> ``run``'s value (None when unset)."""
    mine, theirs = here["settings"].get("env_kwargs") or {}, run["settings"].get("env_kwargs") or {}
    return {k: theirs.get(k) for k in sorted((set(mine) | set(theirs)) - TRAINING_ONLY_KWARGS) if mine.get(k) != theirs.get(k)}


def warm_starts_elsewhere(env_name: str, runs: list[dict[str, Any]], results_dir: Path) -> dict[str, dict[str, Any]]:
    """The warm starts of ``env_name`` in the other committed results folders (``credit_schemes*``) whose
    fingerprint differs from this folder's, or whose env kwargs evaluate differently (the same model with
    another ``split_rule``): folder name -> one of its run files."""
    here = runs[0]
    out: dict[str, dict[str, Any]] = {}
    for folder in sorted(RESULTS.glob("credit_schemes*")):
        if not folder.is_dir() or folder.resolve() == Path(results_dir).resolve():
            continue
        for path in sorted(folder.glob(f"{env_name}/*_seed*.json"))[:1]:
            run = json.loads(path.read_text())
            same_as = [run.get("warm_start_fingerprint") == o.get("warm_start_fingerprint") and not eval_kwargs_differences(run, o)
                       for o in [here, *out.values()]]
            if not any(same_as):  # one row per (warm start, evaluation): the first folder that has it
                out[folder.name] = run
    return out


def warm_start_table(env_name: str, runs: list[dict[str, Any]], others: dict[str, dict[str, Any]]) -> str:
    """This folder's warm start beside the other folders' on the held-out tasks they all evaluated (each
    folder's warm evaluation covers the first N held-out tasks, so the shared ones are the shortest list),
    and on all of this folder's tasks; a folder whose env evaluates differently names the kwargs that differ."""
    import numpy as np

    names = metric_names(env_name)
    here = runs[0]
    shared = [r["task_id"] for r in here["warm"]["rows"]]
    for run in others.values():
        ids = {r["task_id"] for r in run["warm"]["rows"]}
        shared = [t for t in shared if t in ids]

    def means(run: dict[str, Any], ids: Sequence[str]) -> list[str]:
        by_id = {r["task_id"]: r for r in run["warm"]["rows"]}
        return [f"{np.mean([by_id[t][k] for t in ids]):.3f}" for k in names]

    def evaluated_with(run: dict[str, Any]) -> str:
        diff = eval_kwargs_differences(run, here)
        return " evaluated with " + ", ".join(f"`{k}={v!r}`" for k, v in diff.items()) if diff else ""

    rows = [[f"this folder's (`{here['settings']['warm_start']}`, `{here['warm_start_fingerprint'][:19]}…`)",
             len(here["warm"]["rows"]), *means(here, [r["task_id"] for r in here["warm"]["rows"]])]]
    if len(shared) < len(here["warm"]["rows"]):
        rows += [[f"this folder's, first {len(shared)}", len(shared), *means(here, shared)]]
    rows += [[f"`{name}`'s (`{run['settings']['warm_start']}`, `{run['warm_start_fingerprint'][:19]}…`){evaluated_with(run)}, "
              f"first {len(shared)}", len(shared), *means(run, shared)] for name, run in others.items()]
    return ("Warm starts on the same held-out tasks (greedy; `turns` = searches per episode):\n\n"
            + markdown_table(["warm start", "tasks", *names.values()], rows))


def run_shards(jobs: int, argv: list[str], out: Path) -> None:
    """Train the runs in ``jobs`` lanes (``--shard k/jobs``) of cpus/jobs threads each, sharing the plan
    through :func:`claimed_runs`; logs in ``out``."""
    threads = max(1, (os.cpu_count() or 1) // jobs)
    out.mkdir(parents=True, exist_ok=True)
    procs = []
    for k in range(jobs):
        log = open(out / f"shard{k}.log", "w")
        procs.append((subprocess.Popen([sys.executable, "-m", "benchmarks.credit_schemes", *argv, "--jobs", "1",
                                        "--shard", f"{k}/{jobs}", "--no-progress"], stdout=log, stderr=subprocess.STDOUT,
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
    ap.add_argument("--warm-start", default=None, help="warm-start model folder (`toolgym sft` RUN_DIR/model)")
    ap.add_argument("--report", action="store_true",
                    help="only rebuild the tables and figures (docs/learning.md) from the committed run files")
    ap.add_argument("--pool", nargs="+", default=None, metavar="RESULTS_DIR",
                    help="with --report: pool these results folders, each one warm start of the same recipe, with "
                         "(warm start, seed) as the unit (docs/learning.md block credit_schemes_pooled)")
    ap.add_argument("--results-dir", default=None,
                    help=f"folder of the per-run files (default {RUN_FILES.relative_to(RESULTS.parent.parent)})")
    ap.add_argument("--fingerprint", default=None, metavar="MODEL_DIR",
                    help="print the sha256 of a model folder's tensors (compare a rebuilt warm start with the run files')")
    ap.add_argument("--toolsearch-env", default="toolsearch", choices=TOOLSEARCH_ENVS,
                    help="toolsearch: every Seal-Tools task; toolsearch_multi: those with >= 2 gold tools")
    ap.add_argument("--replay-from", default=None, metavar="RUN_DIR",
                    help="copy this run's logged training rollouts (without messages) to <results>/<env>/"
                         "replay_rollouts.jsonl for the per-turn-type credit table, then report")
    ap.add_argument("--steps", type=int, default=6, help="GRPO steps per run (the same budget for every scheme)")
    ap.add_argument("--eval-every", type=int, default=2)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--seed-count", nargs="*", default=[], metavar="SCHEME=N",
                    help="train SCHEME on the first N of --seeds only (e.g. esm_only=3 with --seeds 0 1 2 3 4)")
    ap.add_argument("--eval-tasks", type=int, default=16)
    ap.add_argument("--eval-batch", type=int, default=20, help="episodes generated together in an evaluation")
    ap.add_argument("--tasks-per-step", type=int, default=2)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--toolsearch-schemes", nargs="*", default=DEFAULT_SCHEMES["toolsearch"])
    ap.add_argument("--decompose-schemes", nargs="*", default=DEFAULT_SCHEMES["decompose"])
    ap.add_argument("--decompose-env", default=None,
                    help="dialogue: the generated dialogues (toolgym/Decompose-Dialogue-v0, its test split held out; "
                         "run files under <results>/dialogue/); mixture: every source of the retriever's training "
                         "mixture, each in its own library (toolgym/Decompose-Mixture-v0, held-out parts evaluated; "
                         "<results>/mixture/); or another decomposition env id")
    ap.add_argument("--decompose-eval-split", default=None, help="its held-out split (e.g. test), default heldout")
    ap.add_argument("--decompose-retriever", default=None, metavar="MODEL",
                    help="a toolgym fit-retriever model folder: the decomposition env retrieves with the hybrid of BM25 "
                         "and it (training reward and evaluation alike) instead of BM25")
    ap.add_argument("--decompose-unseen-only", action="store_true",
                    help="mixture: train only on the training queries --decompose-retriever set aside and never "
                         "trained on (the env's unseen_by_retriever), where its reward sees honest retrieval")
    ap.add_argument("--decompose-split-rule", default=None, choices=SPLIT_RULES,
                    help="the policy only decides whether to split and this rule writes the split (the env's "
                         "split_rule): the reward scores what the policy-gated retrieval pipeline searches")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", dest="overrides",
                    help="GRPO config overrides for every run, e.g. sampling.temperature=1.2 grpo.lr=2e-3")
    ap.add_argument("--out", default="runs/credit_schemes")
    ap.add_argument("--jobs", type=int, default=1, help="train the runs in this many processes (cpus/jobs threads each)")
    ap.add_argument("--shard", default=None, metavar="K/N", help=argparse.SUPPRESS)  # set by --jobs
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--no-report", action="store_true",
                    help="print the report only: docs and the summary JSON are left alone (each finished run's "
                         "file still lands in --results-dir, which is what a later call resumes from)")
    ap.add_argument("--commit", action="store_true",
                    help="git-commit each finished run's file as it is written (a long comparison spread over sittings)")
    args = ap.parse_args(argv)
    results_dir = Path(args.results_dir) if args.results_dir else RUN_FILES
    if args.fingerprint:
        print(weights_fingerprint(args.fingerprint))
        return 0
    if args.replay_from:
        src = sorted((Path(args.replay_from) / "rollouts").glob("step_*.jsonl"))
        if not src:
            ap.error(f"{args.replay_from}/rollouts holds no step_*.jsonl (train with train.save_rollouts=true)")
        strip_rollouts(src, results_dir / args.toolsearch_env / "replay_rollouts.jsonl")
        args.report = True
    if args.pool and not args.report:
        ap.error("--pool goes with --report")
    if args.pool:
        missing = [f for f in args.pool if not Path(f).is_dir()]
        if missing:
            ap.error(f"--pool: no such folder: {', '.join(missing)}")
        print(pooled_report([Path(f) for f in args.pool], write=not args.no_report))
        return 0
    if args.report:
        print(report(results_dir, write=not args.no_report, png_dir=Path(args.out) if args.no_report else None))
        return 0
    if args.warm_start is None:
        ap.error("--warm-start is required (except with --report)")
    if args.steps < 1 or args.eval_every < 1 or args.jobs < 1:
        ap.error("--steps, --eval-every and --jobs must be >= 1")
    shard = None
    if args.shard is not None:
        k, _, n = args.shard.partition("/")
        if not (k.isdigit() and n.isdigit() and int(k) < int(n)):
            ap.error("--shard takes K/N with 0 <= K < N")
        shard = (int(k), int(n))
    try:
        decompose_env = set_decompose_env(args)
    except ValueError as e:
        ap.error(str(e))
    from toolgym.rewards import get_reward, reward_names, scheme_names
    from toolgym.trainers.allocator import fix_mmap_threshold

    # Memory only, the numbers are unchanged (so not a run setting): with glibc's threshold fixed at
    # 1 MiB a 1-thread ToolSearch run peaked at 6.7 GB resident instead of 13.5 GB, so two lanes fit
    # in 24 GB (trainers/allocator.py says why the heap grows otherwise).
    fix_mmap_threshold(MMAP_THRESHOLD)
    known = set(reward_names()) | set(scheme_names())
    wanted = {env: schemes for env, schemes in
              {args.toolsearch_env: args.toolsearch_schemes, decompose_env: args.decompose_schemes}.items() if schemes}
    try:
        bases = {split_run_name(s)[0] for v in wanted.values() for s in v}
    except ValueError as e:
        ap.error(str(e))
    missing = sorted(bases - known)
    if missing:
        ap.error(f"unknown reward scheme(s) {missing} on this branch; known: {sorted(known)}")
    assert get_reward  # imported to register every scheme before the check above
    try:
        counts = seed_counts(args.seed_count)
    except ValueError as e:
        ap.error(str(e))
    plan = run_plan(wanted, args.seeds, counts)
    warms = {env: evaluate(args.warm_start, env, args.eval_tasks, Path(args.out) / env / "eval_warm.json",
                           args.eval_batch, progress=not args.no_progress) for env in wanted}
    fingerprint = weights_fingerprint(args.warm_start)
    for env, warm in warms.items():
        warm["fingerprint"] = fingerprint
        warm["task_set"] = task_set_stats(env)
    args.results_dir = str(results_dir)
    if shard is not None:
        for env, scheme, seed in claimed_runs(plan, Path(args.out)):
            run_scheme(env, scheme, seed, args, warms[env])
        return 0
    if args.jobs > 1:
        run_shards(args.jobs, argv, Path(args.out))
    for env, scheme, seed in claimed_runs(plan, Path(args.out)):  # cached after the lanes
        run_scheme(env, scheme, seed, args, warms[env])
    print(report(results_dir, write=not args.no_report, png_dir=Path(args.out) if args.no_report else None))
    return 0

if __name__ == "__main__":
    sys.exit(main())
