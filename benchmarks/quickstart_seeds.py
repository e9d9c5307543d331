"""The quickstart's GRPO stage with several seeds: is its gain a property of the recipe or of one draw?

`make quickstart` trains once (seed 0) and prints one paired gain. A trained model is one draw;
the task-paired se of its gain holds for that model only. This benchmark builds the quickstart's
warm start exactly as `make quickstart` does (its demos and `configs/sft_quickstart.yaml`, seeded),
then runs the GRPO stage (`configs/quickstart.yaml`) once per ``--seeds`` value from that same warm
start, each evaluated greedily before and after on the config's held-out turns. It reports each
seed's paired gain ± task-paired se (and whether it clears 2 se), then the seed-level figure: the
mean of the per-seed gains ± their se over seeds, with t and df.

    python -m benchmarks.quickstart_seeds --seeds 0 1 2          # ~10 min a seed on 2 cores

Each stage (demos, sft, every seed's `toolgym train`) runs as its own process under GNU
``/usr/bin/time -v``: its wall time and peak resident set size are kept (``stages``). ``--set`` and
``--sft-set`` try other settings (``--no-report``: only ``<out>/summary.json``); ``--keep-quickstart
runs/quickstart --make-log LOG`` writes ``benchmarks/results/quickstart.json`` from a `make quickstart`
run timed with ``/usr/bin/time -v make quickstart > LOG 2>&1``.

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
    import time

    log.parent.mkdir(parents=True, exist_ok=True)
    use_time = Path(TIME).exists()
    started = time.time()
    with open(log, "w", encoding="utf-8") as f:
        subprocess.run([TIME, "-v", *cmd] if use_time else cmd, check=True, stdout=f, stderr=subprocess.STDOUT)
    out = {"wall_s": time.time() - started, "peak_rss_gb": None, "log": str(log)}
    if use_time:
        out["peak_rss_gb"] = _peak_rss_gb(log.read_text(encoding="utf-8", errors="replace"))
    return out


def _peak_rss_gb(time_report: str) -> float | None:
    """``Maximum resident set size`` of a GNU ``time -v`` report (KiB) in GB (10⁹ bytes); None without one."""
    import re

    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", time_report)
    return int(m.group(1)) * 1024 / 1e9 if m else None


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


def parse_time_log(log: Path) -> dict[str, Any]:
    """Wall seconds and peak RSS (GB) from the report of GNU ``time -v`` at the end of ``log``."""
    import re

    text = log.read_text(encoding="utf-8", errors="replace")
    m = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text)
    peak = _peak_rss_gb(text)
    if not m or peak is None:
        raise ValueError(f"{log}: no `/usr/bin/time -v` report")
    wall = 0.0
    for part in m.group(1).split(":"):
        wall = wall * 60 + float(part)
    return {"wall_s": wall, "peak_rss_gb": peak}


def keep_quickstart(run: Path, make_log: Path | None) -> dict[str, Any]:
    """``benchmarks/results/quickstart.json`` from a finished `make quickstart` (its ``runs/quickstart``): the GRPO
    stage's eval.json (per-task rows) and metrics.jsonl, the paired gain, the warm start's fingerprint and, from
    ``make_log`` (the output of ``/usr/bin/time -v make quickstart``), the whole command's wall time and peak RSS."""
    from datetime import datetime, timezone

    evals = json.loads((run / "eval.json").read_text())
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    g = seed_gain(evals)
    payload = {"command": "toolgym train configs/quickstart.yaml model.init_from=runs/quickstart/sft",
               "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "note": "the GRPO stage of make quickstart from the quickstart's own warm start; eval.json (per-task "
                       "rows) and metrics.jsonl of that run",
               "warm_start_fingerprint": weights_fingerprint(run / "sft" / "model"), "host": host_info(),
               "paired_reward_gain": {"gain": g["gain"], "se": g["se"], "tasks": g["n"]}}
    if make_log is not None:
        payload["make_quickstart"] = {"command": "/usr/bin/time -v make quickstart", **parse_time_log(make_log)}
    payload.update({"eval": evals, "metrics": metrics})
    (ROOT / "benchmarks" / "results" / "quickstart.json").write_text(json.dumps(payload, indent=2) + "\n")
    return payload


def load_trial(spec: str) -> dict[str, Any]:
    """``LABEL=PATH``: an earlier configuration's run of this benchmark (its summary.json), kept with its rows."""
    label, _, path = spec.partition("=")
    got = json.loads(Path(path).read_text())
    keep = ("config", "sft_config", "overrides", "sft_overrides", "fingerprint", "stages", "seeds", "seed_level",
            "seeds_clearing_2se", "date", "host")
    trial = {"label": label, "source": path, **{k: got[k] for k in keep if k in got}}
    trial["seeds_clearing_2se"] = sum(g["exceeds_2se"] for g in trial["seeds"].values())
    return trial


