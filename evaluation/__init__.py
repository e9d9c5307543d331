"""toolgym.evaluation: measuring retrievers, agents and policies (episodes to per-task metrics, paired comparisons, the retrieval ladder, replayed credit)."""
