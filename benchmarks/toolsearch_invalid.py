"""Invalid-action rate of a ToolSearch policy, plain vs constrained decoding, on the same held-out tasks.

Greedy episodes of ``toolgym/ToolSearch-v0`` (``max_turns: 4``, the setting of the demonstrations)
on the first N held-out tasks, once with the policy as it is and once wrapped in
:class:`toolgym.agents.constrained.ConstrainedToolSearchPolicy`; per-task rows and the means go to
OUT/plain.json and OUT/constrained.json (a finished file is not recomputed), and together, with the
paired gain, to ``benchmarks/results/toolsearch_invalid.json``. Not run in CI.

    python -m benchmarks.toolsearch_invalid --policy runs/sft_warmstart/model --tasks 30 --out runs/toolsearch_invalid
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: shared CPUs collapse with spinning threads
RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    from toolgym.agents.constrained import ConstrainedToolSearchPolicy
    from toolgym.evaluation.evaluate import paired_gain
    from toolgym.trainers.checkpoint import load_policy
    from toolgym.evaluation.paired import evaluate_per_task

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", required=True, help="model folder (e.g. a `toolgym sft` RUN_DIR/model)")
    ap.add_argument("--tasks", type=int, default=30, help="first N held-out tasks")
    ap.add_argument("--out", default="runs/toolsearch_invalid")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sampling = {"max_new_tokens": 96, "stop_strings": ["</tool_call>"], "temperature": 0.0}
    results = {}
    for name in ("plain", "constrained"):
        path = out / f"{name}.json"
        if not path.exists():
            started = time.time()
            policy = load_policy(args.policy, sampling=sampling)
            if name == "constrained":
                policy = ConstrainedToolSearchPolicy(policy)
            r = evaluate_per_task(policy, "toolgym/ToolSearch-v0", {"max_turns": 4, "split": "heldout"},
                                  num_tasks=args.tasks, batch_size=15, max_new_tokens=96)
            r["seconds"] = time.time() - started
            path.write_text(json.dumps(r, indent=1))
        results[name] = json.loads(path.read_text())
    plain = {r["task_id"]: r["reward"] for r in results["plain"]["rows"]}
    constrained = {r["task_id"]: r["reward"] for r in results["constrained"]["rows"]}
    ids = [t for t in plain if t in constrained]
    gain = paired_gain([plain[t] for t in ids], [constrained[t] for t in ids])
    print(json.dumps({name: r["mean"] for name, r in results.items()}, indent=2))
    print("plain -> constrained (paired):", gain)
    summary = {"env_id": "toolgym/ToolSearch-v0", "env_kwargs": {"max_turns": 4, "split": "heldout"},
               "tasks": args.tasks, "policy": f"{args.policy} (greedy)",
               "script": f"benchmarks/toolsearch_invalid.py --policy {args.policy} --tasks {args.tasks}",
               **{name: r["mean"] for name, r in results.items()},
               "seconds": {name: r.get("seconds") for name, r in results.items()},
               "plain_to_constrained": gain, "rows": {name: r["rows"] for name, r in results.items()}}
    (RESULTS / "toolsearch_invalid.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
