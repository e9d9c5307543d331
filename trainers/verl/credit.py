"""Per-turn credit for verl: toolgym reward modules score each GRPO group, the advantage lands
on each turn's tokens (docs/decisions.md#token-credit-and-loss-masking, #ray-and-verl).

verl hands an advantage estimator only ``token_level_rewards, response_mask, index, config``,
and its reward loop scores one sample at a time. A toolgym reward module needs the whole group
(ESM, TCA, ... compare rollouts), and the turn boundaries are known only to the agent loop,
which records each turn's response span. So the credit is placed where the whole batch and the
spans are seen, in ``ToolgymAgentLoopManager`` (:mod:`.agent_loop`), and handed to the
estimator through the one tensor it receives, in the *turn-span layout*:

    token_level_scores[i, p] = A_{i,t}   for every p in the recorded span [s_t, e_t) of turn t of rollout i

and 0 elsewhere: the rule of :func:`toolgym.trainers.grpo.token_advantages`, so the advantages
are exactly :func:`toolgym.trainers.grpo.trajectory_token_advantages` of the local trainer,
also for a turn holding a mask-0 token (a forced token of constrained decoding) and for two
turns with no tool text between them, which the mask alone cannot tell apart. The estimator
``toolgym_turn_credit`` then returns that tensor as the advantages; verl's policy loss masks
tokens with ``response_mask`` as for any estimator.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Sequence

import numpy as np
import torch

from toolgym.data.records import Task, Trajectory

ESTIMATOR_NAME = "toolgym_turn_credit"


def turn_span_scores(response_mask: torch.Tensor, turn_spans: Sequence[Sequence[tuple[int, int]]],
                     turn_values: Sequence[Sequence[float]]) -> torch.Tensor:
    """The turn-span layout: ``turn_values[i][t]`` on every position of rollout ``i``'s turn ``t``.

    ``turn_spans[i][t] = (start, end)`` are response positions (0 = first response token), as
    the agent loop recorded them; ``response_mask`` gives the shape and device. A span cut by
    the response length keeps the part inside. Mask-0 positions inside a span get the value too,
    as in the local trainer (their loss is masked either way).
    """
    scores = torch.zeros(response_mask.shape, dtype=torch.float32)
    width = scores.shape[1]
    for i, (spans, values) in enumerate(zip(turn_spans, turn_values)):
        if len(values) < len(spans):
            raise ValueError(f"row {i}: {len(spans)} turn spans but {len(values)} turn values")
        for (start, end), value in zip(spans, values):
            start, end = max(int(start), 0), min(int(end), width)
            if end > start:
                scores[i, start:end] = float(value)
    return scores.to(response_mask.device)


def compute_turn_credit_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                  index: Any = None, config: Any = None, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """verl advantage estimator ``toolgym_turn_credit``: advantages (= returns) from the turn-span layout.

    The group normalisation and the placement on each turn's tokens already happened (see the
    module docstring), so the advantages are ``token_level_rewards`` as they are. A KL penalty in
    the reward (``algorithm.use_kl_in_reward``) would add a per-token term the layout does not
    describe: that is an error; use the KL loss (``actor.use_kl_loss``), as the local trainer.
    """
    use_kl_in_reward = config.get("use_kl_in_reward", False) if hasattr(config, "get") else getattr(config, "use_kl_in_reward", False)
    if use_kl_in_reward:
        raise ValueError(f"{ESTIMATOR_NAME} takes the turn-span layout as advantages: set algorithm.use_kl_in_reward=false "
                         "and put the KL term in the loss (actor.use_kl_loss=true)")
    with torch.no_grad():
        adv = token_level_rewards.detach().float().clone()
    return adv, adv.clone()


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
