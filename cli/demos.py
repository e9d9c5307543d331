"""``toolgym demos ENV --agent A,B --out FILE``: record scripted demonstration episodes
(:func:`toolgym.trainers.demos.collect_demos`).

``--mixture CONFIG`` (a ``toolgym fit-retriever`` config with ``sources``) records them on each
source's training part instead, never its held-out part, ``--limit`` tasks per source (a seeded
sample), all in one file: a warm start for a policy evaluated on the held-out parts, e.g. by
``benchmarks/ladder.py --heldout-of CONFIG --decomposer``."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from toolgym.trainers.demos import collect_demos, kept_reward_stats


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from toolgym.agents.demonstrators import DEMONSTRATORS  # the help lists exactly what make_demonstrator accepts

    parser.add_argument("env_id", help="environment id, e.g. toolgym/ToolSearch-v0 (see `toolgym envs`)")
    parser.add_argument("--agent", required=True,
                        help="demonstrator name(s), comma-separated (best episode per task is kept): "
                             + ", ".join(DEMONSTRATORS))
    parser.add_argument("--out", required=True, help="output JSONL (rollout records)")
    parser.add_argument("--split", default="train", help="task split (default train; 'none' for all tasks)")
    parser.add_argument("--min-reward", type=float, default=0.0, help="keep episodes with reward >= this")
    parser.add_argument("--limit", type=int, default=None,
                        help="first N tasks only (with --mixture: a seeded sample of N per source)")
    parser.add_argument("--mixture", default=None,
                        help="a fit-retriever config with sources: record on each source's training part")
    parser.add_argument("--env-kwargs", default="{}", help="JSON object of gymnasium.make keyword arguments")
    parser.add_argument("--per-task", type=int, default=1, metavar="K",
                        help="keep up to K episodes per task that act differently, best first (default 1): "
                             "several ways to search one request")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true")


def run(args: argparse.Namespace) -> int:
    from toolgym.data.records import write_rollouts
    from toolgym.envs.registry import require_env_id

    require_env_id(args.env_id)  # one line for an unknown id, before any work

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
    if args.mixture:
        if "dataset" in env_kwargs:
            raise ValueError("--mixture names the datasets: leave 'dataset' out of --env-kwargs")
        groups, stats = collect_mixture_demos(args.env_id, agents, args.mixture, min_reward=args.min_reward,
                                              limit=args.limit, env_kwargs=env_kwargs, seed=args.seed,
                                              progress=not args.no_progress, per_task=args.per_task)
    else:
        groups, stats = collect_demos(args.env_id, agents, split=split, min_reward=args.min_reward, limit=args.limit,
                                      env_kwargs=env_kwargs, seed=args.seed, progress=not args.no_progress,
                                      per_task=args.per_task)
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
    for name, sub in stats.get("sources", {}).items():
        print(f"  {name}: kept {sub['kept']}/{sub['tasks']}; by agent {sub['kept_by_agent']}")
    print(f"demos: {out}\nstats: {stats_path}")
    return 0


def collect_mixture_demos(env_id: str, agents: list[str], config: str, *, min_reward: float, limit: int | None,
                          env_kwargs: dict[str, Any], seed: int, progress: bool,
                          per_task: int = 1) -> tuple[list, dict[str, Any]]:
    """:func:`collect_demos` on each source's training part of a fit config (registered as dataset
    ``mixture:<source>``), ``limit`` tasks per source sampled with ``seed``. ``stats`` sums the
    counts and keeps each source's own under ``sources``."""
    from toolgym.data.training_data import seeded_sample
    from toolgym.envs import register_dataset
    from toolgym.fitting.common import load_sources
    from toolgym.fitting.retriever import FitRetrieverConfig
    from toolgym.trainers.config import load_config

    cfg = load_config(FitRetrieverConfig, config)
    if not cfg.sources:
        raise ValueError(f"{config} has no sources: --mixture needs a mixture config")
    groups: list = []
    stats: dict[str, Any] = {"tasks": 0, "kept": 0, "kept_by_agent": {}, "dropped_tasks": {}, "sources": {}}
    kept: list[float] = []
    for source in load_sources(cfg):
        tasks = seeded_sample(source.train, limit, seed)
        name = f"mixture:{source.name}"
        register_dataset(name, source.corpus, tasks)
        got, sub = collect_demos(env_id, agents, split=None, min_reward=min_reward, limit=None,
                                 env_kwargs={**env_kwargs, "dataset": name}, seed=seed, progress=progress,
                                 per_task=per_task)
        groups += got
        kept += [trajs[0].env_reward for _, trajs in got]
        stats["sources"][name] = sub
        stats["tasks"] += sub["tasks"]
        stats["kept"] += sub["kept"]
        for key in ("kept_by_agent", "dropped_tasks"):
            for k, v in sub[key].items():
                stats[key][k] = stats[key].get(k, 0) + v
    stats["reward_kept"], stats["reward_kept_histogram"] = kept_reward_stats(kept)
    return groups, stats
