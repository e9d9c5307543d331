"""Preference scorers s_φ(x, y) for MagicSelector's R_pref = σ(s_φ(x, y) − s_φ(x, y*)).

Every scorer has ``score(task, decompositions) -> np.ndarray``: one score per decomposition
(a list of subtask strings) of the task's context x. Three are provided:

- :class:`ReferenceAgreementScorer` — light, CPU, reference-based (formula in its docstring);
- :class:`HFRewardModelScorer` — any Hugging Face sequence-classification reward model;
- :class:`LLMJudgeScorer` — an LLM judge over the paper's five criteria, any chat callable.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any, Callable, Protocol, runtime_checkable

import numpy as np

from toolgym.data.records import Task
from toolgym.rewards.embedding import Embed, minilm_embed, unit_rows
from toolgym.rewards.monitors import normalise_text

# The five criteria of MagicSelector §3.3.
PREFERENCE_CRITERIA = (
    "completeness",
    "accuracy",
    "coreference_resolution",
    "standard_expression",
    "context_consistency",
)

# Words that, left inside a subtask, point back into the dialogue instead of naming the thing:
# the subtask then cannot be retrieved for on its own (unresolved coreference).
LEFTOVER_PRONOUNS = frozenset(
    "it its it's itself they them their theirs those these that this he him his she her hers there".split()
)


def preference_reward(score: float | np.ndarray, reference_score: float | np.ndarray) -> np.ndarray:
    """R_pref = σ(s_φ(x, y) − s_φ(x, y*)), σ the logistic sigmoid."""
    d = np.asarray(score, dtype=np.float64) - np.asarray(reference_score, dtype=np.float64)
    return 0.5 * (1.0 + np.tanh(0.5 * d))  # = 1/(1+e^{-d}) without overflow


def joint_decomposition_reward(r_pref: np.ndarray, r_cf: np.ndarray, alpha: float = 1.0, beta: float = 1.0) -> np.ndarray:
    """MagicSelector's joint reward R = α · R_pref + β · R_cf (GRPO-normalised afterwards)."""
    return alpha * np.asarray(r_pref, dtype=np.float64) + beta * np.asarray(r_cf, dtype=np.float64)


def render_decomposition(subtasks: Sequence[str]) -> str:
    """Subtasks as a numbered list, the text a reward model or a judge reads."""
    return "\n".join(f"{j}. {s.strip()}" for j, s in enumerate(subtasks, start=1)) or "(no subtasks)"


@runtime_checkable
class PreferenceScorer(Protocol):
    def score(self, task: Task, decompositions: list[list[str]]) -> np.ndarray: ...


def leftover_pronoun_share(subtasks: Sequence[str]) -> float:
    """pron(y) = share of subtasks that contain a word of :data:`LEFTOVER_PRONOUNS`."""
    if not subtasks:
        return 0.0
    return sum(bool(set(normalise_text(s).split()) & LEFTOVER_PRONOUNS) for s in subtasks) / len(subtasks)


def soft_subtask_f1(sim: np.ndarray) -> float:
    """Soft F1 of a cosine matrix sim[a, b] (candidate subtask a, reference subtask b), clipped to [0, 1].

    P = mean_a max_b sim[a, b],  R = mean_b max_a sim[a, b],  F1 = 2PR / (P + R) (0 if P + R = 0
    or either side is empty).
    """
    if sim.size == 0:
        return 0.0
    sim = np.clip(sim, 0.0, 1.0)
    p, r = float(sim.max(axis=1).mean()), float(sim.max(axis=0).mean())
    return 2 * p * r / (p + r) if p + r > 0 else 0.0


def reference_agreement_score(
    f1_soft: float,
    dup: float,
    empty: float,
    pron: float,
    scale: float = 4.0,
    dup_weight: float = 1.0,
    empty_weight: float = 1.0,
    pronoun_weight: float = 0.5,
) -> float:
    """s(x, y) = scale · [F1_soft(y', y*) − w_dup · dup(y) − w_empty · empty(y) − w_pron · pron(y)]."""
    return scale * (f1_soft - dup_weight * dup - empty_weight * empty - pronoun_weight * pron)


