"""The quickstart's GRPO stage with several seeds: is its gain a property of the recipe or of one draw?

`make quickstart` trains once (seed 0) and prints one paired gain. A trained model is one draw;
the task-paired se of its gain holds for that model only. This benchmark builds the quickstart's
warm start exactly as `make quickstart` does (its demos and `configs/sft_quickstart.yaml`, seeded),
then runs the GRPO stage (`configs/quickstart.yaml`) once per ``--seeds`` value from that same warm
start, each evaluated greedily before and after on the config's held-out turns. It reports each
seed's paired gain ± task-paired se (and whether it clears 2 se), then the seed-level figure: the
mean of the per-seed gains ± their se over seeds, with t and df.

    python -m benchmarks.quickstart_seeds --seeds 0 1 2          # ~6 min a seed on 2 cores

A seed whose run folder holds a finished ``eval.json`` (both phases) is not trained again, so a
stopped run resumes. Writes ``benchmarks/results/quickstart_seeds.json`` (every seed's per-task
rows) and its docs/benchmarks.md section. Not run in CI.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: shared CPUs collapse with spinning threads

from benchmarks._report import ROOT, host_info, markdown_table, weights_fingerprint, write_report  # noqa: E402

CONFIG = ROOT / "configs" / "quickstart.yaml"
SFT_CONFIG = ROOT / "configs" / "sft_quickstart.yaml"


TIME = "/usr/bin/time"  # GNU time: `-v` reports the wall time and the maximum resident set size


def timed(cmd: list[str], log: Path) -> dict[str, Any]:
    """Run ``cmd`` (its output to ``log``); its wall seconds and, under GNU ``time -v`` where this machine has it,
    its peak resident set size in GB (``Maximum resident set size``: the largest process of the command)."""
    import re
    import time

    log.parent.mkdir(parents=True, exist_ok=True)
    use_time = Path(TIME).exists()
    started = time.time()
    with open(log, "w", encoding="utf-8") as f:
        subprocess.run([TIME, "-v", *cmd] if use_time else cmd, check=True, stdout=f, stderr=subprocess.STDOUT)
    out = {"wall_s": time.time() - started, "peak_rss_gb": None, "log": str(log)}
    if use_time:
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", log.read_text(encoding="utf-8", errors="replace"))
        out["peak_rss_gb"] = int(m.group(1)) * 1024 / 1e9 if m else None
    return out


def _stages(out: Path) -> dict[str, Any]:
    path = out / "stages.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _record_stage(out: Path, name: str, stage: dict[str, Any]) -> None:
    stages = _stages(out)
    stages[name] = stage
    (out / "stages.json").write_text(json.dumps(stages, indent=2) + "\n")


TOOLGYM = [sys.executable, "-m", "toolgym.cli.main"]


def build_warm_start(out: Path, sft_overrides: list[str] = ()) -> Path:
    """The quickstart's warm start under ``out`` (demos, then `toolgym sft`), as `make quickstart` makes it,
    each stage timed (wall, peak RSS); reused when its model folder exists."""
    model = out / "sft" / "model"
    if (model / "config.json").exists():
        return model
    demos = out / "demos.jsonl"
    _record_stage(out, "demos", timed([*TOOLGYM, "demos", "toolgym/Decompose-v0", "--agent", "clauses", "--min-reward",
                                       "0.01", "--out", str(demos), "--no-progress"], out / "demos.log"))
    _record_stage(out, "sft", timed([*TOOLGYM, "sft", str(SFT_CONFIG), f"run_dir={out / 'sft'}", f"data.demos=[{demos}]",
                                     *sft_overrides], out / "sft.log"))
    return model


def run_seed(warm: Path, seed: int, out: Path, overrides: list[str] = ()) -> dict[str, Any]:
    """The GRPO stage with ``seed`` (`toolgym train`, as `make quickstart` runs it, timed); its eval.json
    (before and after, per-task rows)."""
    run_dir = out / f"grpo_seed{seed}"
    evals_path = run_dir / "eval.json"
    if evals_path.exists():
        evals = json.loads(evals_path.read_text())
        if "before" in evals and "after" in evals:
            return evals
    resume = ["--resume"] if (run_dir / "checkpoints").is_dir() else []
    _record_stage(out, f"train_seed{seed}", timed(
        [*TOOLGYM, "train", str(CONFIG), f"model.init_from={warm.parent}", f"seed={seed}", f"run_dir={run_dir}",
         *overrides, "--no-progress", *resume], out / f"train_seed{seed}.log"))
    return json.loads(evals_path.read_text())


def seed_gain(evals: dict[str, Any], key: str = "reward") -> dict[str, Any]:
    """One seed's paired gain after − before over the tasks both phases scored, with its per-task rows."""
    from toolgym.evaluation.paired import paired_gain

    before, after = evals["before"]["per_task"], evals["after"]["per_task"]
    tasks = [t for t in before if t in after]
    g = paired_gain([before[t][key] for t in tasks], [after[t][key] for t in tasks])
    return {**g, "rows": [{"task_id": t, "before": before[t][key], "after": after[t][key]} for t in tasks]}


def seed_level_gain(gains: list[float]) -> dict[str, Any]:
    """Mean of the per-seed gains ± their se over seeds (sd / √n), t = mean / se, df = n − 1."""
    n = len(gains)
    mean = sum(gains) / n
    if n < 2:
        return {"n": n, "mean": mean, "se": None, "t": None, "df": 0}
    sd = math.sqrt(sum((g - mean) ** 2 for g in gains) / (n - 1))
    se = sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "se": se, "t": mean / se if se > 0 else None, "df": n - 1,
            "clears": bool(abs(mean) > 2 * se)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default="runs/quickstart_seeds")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    out = Path(args.out)
    warm = build_warm_start(out)
    per_seed = {}
    for seed in args.seeds:
        per_seed[seed] = seed_gain(run_seed(warm, seed, out, not args.no_progress))
    level = seed_level_gain([g["gain"] for g in per_seed.values()])
    rows = [[seed, f"{g['before']:.3f}", f"{g['after']:.3f}", f"{g['gain']:+.3f} ± {g['se']:.3f}",
             "yes" if g["exceeds_2se"] else "no"] for seed, g in per_seed.items()]
    table = markdown_table(["seed", "R_cf before", "R_cf after", "paired gain ± task-paired se", "clears 2 se"], rows)
    seed_line = (f"Seed level ({level['n']} seeds): {level['mean']:+.3f} ± {level['se']:.3f} "
                 f"(t {level['t']:.2f}, df {level['df']}; {'clears' if level['clears'] else 'does not clear'} 2 seed-level se)."
                 if level["se"] else f"One seed: {level['mean']:+.3f}.")
    cleared = sum(g["exceeds_2se"] for g in per_seed.values())
    body = (f"`configs/quickstart.yaml` (GRPO `counterfactual` on `toolgym/Decompose-Dialogue-v0`) from the quickstart's "
            f"own warm start (`{weights_fingerprint(warm)[:19]}…`), one run per seed, greedy evaluation of the warm "
            f"start and of each GRPO policy on the config's held-out turns.\n\n{table}\n\n{seed_line} "
            f"{cleared} of {len(per_seed)} seeds clear 2 task-paired se on their own.")
    write_report("quickstart_seeds", {"config": str(CONFIG.relative_to(ROOT)), "warm_start": str(warm),
                                      "fingerprint": weights_fingerprint(warm), "host": host_info(),
                                      "seeds": {str(s): g for s, g in per_seed.items()}, "seed_level": level},
                 "The quickstart's GRPO stage across seeds", body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
