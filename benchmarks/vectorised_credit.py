"""A vectorised (numpy) ESM + TCA over many groups at once: the comparison path of ``benchmarks/rewards.py``.

Not part of the package: the reward modules (``toolgym.rewards.search``) are the one
implementation training and replay use. This file re-expresses the same credit on padded arrays
to measure what vectorising would buy; ``tests/test_rewards_properties.py`` checks it agrees with
the ``toolsearcher`` scheme on random groups. First discoveries and the TCA gate come from the
package functions (``first_discoveries``, ``tca_gate``, ``submitted_selection``), so only the GRPO
arithmetic is re-expressed here.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from toolgym.data.records import Task, Trajectory
from toolgym.retrieval.metrics import selection_match
from toolgym.rewards import first_discoveries, grpo_advantage, grpo_advantage_masked, tca_gate
from toolgym.rewards.search import check_tca_options, submitted_selection, turn_count


@dataclass
class SearchBatch:
    """B groups of G rollouts, gold sets padded to K tools.

    ``first_turn[b, g, k]``: turn of the search that first returned gold tool k (−1: never, or
    padding); ``match[b, g]`` = 1[S == G]; ``gate_open[b, g]``: TCA's gate; ``submitted[b, g]``:
    ended with a submitted selection; ``num_turns[b, g]``.
    """

    first_turn: np.ndarray
    match: np.ndarray
    gate_open: np.ndarray
    submitted: np.ndarray
    num_turns: np.ndarray

    @property
    def max_turns(self) -> int:
        return int(self.num_turns.max(initial=0))


def encode_search_groups(groups: Sequence[tuple[Task, Sequence[Trajectory]]], gate: str = "full_retrieval") -> SearchBatch:
    """Turn (task, rollouts) groups into a :class:`SearchBatch` (every group must have the same G)."""
    if not groups:
        raise ValueError("no groups to encode")
    sizes = {len(trajs) for _, trajs in groups}
    if len(sizes) != 1:
        raise ValueError(f"vectorised credit needs equal group sizes, got {sorted(sizes)}")
    g, b = sizes.pop(), len(groups)
    k = max(1, max(len(task.gold) for task, _ in groups))
    first_turn = np.full((b, g, k), -1, dtype=np.int64)
    match = np.zeros((b, g))
    gate_open = np.zeros((b, g), dtype=bool)
    submitted = np.zeros((b, g), dtype=bool)
    num_turns = np.zeros((b, g), dtype=np.int64)
    for bi, (task, trajs) in enumerate(groups):
        column = {tool: j for j, tool in enumerate(sorted(task.gold))}
        for gi, traj in enumerate(trajs):
            num_turns[bi, gi] = turn_count(traj)
            submitted[bi, gi] = submitted_selection(traj)
            gate_open[bi, gi] = tca_gate(traj, task.gold, gate)
            match[bi, gi] = selection_match(traj.selection, task.gold)
            for turn, found in first_discoveries(traj, task.gold):
                for tool in found:
                    first_turn[bi, gi, column[tool]] = turn
    return SearchBatch(first_turn, match, gate_open, submitted, num_turns)


def esm_tca_batch(batch: SearchBatch, gate_group: str = "all") -> np.ndarray:
    """Per-turn advantages [B, G, T] = ESM event advantage + TCA selection advantage.

    ESM: z = GRPO over g of r[b, g, k] = 1[first_turn ≥ 0] (padding columns are 0 everywhere, so z = 0);
    A[b, g, t] = max_{k: first_turn[b,g,k] = t} z[b, g, k] (0 if no such k).
    TCA: A_sel = gate · GRPO_g(match) (``gated``: normalised over gated rollouts only), added at
    t = num_turns − 1 of rollouts that submitted. Turns ≥ num_turns are 0.
    """
    check_tca_options("full_retrieval", gate_group)
    t_max = batch.max_turns
    found = batch.first_turn >= 0  # [B, G, K]
    z = np.swapaxes(grpo_advantage(np.swapaxes(found.astype(np.float64), 1, 2)), 1, 2)  # GRPO over G
    turns = np.arange(t_max)
    hit = batch.first_turn[..., None] == turns  # [B, G, K, T]
    esm = np.where(hit, z[..., None], -np.inf).max(axis=2, initial=-np.inf)
    esm = np.where(np.isfinite(esm), esm, 0.0)
    on = batch.gate_open
    sel = np.where(on, grpo_advantage(batch.match), 0.0) if gate_group == "all" else grpo_advantage_masked(batch.match, on)
    at_submit = (turns == (batch.num_turns - 1)[..., None]) & batch.submitted[..., None]
    out = esm + np.where(at_submit, sel[..., None], 0.0)
    return np.where(turns < batch.num_turns[..., None], out, 0.0)
