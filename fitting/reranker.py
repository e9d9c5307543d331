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
wall-clock budget. After each stage the held-out tasks are reranked (the retriever's top
``candidates``) and N@k / C@k logged; ``summary.json`` has every stage's numbers.
"""
from __future__ import annotations

import dataclasses
import json
import random
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from toolgym.fitting.common import (
    FitDataConfig,
    Budget,
    MetricsLog,
    optimizer_step,
    budgeted_schedule,
    load_train_eval,
    plot_fit_curves,
    set_seed,
)
from toolgym.fitting.retriever import mean_retrieval_metrics

STAGES = ("pointwise", "listwise", "distilled")

@dataclass
class FitRerankerConfig(FitDataConfig):
    """Everything ``toolgym fit-reranker`` reads (and the data keys of :class:`FitDataConfig`).

    ``model``: the MiniLM body with a fresh seeded head (``minilm``) or a CrossEncoder folder to
    continue from; ``retriever`` (``bm25`` | ``dense`` | ``hybrid``, with ``retriever_model`` for the
    encoder) proposes ``candidates`` per query, for training pools and evaluation; ``stages`` run in
    order with ``stage_budget_shares`` of the budget; ``epochs`` / ``max_steps`` (0 = no limit) are
    per stage (and per distillation round); ``distill_queries``: training queries the teacher
    scores per round (0 = all; scoring is |queries| x candidates cross-encoder passes, so a CPU
    run mines a seeded sample).
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


def load_reranker(model: str | None, max_length: int) -> Any:
    """A ``CrossEncoderReranker`` to train: the MiniLM body with its seeded fresh head, or a folder."""
    from toolgym.retrieval.rerank import CrossEncoderReranker

    with warnings.catch_warnings():
        # The untrained-head warning is for users who rerank with it; here it is what we train.
        warnings.simplefilter("ignore", UserWarning)
        return CrossEncoderReranker(None if model in (None, "minilm") else model, max_length=max_length)


def train_stage(
    reranker: Any,
    examples: Sequence[Any],
    batch_size: int,
    make_loss: Callable[[Any], Any],
    to_inputs: Callable[[list[Any]], tuple[Any, Any]],
    cfg: Any,
    budget: Budget,
    log: MetricsLog,
    stage: str,
    step0: int,
    rng: random.Random,
) -> int:
    """Shuffled mini-batches of ``examples`` through one sentence-transformers CrossEncoder loss."""
    import torch
    from tqdm.auto import tqdm

    model = reranker.model
    loss_fn = make_loss(model)
    order: list[int] = []
    for _ in range(max(int(cfg.epochs), 1)):
        epoch = list(range(len(examples)))
        rng.shuffle(epoch)
        order += epoch
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
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
        inputs, labels = to_inputs([examples[i] for i in batch])
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


def teacher_hard_negatives(reranker: Any, tasks: Sequence[Any], pools: dict[str, list[str]], corpus: Any, k: int) -> dict[str, list[str]]:
    """Algorithm 1, lines 5-12: the current reranker scores each query's candidate pool; eq. 22 keeps
    its top-k wrong tools."""
    from toolgym.data.training_data import top_k_hard_negatives

    pairs = [(t.context_text(), corpus.text(corpus[i])) for t in tasks for i in pools[t.id]]
    flat = reranker.score_pairs(pairs)
    out, pos = {}, 0
    for t in tasks:
        n = len(pools[t.id])
        out[t.id] = top_k_hard_negatives(pools[t.id], flat[pos : pos + n], t.gold, k)
        pos += n
    return out


def rerank_heldout(reranker: Any, index: Any, tasks: Sequence[Any], depth: int, ks: Sequence[int]) -> dict[str, float]:
    """N@k / C@k in % after reranking the retriever's top ``depth`` for each held-out task."""
    queries = [t.context_text() for t in tasks]
    reranked = reranker.rerank_batch(queries, index.search_batch(queries, k=depth), k=depth)
    return mean_retrieval_metrics([r.ids for r in reranked], tasks, ks)


