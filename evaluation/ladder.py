"""The retrieval ladder (MagicSelector §4): every rung on the same queries of one dataset.

Rungs, in order: BM25, dense (packaged MiniLM), hybrid (RRF), fine-tuned dense and hybrid with
it (``retriever_model``), + point-wise rerank, + list-wise, + self-distilled negatives (the stages
of a ``toolgym fit-reranker`` run, ``reranker_model``), + decomposition by the clause splitter,
+ decomposition by a trained policy (``decomposer``), + dual-boundary dynamic top-K (Algorithm 2:
mean K and C@K). A rung whose model is not given is a ``not trained`` row, never dropped.
Each rung builds on the best pipeline so far: the rerankers reorder the top ``DEPTH`` of the first
stage they were trained on; the clause rung retrieves per clause with that first stage (and the
last reranker) and fuses round robin; dynamic top-K cuts the clause rung's list.

Datasets (:data:`LADDER_DATASETS`): the evaluation split and what was trained on it. Training
never sees these queries: Seal-Tools is evaluated on ``heldout`` (the fit commands train on
``train``), everything else is zero-shot. ``toolgym eval ladder`` and ``benchmarks/ladder.py``
both call :func:`run_ladder`.
"""
from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolgym.data.records import Task
from toolgym.retrieval.corpus import ToolCorpus
from toolgym.retrieval.decompose import split_where

DEPTH = 20  # the candidate list reranked and cut by dynamic top-K (`toolgym eval --candidates`)
KS = (5, 10, 20)
DEFAULT_LIMIT = 300  # queries per dataset: the untrained rungs of all datasets run in minutes on 2 cores
NOT_TRAINED = "not trained"
STAGE_LABELS = {"pointwise": "+ point-wise rerank (eq. 16)", "listwise": "+ list-wise (eq. 17-19)",
                "distilled": "+ self-distilled negatives (Alg. 1, eq. 20)"}
POLICY = "+ decomposition (trained policy)"
REQUEST_CLAUSES = "+ decomposition (request + clauses)"  # the whole request, then its clauses (a fixed rule)
GATED = "+ decomposition (policy-gated request + clauses)"  # that rule where the policy splits, else the request
RUNG_ORDER = ("BM25", "dense (MiniLM)", "hybrid (BM25 + MiniLM)", "fine-tuned dense", "hybrid (BM25 + fine-tuned)",
              *STAGE_LABELS.values(), "+ decomposition (clause splitter)", REQUEST_CLAUSES, POLICY, GATED,
              "+ dynamic top-K (Alg. 2)")


@dataclass(frozen=True)
class LadderSpec:
    """Where a ladder dataset's queries come from and how training relates to them."""

    source: str  # a toolgym.data dataset name, or "dialogue" (the generated dialogues)
    split: str | None
    note: str


LADDER_DATASETS: dict[str, LadderSpec] = {
    "seal_tools": LadderSpec("seal_tools", "heldout", "held-out split (100 multi-tool dev tasks); fit-* train on `train`"),
    "stabletoolbench": LadderSpec("stabletoolbench", None, "zero-shot (never trained on)"),
    "metatool": LadderSpec("metatool", None, "single-tool queries, zero-shot"),
    "metatool_multi": LadderSpec("metatool_multi", None, "two-tool queries, zero-shot"),
    "api_bank": LadderSpec("api_bank", None, "API-calling dialogue turns, zero-shot"),
    "ultratool": LadderSpec("ultratool", None, "UltraTool plans, zero-shot for retrieval (fit-preference trains on them)"),
    "dialogue_in_domain": LadderSpec("dialogue", "test", "generated dialogues over Seal-Tools, in-domain tools (test split)"),
    "dialogue_ood": LadderSpec("dialogue", "ood", "generated dialogues over Seal-Tools, held-out categories (ood split)"),
}


@dataclass
class LadderData:
    name: str
    corpus: ToolCorpus
    tasks: list[Task]
    total: int  # tasks before the cap
    note: str


