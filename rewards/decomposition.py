"""MagicSelector decomposition rewards: counterfactual R_cf and preference R_pref.

Decisions: docs/decisions.md#counterfactual-reward and #preference-reward.

Both are ``outcome`` modules: the ``magicselector`` scheme adds them as
R = α · R_pref + β · R_cf and GRPO-normalises the sum (decomposition rollouts have one turn).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

import numpy as np

from toolgym.data.records import Task, Trajectory
from toolgym.retrieval.fusion import FUSION_METHODS, fuse
from toolgym.retrieval.metrics import (
    check_counterfactual_weights,
    check_ndcg_gain,
    completeness_at_k,
    counterfactual_decomposition_reward,
    ndcg_at_k,
)
from toolgym.rewards.base import GroupCredit, check_group, outcome_credit, register_reward
from toolgym.rewards.embedding import Embed
from toolgym.rewards.preference import (
    HFRewardModelScorer,
    LLMJudgeScorer,
    PreferenceScorer,
    ReferenceAgreementScorer,
    preference_reward,
)

# retrieve(queries, k) -> one ranked list per query: ids, or (id, score) pairs (needed by max_score).
# A retrieve with ``takes_task = True`` (a mixture's) is called retrieve(queries, k, task=task).
Retrieve = Callable[[list[str], int], list[list[Any]]]


def _split_scored(ranked: Sequence[Any]) -> tuple[list[str], list[float] | None]:
    if ranked and isinstance(ranked[0], (tuple, list)):
        return [str(r[0]) for r in ranked], [float(r[1]) for r in ranked]
    return [str(r) for r in ranked], None


@register_reward("counterfactual")
class Counterfactual:
    """R_cf per rollout, via :func:`toolgym.retrieval.metrics.counterfactual_decomposition_reward`.

    The raw context x (:meth:`~toolgym.data.records.Task.context_text`, as in ``DecompositionEnv``) and every subtask
    retrieve top-K in one ``retrieve`` call; subtask lists are fused (``round_robin`` by default,
    ``rrf`` or ``max_score``, which needs retrieve to return (id, score) pairs) and cut to K.
    ``ndcg_gain="signed"`` drops the clip of the NDCG term (a toolgym variant; see
    :func:`~toolgym.retrieval.metrics.counterfactual_decomposition_reward`).
    """

    name = "counterfactual"
    kind = "outcome"
    needs = frozenset({"retrieve"})

    def __init__(
        self,
        retrieve: Retrieve | None = None,
        k: int = 10,
        fusion: str = "round_robin",
        lambda_ndcg: float = 1.0,
        lambda_full: float = 1.0,
        raw_text: Callable[[Task], str] = Task.context_text,
        ndcg_gain: str = "clipped",
    ):
        ndcg_gain = check_ndcg_gain(ndcg_gain)
        if retrieve is None:
            raise ValueError("the counterfactual reward needs retrieve(queries, k) -> ranked id lists")
        if fusion not in FUSION_METHODS:
            raise ValueError(f"unknown fusion {fusion!r}; choose one of {FUSION_METHODS}")
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        self.retrieve, self.k, self.fusion = retrieve, int(k), fusion
        self.lambda_ndcg, self.lambda_full = check_counterfactual_weights(lambda_ndcg, lambda_full)
        self.raw_text = raw_text
        self.ndcg_gain = ndcg_gain

    def score_group(self, trajectories: list[Trajectory], task: Task) -> GroupCredit:
        check_group(trajectories, task)
        subtask_lists = [[s.strip() for s in (t.subtasks or []) if s.strip()] for t in trajectories]
        queries = list(dict.fromkeys([self.raw_text(task)] + [s for lst in subtask_lists for s in lst]))
        # a mixture's retrieve searches the library of the group's task (MixtureIndex.retriever)
        by_task = {"task": task} if getattr(self.retrieve, "takes_task", False) else {}
        results = self.retrieve(queries, self.k, **by_task)
        if len(results) != len(queries):
            raise ValueError(f"retrieve returned {len(results)} lists for {len(queries)} queries")
        ranked = {q: _split_scored(r) for q, r in zip(queries, results)}
        raw, _ = ranked[self.raw_text(task)]
        raw = raw[: self.k]
        gold = task.gold
        r_cf, n_atom, full_atom = [], [], []
        for subtasks in subtask_lists:
            lists = [ranked[s][0][: self.k] for s in subtasks]
            scores = None
            if self.fusion == "max_score":
                scores = [ranked[s][1] for s in subtasks]
                if any(sc is None for sc in scores):
                    raise ValueError("fusion 'max_score' needs retrieve to return (id, score) pairs")
                scores = [sc[: self.k] for sc in scores]
            atom = fuse(lists, self.fusion, k=self.k, scores=scores)
            r_cf.append(counterfactual_decomposition_reward(raw, atom, gold, self.k, self.lambda_ndcg, self.lambda_full,
                                                            self.ndcg_gain))
            n_atom.append(ndcg_at_k(atom, gold, self.k))
            full_atom.append(completeness_at_k(atom, gold, self.k))
        r = np.array(r_cf, dtype=np.float64)
        return outcome_credit(r, {
            "r_cf": float(r.mean()),
            "ndcg_raw": ndcg_at_k(raw, gold, self.k),
            "ndcg_atom": float(np.mean(n_atom)),
            "full_raw": completeness_at_k(raw, gold, self.k),
            "full_atom": float(np.mean(full_atom)),
        })


def make_scorer(
    scorer: str | PreferenceScorer = "reference",
    embed: Embed | None = None,
    judge: Any = None,
    model: str | None = None,
    **options: Any,
) -> PreferenceScorer:
    """A scorer by name: ``reference`` (embed), ``trained`` (a ``toolgym fit-preference`` model folder),
    ``hf`` (model path), ``judge`` (chat callable)."""
    if not isinstance(scorer, str):
        return scorer
    if scorer == "reference":
        return ReferenceAgreementScorer(embed=embed, **options)
    if scorer == "trained":
        if not model:
            raise ValueError("the 'trained' preference scorer needs model=<a toolgym fit-preference RUN_DIR/model>")
        from toolgym.rewards.preference_model import CrossEncoderPreferenceScorer

        return CrossEncoderPreferenceScorer(model, **options)
    if scorer == "hf":
        if not model:
            raise ValueError("the 'hf' preference scorer needs model=<path or HF id>")
        return HFRewardModelScorer.from_pretrained(model, **options)
    if scorer == "judge":
        if judge is None:
            raise ValueError("the 'judge' preference scorer needs judge=<chat callable>")
        return LLMJudgeScorer(judge, **options)
    raise ValueError(f"unknown preference scorer {scorer!r}; choose reference, trained, hf or judge")


@register_reward("preference")
class Preference:
    """R_pref = σ(s_φ(x, y_i) − s_φ(x, y*)) per rollout (:func:`preference_reward`).

    The candidates and the reference y* (``task.subtasks``) are scored in one scorer call.
    """

    name = "preference"
    kind = "outcome"
    needs: frozenset[str] = frozenset()  # embed defaults to the packaged MiniLM; scorer "judge" checks judge itself

    def __init__(
        self,
        scorer: str | PreferenceScorer = "reference",
        embed: Embed | None = None,
        judge: Any = None,
        model: str | None = None,
        scorer_options: dict[str, Any] | None = None,
    ):
        self.scorer = make_scorer(scorer, embed=embed, judge=judge, model=model, **dict(scorer_options or {}))

    def score_group(self, trajectories: list[Trajectory], task: Task) -> GroupCredit:
        check_group(trajectories, task)
        if not task.subtasks:
            raise ValueError(f"task {task.id!r} has no reference decomposition (Task.subtasks) for R_pref")
        candidates = [list(t.subtasks or []) for t in trajectories]
        failures_before = getattr(self.scorer, "parse_failures", 0)
        scores = np.asarray(self.scorer.score(task, candidates + [list(task.subtasks)]), dtype=np.float64)
        if scores.shape != (len(candidates) + 1,):
            raise ValueError(f"the scorer returned shape {scores.shape} for {len(candidates) + 1} decompositions")
        r = preference_reward(scores[:-1], scores[-1])
        components = {
            "r_pref": float(r.mean()),
            "score": float(scores[:-1].mean()),
            "reference_score": float(scores[-1]),
        }
        if hasattr(self.scorer, "parse_failures"):
            components["judge_parse_failures"] = float(self.scorer.parse_failures - failures_before)
        return outcome_credit(r, components)
