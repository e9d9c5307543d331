"""toolgym.fitting: training the retrieval-side models (bi-encoder, cross-encoder reranker, decomposition preference scorer)."""
