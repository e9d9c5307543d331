"""What naming a category costs a ToolSearch policy: its own searches re-run without the category.

A warm start whose demonstrations name categories (``configs/sft_toolsearch_multi_cat.yaml``) can
retrieve badly for two reasons that its F1 alone does not separate: calls the env rejects (a
category outside the schema's enum, malformed JSON), and valid categories that confine a search to
a part of the library holding no gold tool. This benchmark separates them on the policy's own
episodes. Greedy episodes on the first N held-out tasks of an env whose search takes a category
(rollouts saved to OUT/rollouts.jsonl; a saved file of the same model and tasks is reused), then
every ``search`` call the policy wrote is parsed again (the env's parser) and searched in the env's
own index (its top-k), three ways:

* **as run**: the env's record (a rejected call found nothing);
* **unknown categories dropped**: a call whose category is not in the library searched without one,
  valid categories kept;
* **no category**: every parsed call searched in the whole library.

Per task: search recall (gold tools seen / gold tools) under each. Also the rejected turns by kind
and, of the valid searches that named a category, the share whose category holds a gold tool the
episode had not seen yet. The queries are the episode's own, so the later turns are not replayed
(a search that would have found a tool might have changed what the policy wrote next): the gaps are
what the categories cost these queries, not a re-run policy. Per-task rows and means with se go to
``benchmarks/results/category_cost.json`` and the table to ``docs/benchmarks.md``. Not run in CI.

    python -m benchmarks.category_cost --policy runs/sft_toolsearch_multi_cat/model --tasks 100
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: shared CPUs collapse with spinning threads

from benchmarks._report import host_info, markdown_table, weights_fingerprint, write_report  # noqa: E402

WAYS = ("as_run", "unknown_dropped", "no_category")
WAY_NAMES = {"as_run": "as run", "unknown_dropped": "unknown categories dropped", "no_category": "no category"}


def error_kind(observation: str) -> str:
    """A rejected turn's kind, from the env's error observation (its first line)."""
    text = observation[:300]
    if "unknown category" in text:
        return "unknown category"
    if "not valid JSON" in text:
        return "malformed JSON"
    return "other"


def episode_category_cost(task: Any, trajectory: Any, index: Any, categories: Sequence[str], category_of: dict[str, str | None],
                          top_k: int, protocol: str = "hermes") -> dict[str, Any]:
    """One episode's row: search recall as run / with unknown categories dropped / with no category,
    rejected turns by kind, and how many valid category-naming searches named one holding an unseen gold tool."""
    from toolgym.envs.actions import Search
    from toolgym.envs.syntax import parse_action

    gold = set(task.gold)
    known = set(categories)
    seen = {way: set() for way in WAYS}
    for event in trajectory.events:
        seen["as_run"].update(event.results)
    errors: Counter[str] = Counter()
    for message in trajectory.messages:
        if message.get("role") == "assistant":
            action = parse_action(message.get("content", ""), protocol)
            if isinstance(action, Search) and action.query.strip():
                whole = index.search(action.query, None, top_k).ids[:top_k]
                seen["no_category"].update(whole)
                confined = action.category in known  # an unknown category is searched without one
                seen["unknown_dropped"].update(index.search(action.query, action.category, top_k).ids[:top_k] if confined else whole)
        elif message.get("role") in ("tool", "user") and message.get("content", "").startswith("Error"):
            errors[error_kind(message["content"])] += 1
    named = right = 0
    found: set[str] = set()
    for event in trajectory.events:
        if event.category is not None:
            named += 1
            right += any(category_of.get(g) == event.category for g in gold - found)
        found.update(event.results)
    row: dict[str, Any] = {"task_id": task.id, "gold": len(gold), "searches": len(trajectory.events),
                           "turns": trajectory.num_turns, "rejected": trajectory.invalid_actions,
                           "named_category": named, "category_holds_unseen_gold": right}
    row.update({f"recall_{way}": len(gold & seen[way]) / max(len(gold), 1) for way in WAYS})
    row.update({f"rejected_{kind.replace(' ', '_')}": errors.get(kind, 0) for kind in ("unknown category", "malformed JSON", "other")})
    return row


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Means (se over tasks) of the recalls, the paired gaps between the ways, and the turn counts."""
    from toolgym.evaluation.evaluate import paired_gain

    import numpy as np

    def mean_se(values: Sequence[float]) -> dict[str, float]:
        v = np.asarray(values, dtype=float)
        return {"mean": float(v.mean()), "se": float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else 0.0}

    out: dict[str, Any] = {"tasks": len(rows), **{way: mean_se([r[f"recall_{way}"] for r in rows]) for way in WAYS}}
    out["rejected_gap"] = paired_gain([r["recall_as_run"] for r in rows], [r["recall_unknown_dropped"] for r in rows])
    out["category_gap"] = paired_gain([r["recall_unknown_dropped"] for r in rows], [r["recall_no_category"] for r in rows])
    turns = sum(r["turns"] for r in rows)
    out["turns"] = turns
    for kind in ("unknown_category", "malformed_JSON", "other"):
        out[f"rejected_{kind}_share_of_turns"] = sum(r[f"rejected_{kind}"] for r in rows) / max(turns, 1)
    named = sum(r["named_category"] for r in rows)
    out["searches"] = sum(r["searches"] for r in rows)
    out["named_category_share"] = named / max(out["searches"], 1)
    out["category_holds_unseen_gold_share"] = sum(r["category_holds_unseen_gold"] for r in rows) / max(named, 1)
    return out


