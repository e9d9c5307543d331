"""``toolgym fit-retriever CONFIG``: fine-tune the MiniLM bi-encoder (MagicSelector §4.1, §4.3).

Loss: in-batch InfoNCE, eq. 13, as sentence-transformers' ``MultipleNegativesRankingLoss``
(scale = 1/τ; every other positive and negative in the batch is a negative too). Negatives
follow Algorithm 1: round 0 uses random negatives; each later round r uses the current model
as teacher and mines its top-scored wrong tools over the whole corpus (eq. 22,
:func:`toolgym.data.training_data.top_k_hard_negatives`) for the next round's student
(the same model, trained on). The result is a sentence-transformers folder
``<output_dir>/model``: ``toolgym eval retrieval --retriever dense --model <output_dir>/model`` or
``build_index(corpus, "dense", model=...)`` uses it, with its own embedding cache.

Writes ``metrics.jsonl`` (loss per step, held-out N@k / C@k at the end), ``curves.png`` and
``summary.json`` into ``output_dir``.
"""
from __future__ import annotations

import dataclasses
import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from toolgym.data.atomic import write_text_atomic
from toolgym.trainers.config import require
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
    proportional_batches,
    plot_fit_curves,
    set_seed,
)

# The hybrid's BM25 weight on a library the trained encoder never saw: tuned leave-one-library-out
# (benchmarks/zero_shot_weight.py: each leave-one-out model of the mixture on the training queries
# of the library it left out, the in-domain tuning rule; docs/retrieval.md, "Per-encoder weight").
ZERO_SHOT_BM25_WEIGHT = 0.35
# round 0's negatives: drawn at random (Algorithm 1, line 2) or mined by the starting model
FIRST_NEGATIVES = ("random", "model")

@dataclass
class FitRetrieverConfig(FitDataConfig):
    """Everything ``toolgym fit-retriever`` reads (and the data keys of :class:`FitDataConfig`).

    ``model``: the packaged all-MiniLM-L6-v2 (``minilm``) or a sentence-transformers folder.
    ``epochs`` / ``max_steps`` (0 = no limit) are per round; ``scale`` is 1/τ of eq. 13;
    ``first_negatives``: negatives of round 0, ``random`` (Algorithm 1, line 2) or ``model`` = mined
    by the starting model through a dense ToolIndex (its corpus embeddings are cached);
    ``hard_negative_rounds``: R of Algorithm 1, rounds mined by the model being trained.
    ``sources``: a training mixture (:class:`~toolgym.fitting.common.FitSource` entries, each with
    its own corpus, held-out part and sampling weight); empty = the one source of the top-level
    data keys. Negatives, random or mined, and every batch's in-batch negatives come from the
    query's own library; the held-out numbers are reported per source.
    ``dev_fraction`` of each source's training queries (at most ``dev_limit``; 0 = no tuning) are
    set aside, never trained on, to tune the hybrid's BM25 weight for the trained encoder over
    ``hybrid_bm25_weights`` (:func:`tune_hybrid_bm25_weight`), pooled and per source; they are saved
    beside the weights as ``toolgym_hybrid.json``, which ``build_index(corpus, "hybrid",
    model=<folder>)`` reads: a training library's own weight, a mix by tool share for a corpus that
    shares some of their tools, and ``zero_shot_bm25_weight`` for any other corpus (default
    :data:`ZERO_SHOT_BM25_WEIGHT`, tuned leave-one-library-out).
    """

    model: str = "minilm"
    output_dir: str = "runs/fit_retriever"
    epochs: int = 1
    max_steps: int = 0
    batch_size: int = 32
    lr: float = 3.0e-5
    warmup_ratio: float = 0.1
    max_length: int = 128
    scale: float = 20.0
    negatives_per_query: int = 1
    first_negatives: str = "random"
    hard_negative_rounds: int = 1
    sources: list[FitSource] = field(default_factory=list)
    eval_ks: list[int] = field(default_factory=lambda: [1, 5, 10])
    dev_fraction: float = 0.1
    dev_limit: int = 200
    hybrid_bm25_weights: list[float] = field(default_factory=lambda: [i / 20 for i in range(21)])
    zero_shot_bm25_weight: float = ZERO_SHOT_BM25_WEIGHT

    def __post_init__(self) -> None:
        super().__post_init__()
        check_training_loop(self)
        require(self.scale > 0, "scale", self.scale, "must be > 0 (1/τ)")
        require(self.negatives_per_query >= 0, "negatives_per_query", self.negatives_per_query, "must be >= 0")
        require(self.first_negatives in FIRST_NEGATIVES, "first_negatives", self.first_negatives,
                f"must be one of {', '.join(FIRST_NEGATIVES)}")
        require(self.hard_negative_rounds >= 0, "hard_negative_rounds", self.hard_negative_rounds, "must be >= 0")
        require(all(k >= 1 for k in self.eval_ks), "eval_ks", self.eval_ks, "must all be >= 1")
        require(0 <= self.dev_fraction < 1, "dev_fraction", self.dev_fraction, "must be in [0, 1)")
        require(self.dev_limit >= 0, "dev_limit", self.dev_limit, "must be >= 0 (0 = no cap)")
        require(all(math.isfinite(w) and 0 <= w <= 1 for w in self.hybrid_bm25_weights), "hybrid_bm25_weights",
                self.hybrid_bm25_weights, "must all be in [0, 1]")
        require(0 <= self.zero_shot_bm25_weight <= 1, "zero_shot_bm25_weight", self.zero_shot_bm25_weight,
                "must be in [0, 1]")


