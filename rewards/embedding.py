"""The default ``embed`` callable: the packaged MiniLM, loaded once, on first use."""
from __future__ import annotations

from functools import lru_cache
from typing import Callable

import numpy as np

Embed = Callable[[list[str]], np.ndarray]


@lru_cache(maxsize=1)
def _minilm():
    from sentence_transformers import SentenceTransformer

    from toolgym.retrieval.models import minilm_path, quiet_weight_loading

    with quiet_weight_loading():
        return SentenceTransformer(str(minilm_path()), device="cpu")


def minilm_embed(texts: list[str]) -> np.ndarray:
    """Unit-normalised all-MiniLM-L6-v2 embeddings, [len(texts), 384] float32."""
    if not texts:
        return np.zeros((0, 384), dtype=np.float32)
    return np.asarray(_minilm().encode(list(texts), normalize_embeddings=True, show_progress_bar=False))


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (zero rows stay zero), so dot products are cosines."""
    x = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)