class ReferenceAgreementScorer:
    """A light reference-based scorer (CPU, one small embedding model).

    s(x, y) = scale · [ F1_soft(y, y*) − w_dup · dup(y) − w_empty · empty(y) − w_pron · pron(y) ]

    - y' = the non-blank subtasks of y; y* = the task's reference subtasks.
    - F1_soft: :func:`soft_subtask_f1` of the cosine matrix between embeddings of y' and y*
      (a BERTScore-style match at subtask level: does every reference subtask have a close
      candidate subtask, and vice versa). 0 when y' is empty.
    - dup(y) = share of y' that repeat an earlier subtask of y' (same text after lower-casing and
      dropping punctuation, or cosine ≥ ``dup_threshold``).
    - empty(y) = 1 if y' is empty, else the share of blank subtasks in y.
    - pron(y) = :func:`leftover_pronoun_share` of y' (it, them, that, there, ... left unresolved).

    The context x enters only through the reference (y* is x's gold decomposition). Defaults:
    scale 4, w_dup 1, w_empty 1, w_pron 0.5, dup_threshold 0.95. The reference scores
    scale · (1 − penalties(y*)) against itself.
    """

    def __init__(
        self,
        embed: Embed | None = None,
        scale: float = 4.0,
        dup_weight: float = 1.0,
        empty_weight: float = 1.0,
        pronoun_weight: float = 0.5,
        dup_threshold: float = 0.95,
    ):
        self.embed = embed or minilm_embed
        self.scale, self.dup_weight, self.empty_weight = scale, dup_weight, empty_weight
        self.pronoun_weight, self.dup_threshold = pronoun_weight, dup_threshold

    def score(self, task: Task, decompositions: list[list[str]]) -> np.ndarray:
        if not task.subtasks:
            raise ValueError(f"task {task.id!r} has no reference subtasks; the reference scorer needs them")
        reference = [s for s in task.subtasks if s.strip()]
        kept = [[s.strip() for s in d if s.strip()] for d in decompositions]
        texts = list(dict.fromkeys(reference + [s for d in kept for s in d]))
        vectors = unit_rows(self.embed(texts)) if texts else np.zeros((0, 1))
        row = {t: j for j, t in enumerate(texts)}
        ref = vectors[[row[s] for s in reference]]
        weights = dict(scale=self.scale, dup_weight=self.dup_weight, empty_weight=self.empty_weight,
                       pronoun_weight=self.pronoun_weight)
        out = np.zeros(len(decompositions))
        for i, (raw, y) in enumerate(zip(decompositions, kept)):
            if not y:
                out[i] = reference_agreement_score(0.0, 0.0, 1.0, 0.0, **weights)
                continue
            cand = vectors[[row[s] for s in y]]
            out[i] = reference_agreement_score(
                soft_subtask_f1(cand @ ref.T),
                self.duplicate_share(y, cand),
                (len(raw) - len(y)) / len(raw),
                leftover_pronoun_share(y),
                **weights,
            )
        return out

    def duplicate_share(self, subtasks: list[str], vectors: np.ndarray) -> float:
        """dup(y): share of subtasks equal (normalised text) or cosine-close to an earlier one."""
        keys = [normalise_text(s) for s in subtasks]
        sim = vectors @ vectors.T
        dup = 0
        for j in range(1, len(subtasks)):
            dup += any(keys[j] == keys[k] or sim[j, k] >= self.dup_threshold for k in range(j))
        return dup / len(subtasks)


