"""``toolgym fit-reranker CONFIG``: MagicSelector's progressive cross-encoder reranker (§4.2, §4.3).

Three stages, each continuing from the previous model and saved as its own CrossEncoder folder
(``<output_dir>/pointwise``, ``listwise``, ``distilled``), each loadable by
``CrossEncoderReranker(model=...)`` and ``toolgym eval retrieval --rerank <folder>``:

1. **point-wise** (eq. 16): binary cross-entropy on (q, gold) = 1 and (q, negative) = 0, with
   random negatives (Algorithm 1, line 2) plus the first-stage retriever's top wrong tools;
   sentence-transformers' ``BinaryCrossEntropyLoss``.
2. **list-wise** (eq. 17-19): softmax cross-entropy over one list per query (every gold tool
   and the retriever's top wrong tools); ``ListNetLoss``, whose target is softmax(labels):
   labels are ``list_target_scale`` · 1[gold], so P* is (nearly) uniform over the gold tools.
3. **self-distilled hard negatives** (Algorithm 1, eq. 20-24): for ``distill_rounds`` rounds the
   current model (teacher) scores the retriever's candidate pool of every training query, its
   top-k wrong tools (eq. 22) become the negatives, and the student (the same model, trained
   on) minimises eq. 20, -log σ(s(q,t⁺) − s(q,t⁻)), over every (gold, hard negative) pair:
   ``RankNetLoss`` with natural log and no weighting is exactly that sum.

What sentence-transformers lacks and is written here: the stage schedule, the self-distillation
loop (teacher scoring + eq. 22, ``toolgym.data.training_data.top_k_hard_negatives``) and a
wall-clock budget of training time (saving, tuning and evaluating between stages are paused out of
it). After each stage the held-out tasks are reranked (the retriever's top
``candidates``) and N@k / C@k logged; ``summary.json`` has every stage's numbers.

**Training mixtures.** ``sources`` (as in ``fit-retriever``) trains one reranker on several
libraries: every example's candidates and negatives come from its query's own corpus and first-stage
list, and batches are drawn per source in proportion to the sources' weights.

**Interpolation with the first stage.** A cross-encoder trained for minutes on a CPU can know less
than the list it reorders. ``dev_fraction`` of each source's training queries is set aside (never
trained on); after each stage, :func:`tune_first_stage_weight` picks the w of
``toolgym.retrieval.rerank.interpolate_with_first_stage`` that scores best on them, and the stage
folder's ``toolgym_rerank.json`` records it, so ``CrossEncoderReranker(folder)`` reranks with it.
The summary reports each stage both ways: the cross-encoder alone (w = 0) and interpolated.
"""
from __future__ import annotations

import dataclasses
import json
import math
import random
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from toolgym.fitting.common import (
    check_training_loop,
    FitDataConfig,
    FitSource,
    Budget,
    MetricsLog,
    optimizer_step,
    budgeted_schedule,
    fit_dtype,
    load_sources,
    mean_over_sources,
    mixed_precision,
    plot_fit_curves,
    proportional_batches,
    set_seed,
)
from toolgym.fitting.retriever import mean_retrieval_metrics
from toolgym.data.atomic import write_text_atomic
from toolgym.trainers.config import require

STAGES = ("pointwise", "listwise", "distilled")


