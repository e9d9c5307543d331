"""Per-turn credit for verl: toolgym reward modules score each GRPO group, the advantage lands
on each turn's tokens (docs/decisions.md#token-credit-and-loss-masking, #ray-and-verl).

verl hands an advantage estimator only ``token_level_rewards, response_mask, index, config``,
and its reward loop scores one sample at a time. A toolgym reward module needs the whole group
(ESM, TCA, ... compare rollouts). So the credit is computed where the whole batch is seen, in
``ToolgymAgentLoopManager`` (:mod:`.agent_loop`), and handed to the estimator through the one
tensor it receives, in the *turn-end layout*:

    token_level_scores[i, e_t − 1] = A_{i,t}   for every turn t of rollout i with response span [s_t, e_t)

and 0 elsewhere. The estimator ``toolgym_turn_credit`` spreads each value back over its turn:

    A[i, p] = token_level_rewards[i, end(p) − 1] · response_mask[i, p]

where ``end(p)`` is the end of the run of 1s in ``response_mask`` that holds ``p`` (a turn's
policy tokens are one such run: tool text and template glue between turns have mask 0). The
advantages are then exactly :func:`toolgym.trainers.grpo.trajectory_token_advantages`.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Sequence

import numpy as np
import torch

from toolgym.data.records import Task, Trajectory

ESTIMATOR_NAME = "toolgym_turn_credit"


def turn_end_scores(response_mask: torch.Tensor, turn_spans: Sequence[Sequence[tuple[int, int]]],
                    turn_values: Sequence[Sequence[float]]) -> torch.Tensor:
    """The turn-end layout: ``turn_values[i][t]`` at the last policy token of rollout ``i``'s turn ``t``.

    ``turn_spans[i][t] = (start, end)`` are response positions (0 = first response token). A
    span cut by the response length keeps the part inside; a span with no policy token left
    places nothing (its tokens are not trained on).
    """
    scores = torch.zeros(response_mask.shape, dtype=torch.float32)
    mask = response_mask.bool().cpu()
    width = mask.shape[1]
    for i, (spans, values) in enumerate(zip(turn_spans, turn_values)):
        for (start, end), value in zip(spans, values):
            end = min(int(end), width)
            inside = torch.nonzero(mask[i, int(start):end]).flatten()
            if len(inside):
                scores[i, int(start) + int(inside[-1])] = float(value)
    return scores.to(response_mask.device)


def spread_turn_credit(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """``A[i, p] = r[i, end(p) − 1] · m[i, p]``: every run of 1s in the mask takes the value at its last token."""
    mask = response_mask.bool()
    nxt = torch.zeros_like(mask)
    nxt[:, :-1] = mask[:, 1:]
    run_end = mask & ~nxt
    # walk right to left: the value of a run is set at its end and carried left while the mask is 1
    values = torch.where(run_end, token_level_rewards.float(), torch.zeros_like(token_level_rewards, dtype=torch.float32))
    out = torch.zeros_like(values)
    carry = torch.zeros(mask.shape[0], dtype=torch.float32, device=mask.device)
    for p in range(mask.shape[1] - 1, -1, -1):
        carry = torch.where(run_end[:, p], values[:, p], carry)
        out[:, p] = torch.where(mask[:, p], carry, torch.zeros_like(carry))
    return out


def compute_turn_credit_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                  index: Any = None, config: Any = None, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """verl advantage estimator ``toolgym_turn_credit``: advantages (= returns) from the turn-end layout.

    The group normalisation already happened in the toolgym reward module; this only places each
    turn's advantage on that turn's tokens (see the module docstring for the equation).
    """
    with torch.no_grad():
        adv = spread_turn_credit(token_level_rewards, response_mask)
    return adv, adv


def register_estimator() -> None:
    """Register ``toolgym_turn_credit`` with verl (idempotent: a second import registers nothing new)."""
    from verl.trainer.ppo import core_algos

    if core_algos.ADV_ESTIMATOR_REGISTRY.get(ESTIMATOR_NAME) is not compute_turn_credit_advantage:
        core_algos.register_adv_est(ESTIMATOR_NAME)(compute_turn_credit_advantage)


def per_turn_values(credit: Any, index: int, num_turns: int) -> np.ndarray:
    """Turn ``t``'s advantage for rollout ``index`` of a group (the rule of ``trajectory_token_advantages``)."""
    if credit.turn_advantages is not None:
        values = np.asarray(credit.turn_advantages[index], dtype=np.float64)[:num_turns]
        return np.concatenate([values, np.zeros(num_turns - len(values))])
    return np.full(num_turns, float(credit.advantages[index]))


def group_rows(keys: Sequence[Any]) -> "OrderedDict[Any, list[int]]":
    """Row indices per group key, groups in first-seen order."""
    groups: OrderedDict[Any, list[int]] = OrderedDict()
    for row, key in enumerate(keys):
        groups.setdefault(key, []).append(row)
    return groups


def score_groups(trajectories: Sequence[Trajectory], group_keys: Sequence[Any], task_of: Callable[[str], Task],
                 reward: Any, turn_counts: Sequence[int]) -> tuple[list[np.ndarray], np.ndarray, dict[str, float]]:
    """Score each group with a toolgym reward module.

    Returns per-row turn advantages (``turn_counts[i]`` values each), per-row rewards and the
    mean of every numeric component over groups (for logging).
    """
    values: list[np.ndarray] = [np.zeros(0)] * len(trajectories)
    rewards = np.zeros(len(trajectories), dtype=np.float64)
    comps: dict[str, list[float]] = {}
    for rows in group_rows(group_keys).values():
        trajs = [trajectories[r] for r in rows]
        ids = {t.task_id for t in trajs}
        if len(ids) != 1:
            raise ValueError(f"one GRPO group holds rollouts of several tasks: {sorted(ids)}")
        credit = reward.score_group(trajs, task_of(trajs[0].task_id))
        for j, r in enumerate(rows):
            values[r] = per_turn_values(credit, j, int(turn_counts[r]))
            rewards[r] = float(credit.rewards[j])
        for k, v in (credit.components or {}).items():
            if isinstance(v, (int, float)) and np.isfinite(float(v)):
                comps.setdefault(k, []).append(float(v))
    return values, rewards, {k: float(np.mean(v)) for k, v in comps.items()}