def mean_retrieval_metrics(rankings: Sequence[Sequence[str]], tasks: Sequence[Any], ks: Sequence[int]) -> dict[str, float]:
    """Mean N@k and C@k in % over tasks (toolgym.retrieval.metrics)."""
    from toolgym.retrieval.metrics import completeness_at_k, ndcg_at_k

    out = {}
    for k in ks:
        out[f"N@{k}"] = 100.0 * float(np.mean([ndcg_at_k(r, t.gold, k) for r, t in zip(rankings, tasks)]))
        out[f"C@{k}"] = 100.0 * float(np.mean([completeness_at_k(r, t.gold, k) for r, t in zip(rankings, tasks)]))
    return out


def hybrid_rankings(bm25_scores: np.ndarray, cosines: np.ndarray, bm25_weight: float, k: int) -> np.ndarray:
    """Top-``k`` column positions per row of w · z(BM25) + (1 − w) · z(cosine), ties by position:
    the order a hybrid index with ``bm25_weight`` = w returns (z over the whole row)."""
    from toolgym.retrieval.fusion import fuse_standardised

    fused = fuse_standardised([bm25_scores, cosines], (bm25_weight, 1.0 - bm25_weight))
    return np.argsort(-fused, axis=1, kind="stable")[:, :k]


def tune_hybrid_bm25_weight(dev: Sequence[tuple[Sequence[Any], Sequence[str], np.ndarray, np.ndarray]],
                            grid: Sequence[float], slack: float = 1.0) -> tuple[float, dict[str, Any]]:
    """The hybrid's BM25 weight w for one encoder, from set-aside training queries.

    ``dev``: per source (tasks, corpus ids, BM25 score rows, cosine rows). The parts are BM25 alone
    (w = 1) and dense alone (w = 0); a source's better part is the one with the higher mean C@10.
    For each w of ``grid`` and each source, margin(w) = mean over its queries of C@10(hybrid w) −
    C@10(better part), with se(w) the standard error of those paired per-query differences. The
    hybrid is *clearly* below its better part where margin < −max(``slack``, 2 se): on a few dozen
    queries one query is several points, which is noise, not a loss. The chosen w has the least
    shortfall, max over sources of max(0, −max(slack, 2 se) − margin), then the largest mean over
    sources of (N@5 + C@10) / 2, then the larger w. Returns w and, per grid point, the shortfall,
    the mean objective, the margins and their standard errors.
    """
    from toolgym.retrieval.metrics import completeness_at_k, ndcg_at_k
    from toolgym.retrieval.models import check_unit_weight

    weights = sorted({check_unit_weight("hybrid_bm25_weights entry", w) for w in grid})
    if not weights or not dev:
        raise ValueError("tuning the hybrid weight needs a non-empty grid and at least one source with set-aside queries")

    def per_query(w: float) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per source: each query's C@10 and N@5 in % at weight w."""
        out = []
        for tasks, ids, lex, cos in dev:
            ranked = [[ids[i] for i in row] for row in hybrid_rankings(lex, cos, w, 10)]
            out.append((np.array([100.0 * completeness_at_k(r, t.gold, 10) for r, t in zip(ranked, tasks)]),
                        np.array([100.0 * ndcg_at_k(r, t.gold, 5) for r, t in zip(ranked, tasks)])))
        return out

    scored = {w: per_query(w) for w in {*weights, 0.0, 1.0}}  # the parts are w = 1 and w = 0: scored once
    parts = [max(a, b, key=lambda c: c.mean()) for (a, _), (b, _) in zip(scored[1.0], scored[0.0])]
    table: dict[str, Any] = {}
    for w in weights:
        rows = scored[w]
        diffs = [c10 - best for (c10, _), best in zip(rows, parts)]
        margins = [float(d.mean()) for d in diffs]
        ses = [float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else 0.0 for d in diffs]
        table[f"{w:g}"] = {"shortfall": max(max(0.0, -max(slack, 2 * se) - m) for m, se in zip(margins, ses)),
                           "objective": float(np.mean([(c10.mean() + n5.mean()) / 2 for c10, n5 in rows])),
                           "margins": margins, "margin_se": ses}
    best = max(weights, key=lambda w: (-round(table[f"{w:g}"]["shortfall"], 9), round(table[f"{w:g}"]["objective"], 9), w))
    return best, table


