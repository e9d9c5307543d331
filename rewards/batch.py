"""Vectorised ESM + TCA over many groups at once (numpy), for large batches.

The same credit as the ``toolsearcher`` scheme (ESM on search turns + TCA on the submit turn),
computed on padded arrays; ``tests/test_rewards_batch.py`` checks both agree and
``benchmarks/rewards.py`` times them.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from toolgym.data.records import Task, Trajectory
from toolgym.retrieval.metrics import selection_match
from toolgym.rewards.base import grpo_advantage, grpo_advantage_masked
from toolgym.rewards.search import TCA_GATE_GROUPS, TCA_GATES, turn_count


@dataclass
class SearchBatch:
    """B groups of G rollouts, gold sets padded to K tools, turns padded to T.

    ``first_turn[b, g, k]``: turn of the search that first returned gold tool k (−1: never, or
    padding); ``gold_mask[b, k]``: tool k is real; ``match[b, g]`` = 1[S == G];
    ``submitted[b, g]``: ended with a submit; ``num_turns[b, g]``.
    """

    first_turn: np.ndarray
    gold_mask: np.ndarray
    match: np.ndarray
    submitted: np.ndarray
    num_turns: np.ndarray

    @property
    def max_turns(self) -> int:
        return int(self.num_turns.max(initial=0))


def encode_search_groups(groups: Sequence[tuple[Task, Sequence[Trajectory]]]) -> SearchBatch:
    """Turn (task, rollouts) groups into a :class:`SearchBatch` (every group must have the same G)."""
    if not groups:
        raise ValueError("no groups to encode")
    sizes = {len(trajs) for _, trajs in groups}
    if len(sizes) != 1:
        raise ValueError(f"vectorised credit needs equal group sizes, got {sorted(sizes)}")
    g = sizes.pop()
    b = len(groups)
    k = max(1, max(len(task.gold) for task, _ in groups))
    first_turn = np.full((b, g, k), -1, dtype=np.int64)
    gold_mask = np.zeros((b, k), dtype=bool)
    match = np.zeros((b, g))
    submitted = np.zeros((b, g), dtype=bool)
    num_turns = np.zeros((b, g), dtype=np.int64)
    for bi, (task, trajs) in enumerate(groups):
        column = {tool: j for j, tool in enumerate(sorted(task.gold))}
        gold_mask[bi, : len(column)] = True
        for gi, traj in enumerate(trajs):
            num_turns[bi, gi] = turn_count(traj)
            submitted[bi, gi] = traj.terminated_by == "submit" and traj.selection is not None
            match[bi, gi] = selection_match(traj.selection, task.gold)
            row = first_turn[bi, gi]
            for event in traj.events:
                for tool in event.results:
                    j = column.get(tool)
                    if j is not None and row[j] < 0:
                        row[j] = event.turn
    return SearchBatch(first_turn, gold_mask, match, submitted, num_turns)


def esm_tca_batch(batch: SearchBatch, gate: str = "full_retrieval", gate_group: str = "all") -> np.ndarray:
    """Per-turn advantages [B, G, T] = ESM event advantage + TCA selection advantage.

    ESM: z = GRPO over g of r[b, g, k] = 1[first_turn ≥ 0];
    A[b, g, t] = max_{k: first_turn[b,g,k] = t} z[b, g, k] (0 if no such k).
    TCA: A_sel = gate · GRPO_g(match) (``gated``: normalised over gated rollouts only), added at
    t = num_turns − 1 of rollouts that submitted. Turns ≥ num_turns are 0.
    """
    if gate not in TCA_GATES:
        raise ValueError(f"unknown TCA gate {gate!r}; choose one of {TCA_GATES}")
    if gate_group not in TCA_GATE_GROUPS:
        raise ValueError(f"unknown TCA gate_group {gate_group!r}; choose one of {TCA_GATE_GROUPS}")
    t_max = batch.max_turns
    found = batch.first_turn >= 0  # [B, G, K]
    z = np.swapaxes(grpo_advantage(np.swapaxes(found.astype(np.float64), 1, 2)), 1, 2)  # GRPO over G
    turns = np.arange(t_max)
    hit = batch.first_turn[..., None] == turns  # [B, G, K, T]
    esm = np.where(hit, z[..., None], -np.inf).max(axis=2, initial=-np.inf)
    esm = np.where(np.isfinite(esm), esm, 0.0)

    if gate == "full_retrieval":
        on = (found | ~batch.gold_mask[:, None, :]).all(axis=-1) & batch.gold_mask.any(axis=-1)[:, None]
    else:
        on = batch.submitted
    if gate_group == "all":
        sel = np.where(on, grpo_advantage(batch.match), 0.0)
    else:
        sel = grpo_advantage_masked(batch.match, on)
    at_submit = (turns == (batch.num_turns - 1)[..., None]) & batch.submitted[..., None]
    out = esm + np.where(at_submit, sel[..., None], 0.0)
    return np.where(turns < batch.num_turns[..., None], out, 0.0)
