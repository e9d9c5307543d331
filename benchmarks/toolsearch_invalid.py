"""Held-out ToolSearch-v0 (max_turns 4), the warm start greedy: plain vs constrained decoding, same tasks."""
import json, sys, time
from pathlib import Path
from toolgym.trainers.evaluate import load_policy
from toolgym.trainers.paired_eval import evaluate_per_task
from toolgym.agents.constrained import ConstrainedToolSearchPolicy
n = int(sys.argv[1]); model = sys.argv[2]; out = Path(sys.argv[3]); out.mkdir(parents=True, exist_ok=True)
sampling = {"max_new_tokens": 96, "stop_strings": ["</tool_call>"], "temperature": 0.0}
for name in ("plain", "constrained"):
    path = out / f"{name}.json"
    if path.exists():
        continue
    t = time.time()
    policy = load_policy(model, sampling=sampling)
    if name == "constrained":
        policy = ConstrainedToolSearchPolicy(policy)
    r = evaluate_per_task(policy, "toolgym/ToolSearch-v0", {"max_turns": 4, "split": "heldout"}, num_tasks=n,
                          batch_size=15, max_new_tokens=96)
    r["seconds"] = time.time() - t
    path.write_text(json.dumps(r, indent=1))
    print(name, json.dumps(r["mean"]), round(r["seconds"]), flush=True)