def load_ladder_data(name: str, limit: int | None = DEFAULT_LIMIT, seed: int = 0) -> LadderData:
    """The evaluation tasks of a ladder dataset, a seeded sample of ``limit`` when there are more."""
    if name not in LADDER_DATASETS:
        raise ValueError(f"unknown ladder dataset {name!r}; choose one of {', '.join(LADDER_DATASETS)}")
    spec = LADDER_DATASETS[name]
    if spec.source == "dialogue":
        from toolgym.data import load_dataset
        from toolgym.data.dialogue_generator import dialogue_tasks, generate_dialogues
        from toolgym.envs.dialogue import DIALOGUE_CONFIG, DIALOGUE_LIBRARY

        corpus = load_dataset(DIALOGUE_LIBRARY).corpus
        tasks = [t for t in dialogue_tasks(generate_dialogues(corpus, DIALOGUE_CONFIG)) if t.split == spec.split]
    else:
        from toolgym.data import load_dataset

        ds = load_dataset(spec.source, split=spec.split)
        corpus, tasks = ds.corpus, list(ds.tasks)
        if spec.source == "seal_tools":
            from toolgym.data.training_data import check_disjoint

            check_disjoint(load_dataset("seal_tools", split="train").tasks, tasks)
    from toolgym.data.training_data import seeded_sample

    return LadderData(name, corpus, seeded_sample(tasks, limit, seed), len(tasks), spec.note)


def reranker_stages(reranker_model: str | None) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """(rung label, model folder) per reranker stage, and the run's summary.

    ``reranker_model``: a ``toolgym fit-reranker`` run folder (its ``summary.json`` lists the
    stages) or one CrossEncoder folder (one ``+ rerank`` rung)."""
    if not reranker_model:
        return [], {}
    path = Path(reranker_model)
    if not path.exists():
        raise FileNotFoundError(f"--reranker-model {reranker_model}: no such folder")
    summary_path = path / "summary.json"
    if summary_path.is_file():
        summary = json.loads(summary_path.read_text())
        stages = [(STAGE_LABELS.get(s, f"+ {s}"), info["model_dir"]) for s, info in summary.get("stages", {}).items()]
        if stages:
            return stages, summary
    return [(f"+ rerank ({path.name})", str(path))], {}


def _metrics(result: dict[str, Any]) -> dict[str, float]:
    keep = ("N@5", "C@10", "C@20", "R@10")
    return {k: float(result[k]) for k in keep if k in result}