@dataclass
class FitRerankerConfig(FitDataConfig):
    """Everything ``toolgym fit-reranker`` reads (and the data keys of :class:`FitDataConfig`).

    ``model``: the MiniLM body with a fresh seeded head (``minilm``) or a CrossEncoder folder to
    continue from; ``retriever`` (``bm25`` | ``dense`` | ``hybrid``, with ``retriever_model`` for the
    encoder) proposes ``candidates`` per query, for training pools and evaluation; ``stages`` run in
    order with ``stage_budget_shares`` of the budget; ``epochs`` / ``max_steps`` (0 = no limit) are
    per stage (and per distillation round); ``distill_queries``: training queries the teacher
    scores per round and source (0 = all; scoring is |queries| x candidates cross-encoder passes,
    so a CPU run mines a seeded sample). ``sources``: a training mixture (empty: the one source of
    the top-level data keys). ``dev_fraction`` of each source's training queries (at most
    ``dev_limit``; 0 = no tuning, w = 0) tunes the first-stage weight over ``first_stage_weights``.
    """

    model: str = "minilm"
    retriever: str = "bm25"
    retriever_model: Optional[str] = None
    candidates: int = 20
    output_dir: str = "runs/fit_reranker"
    stages: list[str] = field(default_factory=lambda: list(STAGES))
    stage_budget_shares: list[float] = field(default_factory=lambda: [0.35, 0.35, 0.30])
    max_length: int = 128
    lr: float = 2.0e-5
    warmup_ratio: float = 0.1
    epochs: int = 1
    max_steps: int = 0
    point_batch_size: int = 32
    point_random_negatives: int = 2
    point_retrieved_negatives: int = 3
    list_size: int = 8
    list_batch_size: int = 4
    list_target_scale: float = 10.0
    distill_rounds: int = 1
    distill_hard_negatives: int = 4
    distill_batch_size: int = 4
    distill_queries: int = 128
    eval_ks: list[int] = field(default_factory=lambda: [1, 5, 10])
    eval_each_stage: bool = True
    sources: list[FitSource] = field(default_factory=list)
    dev_fraction: float = 0.1
    dev_limit: int = 200
    first_stage_weights: list[float] = field(default_factory=lambda: [i / 20 for i in range(21)])

    def __post_init__(self) -> None:
        super().__post_init__()
        unknown = [s for s in self.stages if s not in STAGES]
        if unknown:
            raise ValueError(f"unknown reranker stage {unknown[0]!r}; choose from {STAGES}")
        require(len(self.stage_budget_shares) == len(STAGES) and all(math.isfinite(x) and x >= 0
                                                                    for x in self.stage_budget_shares),
                "stage_budget_shares", list(self.stage_budget_shares), f"needs {len(STAGES)} non-negative numbers")
        require(self.candidates >= 1, "candidates", self.candidates, "must be >= 1")
        check_training_loop(self, batch_key=None)  # three batch sizes, checked below
        for key in ("point_batch_size", "list_batch_size", "distill_batch_size"):
            require(getattr(self, key) >= 1, key, getattr(self, key), "must be >= 1")
        for key in ("point_random_negatives", "point_retrieved_negatives", "distill_rounds", "distill_hard_negatives",
                    "distill_queries", "dev_limit"):
            require(getattr(self, key) >= 0, key, getattr(self, key), "must be >= 0")
        require(self.list_size >= 2, "list_size", self.list_size, "must be >= 2 (a gold tool and a negative)")
        require(self.list_target_scale > 0, "list_target_scale", self.list_target_scale, "must be > 0")
        require(all(k >= 1 for k in self.eval_ks), "eval_ks", self.eval_ks, "must all be >= 1")
        require(0 <= self.dev_fraction < 1, "dev_fraction", self.dev_fraction, "must be in [0, 1)")
        require(all(math.isfinite(w) and 0 <= w <= 1 for w in self.first_stage_weights), "first_stage_weights",
                self.first_stage_weights, "must all be in [0, 1]")


def load_reranker(model: str | None, max_length: int) -> Any:
    """A ``CrossEncoderReranker`` to train: the MiniLM body with its seeded fresh head, or a folder."""
    from toolgym.retrieval.rerank import CrossEncoderReranker

    with warnings.catch_warnings():
        # The untrained-head warning is for users who rerank with it; here it is what we train.
        warnings.simplefilter("ignore", UserWarning)
        return CrossEncoderReranker(None if model in (None, "minilm") else model, max_length=max_length)