def run_episodes(policy_dir: str, env: dict[str, Any], tasks: int, batch: int, path: Path) -> dict[str, Any]:
    """Greedy episodes with rollouts saved (reused when ``path``'s settings match)."""
    from toolgym.evaluation.evaluate import env_tasks, evaluate, make_envs
    from toolgym.trainers.checkpoint import load_policy

    settings = {"policy": policy_dir, "fingerprint": weights_fingerprint(policy_dir), "tasks": tasks,
                "env_kwargs": {**env["kwargs"], "split": env.get("eval_split", "heldout")},
                "max_new_tokens": env["max_new_tokens"], "stop_strings": list(env["stop_strings"])}
    marker = path.with_suffix(".settings.json")
    saved = json.loads(marker.read_text()) if path.exists() and marker.exists() else {}
    if {k: v for k, v in saved.items() if k != "seconds"} == settings:  # the marker adds the episodes' seconds
        return saved
    policy = load_policy(policy_dir, sampling={"max_new_tokens": env["max_new_tokens"], "stop_strings": env["stop_strings"],
                                               "temperature": 0.0})
    kwargs = settings["env_kwargs"]
    probe = make_envs(env["id"], kwargs, 1)[0]
    chosen = env_tasks(probe)[:tasks]
    envs = [probe] + make_envs(env["id"], kwargs, max(0, min(batch, len(chosen)) - 1))
    started = time.time()
    evaluate(policy, envs, chosen, save_rollouts=path)
    settings["seconds"] = time.time() - started
    marker.write_text(json.dumps(settings, indent=1))
    return settings


def main(argv: list[str] | None = None) -> int:
    from benchmarks.learning import ENVS
    from toolgym.data.records import read_rollouts
    from toolgym.evaluation.evaluate import make_envs

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", required=True, help="model folder (e.g. runs/sft_toolsearch_multi_cat/model)")
    ap.add_argument("--env", default="toolsearch_multi_cat", help="a ToolSearch env of benchmarks/learning.py whose search takes a category")
    ap.add_argument("--tasks", type=int, default=100, help="first N held-out tasks")
    ap.add_argument("--batch", type=int, default=20, help="episodes decoded at once")
    ap.add_argument("--out", default="runs/category_cost")
    args = ap.parse_args(argv)
    env = ENVS[args.env]
    if env["kwargs"].get("category_mode", "off") == "off":
        ap.error(f"{args.env}: its search takes no category")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    settings = run_episodes(args.policy, env, args.tasks, args.batch, out / "rollouts.jsonl")
    probe = make_envs(env["id"], settings["env_kwargs"], 1)[0].unwrapped
    category_of = {t.id: t.category for t in probe.corpus.tools}
    rows = [episode_category_cost(task, trajectory, probe.index, probe.corpus.categories, category_of, probe.top_k, probe.protocol)
            for task, trajectories in read_rollouts(out / "rollouts.jsonl") for trajectory in trajectories]
    summary = summarise(rows)
    table = markdown_table(
        ["searched", "search recall", "gap to the row above (paired)"],
        [[WAY_NAMES["as_run"], f"{summary['as_run']['mean']:.3f} ± {summary['as_run']['se']:.3f}", ""],
         [WAY_NAMES["unknown_dropped"], f"{summary['unknown_dropped']['mean']:.3f} ± {summary['unknown_dropped']['se']:.3f}",
          f"{summary['rejected_gap']['gain']:+.3f} ± {summary['rejected_gap']['se']:.3f}"],
         [WAY_NAMES["no_category"], f"{summary['no_category']['mean']:.3f} ± {summary['no_category']['se']:.3f}",
          f"{summary['category_gap']['gain']:+.3f} ± {summary['category_gap']['se']:.3f}"]])
    body = (f"`{args.policy}` (`{settings['fingerprint'][:19]}…`), greedy, on the first {args.tasks} held-out tasks of "
            f"`{args.env}` ({settings['seconds']:.0f} s of episodes). Its own search calls re-run three ways in the env's "
            f"index (top {probe.top_k}); the later turns are not replayed.\n\n{table}\n\n"
            f"Rejected turns: {summary['rejected_unknown_category_share_of_turns']:.1%} of {summary['turns']} turns named an "
            f"unknown category, {summary['rejected_malformed_JSON_share_of_turns']:.1%} were malformed JSON, "
            f"{summary['rejected_other_share_of_turns']:.1%} other. Of the {summary['searches']} searches, "
            f"{summary['named_category_share']:.1%} named a category, and of those "
            f"{summary['category_holds_unseen_gold_share']:.1%} named one holding a gold tool not yet seen.")
    print(body)
    write_report("category_cost", {"env": args.env, "env_kwargs": settings["env_kwargs"], "policy": args.policy,
                                   "fingerprint": settings["fingerprint"], "episode_seconds": settings["seconds"],
                                   "host": host_info(), **summary, "rows": rows},
                 "What naming a category costs a ToolSearch policy", body,
                 script=f"category_cost.py --policy {args.policy} --tasks {args.tasks}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
