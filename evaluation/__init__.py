"""toolgym.evaluation: measuring retrievers, agents and policies (episodes to per-task metrics, paired comparisons, the retrieval ladder, replayed credit)."""
if __name__ != "toolgym.evaluation":  # the checkout folder imported by its own name: every module would load twice
    raise ImportError(f"this folder is the package toolgym.evaluation: import toolgym.evaluation (after `pip install -e .` or `make install`), not {__name__!r}")
