"""toolgym.fitting: training the retrieval-side models (bi-encoder, cross-encoder reranker, decomposition preference scorer)."""
if __name__ != "toolgym.fitting":  # the checkout folder imported by its own name: every module would load twice
    raise ImportError(f"this folder is the package toolgym.fitting: import toolgym.fitting (after `pip install -e .` or `make install`), not {__name__!r}")
