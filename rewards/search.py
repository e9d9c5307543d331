"""ToolSearcher credit (docs/decisions.md#esm, #tca): ESM first-discovery event advantages and TCA selection
credit, plus the plain outcome rewards (selection F1 / Match, search recall) used by the
``grpo_f1`` / ``grpo_match`` baselines.

Turns are 0-based. ``SearchEvent.turn`` is the turn of that search; the submit happens at turn
``num_turns - 1`` when ``terminated_by == "submit"``. First-found sets are recomputed from the
ranked results with :func:`toolgym.data.records.first_found` (the formula's definition; a replayed
file may come from elsewhere, without or with a different ``first_found``); a recorded value that
disagrees is counted in ``esm/first_found_mismatches``, never used.
"""
from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from toolgym.data.records import Task, Trajectory, first_found_per_search
from toolgym.retrieval.metrics import search_recall, selection_match, selection_prf
from toolgym.rewards.base import (
    GroupCredit,
    check_group,
    grpo_advantage,
    grpo_advantage_masked,
    is_zero_variance,
    outcome_credit,
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
    """Per search event, in order: (turn, F) with F = results(e) ∩ (G \\ results(events before e)).

    Computed by :func:`toolgym.data.records.first_found_per_search` from the ranked results, never
    read from ``SearchEvent.first_found`` (see the module docstring).
    """
    found = first_found_per_search((e.results for e in traj.events), gold)
    return [(e.turn, f) for e, f in zip(traj.events, found)]


def recorded_first_found_mismatches(traj: Trajectory, discoveries: list[tuple[int, list[str]]]) -> int:
    """Events whose recorded ``first_found`` (when the writer recorded one) differs from the recomputed F."""
    return sum(e.first_found is not None and set(e.first_found) != set(f) for e, (_, f) in zip(traj.events, discoveries))


def esm_tool_advantages(trajectories: Sequence[Trajectory], gold: Collection[str]) -> tuple[list[str], np.ndarray]:
    """Per gold tool T the GRPO-normalised retrieval reward: z(T, i) = GRPO_i(r(T, ·)).

    r(T, i) = 1 if T appears in any search result of rollout i, else 0. Returns the gold ids
    (sorted) and z as a [|G|, G_rollouts] array; a tool every rollout found (mastered) or none
    found gets z = 0. An empty gold set gives a [0, G_rollouts] array.
    """
    tools = sorted(gold)
    seen = [t.seen for t in trajectories]
    r = np.array([[1.0 if tool in s else 0.0 for s in seen] for tool in tools]).reshape(len(tools), len(trajectories))
    return tools, grpo_advantage(r)


ESM_AGGREGATES = ("max", "mean")


def check_esm_aggregate(aggregate: str) -> None:
    if aggregate not in ESM_AGGREGATES:
        raise ValueError(f"unknown ESM aggregate {aggregate!r}; choose one of {ESM_AGGREGATES}")


def _esm_event_advantages(trajectories: Sequence[Trajectory], tools: list[str], z: np.ndarray,
                          discoveries: list[list[tuple[int, list[str]]]], aggregate: str = "max") -> list[np.ndarray]:
    check_esm_aggregate(aggregate)
    pool = max if aggregate == "max" else (lambda values: float(np.mean(list(values))))
    row = {tool: k for k, tool in enumerate(tools)}
    out = []
    for i, (traj, events) in enumerate(zip(trajectories, discoveries)):
        adv = np.zeros(turn_count(traj))
        found_at: dict[int, list[str]] = {}
        for turn, found in events:
            if found:
                found_at.setdefault(turn, []).extend(found)
        for turn, found in found_at.items():
            adv[turn] = pool(z[row[t], i] for t in found)
        out.append(adv)
    return out


def esm_turn_advantages(trajectories: Sequence[Trajectory], gold: Collection[str],
                        aggregate: str = "max") -> list[np.ndarray]:
    """ESM event advantage, placed on the turn of each search event.

    A_{i,e} = max_{T ∈ F_e} z(T, i)  if F_e ≠ ∅, else 0   (``aggregate="max"``, the paper),
    A_{i,e} = (1/|F_e|) Σ_{T ∈ F_e} z(T, i)               (``aggregate="mean"``, an ablation),
    F_e = results(e) ∩ (G \\ results(events of rollout i before e)),  z from
    :func:`esm_tool_advantages`. Turns without a search event get 0; if a turn holds several
    events its F is the union of theirs. With one tool per event the two agree; they differ only
    for a search that discovers several gold tools of unequal rarity in the group.
    """
    tools, z = esm_tool_advantages(trajectories, gold)
    return _esm_event_advantages(trajectories, tools, z, [first_discoveries(t, gold) for t in trajectories], aggregate)


def submitted_selection(traj: Trajectory) -> bool:
    """The rollout ended with a submitted selection (the turn TCA's selection credit lands on)."""
    return traj.terminated_by == "submit" and traj.selection is not None


def check_tca_options(gate: str, gate_group: str) -> None:
    """Clear errors for an unknown TCA ``gate`` or ``gate_group``."""
    if gate not in TCA_GATES:
        raise ValueError(f"unknown TCA gate {gate!r}; choose one of {TCA_GATES}")
    if gate_group not in TCA_GATE_GROUPS:
        raise ValueError(f"unknown TCA gate_group {gate_group!r}; choose one of {TCA_GATE_GROUPS}")


def tca_gate(traj: Trajectory, gold: Collection[str], gate: str = "full_retrieval") -> bool:
    """Whether TCA lets rollout i learn selection.

    ``full_retrieval`` (the paper): full_i = G ⊆ seen_i (false for an empty G). ``answered`` (the
    authors' released code): the rollout ended with a submitted answer.
    """
    if gate == "full_retrieval":
        return bool(gold) and set(gold) <= traj.seen
    if gate == "answered":
        return submitted_selection(traj)
    raise ValueError(f"unknown TCA gate {gate!r}; choose one of {TCA_GATES}")


def selection_matches(trajectories: Sequence[Trajectory], gold: Collection[str]) -> np.ndarray:
    """TCA's selection reward per rollout: s_i = Match(S_i, G) = 1[S_i == G] (0 without a submit)."""
    return np.array([selection_match(t.selection, gold) for t in trajectories], dtype=np.float64)


def _tca_advantage(s: np.ndarray, on: np.ndarray, gate_group: str) -> np.ndarray:
    if gate_group == "all":
        return np.where(on, grpo_advantage(s), 0.0)
    return grpo_advantage_masked(s, on)


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
    check_tca_options(gate, gate_group)
    s = selection_matches(trajectories, gold)
    on = np.array([tca_gate(t, gold, gate) for t in trajectories], dtype=bool)
    return _tca_advantage(s, on, gate_group)


def place_on_submit_turn(trajectories: Sequence[Trajectory], values: np.ndarray) -> list[np.ndarray]:
    """Per rollout an array of length num_turns, ``values[i]`` at the submit turn, 0 elsewhere.

    A rollout that never submitted has no selection tokens, so its value lands nowhere.
    """
    out = []
    for traj, value in zip(trajectories, values):
        adv = np.zeros(turn_count(traj))
        if submitted_selection(traj):
            adv[-1] = value
        out.append(adv)
    return out


@register_reward("esm")
class ESM:
    """Event-level search modelling: first-discovery advantages on search turns.

    ``aggregate``: how a search that first discovers several gold tools is credited, ``max`` over
    their z (the paper) or their ``mean`` (:func:`esm_turn_advantages`). An empty gold set
    (nothing to discover) gives zero credit, not an error.
    """

    name = "esm"
    kind = "credit"
    needs: frozenset[str] = frozenset()

    def __init__(self, aggregate: str = "max"):
        check_esm_aggregate(aggregate)
        self.aggregate = aggregate

    def score_group(self, trajectories: list[Trajectory], task: Task) -> GroupCredit:
        check_group(trajectories, task)
        gold = task.gold
        tools, z = esm_tool_advantages(trajectories, gold)
        discoveries = [first_discoveries(t, gold) for t in trajectories]
        turn_adv = _esm_event_advantages(trajectories, tools, z, discoveries, self.aggregate)
        seen = [t.seen for t in trajectories]
        recall = np.array([search_recall(s, gold) for s in seen])
        found_any = np.array([[tool in s for s in seen] for tool in tools], dtype=bool).reshape(len(tools), len(trajectories))
        n_tools = max(len(tools), 1)
        credited = [sum(1 for _, f in events if f) for events in discoveries]
        # events that first-find >= 2 gold tools: the only ones where max and mean aggregation differ
        multi = sum(1 for events in discoveries for _, f in events if len(f) >= 2)
        mismatches = sum(recorded_first_found_mismatches(t, d) for t, d in zip(trajectories, discoveries))
        return GroupCredit(
            rewards=recall,
            advantages=grpo_advantage(recall),
            turn_advantages=turn_adv,
            components={
                "search_recall": float(recall.mean()),
                "discovery_events": float(np.mean(credited)),
                "multi_tool_discovery_share": float(multi / max(sum(credited), 1)),
                "mastered_tools": float(found_any.all(axis=1).sum() / n_tools),
                "never_found_tools": float((~found_any.any(axis=1)).sum() / n_tools),
                "positive_turns": float(np.mean([np.sum(a > 0) for a in turn_adv])),
                "first_found_mismatches": float(mismatches),
                "zero_var": float(bool(np.all(z == 0.0))),
            },
        )


@register_reward("tca")
class TCA:
    """Trajectory-aligned credit: exact-match selection advantage, gated on full retrieval."""

    name = "tca"
    kind = "credit"
    needs: frozenset[str] = frozenset()

    def __init__(self, gate: str = "full_retrieval", gate_group: str = "all"):
        check_tca_options(gate, gate_group)
        self.gate, self.gate_group = gate, gate_group

    def score_group(self, trajectories: list[Trajectory], task: Task) -> GroupCredit:
        check_group(trajectories, task)
        gold = task.gold
        s = selection_matches(trajectories, gold)
        full = np.array([tca_gate(t, gold, "full_retrieval") for t in trajectories], dtype=bool)
        answered = np.array([tca_gate(t, gold, "answered") for t in trajectories], dtype=bool)
        on = full if self.gate == "full_retrieval" else answered
        adv = _tca_advantage(s, on, self.gate_group)
        normalised = s if self.gate_group == "all" else s[on]
        return GroupCredit(
            rewards=s,
            advantages=adv,
            turn_advantages=place_on_submit_turn(trajectories, adv),
            components={
                "match": float(s.mean()),
                "full_retrieval": float(full.mean()),
                "answered": float(answered.mean()),
                "gate_open": float(on.mean()),
                "zero_var": float(is_zero_variance(normalised) or not on.any()),
            },
        )


class _OutcomeReward:
    """Base for one scalar reward per rollout; a composite adds these up and then normalises."""

    name = "outcome"
    kind = "outcome"
    needs: frozenset[str] = frozenset()

    def reward(self, traj: Trajectory, gold: Collection[str]) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def score_group(self, trajectories: list[Trajectory], task: Task) -> GroupCredit:
        check_group(trajectories, task)
        r = np.array([self.reward(t, task.gold) for t in trajectories], dtype=np.float64)
        return outcome_credit(r, {"mean": float(r.mean())})


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


@register_reward("valid_actions")
class ValidActions(_OutcomeReward):
    """R_i = 1 − invalid_actions_i / num_turns_i (1 for a rollout of no turns).

    Not from either paper: a format term. ESM's credit is never negative (it sits on discovery
    events), so under ``esm_only`` / ``toolsearcher`` nothing pushes down a turn the env rejected,
    e.g. a query cut at the turn's token limit; GRPO-normalised, this term does.
    """

    name = "valid_actions"

    def reward(self, traj: Trajectory, gold: Collection[str]) -> float:
        return 1.0 - traj.invalid_actions / traj.num_turns if traj.num_turns > 0 else 1.0


@register_reward("search_recall")
class SearchRecall(_OutcomeReward):
    """R_i = SRecall_i = |G ∩ seen_i| / |G|."""

    name = "search_recall"

    def reward(self, traj: Trajectory, gold: Collection[str]) -> float:
        return search_recall(traj.seen, gold)
