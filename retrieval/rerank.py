"""Cross-encoder reranking of a :class:`~toolgym.retrieval.index.SearchResult`.

WARNING — the default model is NOT a trained reranker. No pretrained cross-encoder ships
offline here, so ``CrossEncoderReranker(model=None)`` builds a sentence-transformers
``CrossEncoder`` from the all-MiniLM-L6-v2 *body* with a fresh one-logit classification head
(``num_labels=1``). That head is randomly initialised (seeded, so runs repeat): its scores are
close to constant and its order is close to arbitrary until it is fine-tuned. ``toolgym
fit-reranker`` trains it (MagicSelector's progressive point-wise -> list-wise -> self-distilled
reranker, ``toolgym.fitting.reranker``); pass ``model=`` a trained cross-encoder folder
(``runs/fit_reranker/distilled``) or a cached HF id to rerank for real.

A trained folder may carry ``toolgym_rerank.json`` with a ``first_stage_weight`` w that
``fit-reranker`` tuned on training queries it set aside: the final order is then
:func:`interpolate_with_first_stage` of the first-stage and cross-encoder scores, so a reranker
that knows less than its input list leans on that list (w = 1 returns the input order unchanged).
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from toolgym.retrieval.corpus import ToolCorpus
from toolgym.retrieval.fusion import standardise_rows
from toolgym.retrieval.index import SearchResult, _check_k, _check_query
from toolgym.retrieval.models import check_unit_weight, quiet_weight_loading, read_model_setting, resolve_embedding_model

HEAD_SEED = 0
SETTINGS_FILE = "toolgym_rerank.json"  # beside a trained CrossEncoder's weights: its tuned first-stage weight


def interpolate_with_first_stage(first_stage: Sequence[float], reranker: Sequence[float], first_stage_weight: float) -> np.ndarray:
    """Interpolated score of each candidate of one list:

        s(t) = w · z_first(t) + (1 − w) · z_rerank(t),   z(t) = (x(t) − mean) / std over the list

    w = 0 is the cross-encoder alone, w = 1 the first stage alone (its order, kept exactly). The
    two score scales differ (BM25 sums idf weights, logits are unbounded), so each is standardised
    over the candidates first; a constant list standardises to 0.
    """
    w = check_first_stage_weight(first_stage_weight)
    first = np.asarray(first_stage, dtype=np.float64).reshape(1, -1)
    rerank = np.asarray(reranker, dtype=np.float64).reshape(1, -1)
    if first.shape != rerank.shape:
        raise ValueError(f"{first.shape[1]} first-stage scores for {rerank.shape[1]} reranker scores")
    return (w * standardise_rows(first) + (1.0 - w) * standardise_rows(rerank))[0]


def reorder(result: SearchResult, reranker_scores: Sequence[float], first_stage_weight: float,
            k: int | None = None) -> SearchResult:
    """``result``'s candidates by the reranker's scores, interpolated with the result's own when
    ``first_stage_weight`` > 0; ties keep the input order; the top ``k`` (all if None)."""
    s = np.asarray(reranker_scores, dtype=np.float64)
    if first_stage_weight > 0:
        s = interpolate_with_first_stage(result.scores, s, first_stage_weight)
    order = np.argsort(-s, kind="stable")[: k if k is not None else len(s)]
    return SearchResult(tuple(result.ids[i] for i in order), tuple(float(s[i]) for i in order))


def check_first_stage_weight(value: object) -> float:
    """A first-stage weight as a float in [0, 1], or a ``ValueError`` naming what was wrong."""
    return check_unit_weight("first_stage_weight", value)


def read_first_stage_weight(folder: str) -> float:
    """The ``first_stage_weight`` saved beside a trained reranker (0.0 = none saved: the cross-encoder alone)."""
    value = read_model_setting(folder, SETTINGS_FILE, "first_stage_weight")
    return 0.0 if value is None else check_first_stage_weight(value)


class CrossEncoderReranker:
    """Scores (query, tool text) pairs with a sentence-transformers ``CrossEncoder``.

    ``model``: a cross-encoder folder or HF id. ``None`` (or a MiniLM alias) = the packaged
    all-MiniLM-L6-v2 body with an UNTRAINED, randomly initialised (seed 0) scoring head — it
    emits a ``UserWarning`` and must be fine-tuned before its order means anything.
    ``corpus``: maps tool ids in a ``SearchResult`` to the text scored (``corpus.text(tool)``,
    the same text the index searched); without it, pass ``texts=`` to :meth:`rerank`.
    ``max_length``: tokens per (query, tool) pair; longer pairs are truncated.
    ``first_stage_weight``: w of :func:`interpolate_with_first_stage` (``None``: the value saved
    in the model folder's ``toolgym_rerank.json``, else 0, the cross-encoder alone).
    Without interpolation the scores are raw logits (no sigmoid), so the score gaps that
    :func:`toolgym.retrieval.topk.dual_boundary_dynamic_top_k` reads are not squashed; with it,
    they are the interpolated z-scores.
    """

    def __init__(
        self,
        model: str | None = None,
        max_length: int = 256,
        *,
        corpus: ToolCorpus | None = None,
        device: str = "cpu",
        batch_size: int = 32,
        first_stage_weight: float | None = None,
    ):
        import torch
        from sentence_transformers import CrossEncoder

        self.untrained_head = model is None or resolve_embedding_model(model) == resolve_embedding_model(None)
        path = resolve_embedding_model(model)
        self.model_name = path
        self.corpus = corpus
        self.batch_size = batch_size
        if self.untrained_head:
            warnings.warn(
                "CrossEncoderReranker: no pretrained cross-encoder is available offline, so the MiniLM body "
                "gets a randomly initialised scoring head; its ranking is arbitrary until fine-tuned",
                UserWarning,
                stacklevel=2,
            )
        # Seed only the head's initialisation, without disturbing the caller's RNG stream.
        with torch.random.fork_rng(devices=[]), quiet_weight_loading():
            torch.manual_seed(HEAD_SEED)
            self.model = CrossEncoder(
                path,
                num_labels=1,
                max_length=max_length,
                device=device,
                local_files_only=True,
                activation_fn=torch.nn.Identity(),
            )
        self.max_length = max_length
        if first_stage_weight is None:
            first_stage_weight = 0.0 if self.untrained_head else read_first_stage_weight(path)
        self.first_stage_weight = check_first_stage_weight(first_stage_weight)

    # -- scoring ---------------------------------------------------------------------------
    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """Raw relevance logits of ``query`` against each text (higher = more relevant)."""
        return self.score_pairs([(query, t) for t in texts])

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        if not pairs:
            return np.zeros(0, dtype=np.float32)
        out = self.model.predict(
            list(pairs), batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True
        )
        return np.asarray(out, dtype=np.float32).reshape(-1)

    # -- reranking -------------------------------------------------------------------------
    def rerank(
        self, query: str, result: SearchResult, k: int | None = None, *, texts: Sequence[str] | None = None
    ) -> SearchResult:
        """Reorder ``result`` by cross-encoder score (interpolated with its own scores when
        ``first_stage_weight`` > 0) and keep the top ``k`` (all if None)."""
        return self.rerank_batch([query], [result], k, texts=None if texts is None else [texts])[0]

    def rerank_batch(
        self,
        queries: Sequence[str],
        results: Sequence[SearchResult],
        k: int | None = None,
        *,
        texts: Sequence[Sequence[str]] | None = None,
    ) -> list[SearchResult]:
        """``rerank`` for many queries: every (query, tool) pair goes through one ``predict``."""
        if isinstance(queries, str):
            raise ValueError("rerank_batch takes a sequence of queries, not one string")
        if len(queries) != len(results):
            raise ValueError(f"got {len(queries)} queries but {len(results)} results")
        if k is not None:
            k = _check_k(k)
        queries = [_check_query(q) for q in queries]
        docs = [self._texts_for(r, None if texts is None else texts[i]) for i, r in enumerate(results)]
        pairs = [(q, d) for q, ds in zip(queries, docs) for d in ds]
        flat = self.score_pairs(pairs)
        out, start = [], 0
        for res, ds in zip(results, docs):
            out.append(reorder(res, flat[start : start + len(ds)], self.first_stage_weight, k))
            start += len(ds)
        return out

    def _texts_for(self, result: SearchResult, texts: Sequence[str] | None) -> list[str]:
        if texts is not None:
            if len(texts) != len(result.ids):
                raise ValueError(f"{len(texts)} texts for {len(result.ids)} result ids")
            return list(texts)
        if self.corpus is None:
            raise ValueError("CrossEncoderReranker needs corpus= (or texts=) to know what each tool id says")
        return [self.corpus.text(self.corpus[i]) for i in result.ids]

    def __repr__(self) -> str:
        head = "untrained head" if self.untrained_head else "trained"
        w = f", first_stage_weight={self.first_stage_weight:g}" if self.first_stage_weight else ""
        return f"CrossEncoderReranker({self.model_name!r}, {head}, max_length={self.max_length}{w})"

