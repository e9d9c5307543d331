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
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from toolgym.fitting.common import (
    FitDataConfig,
    FitSource,
    Budget,
    MetricsLog,
    optimizer_step,
    budgeted_schedule,
    load_sources,
    mean_over_sources,
    proportional_batches,
    plot_fit_curves,
    set_seed,
)

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


def mean_retrieval_metrics(rankings: Sequence[Sequence[str]], tasks: Sequence[Any], ks: Sequence[int]) -> dict[str, float]:
    """Mean N@k and C@k in % over tasks (toolgym.retrieval.metrics)."""
    from toolgym.retrieval.metrics import completeness_at_k, ndcg_at_k

    out = {}
    for k in ks:
        out[f"N@{k}"] = 100.0 * float(np.mean([ndcg_at_k(r, t.gold, k) for r, t in zip(rankings, tasks)]))
        out[f"C@{k}"] = 100.0 * float(np.mean([completeness_at_k(r, t.gold, k) for r, t in zip(rankings, tasks)]))
    return out


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
    from toolgym.retrieval.models import resolve_embedding_model
    from toolgym.data.training_data import contrastive_triples, random_negatives

    set_seed(int(cfg.seed))
    rng = random.Random(int(cfg.seed))
    out_dir = Path(cfg.output_dir)
    log = MetricsLog(out_dir)
    sources = load_sources(cfg)
    clock = Budget(0)  # wall clock of the whole command

    with torch.random.fork_rng(devices=[]):
        model = SentenceTransformer(resolve_embedding_model(cfg.model), device="cpu", local_files_only=True)
    model.max_seq_length = int(cfg.max_length)
    m = int(cfg.negatives_per_query)
    rounds = max(int(cfg.hard_negative_rounds), 0)
    if cfg.first_negatives == "random":
        negatives = {s.name: {t.id: random_negatives(t.gold, s.corpus.ids, m, rng) for t in s.train} for s in sources}
    elif cfg.first_negatives == "model":
        negatives = {s.name: mine_with_index(build_index(s.corpus, "dense", model=cfg.model), s.train, m) for s in sources}
    else:
        raise ValueError(f"first_negatives must be 'random' or 'model', got {cfg.first_negatives!r}")
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
            negatives = {s.name: mine_with_model(model, s.corpus, s.train, m) for s in sources}  # within each library
        triples = {s.name: contrastive_triples(s.train, s.corpus, negatives[s.name], m) for s in sources}
        start = step
        step = train_round(model, triples, cfg, budget.share(1.0 / (rounds + 1 - r)), log, stage, step, rng, weights)
        round_info.append({"stage": stage, "triples": {name: len(t) for name, t in triples.items()}, "steps": step - start})
    model_dir = out_dir / "model"
    model.save(str(model_dir))

    ks = [int(k) for k in cfg.eval_ks]
    by_source = {}
    for s in sources:
        if not s.heldout:
            continue
        index = build_index(s.corpus, "dense", model=str(model_dir))
        ranked = index.search_batch([t.context_text() for t in s.heldout], k=max(ks))
        by_source[s.name] = mean_retrieval_metrics([r.ids for r in ranked], s.heldout, ks)
        log.write({"stage": "eval", "step": step, "source": s.name, **{f"heldout_{k}": v for k, v in by_source[s.name].items()}})
    heldout = mean_over_sources(by_source)  # each source's numbers are reported too
    summary = {
        "command": "fit-retriever", "model_dir": str(model_dir), "steps": step, "rounds": round_info,
        "train_tasks": sum(len(s.train) for s in sources), "eval_tasks": sum(len(s.heldout) for s in sources),
        "elapsed_s": clock.elapsed(), "training_s": budget.elapsed(),
        "budget_minutes": float(cfg.budget_minutes), "heldout": heldout, "heldout_by_source": by_source,
        "config": dataclasses.asdict(cfg),
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    plot_fit_curves(log.path, out_dir / "curves.png", ["loss", "lr"], "fit-retriever (eq. 13, InfoNCE)")
    return summary