HYBRID_OBJECTIVE = ("least shortfall below the better of BM25 and dense (C@10, beyond max(1, 2 paired se)) on any "
                    "source, then the largest mean over sources of (N@5 + C@10) / 2")


def set_aside_dev(sources: Sequence[Any], cfg: Any) -> dict[str, list]:
    """Take ``dev_fraction`` of each source's training queries (at most ``dev_limit``) out of
    ``source.train``, in place, before any negative is drawn: they tune the hybrid weight and are
    never trained on. A one-group source trains on everything and tunes on nothing."""
    from toolgym.data.training_data import split_tasks

    dev: dict[str, list] = {s.name: [] for s in sources}  # dev_fraction in [0, 1): FitRetrieverConfig's check
    if float(cfg.dev_fraction) > 0:
        for s in sources:
            train, held = split_tasks(s.train, float(cfg.dev_fraction), int(cfg.seed))
            if train and held:
                s.train, dev[s.name] = train, held[: int(cfg.dev_limit)] if int(cfg.dev_limit) > 0 else held
    return dev


def tune_and_save_hybrid_weight(model_dir: str | Path, sources: Sequence[Any], dev: dict[str, list],
                                grid: Sequence[float], zero_shot_bm25_weight: float = ZERO_SHOT_BM25_WEIGHT) -> dict[str, Any]:
    """Tune the BM25 weight of ``model_dir``'s hybrid on the set-aside queries (one scoring pass per
    source): pooled over the sources (``bm25_weight``) and per source on its own queries
    (``library_weights``: each library's weight and tools, so a corpus that shares some of them
    mixes the weights by :func:`~toolgym.retrieval.models.overlap_bm25_weight`). Written beside the
    weights (``toolgym_hybrid.json``) with the libraries they are for (``trained_corpora``: each
    training source's ``ToolCorpus.ids_hash``) and the weight for every other corpus
    (``zero_shot_bm25_weight``) and the set-aside task ids (``set_aside_tasks``, read by
    :func:`~toolgym.retrieval.models.set_aside_task_ids`); returns what was written (empty, and
    nothing written, when no source set queries aside)."""
    from toolgym.retrieval import build_index
    from toolgym.retrieval.models import (
        HYBRID_SETTINGS_FILE,
        LIBRARY_WEIGHTS_KEY,
        SET_ASIDE_TASKS_KEY,
        check_unit_weight,
        trained_tool_hashes,
    )

    zero_shot = check_unit_weight("zero_shot_bm25_weight", zero_shot_bm25_weight)

    rows = {}
    for s in sources:
        if dev.get(s.name):
            lex, cos = build_index(s.corpus, "hybrid", model=str(model_dir), bm25_weight=0.5).hybrid_score_rows(
                [t.context_text() for t in dev[s.name]])
            rows[s.name] = (dev[s.name], s.corpus.ids, lex, cos)
    if not rows:
        return {}
    w, table = tune_hybrid_bm25_weight(list(rows.values()), grid)
    # One weight per library, by the same rule on its own set-aside queries: where the dense index
    # leads (MetaTool, UltraTool) the pooled weight gave away up to 4 N@5 to the BM25 share that
    # Seal-Tools needs. A library without set-aside queries keeps the pooled weight.
    libraries = {s.name: {"bm25_weight": tune_hybrid_bm25_weight([rows[s.name]], grid)[0] if s.name in rows else w,
                          # the library's tools, so a corpus sharing some of them gets that library's weight for them
                          "tool_hashes": trained_tool_hashes(s.corpus.texts())}
                 for s in sources}
    tuning = {"bm25_weight": w, "trained_corpora": {s.name: s.corpus.ids_hash for s in sources},
              "zero_shot_bm25_weight": zero_shot, "tuned_on": {name: len(d) for name, d in dev.items()},
              "objective": HYBRID_OBJECTIVE, "grid": table, LIBRARY_WEIGHTS_KEY: libraries,
              # the queries it never trained on: rewards computed with this encoder belong there
              SET_ASIDE_TASKS_KEY: {name: [t.id for t in d] for name, d in dev.items() if d}}
    (Path(model_dir) / HYBRID_SETTINGS_FILE).write_text(json.dumps(tuning, indent=2) + "\n")
    return tuning


