"""``toolgym eval MODE``: score a retriever, the retrieval ladder, a scripted agent or a trained policy.

``eval retrieval`` ranks tools for each task's request, optionally split into clauses
(``--decompose clauses``), reranked (``--rerank``) and cut to a fixed or dynamic top-K, and
reports NDCG@k / Recall@k / Completeness@k overall and per group (StableToolBench's G1..G3).
``eval ladder --dataset X`` prints every rung of the retrieval ladder (``toolgym.evaluation.ladder``).
``eval agent --env ID --agent NAME`` and ``eval policy --env ID --policy DIR`` run whole episodes
and print one table with the same metric keys (selection F1/P/R/Match, SRecall, turns, invalid);
with ``--tasks``/``--corpus`` they run on the user's own data (registered as a dataset the env is
built on). The mode-less spelling of earlier versions still works (:func:`normalize_argv`).
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


from toolgym.data.records import Task
from toolgym.retrieval.corpus import ToolCorpus
from toolgym.cli.main import check_output_file


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def decompose_arg(text: str) -> str:
    """argparse type of ``--decompose``: ``none``, ``clauses``, ``request_clauses``, ``policy:PATH`` or
    ``gated:PATH`` (the path checked before any index is built)."""
    if text in ("none", "clauses", "request_clauses"):
        return text
    kind, _, path = text.partition(":")
    if kind not in ("policy", "gated") or not path:
        raise argparse.ArgumentTypeError(f"must be none, clauses, request_clauses, policy:PATH or gated:PATH, got {text!r}")
    try:
        check_policy_path(path)
    except FileNotFoundError as e:
        raise argparse.ArgumentTypeError(str(e).replace("--policy ", f"{kind}:", 1)) from None
    return text


def topk_arg(text: str) -> str:
    """argparse type of ``--topk``: ``dynamic`` or an integer >= 1 (checked before any index is built)."""
    if text == "dynamic":
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer or 'dynamic', got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer or 'dynamic', got {text}")
    return str(value)


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


MODES = {
    "retrieval": "rank tools for each request with a retriever: N@k / R@k / C@k, overall and per group",
    "ladder": "every rung of the retrieval ladder of one dataset, on the same queries",
    "agent": "whole episodes of a scripted agent in an env: F1 / P / R / Match / SRecall / turns",
    "policy": "whole episodes of a trained policy in an env (greedy): the agent table's metrics",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    modes = parser.add_subparsers(dest="mode", metavar="MODE", required=True,
                                  parser_class=type(parser))
    for name, help_text in MODES.items():
        p = modes.add_parser(name, help=help_text, description=help_text)
        {"retrieval": _retrieval_arguments, "ladder": _ladder_arguments, "agent": _agent_arguments,
         "policy": _policy_arguments}[name](p)
        p.add_argument("--json", help="write the metrics as JSON to this path")


def normalize_argv(argv: list[str]) -> list[str]:
    """The mode-less spelling of earlier versions (``toolgym eval --dataset X``, ``--ladder``,
    ``--env E --agent A``, ``--env E --policy P``) read as ``toolgym eval MODE ...``."""
    at = argv.index("eval")
    rest = argv[at + 1:]
    if not rest or rest[0] in MODES or rest[0] in ("-h", "--help"):
        return argv
    def has(flag: str) -> bool:
        return any(a == flag or a.startswith(flag + "=") for a in rest)
    mode = "ladder" if has("--ladder") else "agent" if has("--agent") else "policy" if has("--policy") else "retrieval"
    return argv[:at + 1] + [mode] + [a for a in rest if a != "--ladder"]


def _data_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_argument_group("data")
    src.add_argument("--dataset", help="bundled dataset name (see toolgym.data.dataset_names())")
    src.add_argument("--split", default=None, help="dataset split, where the dataset has several")
    src.add_argument("--tasks", help="tasks JSONL (Task records) with --corpus, or a `toolgym export-hf` folder "
                                     "(its corpus inside; --split picks one split) — instead of --dataset")
    src.add_argument("--corpus", help="corpus JSONL (Tool records)")
    src.add_argument("--limit", type=positive_int, default=None, help="evaluate the first N tasks only")


def _retrieval_arguments(p: argparse.ArgumentParser) -> None:
    _data_arguments(p)
    ret = p.add_argument_group("retriever")
    # hybrid: the rung of the retrieval ladder that holds on every dataset without training (docs/retrieval.md)
    ret.add_argument("--retriever", default="hybrid", choices=["bm25", "dense", "hybrid"],
                     help="default hybrid (z-score BM25 + dense; with --model a fine-tuned folder, its tuned weight)")
    ret.add_argument("--model", default=None, help="embedding model path or id (default: packaged MiniLM)")
    ret.add_argument("--identifiers", default="split", choices=["whole", "split", "both"],
                     help="BM25: compound words (getWeatherForecast) as one token, split into parts (default), or both")
    ret.add_argument("--bm25-parameters", default=True, action=argparse.BooleanOptionalAction,
                     help="BM25 also indexes parameter names and descriptions (default on; --no-bm25-parameters: "
                          "with --identifiers whole, the old BM25)")
    ret.add_argument("--rerank", nargs="?", const="minilm", default=None, metavar="MODEL",
                     help="rerank the top candidates with a CrossEncoder (path; default: MiniLM body, untrained head)")
    ret.add_argument("--decompose", default="none", type=decompose_arg,
                     metavar="{none,clauses,request_clauses,policy:PATH,gated:PATH}",
                     help="retrieve per clause of the request (clauses), with the whole request then its clauses "
                          "(request_clauses), per subtask a trained decomposition policy writes (policy:PATH, a "
                          "toolgym train run/checkpoint or model folder; greedy), or as request_clauses where that "
                          "policy splits and whole where it does not (gated:PATH); the lists are fused round robin")
    ret.add_argument("--topk", default="10", type=topk_arg, help="final list size: an integer or 'dynamic' (Algorithm 2)")
    ret.add_argument("--candidates", type=positive_int, default=20,
                     help="list depth that --rerank reorders and --topk dynamic cuts (the paper's avg K is 8-12)")
    ret.add_argument("--k", default="1,3,5,10", help="comma-separated cutoffs for N@k, R@k, C@k")


def _ladder_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", required=True, help="the dataset whose ladder to print (its evaluation split is fixed)")
    p.add_argument("--limit", type=positive_int, default=None, help="a seeded sample of N queries (default 300)")
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("--candidates", type=positive_int, default=20, help="list depth the reranker and dynamic top-K see")
    p.add_argument("--retriever-model", metavar="DIR", help="fine-tuned bi-encoder (toolgym fit-retriever's model folder)")
    p.add_argument("--reranker-model", metavar="DIR",
                   help="toolgym fit-reranker run folder (one rung per stage) or one CrossEncoder folder")
    p.add_argument("--decomposer", metavar="DIR", help="trained decomposition policy (checkpoint or model folder)")


def _episode_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", required=True, help="environment id, e.g. toolgym/ToolSearch-StableToolBench-v0")
    _data_arguments(p)


def _agent_arguments(p: argparse.ArgumentParser) -> None:
    _episode_arguments(p)
    p.add_argument("--agent", required=True, help="scripted agent: raw | oracle | random")
    p.add_argument("--group-size", type=positive_int, default=1, help="rollouts per task (for --save-rollouts)")
    p.add_argument("--save-rollouts", help="write the rollouts JSONL that `toolgym replay` re-scores")
    p.add_argument("--seed", type=non_negative_int, default=0)


def _policy_arguments(p: argparse.ArgumentParser) -> None:
    _episode_arguments(p)
    p.add_argument("--policy", required=True, help="a trained checkpoint or run folder (or a model folder / name)")
    p.add_argument("--constrained", choices=["toolsearch"], default=None,
                   help="constrained decoding, every turn a valid ToolSearch call (docs/learning.md)")


def load_eval_data(args: argparse.Namespace) -> tuple[str, ToolCorpus, list[Task]]:
    from toolgym.data import load_corpus_and_tasks, load_dataset

    if args.dataset and (args.tasks or args.corpus):
        raise ValueError("give either --dataset or --tasks/--corpus, not both")
    if args.dataset:
        ds = load_dataset(args.dataset, split=args.split)
        name, corpus, tasks = ds.name, ds.corpus, list(ds.tasks)
    elif args.tasks and not args.corpus and Path(args.tasks).is_dir():
        # a `toolgym export-hf` folder (datasets parquet): corpus and tasks both inside it
        from toolgym.trainers.export_hf import load_export

        corpus, tasks = load_export(args.tasks, split=args.split)
        name = Path(args.tasks).name
    elif args.tasks and args.corpus:
        loaded = load_corpus_and_tasks(args.corpus, args.tasks)
        corpus, tasks = loaded.corpus, loaded.tasks
        name = Path(args.tasks).stem
        if args.split is not None:  # was ignored: every task scored, exit 0
            splits = sorted({t.split for t in tasks})
            tasks = [t for t in tasks if t.split == args.split]
            if not tasks:
                raise ValueError(f"--split {args.split!r}: no task of {args.tasks} is in that split; "
                                 f"its splits: {splits}")
    else:
        raise ValueError("give --dataset NAME, both --tasks PATH and --corpus PATH, or --tasks EXPORT_DIR")
    check_unique_task_ids(tasks, args.tasks or name)
    if args.limit is not None:
        if args.limit < 1:
            raise ValueError(f"--limit must be a positive integer, got {args.limit}")
        tasks = tasks[: args.limit]
    if not tasks:
        raise ValueError("no tasks to evaluate")
    return name, corpus, tasks


def check_unique_task_ids(tasks: Sequence[Task], source: str) -> None:
    """Each task once: a repeated id would be scored (and averaged) twice."""
    seen: set[str] = set()
    for task in tasks:
        if task.id in seen:
            raise ValueError(f"{source}: duplicate task id {task.id!r}; task ids must be unique")
        seen.add(task.id)


def check_env_id(env_id: str) -> None:
    """The id must be a registered toolgym environment (``toolgym envs``)."""
    import difflib

    from toolgym.envs import registered_ids

    ids = registered_ids()
    if env_id not in ids:
        close = difflib.get_close_matches(env_id, ids, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown env id {env_id!r}{hint} (`toolgym envs` lists them)")


def check_policy_path(policy: str) -> None:
    """``--policy`` must name a checkpoint/run/model folder or file, a model alias or a cached model id."""
    from toolgym.agents.hf_policy import SMOLLM2_ALIASES, TINY_ALIASES

    aliases = SMOLLM2_ALIASES | TINY_ALIASES
    if policy in aliases or Path(policy).exists():
        return
    try:  # a Hugging Face id already in the local cache (nothing downloads)
        from huggingface_hub import try_to_load_from_cache

        if isinstance(try_to_load_from_cache(policy, "config.json"), str):
            return
    except Exception:  # noqa: BLE001 - not a valid hub id: report it as a missing path below
        pass
    raise FileNotFoundError(f"--policy {policy}: no such checkpoint, run folder or model file, and not a model "
                            f"alias ({', '.join(sorted(aliases))}) or a cached model id")


def parse_ks(text: str) -> list[int]:
    try:
        ks = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise ValueError(f"--k must be comma-separated integers, got {text!r}") from None
    if not ks or ks[0] <= 0:
        raise ValueError(f"--k cutoffs must be positive, got {text!r}")
    return ks


def print_table(title: str, result: dict[str, Any], keys: Sequence[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    table.add_column("set")
    for key in keys:
        table.add_column(key, justify="right")
    table.add_column("n", justify="right")

    def cells(metrics: dict[str, Any]) -> list[str]:
        return [f"{metrics[k]:.2f}" if k in ("K", "turns", "reward") else f"{metrics[k]:.1f}" for k in keys] + [str(metrics["n"])]

    for group, metrics in result.get("groups", {}).items():
        table.add_row(group, *cells(metrics))
    table.add_row("all", *cells(result), style="bold")
    # Off a terminal rich assumes 80 columns and would elide the numbers.
    Console(width=None if sys.stdout.isatty() else 200).print(table)


def write_json_output(path: str, result: dict[str, Any]) -> None:
    from toolgym.data.atomic import write_json

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_json(path, result)


def run(args: argparse.Namespace) -> int:
    # Outputs are checked first: a misplaced path must not cost a whole evaluation.
    check_output_file(args.json, "--json")
    check_output_file(getattr(args, "save_rollouts", None), "--save-rollouts")
    return {"retrieval": run_retrieval, "ladder": run_ladder_command, "agent": run_episodes,
            "policy": run_episodes}[args.mode](args)


def run_retrieval(args: argparse.Namespace) -> int:
    """``eval retrieval``: one retriever (+ clauses, reranker, top-K cut) on a dataset or the user's files."""
    name, corpus, tasks = load_eval_data(args)
    ks = parse_ks(args.k)
    from toolgym.evaluation.retrieval import evaluate_retrieval
    from toolgym.retrieval import build_index
    from toolgym.trainers.console import verbose

    index = build_index(corpus, args.retriever, model=args.model, show_progress=verbose(), identifiers=args.identifiers,
                        parameters=args.bm25_parameters)
    reranker = None
    if args.rerank:
        from toolgym.retrieval.rerank import CrossEncoderReranker

        reranker = CrossEncoderReranker(None if args.rerank == "minilm" else args.rerank, corpus=corpus)
    decompose: Any = args.decompose
    if decompose.startswith(("policy:", "gated:")):
        from toolgym.evaluation.decomposer import GatedClauseDecomposer, PolicyDecomposer
        from toolgym.trainers.policy_loading import load_policy

        kind, _, path = decompose.partition(":")
        decompose = PolicyDecomposer(load_policy(path))
        if kind == "gated":
            decompose = GatedClauseDecomposer(decompose)
    result = evaluate_retrieval(index, tasks, ks, topk=args.topk, decompose=decompose, reranker=reranker,
                                candidates=args.candidates)
    result["config"] = {"dataset": name, "retriever": args.retriever, "identifiers": args.identifiers,
                        "bm25_parameters": args.bm25_parameters, "rerank": args.rerank,
                        "decompose": args.decompose, "topk": args.topk, "k": ks}
    keys = [f"{m}@{k}" for m in ("N", "R", "C") for k in ks] + ["K", "C@K"]
    print_table(f"{name}: {args.retriever}" + (" + rerank" if args.rerank else "")
                + {"none": "", "clauses": " + clauses", "request_clauses": " + request and clauses"}.get(
                    args.decompose, " + policy-gated request and clauses" if args.decompose.startswith("gated:")
                    else " + trained decomposer")
                + f", top-K={args.topk}", result, keys)
    if not isinstance(decompose, str) and tasks:
        result["decompose_ms_per_request"] = 1000 * decompose.seconds / len(tasks)
        print(f"decomposition: {result['decompose_ms_per_request']:.0f} ms per request (greedy decoding)")
    if args.json:
        write_json_output(args.json, result)
    return 0