class HFRewardModelScorer:
    """s_φ(x, y) = the logit of a Hugging Face sequence-classification reward model.

    The input is the context and the numbered decomposition: through the tokenizer's chat
    template (user = context, assistant = decomposition) when it has one, else as a text pair.
    ``num_labels == 1``: the single logit; otherwise the logit of ``label_index``.
    """

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 16, max_length: int = 512, label_index: int = -1):
        self.model, self.tokenizer = model.eval(), tokenizer
        self.batch_size, self.max_length, self.label_index = batch_size, max_length, label_index

    @classmethod
    def from_pretrained(cls, name_or_path: str, **kwargs: Any) -> "HFRewardModelScorer":
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(name_or_path)
        model = AutoModelForSequenceClassification.from_pretrained(name_or_path)
        return cls(model, tok, **kwargs)

    def _pairs(self, task: Task, decompositions: list[list[str]]) -> tuple[list[str], list[str] | None]:
        x = task.dialogue_text()
        ys = [render_decomposition(d) for d in decompositions]
        if getattr(self.tokenizer, "chat_template", None):
            texts = [
                self.tokenizer.apply_chat_template(
                    [{"role": "user", "content": f"Decompose into atomic subtasks:\n{x}"}, {"role": "assistant", "content": y}],
                    tokenize=False,
                )
                for y in ys
            ]
            return texts, None
        return [x] * len(ys), ys

    def score(self, task: Task, decompositions: list[list[str]]) -> np.ndarray:
        import torch

        first, second = self._pairs(task, decompositions)
        out = []
        with torch.inference_mode():
            for start in range(0, len(first), self.batch_size):
                a = first[start : start + self.batch_size]
                b = second[start : start + self.batch_size] if second is not None else None
                enc = self.tokenizer(a, b, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
                enc = {k: v.to(self.model.device) for k, v in enc.items()}
                logits = self.model(**enc).logits.float()
                col = 0 if logits.shape[-1] == 1 else self.label_index
                out.append(logits[:, col].cpu().numpy())
        return np.concatenate(out).astype(np.float64) if out else np.zeros(0)


JUDGE_SYSTEM = (
    "You grade how well a list of subtasks decomposes the user's latest request in a dialogue. "
    "Score each criterion from 1 (bad) to 10 (excellent):\n"
    "- completeness: every intent of the request (and what it inherits from earlier turns) has a subtask;\n"
    "- accuracy: each subtask says what the user actually asked, nothing invented;\n"
    "- coreference_resolution: pronouns and references to earlier turns are replaced by what they mean;\n"
    "- standard_expression: each subtask is one clear, self-contained imperative;\n"
    "- context_consistency: subtasks agree with the dialogue's constraints (times, places, names).\n"
    'Answer with JSON only, e.g. {"completeness": 7, "accuracy": 8, "coreference_resolution": 6, '
    '"standard_expression": 9, "context_consistency": 7}.'
)


# A judge reply is cut to this many characters before parsing: the five scores take ~150, and the
# cap keeps parsing linear and bounded whatever the judge (or an attacker steering it) returns.
MAX_JUDGE_REPLY_CHARS = 16_384
# A score has at most this many digits; longer digit runs are not scores (and int() of > 4,300
# digits raises).
MAX_SCORE_DIGITS = 32


def _reply_text(reply: Any) -> str | None:
    """The text of a judge reply (a string, ``.text``/``.content``, or ``{"content": ...}``), else None."""
    if isinstance(reply, str):
        return reply
    for attr in ("text", "content"):
        if isinstance(getattr(reply, attr, None), str):
            return getattr(reply, attr)
    if isinstance(reply, dict) and isinstance(reply.get("content"), str):
        return reply["content"]
    return None


def _score_number(token: str) -> float | None:
    return float(token) if len(token) <= MAX_SCORE_DIGITS else None


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a score")


def parse_judge_scores(text: str, criteria: Sequence[str] = PREFERENCE_CRITERIA) -> dict[str, float] | None:
    """Criterion scores from a judge reply: the first flat JSON object, else ``name: number`` pairs.

    Only the first :data:`MAX_JUDGE_REPLY_CHARS` characters are read; numbers of more than
    :data:`MAX_SCORE_DIGITS` characters, NaN and infinities are not scores. Linear in the (capped)
    text. Returns None unless every criterion has a finite number.
    """
    text = str(text)[:MAX_JUDGE_REPLY_CHARS]
    found: dict[str, Any] = {}
    for match in re.finditer(r"\{[^{}]*\}", text):
        try:
            obj = json.loads(match.group(0), parse_int=_score_number, parse_float=_score_number,
                             parse_constant=_reject_constant)
        except (ValueError, RecursionError):  # bad JSON, a rejected number, or arrays nested too deep
            continue
        if isinstance(obj, dict):
            found = {str(k).lower().replace(" ", "_"): v for k, v in obj.items()}
            break
    if not all(c in found for c in criteria):
        for c in criteria:
            pattern = re.escape(c).replace("_", r"[_ ]")
            m = re.search(rf"{pattern}\W{{0,5}}(-?\d+(?:\.\d+)?)", text, re.IGNORECASE)
            if m and c not in found:
                found[c] = _score_number(m.group(1))
    try:
        scores = {c: float(found[c]) for c in criteria}
    except (KeyError, TypeError, ValueError):
        return None
    return scores if all(math.isfinite(v) for v in scores.values()) else None


class LLMJudgeScorer:
    """s_φ(x, y) = mean over the five criteria of the judge's 1–10 scores (clipped to [1, 10]).

    ``judge`` is any chat callable ``judge(messages) -> str`` or an object with such a
    ``generate`` method (a toolgym chat policy, an OpenAI-compatible client wrapper). A reply
    that is not text (e.g. None) or cannot be parsed scores ``fallback_score`` (default 1, the
    worst) and is counted in ``parse_failures``, so a broken judge shows up in the logs instead of
    stopping training. The judge reads :meth:`Task.dialogue_text` and the numbered subtasks.
    """

    def __init__(
        self,
        judge: Callable[[list[dict[str, str]]], Any] | Any,
        criteria: Sequence[str] = PREFERENCE_CRITERIA,
        fallback_score: float = 1.0,
        low: float = 1.0,
        high: float = 10.0,
    ):
        self.generate = judge if callable(judge) and not hasattr(judge, "generate") else getattr(judge, "generate", None)
        if not callable(self.generate):
            raise TypeError("the judge must be callable(messages) -> str or have a generate(messages) method")
        self.criteria, self.fallback_score, self.low, self.high = tuple(criteria), fallback_score, low, high
        self.parse_failures = 0

    def messages(self, task: Task, subtasks: Sequence[str]) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": JUDGE_SYSTEM},
            {"role": "user", "content": f"Dialogue:\n{task.dialogue_text()}\n\nSubtasks:\n{render_decomposition(subtasks)}"},
        ]

    def score(self, task: Task, decompositions: list[list[str]]) -> np.ndarray:
        out = np.zeros(len(decompositions))
        for i, d in enumerate(decompositions):
            text = _reply_text(self.generate(self.messages(task, d)))
            parsed = parse_judge_scores(text, self.criteria) if text is not None else None
            if parsed is None:
                self.parse_failures += 1
                out[i] = self.fallback_score
            else:
                out[i] = float(np.mean([min(max(v, self.low), self.high) for v in parsed.values()]))
        return out