def _encode(model: Any, texts: list[str], progress: bool = False) -> np.ndarray:
    model.eval()
    vecs = model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=progress)
    return np.asarray(vecs, dtype=np.float32)


def mine_with_model(model: Any, corpus: Any, tasks: Sequence[Any], k: int, depth: int = 50,
                    tool_vectors: np.ndarray | None = None) -> dict[str, list[str]]:
    """Teacher step of Algorithm 1 for the retriever: s_r = cosine under the current model,
    candidate pool = its top ``depth`` tools, then eq. 22."""
    from toolgym.data.training_data import top_k_hard_negatives

    tools = tool_vectors if tool_vectors is not None else _encode(model, corpus.texts())
    queries = _encode(model, [t.context_text() for t in tasks])
    scores = queries @ tools.T
    depth = min(depth, scores.shape[1])
    top = np.argpartition(-scores, depth - 1, axis=1)[:, :depth]
    ids = corpus.ids
    out = {}
    for row, task in enumerate(tasks):
        cand = top[row]
        out[task.id] = top_k_hard_negatives([ids[i] for i in cand], scores[row, cand], task.gold, k)
    return out


def mine_with_index(index: Any, tasks: Sequence[Any], k: int, depth: int = 50) -> dict[str, list[str]]:
    """Eq. 22 with any ``ToolIndex`` as teacher: its top ``depth`` list, gold removed, first ``k``."""
    from toolgym.data.training_data import top_k_hard_negatives

    found = index.search_batch([t.context_text() for t in tasks], k=depth)
    return {t.id: top_k_hard_negatives(list(r.ids), None, t.gold, k) for t, r in zip(tasks, found)}


