"""``toolgym demos ENV --agent A,B --out FILE``: record scripted demonstration episodes
(:func:`toolgym.trainers.demos.collect_demos`)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from toolgym.trainers.demos import collect_demos


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from toolgym.agents.demonstrators import DEMONSTRATORS  # the help lists exactly what make_demonstrator accepts

    parser.add_argument("env_id", help="environment id, e.g. toolgym/ToolSearch-v0 (see `toolgym envs`)")
    parser.add_argument("--agent", required=True,
                        help="demonstrator name(s), comma-separated (best episode per task is kept): "
                             + ", ".join(DEMONSTRATORS))
    parser.add_argument("--out", required=True, help="output JSONL (rollout records)")
    parser.add_argument("--split", default="train", help="task split (default train; 'none' for all tasks)")
    parser.add_argument("--min-reward", type=float, default=0.0, help="keep episodes with reward >= this")
    parser.add_argument("--limit", type=int, default=None, help="first N tasks only")
    parser.add_argument("--env-kwargs", default="{}", help="JSON object of gymnasium.make keyword arguments")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true")


def run(args: argparse.Namespace) -> int:
    from toolgym.data.records import write_rollouts

    try:
        env_kwargs = json.loads(args.env_kwargs)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--env-kwargs is not JSON: {exc}") from None
    if not isinstance(env_kwargs, dict):
        raise ValueError("--env-kwargs must be a JSON object")
    from toolgym.cli.main import check_output_file

    check_output_file(args.out, "--out")  # before the episodes, not after them
    split = None if str(args.split).lower() == "none" else args.split
    agents = [a.strip() for a in args.agent.split(",") if a.strip()]
    groups, stats = collect_demos(args.env_id, agents, split=split, min_reward=args.min_reward, limit=args.limit,
                                  env_kwargs=env_kwargs, seed=args.seed, progress=not args.no_progress)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_rollouts(out, groups)
    stats_path = out.with_name(out.name + ".stats.json")
    stats_path.write_text(json.dumps(stats, indent=2))
    k = stats["reward_kept"]
    print(f"kept {stats['kept']}/{stats['tasks']} episodes (reward >= {args.min_reward}); by agent {stats['kept_by_agent']}; "
          f"dropped {stats['dropped_tasks']}")
    if k:
        print(f"kept reward: mean {k['mean']:.3f}  min {k['min']:.3f}  median {k['median']:.3f}  max {k['max']:.3f}; "
              f"histogram {stats['reward_kept_histogram']}")
    print(f"demos: {out}\nstats: {stats_path}")
    return 0
