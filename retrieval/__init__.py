"""toolgym.retrieval: tool corpus, BM25 / dense / hybrid index, reranking, dynamic top-K, metrics.

``build_index(corpus, method)`` -> :class:`ToolIndex` with ``search`` / ``search_batch``
returning :class:`SearchResult`; see docs/retrieval.md. The reranker
(``toolgym.retrieval.rerank.CrossEncoderReranker``) is not imported here because it pulls in
torch; import it from its module.
"""
from toolgym.retrieval.corpus import Tool, ToolCorpus
from toolgym.retrieval.index import METHODS, SearchResult, ToolIndex, build_index, default_cache_dir
from toolgym.retrieval.topk import dual_boundary_dynamic_top_k

__all__ = [
    "METHODS",
    "SearchResult",
    "Tool",
    "ToolCorpus",
    "ToolIndex",
    "build_index",
    "default_cache_dir",
    "dual_boundary_dynamic_top_k",
]
