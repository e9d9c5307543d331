"""ToolSearcher credit (DESIGN §7): ESM first-discovery event advantages and TCA selection
credit, plus the plain outcome rewards (selection F1 / Match, search recall) used by the
``grpo_f1`` / ``grpo_match`` baselines.

Turns are 0-based. ``SearchEvent.turn`` is the turn of that search; the submit happens at turn
``num_turns - 1`` when ``terminated_by == "submit"``. First-found sets are recomputed from the
ranked results (the formula's definition), so files written without ``first_found`` replay the
same.
"""
from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from toolgym.data.records import Task, Trajectory
from toolgym.retrieval.metrics import search_recall, selection_match, selection_prf
from toolgym.rewards.base import (
    GroupCredit,
    check_group,
    grpo_advantage,
    grpo_advantage_masked,
    is_zero_variance,
    register_reward,
)

TCA_GATES = ("full_retrieval", "answered")
TCA_GATE_GROUPS = ("all", "gated")


def turn_count(traj: Trajectory) -> int:
    """``traj.num_turns``, checked against its events and its submit (a clear error if short)."""
    n = int(traj.num_turns)
    last_event = max((e.turn for e in traj.events), default=-1)
    if any(e.turn < 0 for e in traj.events):
        raise ValueError(f"trajectory of task {traj.task_id!r}: negative event turn")
    if last_event >= n:
        raise ValueError(
            f"trajectory of task {traj.task_id!r}: a search at turn {last_event} but num_turns={n} "
            "(turns are 0-based; num_turns counts every policy turn, the submit included)"
        )
    if traj.terminated_by == "submit" and n < 1:
        raise ValueError(f"trajectory of task {traj.task_id!r}: submitted but num_turns=0")
    return n


def first_discoveries(traj: Trajectory, gold: Collection[str]) -> list[tuple[int, list[str]]]:
    """Per search event, in order: (turn, F) with F = results(e) ∩ (G \\ results(events before e))."""
    gold = set(gold)
    seen: set[str] = set()
    out = []
    for event in traj.events:
        found = [t for t in dict.fromkeys(event.results) if t in gold and t not in seen]
        seen.update(event.results)
        out.append((event.turn, found))
    return out


def esm_tool_advantages(trajectories: Sequence[Trajectory], gold: Collection[str]) -> tuple[list[str], np.ndarray]:
    """Per gold tool T the GRPO-normalised retrieval reward: z(T, i) = GRPO_i(r(T, ·)).

    r(T, i) = 1 if T appears in any search result of rollout i, else 0. Returns the gold ids
    (sorted) and z as a [|G|, G_rollouts] array; a tool every rollout found (mastered) or none
    found gets z = 0.
    """
    tools = sorted(gold)
    seen = [t.seen for t in trajectories]
    r = np.array([[1.0 if tool in s else 0.0 for s in seen] for tool in tools]).reshape(len(tools), len(trajectories))
    return tools, grpo_advantage(r)


def esm_turn_advantages(trajectories: Sequence[Trajectory], gold: Collection[str]) -> list[np.ndarray]:
    """ESM event advantage, placed on the turn of each search event.

    A_{i,e} = max_{T ∈ F_e} z(T, i)  if F_e ≠ ∅, else 0,
    F_e = results(e) ∩ (G \\ results(events of rollout i before e)),  z from
    :func:`esm_tool_advantages`. Max, not mean. Turns without a search event get 0; if a turn
    holds several events its F is the union of theirs.
    """
    tools, z = esm_tool_advantages(trajectories, gold)
    row = {tool: k for k, tool in enumerate(tools)}
    out = []
    for i, traj in enumerate(trajectories):
        adv = np.zeros(turn_count(traj))
        found_at: dict[int, list[str]] = {}
        for turn, found in first_discoveries(traj, gold):
            if found:
                found_at.setdefault(turn, []).extend(found)
        for turn, found in found_at.items():
            adv[turn] = max(z[row[t], i] for t in found)
        out.append(adv)
    return out


def tca_gate(traj: Trajectory, gold: Collection[str], gate: str = "full_retrieval") -> bool:
    """Whether TCA lets rollout i learn selection.

    ``full_retrieval`` (the paper): full_i = G ⊆ seen_i. ``answered`` (the authors' released
    code): the rollout ended with a submitted answer.
    """
    if gate == "full_retrieval":
        return bool(gold) and set(gold) <= traj.seen
    if gate == "answered":
        return traj.terminated_by == "submit" and traj.selection is not None
    raise ValueError(f"unknown TCA gate {gate!r}; choose one of {TCA_GATES}")


def tca_selection_advantages(
    trajectories: Sequence[Trajectory],
    gold: Collection[str],
    gate: str = "full_retrieval",
    gate_group: str = "all",
) -> np.ndarray:
    """TCA selection advantage per rollout.

    s_i = Match(S_i, G) = 1[S_i == G];  gate_i from :func:`tca_gate`;
    ``gate_group="all"`` (paper):  A_i = gate_i · (s_i − mean(s)) / (std(s) + eps) over all G rollouts;
    ``gate_group="gated"``:        A_i = gate_i · (s_i − mean_{gated}(s)) / (std_{gated}(s) + eps).
    Equal rewards in the normalised set, or a set of one, give 0.
    """
    if gate_group not in TCA_GATE_GROUPS:
        raise ValueError(f"unknown TCA gate_group {gate_group!r}; choose one of {TCA_GATE_GROUPS}")
    s = np.array([selection_match(t.selection, gold) for t in trajectories])
    on = np.array([tca_gate(t, gold, gate) for t in trajectories], dtype=bool)
    if gate_group == "all":
        return np.where(on, grpo_advantage(s), 0.0)
    return grpo_advantage_masked(s, on)