def mixture_batches(examples: dict[str, Sequence[Any]], batch_size: int, weights: dict[str, float], epochs: int,
                    rng: random.Random) -> list[list[Any]]:
    """Mini-batches of one stage: each source's examples shuffled for ``epochs`` epochs and cut into
    batches, then drawn across sources in proportion to ``weights``
    (:func:`~toolgym.fitting.common.proportional_batches`; one source: all its batches, shuffled)."""
    per_source: dict[str, list[list[int]]] = {}
    for name, rows in examples.items():
        order: list[int] = []
        for _ in range(max(int(epochs), 1)):
            epoch = list(range(len(rows)))
            rng.shuffle(epoch)
            order += epoch
        per_source[name] = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    return [[examples[name][i] for i in batch] for name, batch in proportional_batches(per_source, weights, rng)]


def train_stage(
    reranker: Any,
    batches: list[list[Any]],
    make_loss: Callable[[Any], Any],
    to_inputs: Callable[[list[Any]], tuple[Any, Any]],
    cfg: Any,
    budget: Budget,
    log: MetricsLog,
    stage: str,
    step0: int,
) -> int:
    """``batches`` (:func:`mixture_batches`) through one sentence-transformers CrossEncoder loss."""
    import torch
    from tqdm.auto import tqdm

    model = reranker.model
    loss_fn = make_loss(model)
    if int(cfg.max_steps) > 0:
        batches = batches[: int(cfg.max_steps)]
    if not batches:
        return step0
    optimizer = torch.optim.AdamW(model.parameters(), lr=float(cfg.lr))
    scheduler = budgeted_schedule(optimizer, len(batches), float(cfg.warmup_ratio), budget)
    model.train()
    step = step0
    bar = tqdm(batches, desc=f"fit-reranker {stage}", disable=not cfg.progress)
    for batch in bar:
        if budget.spent():
            log.write({"stage": stage, "step": step, "event": "budget_spent", "elapsed_s": budget.elapsed()})
            break
        inputs, labels = to_inputs(batch)
        with mixed_precision(cfg.precision):
            loss = loss_fn(inputs, labels)
        step += 1
        value = optimizer_step(loss, model, optimizer, scheduler, log, stage, step)
        bar.set_postfix(loss=f"{value:.3f}")
    bar.close()
    model.eval()
    return step


def _pointwise_inputs(batch: list[tuple[str, str, float]]) -> tuple[Any, Any]:
    import torch

    return [[q for q, _, _ in batch], [d for _, d, _ in batch]], torch.tensor([y for _, _, y in batch])


def _list_inputs(scale: float) -> Callable[[list[Any]], tuple[Any, Any]]:
    def convert(batch: list[tuple[str, list[str], list[float]]]) -> tuple[Any, Any]:
        import torch

        return [[q for q, _, _ in batch], [ds for _, ds, _ in batch]], [scale * torch.tensor(ys) for _, _, ys in batch]

    return convert


def teacher_hard_negatives(reranker: Any, tasks: Sequence[Any], lists: Sequence[Any], corpus: Any, k: int,
                           precision: str = "float32") -> dict[str, list[str]]:
    """Algorithm 1, lines 5-12: the current reranker scores each query's candidate pool (its
    first-stage list); eq. 22 keeps its top-k wrong tools."""
    from toolgym.data.training_data import top_k_hard_negatives

    scores = cross_encoder_scores(reranker, tasks, lists, corpus, precision)
    return {t.id: top_k_hard_negatives(list(r.ids), s, t.gold, k) for t, r, s in zip(tasks, lists, scores)}


