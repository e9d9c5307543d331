"""toolgym.retrieval: tool corpus, BM25 / dense / hybrid index, fusion, dynamic top-K, metrics.

``build_index(corpus, method)`` -> :class:`ToolIndex` with ``search`` / ``search_batch``
returning :class:`SearchResult`; see docs/retrieval.md. The reranker
(``toolgym.retrieval.rerank.CrossEncoderReranker``) is not imported here because it pulls in
torch; import it from its module. Reading corpus files is ``toolgym.data``'s job
(``toolgym.data.load_corpus``): retrieval never imports data.
"""
if __name__ != "toolgym.retrieval":  # the checkout folder imported by its own name: every module would load twice
    raise ImportError(f"this folder is the package toolgym.retrieval: import toolgym.retrieval (after `pip install -e .` or `make install`), not {__name__!r}")
from toolgym.retrieval.corpus import Tool, ToolCorpus
from toolgym.retrieval.fusion import FUSION_METHODS, fuse, fuse_max_score, fuse_round_robin, fuse_rrf
from toolgym.retrieval.index import (
    METHODS,
    IndexConfig,
    SearchResult,
    ToolIndex,
    build_index,
    default_cache_dir,
    default_encode_batch_size,
    default_encode_threads,
)
from toolgym.retrieval.metrics import (
    completeness_at_k,
    ndcg_at_k,
    recall_at_k,
    search_recall,
    selection_match,
    selection_prf,
)
from toolgym.retrieval.models import resolve_embedding_model
from toolgym.retrieval.topk import dual_boundary_dynamic_top_k

__all__ = [
    "FUSION_METHODS",
    "METHODS",
    "IndexConfig",
    "SearchResult",
    "Tool",
    "ToolCorpus",
    "ToolIndex",
    "build_index",
    "completeness_at_k",
    "default_cache_dir",
    "default_encode_batch_size",
    "default_encode_threads",
    "dual_boundary_dynamic_top_k",
    "fuse",
    "fuse_max_score",
    "fuse_round_robin",
    "fuse_rrf",
    "ndcg_at_k",
    "recall_at_k",
    "resolve_embedding_model",
    "search_recall",
    "selection_match",
    "selection_prf",
]