def run_ladder(
    data: LadderData,
    *,
    retriever_model: str | None = None,
    reranker_model: str | None = None,
    decomposer: str | None = None,
    depth: int = DEPTH,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every rung on ``data.tasks``: ``{"rungs": {label: metrics | {"status": "not trained"}}, ...}``.

    Metrics in %: N@5, R@10, C@10, C@20; the dynamic top-K rung has the mean ``K`` and ``C@K``
    (with ``P@K``, ``R@K``, ``F1@K``) of the cut it makes in the previous rung's list.
    ``per_query[label]``: each query's metrics (fractions; the rung's numbers are 100 x their mean)
    for every rung measured here (the trained-policy rung is an env evaluation: none).
    """
    from toolgym.retrieval import build_index
    from toolgym.evaluation.retrieval import evaluate_retrieval

    tasks, corpus = data.tasks, data.corpus
    rungs: dict[str, dict[str, Any]] = {}
    timing: dict[str, float] = {}
    per_query: dict[str, list[dict[str, Any]]] = {}

    def rung(label: str, index: Any, **kw: Any) -> dict[str, Any]:
        t0 = time.perf_counter()
        res = evaluate_retrieval(index, tasks, KS, candidates=depth, keep_rows=True, **kw)
        timing[label] = time.perf_counter() - t0
        rungs[label] = _metrics(res)
        per_query[label] = [{k: r[k] for k in ("task_id", *rungs[label])} for r in res["per_task"]]
        log(f"{data.name} {label}: {_fmt(rungs[label])} ({timing[label]:.0f} s)")
        return res

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the untrained reranker head warns; the rows say it
        bm25 = build_index(corpus, "bm25", cache_size=0)
        dense = build_index(corpus, "dense", cache_size=0)
        hybrid = build_index(corpus, "hybrid", cache_size=0)
        rung("BM25", bm25)
        rung("dense (MiniLM)", dense)
        rung("hybrid (BM25 + MiniLM)", hybrid)
        first: Any = hybrid
        tuned_dense = tuned_hybrid = None
        if retriever_model:
            tuned_dense = build_index(corpus, "dense", model=retriever_model, cache_size=0)
            tuned_hybrid = build_index(corpus, "hybrid", model=retriever_model, cache_size=0)
            rung("fine-tuned dense", tuned_dense)
            rung("hybrid (BM25 + fine-tuned)", tuned_hybrid)
            first = tuned_hybrid
        else:
            rungs["fine-tuned dense"] = rungs["hybrid (BM25 + fine-tuned)"] = {"status": NOT_TRAINED}

        stages, summary = reranker_stages(reranker_model)
        if summary.get("retriever"):  # rerank the list of the retriever the reranker was trained on
            first = {"bm25": bm25, "dense": tuned_dense or dense, "hybrid": tuned_hybrid or hybrid}[summary["retriever"]]
        reranker = None
        if stages:
            from toolgym.retrieval.rerank import CrossEncoderReranker

            for label, folder in stages:
                reranker = CrossEncoderReranker(folder, max_length=128, corpus=corpus)
                rung(label, first, reranker=reranker)
        else:
            for label in STAGE_LABELS.values():
                rungs[label] = {"status": NOT_TRAINED}

        # One pass gives the clause rung (its ranking) and the dynamic rung (the cut of that ranking).
        clauses = rung("+ decomposition (clause splitter)", first, decompose="clauses", reranker=reranker, topk="dynamic")
        rungs["+ decomposition (clause splitter)"]["clauses_per_query"] = sum(len(_clauses(t)) for t in tasks) / len(tasks)
        rung(REQUEST_CLAUSES, first, decompose="request_clauses", reranker=reranker)
        if decomposer:
            # the policy's subtasks are retrieved with the best untrained-or-trained hybrid, as clauses are
            options = {"model": retriever_model} if retriever_model else {}
            rungs[POLICY], per_query[POLICY] = decomposer_rung(data, decomposer, log, retriever="hybrid",
                                                               retriever_options=options)
            # the same decisions, the rule's words: split where the policy wrote more than one subtask
            split = {row["task_id"]: row["subtasks"] > 1 for row in per_query[POLICY]}
            rung(GATED, first, reranker=reranker, decompose=lambda ts: split_where(ts, [split[t.id] for t in ts]))
            rungs[GATED]["split_share"] = sum(split.values()) / len(split)
        else:
            rungs[POLICY] = rungs[GATED] = {"status": NOT_TRAINED}
        rungs["+ dynamic top-K (Alg. 2)"] = {key: float(clauses[key]) for key in ("K", "C@K", "P@K", "R@K", "F1@K")}
        per_query["+ dynamic top-K (Alg. 2)"] = [{k: r[k] for k in ("task_id", "K", "C@K", "P@K", "R@K", "F1@K")}
                                                 for r in clauses["per_task"]]
        log(f"{data.name} + dynamic top-K (Alg. 2): {_fmt(rungs['+ dynamic top-K (Alg. 2)'])}")
    first_label = next((k for k, v in {"BM25": bm25, "hybrid (BM25 + MiniLM)": hybrid, "fine-tuned dense": tuned_dense,
                                       "hybrid (BM25 + fine-tuned)": tuned_hybrid, "dense (MiniLM)": dense}.items()
                        if v is first), "?")
    return {"dataset": data.name, "queries": len(tasks), "of": data.total, "note": data.note, "depth": depth,
            "first_stage": first_label, "rungs": rungs, "per_query": per_query,
            "paired": paired_over(per_query, first_label),
            "seconds": timing, "reranker_run": {k: summary.get(k) for k in ("steps", "budget_minutes", "retriever")} if summary else None}


PAIRED_KEYS = ("C@10", "N@5")


def paired_over(per_query: dict[str, list[dict[str, Any]]], base: str) -> dict[str, dict[str, dict[str, float]]]:
    """Each rung stacked on the first stage ``base`` (rerank, decomposition) against it on the same
    queries: ``{rung: {metric: {"gain", "se"}}}`` in points (100 x the paired mean and its standard
    error, :func:`~toolgym.evaluation.evaluate.paired_gain`); the trained decomposer also against
    the clause splitter (key ``"<policy rung> vs clause splitter"``)."""
    from toolgym.evaluation.evaluate import paired_gain

    def diff(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
        assert [r["task_id"] for r in before] == [r["task_id"] for r in after]
        out = {}
        for key in PAIRED_KEYS:
            g = paired_gain([r[key] for r in before], [r[key] for r in after])
            out[key] = {"gain": 100 * g["gain"], "se": 100 * g["se"]}
        return out

    if base not in per_query:
        return {}
    stacked = [label for label in per_query if label.startswith("+ ") and all(k in per_query[label][0] for k in PAIRED_KEYS)]
    out = {label: diff(per_query[base], per_query[label]) for label in stacked}
    clauses = "+ decomposition (clause splitter)"
    for policy in (POLICY, GATED):
        if policy in out and clauses in per_query:
            out[f"{policy} vs clause splitter"] = diff(per_query[clauses], per_query[policy])
    return out


def _clauses(task: Task) -> list[str]:
    from toolgym.retrieval.decompose import split_into_clauses

    return split_into_clauses(task.context_text())


def decomposer_rung(data: LadderData, decomposer: str, log: Callable[[str], None] = print, *,
                    retriever: str = "bm25", retriever_options: dict[str, Any] | None = None,
                    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A trained decomposition policy on ``toolgym/Decompose-v0`` over the ladder's tasks, greedy:
    the env's fused list (``retriever`` per subtask, round robin, top 10) as N@5 / C@10, with the
    mean number of subtasks; and each query's row (fractions, like the other rungs')."""
    from toolgym.envs import register_dataset
    from toolgym.evaluation.evaluate import evaluate_policy
    from toolgym.retrieval.models import quiet_weight_loading

    name = f"ladder:{data.name}"
    register_dataset(name, data.corpus, data.tasks)
    t0 = time.perf_counter()
    with quiet_weight_loading():  # the ladder prints one line per rung, no loading bar
        res = evaluate_policy(decomposer, "toolgym/Decompose-v0", split=None, num_tasks=None,
                              env_kwargs={"dataset": name, "min_gold": 1, "retriever": retriever,
                                          "retriever_options": dict(retriever_options or {})}, progress=False)
    which = retriever + (" + fine-tuned" if (retriever_options or {}).get("model") else "")
    out = {"N@5": float(res["N@5"]), "C@10": float(res["C@10"]),
           "subtasks_per_query": sum(row["subtasks"] for row in res["per_task"].values()) / len(res["per_task"]),
           "note": f"the env's {which} list per subtask, round robin, top 10"}
    rows = [{"task_id": t.id, **{k: res["per_task"][t.id][k] for k in ("N@5", "C@10", "subtasks")}} for t in data.tasks]
    log(f"{data.name} + decomposition (trained policy): {_fmt(out)} ({time.perf_counter() - t0:.0f} s)")
    return out, rows


