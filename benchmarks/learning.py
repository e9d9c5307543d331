"""Does local GRPO learn on CPU? Mean held-out reward before vs after a time-budgeted run.

Two runs, each from the untrained SmolLM2-135M-Instruct with LoRA:
  1. ``toolgym/Decompose-v0`` (Seal-Tools multi-tool requests, BM25) with the counterfactual
     reward R_cf (MagicSelector);
  2. ``toolgym/ToolSearch-v0`` (Seal-Tools, BM25) with the ToolSearcher credit (ESM + TCA).
Each: greedy evaluation on the held-out split (100 requests by default), GRPO for
``--budget-min`` minutes, greedy evaluation again; mean reward ± standard error. Not run in CI.

    python benchmarks/learning.py                 # 30 min per run
    python benchmarks/learning.py --budget-min 4 --eval-tasks 40
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: shared CPUs collapse with spinning threads

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import markdown_table, write_report  # noqa: E402

RUNS = {
    "decompose_counterfactual": {
        "env": {"id": "toolgym/Decompose-v0", "kwargs": {"k": 10}, "train_kwargs": {"split": "train"},
                "eval_kwargs": {"split": "heldout"}},
        "reward": {"name": "counterfactual", "options": {"k": 10}},
        "sampling": {"max_new_tokens": 48, "stop_strings": []},
    },
    "toolsearch_toolsearcher": {
        "env": {"id": "toolgym/ToolSearch-v0", "kwargs": {"max_turns": 3}, "train_kwargs": {"split": "train"},
                "eval_kwargs": {"split": "heldout"}},
        "reward": {"name": "toolsearcher", "options": {}},
        "sampling": {"max_new_tokens": 64},
    },
}


def run_one(name: str, budget_s: float, eval_tasks: int, model: str, out_dir: Path, reuse: bool = False) -> dict:
    from omegaconf import OmegaConf

    from toolgym.trainers.train_cmd import load_config, train

    run_dir = out_dir / name
    eval_path = run_dir / "eval.json"
    if reuse and eval_path.exists() and {"before", "after"} <= set(json.loads(eval_path.read_text())):
        evals = json.loads(eval_path.read_text())  # a finished run of an earlier invocation
        rows = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
        summary = {"eval": evals, "steps": len(rows), "train_seconds": sum(r["step_s"] for r in rows)}
        return _result(name, None, summary)  # budget of that earlier invocation unknown; steps say it
    cfg = load_config(Path(__file__).resolve().parent.parent / "configs" / "quickstart.yaml")
    for section in ("env", "reward", "sampling"):  # replace, not merge: env kwargs differ per env
        cfg[section] = OmegaConf.merge(load_config(None)[section], RUNS[name][section])
    cfg.run_dir = str(run_dir)
    cfg.model.name = model
    cfg.train.steps = 100_000
    cfg.train.time_budget_s = budget_s
    cfg.train.checkpoint_every = 0
    cfg.train.save_rollouts = False
    cfg.eval.before = cfg.eval.after = True
    cfg.eval.num_tasks = eval_tasks
    summary = train(cfg, progress=True)
    return _result(name, budget_s, summary)


def _result(name: str, budget_s: float | None, summary: dict) -> dict:
    """One run's record; ``stderr`` is the standard error of the gain, sqrt(se_before² + se_after²)."""
    before, after = summary["eval"]["before"], summary["eval"]["after"]
    gain = after["reward"] - before["reward"]
    stderr = (before["reward_se"] ** 2 + after["reward_se"] ** 2) ** 0.5
    return {
        "env_id": RUNS[name]["env"]["id"], "reward_scheme": RUNS[name]["reward"]["name"], "budget_s": budget_s,
        "steps": summary["steps"], "train_seconds": summary["train_seconds"],
        "wall_seconds": summary["train_seconds"] + before.get("seconds", 0.0) + after.get("seconds", 0.0),
        "eval_tasks": before["num_tasks"], "before": before, "after": after,
        "gain": gain, "stderr": stderr, "gain_exceeds_2se": bool(gain > 2 * stderr),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget-min", type=float, default=30.0, help="GRPO minutes per run (default 30)")
    ap.add_argument("--eval-tasks", type=int, default=100, help="held-out requests evaluated before and after")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--runs", nargs="+", default=list(RUNS), choices=list(RUNS))
    ap.add_argument("--out", default=None, help="run folders (default: a temporary folder)")
    ap.add_argument("--reuse", action="store_true", help="take finished runs (eval.json with before/after) from --out")
    args = ap.parse_args(argv)
    out_dir = Path(args.out or tempfile.mkdtemp(prefix="toolgym_learning_"))
    results_path = Path(__file__).resolve().parent / "results" / "learning.json"
    # Runs not asked for this time keep their recorded results, so one run can be redone alone.
    results = json.loads(results_path.read_text()).get("results", {}) if results_path.exists() else {}
    results = {name: r for name, r in results.items() if name in RUNS and "gain" in r}
    for name in args.runs:
        results[name] = run_one(name, args.budget_min * 60, args.eval_tasks, args.model, out_dir, args.reuse)
    rows = []
    for name, r in results.items():
        b, a = r["before"], r["after"]
        rows.append([r["env_id"], r["reward_scheme"], r["steps"], f"{r['train_seconds'] / 60:.1f}", r["eval_tasks"],
                     f"{b['reward']:.3f} ± {b['reward_se']:.3f}", f"{a['reward']:.3f} ± {a['reward_se']:.3f}",
                     f"{r['gain']:+.3f} ± {r['stderr']:.3f}", "yes" if r["gain_exceeds_2se"] else "no"])
    body = (
        f"Model `{args.model}` + LoRA (r=16), GRPO on CPU for a fixed time budget; greedy evaluation on "
        "held-out Seal-Tools requests before and after (mean episode reward ± standard error).\n\n"
        + markdown_table(["env", "reward", "steps", "train min", "eval tasks", "before", "after", "gain ± se",
                          "gain > 2 se"], rows)
    )
    write_report("learning", {"model": args.model, "results": results},
                 "Learning: held-out reward before vs after CPU GRPO", body)
    print(json.dumps({k: {"before": v["before"]["reward"], "after": v["after"]["reward"], "steps": v["steps"]}
                      for k, v in results.items()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