def place_on_submit_turn(trajectories: Sequence[Trajectory], values: np.ndarray) -> list[np.ndarray]:
    """Per rollout an array of length num_turns, ``values[i]`` at the submit turn, 0 elsewhere.

    A rollout that never submitted has no selection tokens, so its value lands nowhere.
    """
    out = []
    for traj, value in zip(trajectories, values):
        adv = np.zeros(turn_count(traj))
        if traj.terminated_by == "submit" and traj.selection is not None:
            adv[-1] = value
        out.append(adv)
    return out


@register_reward("esm")
class ESM:
    """Event-level search modelling: first-discovery advantages on search turns."""

    name = "esm"
    kind = "credit"

    def score_group(self, trajectories: list[Trajectory], task: Task) -> GroupCredit:
        check_group(trajectories, task)
        gold = task.gold
        turn_adv = esm_turn_advantages(trajectories, gold)
        tools, z = esm_tool_advantages(trajectories, gold)
        seen = [t.seen for t in trajectories]
        recall = np.array([search_recall(s, gold) for s in seen])
        found_any = np.array([[tool in s for s in seen] for tool in tools], dtype=bool).reshape(len(tools), -1)
        n_tools = max(len(tools), 1)
        credited = [sum(1 for _, f in first_discoveries(t, gold) if f) for t in trajectories]
        zero_var = bool(np.all(z == 0.0))
        return GroupCredit(
            rewards=recall,
            advantages=grpo_advantage(recall),
            turn_advantages=turn_adv,
            components={
                "search_recall": float(recall.mean()),
                "discovery_events": float(np.mean(credited)),
                "mastered_tools": float(found_any.all(axis=1).sum() / n_tools),
                "never_found_tools": float((~found_any.any(axis=1)).sum() / n_tools),
                "positive_turns": float(np.mean([np.sum(a > 0) for a in turn_adv])),
                "zero_var": float(zero_var),
            },
        )


@register_reward("tca")
class TCA:
    """Trajectory-aligned credit: exact-match selection advantage, gated on full retrieval."""

    name = "tca"
    kind = "credit"

    def __init__(self, gate: str = "full_retrieval", gate_group: str = "all"):
        if gate not in TCA_GATES:
            raise ValueError(f"unknown TCA gate {gate!r}; choose one of {TCA_GATES}")
        if gate_group not in TCA_GATE_GROUPS:
            raise ValueError(f"unknown TCA gate_group {gate_group!r}; choose one of {TCA_GATE_GROUPS}")
        self.gate, self.gate_group = gate, gate_group

    def score_group(self, trajectories: list[Trajectory], task: Task) -> GroupCredit:
        check_group(trajectories, task)
        gold = task.gold
        adv = tca_selection_advantages(trajectories, gold, self.gate, self.gate_group)
        s = np.array([selection_match(t.selection, gold) for t in trajectories])
        on = np.array([tca_gate(t, gold, self.gate) for t in trajectories], dtype=bool)
        normalised = s if self.gate_group == "all" else s[on]
        return GroupCredit(
            rewards=s,
            advantages=adv,
            turn_advantages=place_on_submit_turn(trajectories, adv),
            components={
                "match": float(s.mean()),
                "full_retrieval": float(np.mean([tca_gate(t, gold, "full_retrieval") for t in trajectories])),
                "answered": float(np.mean([tca_gate(t, gold, "answered") for t in trajectories])),
                "gate_open": float(on.mean()),
                "zero_var": float(is_zero_variance(normalised) or not on.any()),
            },
        )


class _OutcomeReward:
    """Base for one scalar reward per rollout; a composite adds these up and then normalises."""

    name = "outcome"
    kind = "outcome"

    def reward(self, traj: Trajectory, gold: Collection[str]) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def score_group(self, trajectories: list[Trajectory], task: Task) -> GroupCredit:
        check_group(trajectories, task)
        r = np.array([self.reward(t, task.gold) for t in trajectories], dtype=np.float64)
        return GroupCredit(
            rewards=r,
            advantages=grpo_advantage(r),
            components={"mean": float(r.mean()), "zero_var": float(is_zero_variance(r))},
        )


@register_reward("selection_f1")
class SelectionF1(_OutcomeReward):
    """R_i = F1(S_i, G) of the submitted set (0 without a submit)."""

    name = "selection_f1"

    def reward(self, traj: Trajectory, gold: Collection[str]) -> float:
        return selection_prf(traj.selection, gold)[2]


@register_reward("selection_match")
class SelectionMatch(_OutcomeReward):
    """R_i = 1[S_i == G] (0 without a submit)."""

    name = "selection_match"

    def reward(self, traj: Trajectory, gold: Collection[str]) -> float:
        return selection_match(traj.selection, gold)


@register_reward("search_recall")
class SearchRecall(_OutcomeReward):
    """R_i = SRecall_i = |G ∩ seen_i| / |G|."""

    name = "search_recall"

    def reward(self, traj: Trajectory, gold: Collection[str]) -> float:
        return search_recall(traj.seen, gold)