def _fmt(m: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in m.items())


def ladder_rows(result: dict[str, Any]) -> list[list[str]]:
    """Table rows: rung, N@5, C@10, C@20, K, C@K, note (``—`` where a number does not apply)."""
    rows = []
    for label, m in result["rungs"].items():
        if m.get("status") == NOT_TRAINED:
            rows.append([label, "—", "—", "—", "—", "—", f"{NOT_TRAINED} (no model given)"])
            continue
        cell = [f"{m[k]:.1f}" if k in m else "—" for k in ("N@5", "C@10", "C@20")]
        dyn = [f"{m['K']:.1f}", f"{m['C@K']:.1f}"] if "K" in m else ["—", "—"]
        note = m.get("note", "")
        if "clauses_per_query" in m:
            note = f"{m['clauses_per_query']:.2f} clauses per query"
        if "subtasks_per_query" in m:
            note = f"{m['subtasks_per_query']:.2f} subtasks per query; {note}"
        if "split_share" in m:
            note = f"the policy split {m['split_share']:.0%} of the queries"
        rows.append([label, *cell, *dyn, note])
    return rows


LADDER_HEADERS = ["rung", "N@5", "C@10", "C@20", "mean K", "C@K", "note"]


def ladder_markdown(result: dict[str, Any]) -> str:
    lines = ["| " + " | ".join(LADDER_HEADERS) + " |", "|" + "---|" * len(LADDER_HEADERS)]
    lines += ["| " + " | ".join(row) + " |" for row in ladder_rows(result)]
    return "\n".join(lines)


def print_ladder(result: dict[str, Any]) -> None:
    import sys

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"ladder: {result['dataset']} ({result['queries']} of {result['of']} queries; {result['note']}; "
                        f"rerank / decomposition on {result['first_stage']}, top {result['depth']})")
    for i, header in enumerate(LADDER_HEADERS):
        table.add_column(header, justify="left" if i in (0, len(LADDER_HEADERS) - 1) else "right")
    for row in ladder_rows(result):
        table.add_row(*row)
    Console(width=None if sys.stdout.isatty() else 200).print(table)


def ladder_names() -> Sequence[str]:
    return list(LADDER_DATASETS)