def cross_encoder_scores(reranker: Any, tasks: Sequence[Any], lists: Sequence[Any], corpus: Any,
                         precision: str = "float32") -> list[Any]:
    """The cross-encoder's raw score of every candidate of each task's first-stage list (one ``predict``,
    under :func:`~toolgym.fitting.common.mixed_precision` of ``precision``)."""
    pairs = [(t.context_text(), corpus.text(corpus[i])) for t, r in zip(tasks, lists) for i in r.ids]
    with mixed_precision(precision):
        flat = reranker.score_pairs(pairs)
    out, pos = [], 0
    for r in lists:
        out.append(flat[pos : pos + len(r.ids)])
        pos += len(r.ids)
    return out


def rerankings(lists: Sequence[Any], scores: Sequence[Any], first_stage_weight: float) -> list[tuple[str, ...]]:
    """Each first-stage list reordered by the interpolated score (w = 0: the cross-encoder alone)."""
    from toolgym.retrieval.rerank import reorder

    return [reorder(r, s, first_stage_weight).ids for r, s in zip(lists, scores)]


def tune_first_stage_weight(dev: Sequence[tuple[Sequence[Any], Sequence[Any], Sequence[Any]]],
                            grid: Sequence[float]) -> tuple[float, dict[str, float]]:
    """The w of ``grid`` maximising, on set-aside training queries, the mean over sources of
    (N@5 + C@10) / 2 after reranking; ``dev``: one (tasks, first-stage lists, cross-encoder scores)
    per source. Ties go to the larger w (the smaller change to the input list). Returns w and the
    objective at every grid point."""
    from toolgym.retrieval.rerank import check_first_stage_weight

    weights = sorted({check_first_stage_weight(w) for w in grid})
    if not weights:
        raise ValueError("first_stage_weights is empty")
    objective: dict[str, float] = {}
    for w in weights:
        per_source = []
        for tasks, lists, scores in dev:
            m = mean_retrieval_metrics(rerankings(lists, scores, w), tasks, [5, 10])
            per_source.append((m["N@5"] + m["C@10"]) / 2)
        objective[f"{w:g}"] = sum(per_source) / max(len(per_source), 1)
    best = max(weights, key=lambda w: (round(objective[f"{w:g}"], 9), w))
    return best, objective


def _per_query(rankings: Sequence[Sequence[str]], tasks: Sequence[Any]) -> list[dict[str, Any]]:
    from toolgym.retrieval.metrics import completeness_at_k, ndcg_at_k

    return [{"task_id": t.id, "N@5": ndcg_at_k(r, t.gold, 5), "C@10": completeness_at_k(r, t.gold, 10)}
            for r, t in zip(rankings, tasks)]


@dataclass
class _Source:
    """A source's training state: its data, its first-stage index and every query's candidate list."""

    data: Any
    train: list
    dev: list
    pools: dict  # training task id -> the first stage's SearchResult
    dev_lists: list
    heldout_lists: list


def _prepare_source(data: Any, cfg: Any, depth: int) -> _Source:
    from toolgym.data.training_data import split_tasks
    from toolgym.retrieval import build_index

    train, dev = list(data.train), []
    if float(cfg.dev_fraction) > 0 and len(train) > 1:
        train, dev = split_tasks(train, float(cfg.dev_fraction), int(cfg.seed))
        dev = dev[: int(cfg.dev_limit)] if int(cfg.dev_limit) > 0 else dev
        if not train:  # a one-group source: train on it, tune on nothing
            train, dev = list(data.train), []
    index = build_index(data.corpus, cfg.retriever, model=cfg.retriever_model)

    def search(tasks: list) -> list:
        return index.search_batch([t.context_text() for t in tasks], k=depth) if tasks else []

    pools = {t.id: r for t, r in zip(train, search(train))}
    return _Source(data, train, dev, pools, search(dev), search(data.heldout))