def train_round(model: Any, triples: dict[str, list[Any]], cfg: Any, budget: Budget, log: MetricsLog, stage: str,
                step0: int, rng: random.Random, weights: dict[str, float] | None = None) -> int:
    """One round of eq. 13 over every source's ``triples`` (batches drawn per source in proportion
    to ``weights``, :func:`~toolgym.fitting.common.proportional_batches`); returns the global step reached."""
    import torch
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.util import batch_to_device
    from tqdm.auto import tqdm

    from toolgym.data.training_data import no_duplicate_batches

    loss_fn = MultipleNegativesRankingLoss(model, scale=float(cfg.scale))
    weights = weights or {name: 1.0 for name in triples}
    plan = []
    for _ in range(max(int(cfg.epochs), 1)):
        per_source = {name: no_duplicate_batches(items, int(cfg.batch_size), lambda t: (t.query, t.positive, *t.negatives), rng)
                      for name, items in triples.items()}
        plan += proportional_batches(per_source, weights, rng)
    if int(cfg.max_steps) > 0:
        plan = plan[: int(cfg.max_steps)]
    optimizer = torch.optim.AdamW(model.parameters(), lr=float(cfg.lr))
    scheduler = budgeted_schedule(optimizer, len(plan), float(cfg.warmup_ratio), budget)
    model.train()
    step = step0
    bar = tqdm(plan, desc=f"fit-retriever {stage}", disable=not cfg.progress)
    for source, batch in bar:
        if budget.spent():
            log.write({"stage": stage, "step": step, "event": "budget_spent", "elapsed_s": budget.elapsed()})
            break
        items = [triples[source][i] for i in batch]
        columns = [[t.query for t in items], [t.positive for t in items]]
        columns += [[t.negatives[j] for t in items] for j in range(len(items[0].negatives))]
        features = [batch_to_device(model.preprocess(c), model.device) for c in columns]
        with mixed_precision(cfg.precision):
            loss = loss_fn(features, None)
        step += 1
        value = optimizer_step(loss, model, optimizer, scheduler, log, stage, step)
        bar.set_postfix(loss=f"{value:.3f}")
    bar.close()
    return step