def run_ladder_command(args: argparse.Namespace) -> int:
    """``eval ladder``: every rung of the retrieval ladder on one dataset (``toolgym.evaluation.ladder``)."""
    from toolgym.evaluation.ladder import DEFAULT_LIMIT, load_ladder_data, ladder_names, print_ladder, run_ladder

    if args.dataset not in ladder_names():
        raise ValueError(f"--dataset {args.dataset!r} has no ladder; one of {', '.join(ladder_names())}")
    for flag in ("retriever_model", "reranker_model", "decomposer"):
        path = getattr(args, flag)
        if path and not Path(path).exists():
            raise FileNotFoundError(f"--{flag.replace('_', '-')} {path}: no such folder")
    data = load_ladder_data(args.dataset, args.limit or DEFAULT_LIMIT, args.seed)
    result = run_ladder(data, retriever_model=args.retriever_model, reranker_model=args.reranker_model,
                        decomposer=args.decomposer, depth=args.candidates, log=lambda m: print(m, file=sys.stderr, flush=True))
    print_ladder(result)
    if args.json:
        write_json_output(args.json, result)
    return 0


def run_episodes(args: argparse.Namespace) -> int:
    """``eval agent`` / ``eval policy``: whole episodes in an environment."""
    check_env_id(args.env)
    if args.mode == "policy":
        check_policy_path(args.policy)
    dataset = args.dataset
    if args.tasks or args.corpus:
        # The user's own data: registered under a dataset name the env is then built on.
        from toolgym.envs import register_dataset

        _, corpus, tasks = load_eval_data(args)
        dataset = f"user:{Path(args.tasks).name}"
        register_dataset(dataset, corpus, tasks)
    if args.mode == "agent" and args.save_rollouts:
        Path(args.save_rollouts).parent.mkdir(parents=True, exist_ok=True)
    if args.mode == "agent":
        from toolgym.agents import make_agent
        from toolgym.evaluation.evaluate import evaluate_agent

        result = evaluate_agent(args.env, make_agent(args.agent, seed=args.seed), dataset=dataset,
                                split=args.split, limit=args.limit, group_size=args.group_size,
                                save_rollouts=args.save_rollouts, seed=args.seed)
        who = f"agent={args.agent}"
    else:
        from toolgym.evaluation.evaluate import evaluate_policy
        from toolgym.trainers.policy_loading import load_policy

        env_kwargs = {"dataset": dataset} if dataset else None
        result = evaluate_policy(load_policy(args.policy), args.env, split=args.split, num_tasks=args.limit,
                                 env_kwargs=env_kwargs, constrained=args.constrained)
        who = f"policy={args.policy}"
    # one table for agents and policies: evaluate()'s keys (rates in percent)
    keys = [k for k in ("reward", "F1", "P", "R", "Match", "SRecall", "turns", "search_turns", "invalid") if k in result]
    print_table(f"{args.env}: {who}" + (f" on {dataset}" if dataset else ""), result, keys)
    if args.json:
        write_json_output(args.json, result)
    return 0