def fit_reranker(cfg: Any) -> dict[str, Any]:
    """Run the configured stages; returns the summary (also written to ``summary.json``)."""
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss, ListNetLoss, RankNetLoss

    from toolgym.data.training_data import listwise_groups, pointwise_examples, random_negatives
    from toolgym.retrieval.rerank import SETTINGS_FILE

    stages = list(cfg.stages)  # stages, shares and fractions: FitRerankerConfig checks them
    shares = [float(x) for x in cfg.stage_budget_shares]
    fit_dtype(cfg.precision)  # a bad precision fails here, before any index is built
    set_seed(int(cfg.seed))
    clock = Budget(0)  # wall clock of the whole command
    rng = random.Random(int(cfg.seed))
    out_dir = Path(cfg.output_dir)
    log = MetricsLog(out_dir)
    depth = int(cfg.candidates)
    ks = [int(k) for k in cfg.eval_ks]
    sources = [_prepare_source(d, cfg, depth) for d in load_sources(cfg)]
    weights = {s.data.name: s.data.weight for s in sources}
    budget = Budget(float(cfg.budget_minutes))
    retrieved_negs = {s.data.name: {t.id: [i for i in s.pools[t.id].ids if i not in t.gold] for t in s.train} for s in sources}

    reranker = load_reranker(cfg.model, int(cfg.max_length))
    evaluated = [s for s in sources if s.data.heldout] if cfg.eval_each_stage else []
    summary: dict[str, Any] = {"command": "fit-reranker", "stages": {}, "train_tasks": sum(len(s.train) for s in sources),
                               "dev_tasks": sum(len(s.dev) for s in sources),
                               "eval_tasks": sum(len(s.data.heldout) for s in sources), "retriever": cfg.retriever,
                               "retriever_model": cfg.retriever_model, "candidates": depth,
                               "sources": [s.data.name for s in sources]}
    per_query: dict[str, dict[str, list]] = {s.data.name: {} for s in evaluated}
    if evaluated:
        by_source = {}
        for s in evaluated:
            ranked = [r.ids for r in s.heldout_lists]
            by_source[s.data.name] = mean_retrieval_metrics(ranked, s.data.heldout, ks)
            per_query[s.data.name]["input"] = _per_query(ranked, s.data.heldout)
        summary["retriever_heldout"], summary["retriever_heldout_by_source"] = mean_over_sources(by_source), by_source
    step = 0
    remaining_share = sum(shares[STAGES.index(s)] for s in stages) or 1.0
    for stage in stages:
        share = shares[STAGES.index(stage)] / remaining_share
        remaining_share -= shares[STAGES.index(stage)]
        stage_budget = budget.share(min(share, 1.0))
        start = step
        if stage == "pointwise":
            examples = {}
            for s in sources:
                negs = retrieved_negs[s.data.name]
                negatives = {t.id: negs[t.id][: int(cfg.point_retrieved_negatives)]
                             + random_negatives(set(t.gold) | set(negs[t.id]), s.data.corpus.ids, int(cfg.point_random_negatives), rng)
                             for t in s.train}
                examples[s.data.name] = pointwise_examples(s.train, s.data.corpus, negatives)
            batches = mixture_batches(examples, int(cfg.point_batch_size), weights, int(cfg.epochs), rng)
            step = train_stage(reranker, batches, BinaryCrossEntropyLoss, _pointwise_inputs, cfg, stage_budget, log, stage, step)
            n_examples = sum(len(e) for e in examples.values())
        elif stage == "listwise":
            groups = {s.data.name: listwise_groups(s.train, s.data.corpus, retrieved_negs[s.data.name], int(cfg.list_size), rng)
                      for s in sources}
            batches = mixture_batches(groups, int(cfg.list_batch_size), weights, int(cfg.epochs), rng)
            step = train_stage(reranker, batches, ListNetLoss, _list_inputs(float(cfg.list_target_scale)), cfg,
                               stage_budget, log, stage, step)
            n_examples = sum(len(g) for g in groups.values())
        else:
            n_examples = 0
            rounds = max(int(cfg.distill_rounds), 1)
            k = int(cfg.distill_hard_negatives)
            for r in range(rounds):
                round_budget = stage_budget.share(1.0 / (rounds - r))
                if round_budget.spent():
                    break
                groups = {}
                for s in sources:
                    n = int(cfg.distill_queries)
                    mined = rng.sample(s.train, n) if 0 < n < len(s.train) else list(s.train)
                    hard = teacher_hard_negatives(reranker, mined, [s.pools[t.id] for t in mined], s.data.corpus, k, cfg.precision)
                    # Eq. 20 over every (t+, t-_hard) pair of a query: one list of gold + hard negatives.
                    groups[s.data.name] = listwise_groups(mined, s.data.corpus, hard, k + max(len(t.gold) for t in mined), rng)
                batches = mixture_batches(groups, int(cfg.distill_batch_size), weights, int(cfg.epochs), rng)
                step = train_stage(
                    reranker, batches, lambda m: RankNetLoss(m, reduction_log="natural"), _list_inputs(1.0),
                    cfg, round_budget, log, f"distilled_r{r + 1}", step,
                )
                n_examples += sum(len(g) for g in groups.values())
        folder = out_dir / stage
        with budget.paused():  # saving, tuning w and held-out evaluation are not training time
            reranker.model.save(str(folder))
            info: dict[str, Any] = {"model_dir": str(folder), "steps": step - start, "examples": n_examples,
                                    "elapsed_s": budget.elapsed()}
            # The first-stage weight, tuned on the set-aside training queries (w = 0 when there are none).
            dev = [(s.dev, s.dev_lists, cross_encoder_scores(reranker, s.dev, s.dev_lists, s.data.corpus, cfg.precision))
                   for s in sources if s.dev]
            w, objective = tune_first_stage_weight(dev, cfg.first_stage_weights) if dev else (0.0, {})
            info.update(first_stage_weight=w, dev_objective=objective)
            (folder / SETTINGS_FILE).write_text(json.dumps(
                {"first_stage_weight": w, "retriever": cfg.retriever, "retriever_model": cfg.retriever_model,
                 "tuned_on": {s.data.name: len(s.dev) for s in sources}, "objective": "mean over sources of (N@5 + C@10) / 2",
                 "dev_objective": objective}, indent=2) + "\n")
            if evaluated:
                alone, mixed = {}, {}
                for s in evaluated:
                    scores = cross_encoder_scores(reranker, s.data.heldout, s.heldout_lists, s.data.corpus, cfg.precision)
                    for label, table, weight in ((stage, alone, 0.0), (f"{stage}+first_stage", mixed, w)):
                        ranked = rerankings(s.heldout_lists, scores, weight)
                        table[s.data.name] = mean_retrieval_metrics(ranked, s.data.heldout, ks)
                        per_query[s.data.name][label] = _per_query(ranked, s.data.heldout)
                info.update(heldout=mean_over_sources(alone), heldout_by_source=alone,
                            heldout_interpolated=mean_over_sources(mixed), heldout_interpolated_by_source=mixed)
                log.write({"stage": "eval", "step": step, "after": stage, "first_stage_weight": w,
                           **{f"heldout_{k}": v for k, v in info["heldout"].items()},
                           **{f"heldout_interpolated_{k}": v for k, v in info["heldout_interpolated"].items()}})
        summary["stages"][stage] = info
    summary.update(steps=step, elapsed_s=clock.elapsed(), training_s=budget.elapsed(), budget_minutes=float(cfg.budget_minutes),
                   model_dir=summary["stages"][stages[-1]]["model_dir"] if stages else None,
                   config=dataclasses.asdict(cfg))
    write_text_atomic(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    if per_query:
        write_text_atomic(out_dir / "heldout_per_query.json", json.dumps(per_query) + "\n")
    plot_fit_curves(log.path, out_dir / "curves.png", ["loss", "lr"], "fit-reranker (eq. 16 -> 19 -> 20)")
    return summary