def fit_retriever(cfg: Any) -> dict[str, Any]:
    """Run Algorithm 1 with eq. 13 for the bi-encoder; returns the summary (also written to disk)."""
    import torch
    from sentence_transformers import SentenceTransformer

    from toolgym.retrieval import build_index
    from toolgym.retrieval.models import quiet_weight_loading, resolve_embedding_model
    from toolgym.data.training_data import contrastive_triples, random_negatives

    fit_dtype(cfg.precision)  # a bad precision fails here, before any data is read
    set_seed(int(cfg.seed))
    rng = random.Random(int(cfg.seed))
    out_dir = Path(cfg.output_dir)
    log = MetricsLog(out_dir)
    sources = load_sources(cfg)
    dev = set_aside_dev(sources, cfg)  # before any negative is drawn: never trained on
    clock = Budget(0)  # wall clock of the whole command

    with torch.random.fork_rng(devices=[]), quiet_weight_loading():
        model = SentenceTransformer(resolve_embedding_model(cfg.model), device="cpu", local_files_only=True)
    model.max_seq_length = int(cfg.max_length)
    m = int(cfg.negatives_per_query)
    rounds = max(int(cfg.hard_negative_rounds), 0)
    if cfg.first_negatives == "random":
        negatives = {s.name: {t.id: random_negatives(t.gold, s.corpus.ids, m, rng) for t in s.train} for s in sources}
    else:  # "model" (FitRetrieverConfig checks the value)
        negatives = {s.name: mine_with_index(build_index(s.corpus, "dense", model=cfg.model), s.train, m) for s in sources}
    weights = {s.name: s.weight for s in sources}
    # The budget bounds training and later mining; the first negatives' cost is a one-off
    # corpus encoding that the embedding cache keeps.
    budget = Budget(float(cfg.budget_minutes))
    step, round_info = 0, []
    for r in range(rounds + 1):
        stage = f"{cfg.first_negatives}_negatives" if r == 0 else f"hard_negatives_{r}"
        if r > 0:
            if budget.spent():
                break
            with mixed_precision(cfg.precision):  # the corpus encodings of mining, in the training precision
                negatives = {s.name: mine_with_model(model, s.corpus, s.train, m) for s in sources}  # within each library
        triples = {s.name: contrastive_triples(s.train, s.corpus, negatives[s.name], m) for s in sources}
        start = step
        step = train_round(model, triples, cfg, budget.share(1.0 / (rounds + 1 - r)), log, stage, step, rng, weights)
        round_info.append({"stage": stage, "triples": {name: len(t) for name, t in triples.items()}, "steps": step - start})
    model_dir = out_dir / "model"
    model.save(str(model_dir))

    # The hybrid's BM25 weight for this encoder, on the set-aside queries.
    tuning = tune_and_save_hybrid_weight(model_dir, sources, dev, cfg.hybrid_bm25_weights, cfg.zero_shot_bm25_weight)
    w = tuning.get("bm25_weight")
    if tuning:
        log.write({"stage": "tune_hybrid", "step": step, "bm25_weight": w})

    by_source, hybrid_by_source = evaluate_heldout(model_dir, sources, [int(k) for k in cfg.eval_ks])
    for name in by_source:
        log.write({"stage": "eval", "step": step, "source": name, **{f"heldout_{k}": v for k, v in by_source[name].items()},
                   **{f"heldout_hybrid_{k}": v for k, v in hybrid_by_source[name].items()}})
    heldout = mean_over_sources(by_source)  # each source's numbers are reported too
    summary = {
        "command": "fit-retriever", "model_dir": str(model_dir), "steps": step, "rounds": round_info,
        "train_tasks": sum(len(s.train) for s in sources), "eval_tasks": sum(len(s.heldout) for s in sources),
        "elapsed_s": clock.elapsed(), "training_s": budget.elapsed(),
        "budget_minutes": float(cfg.budget_minutes), "heldout": heldout, "heldout_by_source": by_source,
        "dev_tasks": sum(len(d) for d in dev.values()), "hybrid_bm25_weight": w, "hybrid_tuning": tuning,
        "heldout_hybrid": mean_over_sources(hybrid_by_source), "heldout_hybrid_by_source": hybrid_by_source,
        "config": dataclasses.asdict(cfg),
    }
    write_text_atomic(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    plot_fit_curves(log.path, out_dir / "curves.png", ["loss", "lr"], "fit-retriever (eq. 13, InfoNCE)")
    return summary


def evaluate_heldout(model_dir: str | Path, sources: Sequence[Any], ks: Sequence[int]) -> tuple[dict, dict]:
    """(dense, hybrid) mean N@k / C@k per source on its held-out part: one scoring pass, the hybrid at
    the weight saved in ``model_dir`` (else the default)."""
    from toolgym.retrieval import build_index

    dense, hybrid = {}, {}
    for s in sources:
        if not s.heldout:
            continue
        index = build_index(s.corpus, "hybrid", model=str(model_dir))
        lex, cos = index.hybrid_score_rows([t.context_text() for t in s.heldout])
        ids = s.corpus.ids
        for table, weight in ((dense, 0.0), (hybrid, index.bm25_weight)):
            ranked = hybrid_rankings(lex, cos, weight, max(ks))
            table[s.name] = mean_retrieval_metrics([[ids[i] for i in row] for row in ranked], s.heldout, ks)
    return dense, hybrid


def retune_hybrid_weight(cfg: Any, evaluate: bool = True) -> dict[str, Any]:
    """Tune the hybrid weight of a finished ``fit-retriever`` run again (``cfg.output_dir``, with the
    same data keys: the same set-aside queries) without training: e.g. after changing the grid or
    the tuning rule. Rewrites ``toolgym_hybrid.json`` and the hybrid fields of ``summary.json``
    (``evaluate=False``: the held-out hybrid numbers are left as they were, not re-measured)."""
    out_dir = Path(cfg.output_dir)
    summary = json.loads((out_dir / "summary.json").read_text())
    model_dir = Path(summary["model_dir"])
    sources = load_sources(cfg)
    dev = set_aside_dev(sources, cfg)
    tuning = tune_and_save_hybrid_weight(model_dir, sources, dev, cfg.hybrid_bm25_weights, cfg.zero_shot_bm25_weight)
    summary.update(hybrid_bm25_weight=tuning.get("bm25_weight"), hybrid_tuning=tuning)
    if evaluate:
        _, hybrid = evaluate_heldout(model_dir, sources, [int(k) for k in cfg.eval_ks])
        summary.update(heldout_hybrid=mean_over_sources(hybrid), heldout_hybrid_by_source=hybrid)
    write_text_atomic(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    return summary
