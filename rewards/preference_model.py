"""A trained preference scorer s_φ(x, y): a MiniLM cross-encoder over (context, numbered subtasks).

Implements :class:`toolgym.rewards.preference.PreferenceScorer`, so it plugs into
R_pref = σ(s_φ(x, y) − s_φ(x, y*)). Train one with ``toolgym fit-preference``
(``configs/fit_preference.yaml``); its folder is ``<output_dir>/model``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from toolgym.data.records import Task
from toolgym.rewards.preference import render_decomposition

# Texts are cut to this many characters before tokenising: the tokenizer would truncate to
# max_length tokens anyway, and a cap keeps a hostile (huge) decomposition cheap.
MAX_INPUT_CHARS = 4_000


def preference_inputs(task: Task, decompositions: list[list[str]]) -> list[tuple[str, str]]:
    """(x, y) text pairs the model reads: the dialogue context and the numbered subtasks."""
    x = task.dialogue_text()[:MAX_INPUT_CHARS]
    out = []
    for d in decompositions:
        if isinstance(d, str):
            raise ValueError("each decomposition is a list of subtask strings, not one string")
        # Render only as many subtasks as can fit in the character cap.
        kept, size = [], 0
        for s in d:
            s = str(s)[:MAX_INPUT_CHARS]
            size += len(s) + 4
            kept.append(s)
            if size > MAX_INPUT_CHARS:
                break
        out.append((x, render_decomposition(kept)[:MAX_INPUT_CHARS]))
    return out


class CrossEncoderPreferenceScorer:
    """s_φ(x, y) = the raw logit of a sentence-transformers ``CrossEncoder`` on (x, y).

    ``model``: a folder written by ``toolgym fit-preference`` (or any one-logit cross-encoder).
    Higher = better decomposition. Scores are logits, so σ(s(y) − s(y*)) is the model's
    probability that y beats the reference (the Bradley–Terry reading of its training loss).
    """

    def __init__(self, model: str | Path, max_length: int = 256, batch_size: int = 16, device: str = "cpu"):
        import torch
        from sentence_transformers import CrossEncoder

        path = Path(model)
        if not path.is_dir():
            raise FileNotFoundError(f"preference model folder {path} not found (train one with `toolgym fit-preference`)")
        self.model_dir = str(path)
        self.batch_size = batch_size
        from toolgym.retrieval.models import quiet_weight_loading

        with quiet_weight_loading():
            self.model = CrossEncoder(str(path), num_labels=1, max_length=max_length, device=device,
                                      local_files_only=True, activation_fn=torch.nn.Identity())

    def score_pairs(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        if not pairs:
            return np.zeros(0, dtype=np.float64)
        out = self.model.predict(pairs, batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True)
        return np.asarray(out, dtype=np.float64).reshape(-1)

    def score(self, task: Task, decompositions: list[list[str]]) -> np.ndarray:
        return self.score_pairs(preference_inputs(task, decompositions))

    def __repr__(self) -> str:
        return f"CrossEncoderPreferenceScorer({self.model_dir!r})"