def trials_table(trials: list[dict[str, Any]]) -> str:
    rows = []
    for t in trials:
        stages = t.get("stages", {})
        peaks = [st["peak_rss_gb"] for st in stages.values() if st.get("peak_rss_gb")]
        rows.append([t["label"], " / ".join(f"{g['gain']:+.3f} ± {g['se']:.3f}" for g in t["seeds"].values()),
                     f"{t['seeds_clearing_2se']} of {len(t['seeds'])}", f"{max(peaks):.2f}" if peaks else "not measured"])
    return markdown_table(["configuration", "paired gain ± task-paired se, seeds 0 / 1 / 2", "clear 2 se",
                           "max peak RSS GB"], rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default="runs/quickstart_seeds")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", dest="overrides",
                    help="overrides of configs/quickstart.yaml for a trial (the committed report has none)")
    ap.add_argument("--sft-set", nargs="*", default=[], metavar="KEY=VALUE", dest="sft_overrides",
                    help="overrides of configs/sft_quickstart.yaml for a trial")
    ap.add_argument("--no-report", action="store_true",
                    help="write only <out>/summary.json, not benchmarks/results/quickstart_seeds.json (trials)")
    ap.add_argument("--keep-quickstart", metavar="RUN_DIR", default=None,
                    help="only write benchmarks/results/quickstart.json from a finished `make quickstart` run folder")
    ap.add_argument("--make-log", default=None,
                    help="with --keep-quickstart: the output of `/usr/bin/time -v make quickstart` (wall time, peak RSS)")
    ap.add_argument("--trials", nargs="*", default=[], metavar="LABEL=SUMMARY_JSON",
                    help="earlier configurations to keep beside the result: a label and the summary.json of its "
                         "--no-report run (or an earlier quickstart_seeds.json), per-task rows included")
    ap.add_argument("--no-progress", action="store_true", help="accepted for old command lines; the stages never draw bars")
    args = ap.parse_args(argv)
    if args.keep_quickstart:
        kept = keep_quickstart(Path(args.keep_quickstart), Path(args.make_log) if args.make_log else None)
        print(json.dumps({k: v for k, v in kept.items() if k not in ("eval", "metrics", "host")}, indent=2))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    warm = build_warm_start(out, args.sft_overrides)
    per_seed = {}
    for seed in args.seeds:
        per_seed[seed] = seed_gain(run_seed(warm, seed, out, args.overrides))
    stages = _stages(out)
    level = seed_level_gain([g["gain"] for g in per_seed.values()])
    cleared = sum(g["exceeds_2se"] for g in per_seed.values())
    n_tasks = sorted({g["n"] for g in per_seed.values()})
    rows = []
    for seed, g in per_seed.items():
        st = stages.get(f"train_seed{seed}", {})
        rows.append([seed, f"{g['before']:.3f}", f"{g['after']:.3f}", f"{g['gain']:+.3f} ± {g['se']:.3f}",
                     "yes" if g["exceeds_2se"] else "no", f"{st['wall_s']:.0f}" if st.get("wall_s") else "",
                     f"{st['peak_rss_gb']:.2f}" if st.get("peak_rss_gb") else ""])
    table = markdown_table(["seed", "R_cf before", "R_cf after", "paired gain ± task-paired se", "clears 2 se",
                            "GRPO stage s", "peak RSS GB"], rows)
    seed_line = (f"Seed level ({level['n']} seeds): {level['mean']:+.3f} ± {level['se']:.3f} "
                 f"(t {level['t']:.2f}, df {level['df']}; {'clears' if level['clears'] else 'does not clear'} 2 seed-level se)."
                 if level["se"] else f"One seed: {level['mean']:+.3f}.")
    warm_stages = "; ".join(f"{name} {st['wall_s']:.0f} s, peak RSS {st['peak_rss_gb']:.2f} GB" for name, st in stages.items()
                            if name in ("demos", "sft") and st.get("peak_rss_gb"))
    body = (f"`configs/quickstart.yaml` (GRPO `counterfactual` on `toolgym/Decompose-Dialogue-v0`) from the quickstart's "
            f"own warm start (`configs/sft_quickstart.yaml`, `{weights_fingerprint(warm)[:19]}…`), one `toolgym train` "
            f"per seed, greedy evaluation of the warm start and of each GRPO policy on the config's "
            f"{', '.join(map(str, n_tasks))} held-out turns. Every stage runs as its own process under "
            f"`/usr/bin/time -v` (peak RSS = its maximum resident set size, GB = 10⁹ bytes){': ' + warm_stages if warm_stages else ''}."
            f"\n\n{table}\n\n{seed_line} {cleared} of {len(per_seed)} seeds clear 2 task-paired se on their own.")
    payload = {"config": str(CONFIG.relative_to(ROOT)), "sft_config": str(SFT_CONFIG.relative_to(ROOT)),
               "overrides": args.overrides, "sft_overrides": args.sft_overrides, "warm_start": str(warm),
               "fingerprint": weights_fingerprint(warm), "host": host_info(), "stages": stages,
               "seeds": {str(s): g for s, g in per_seed.items()}, "seed_level": level, "seeds_clearing_2se": cleared}
    (out / "summary.json").write_text(json.dumps(payload, indent=2) + "\n")
    if args.trials:
        payload["trials"] = [load_trial(spec) for spec in args.trials]
        body += "\n\nEarlier configurations (same benchmark, same 3 seeds; each from its own warm start):\n\n" + \
            trials_table(payload["trials"])
    if not args.no_report:
        if args.overrides or args.sft_overrides:
            raise SystemExit("the committed report is the quickstart's own configs: drop --set/--sft-set or pass --no-report")
        write_report("quickstart_seeds", payload, "The quickstart's GRPO stage across seeds", body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