def fit_reranker(cfg: Any) -> dict[str, Any]:
    """Run the configured stages; returns the summary (also written to ``summary.json``)."""
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss, ListNetLoss, RankNetLoss

    from toolgym.retrieval import build_index
    from toolgym.data.training_data import listwise_groups, pointwise_examples, random_negatives

    stages = list(cfg.stages)
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise ValueError(f"unknown reranker stage {unknown[0]!r}; choose from {STAGES}")
    shares = [float(x) for x in cfg.stage_budget_shares]
    if len(shares) != len(STAGES) or any(x < 0 for x in shares):
        raise ValueError(f"stage_budget_shares needs {len(STAGES)} non-negative numbers, got {shares}")
    set_seed(int(cfg.seed))
    rng = random.Random(int(cfg.seed))
    out_dir = Path(cfg.output_dir)
    log = MetricsLog(out_dir)
    corpus, train_tasks, eval_tasks = load_train_eval(cfg)
    budget = Budget(float(cfg.budget_minutes))
    index = build_index(corpus, cfg.retriever, model=cfg.retriever_model)
    depth = int(cfg.candidates)
    ks = [int(k) for k in cfg.eval_ks]
    # Candidate pools of the training queries (the retriever is the first teacher).
    found = index.search_batch([t.context_text() for t in train_tasks], k=depth)
    pools = {t.id: list(r.ids) for t, r in zip(train_tasks, found)}
    retrieved_negs = {t.id: [i for i in pools[t.id] if i not in t.gold] for t in train_tasks}

    reranker = load_reranker(cfg.model, int(cfg.max_length))
    reranker.corpus = corpus  # rerank_heldout reads each candidate's text from it
    summary: dict[str, Any] = {"command": "fit-reranker", "stages": {}, "train_tasks": len(train_tasks),
                               "eval_tasks": len(eval_tasks), "retriever": cfg.retriever,
                               "retriever_model": cfg.retriever_model, "candidates": depth}
    if eval_tasks and cfg.eval_each_stage:
        summary["retriever_heldout"] = mean_retrieval_metrics(
            [r.ids for r in index.search_batch([t.context_text() for t in eval_tasks], k=depth)], eval_tasks, ks)
    step = 0
    remaining_share = sum(shares[STAGES.index(s)] for s in stages) or 1.0
    for stage in stages:
        share = shares[STAGES.index(stage)] / remaining_share
        remaining_share -= shares[STAGES.index(stage)]
        stage_budget = budget.share(min(share, 1.0))
        start = step
        if stage == "pointwise":
            negatives = {
                t.id: retrieved_negs[t.id][: int(cfg.point_retrieved_negatives)]
                + random_negatives(set(t.gold) | set(retrieved_negs[t.id]), corpus.ids, int(cfg.point_random_negatives), rng)
                for t in train_tasks
            }
            examples = pointwise_examples(train_tasks, corpus, negatives)
            step = train_stage(reranker, examples, int(cfg.point_batch_size), BinaryCrossEntropyLoss, _pointwise_inputs,
                               cfg, stage_budget, log, stage, step, rng)
            n_examples = len(examples)
        elif stage == "listwise":
            groups = listwise_groups(train_tasks, corpus, retrieved_negs, int(cfg.list_size), rng)
            step = train_stage(reranker, groups, int(cfg.list_batch_size), ListNetLoss,
                               _list_inputs(float(cfg.list_target_scale)), cfg, stage_budget, log, stage, step, rng)
            n_examples = len(groups)
        else:
            n_examples = 0
            rounds = max(int(cfg.distill_rounds), 1)
            for r in range(rounds):
                round_budget = stage_budget.share(1.0 / (rounds - r))
                if round_budget.spent():
                    break
                n = int(cfg.distill_queries)
                mined = rng.sample(train_tasks, n) if 0 < n < len(train_tasks) else list(train_tasks)
                hard = teacher_hard_negatives(reranker, mined, pools, corpus, int(cfg.distill_hard_negatives))
                k = int(cfg.distill_hard_negatives)
                # Eq. 20 over every (t+, t-_hard) pair of a query: one list of gold + hard negatives.
                groups = listwise_groups(mined, corpus, hard, k + max(len(t.gold) for t in mined), rng)
                step = train_stage(
                    reranker, groups, int(cfg.distill_batch_size),
                    lambda m: RankNetLoss(m, reduction_log="natural"), _list_inputs(1.0),
                    cfg, round_budget, log, f"distilled_r{r + 1}", step, rng,
                )
                n_examples += len(groups)
        folder = out_dir / stage
        reranker.model.save(str(folder))
        info: dict[str, Any] = {"model_dir": str(folder), "steps": step - start, "examples": n_examples,
                                "elapsed_s": budget.elapsed()}
        if eval_tasks and cfg.eval_each_stage:
            info["heldout"] = rerank_heldout(reranker, index, eval_tasks, depth, ks)
            log.write({"stage": "eval", "step": step, "after": stage, **{f"heldout_{k}": v for k, v in info["heldout"].items()}})
        summary["stages"][stage] = info
    summary.update(steps=step, elapsed_s=budget.elapsed(), budget_minutes=float(cfg.budget_minutes),
                   model_dir=summary["stages"][stages[-1]]["model_dir"] if stages else None,
                   config=dataclasses.asdict(cfg))
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    plot_fit_curves(log.path, out_dir / "curves.png", ["loss", "lr"], "fit-reranker (eq. 16 -> 19 -> 20)")
    return summary
