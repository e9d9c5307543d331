"""The reward-module interface, GRPO normalisation and the registry (docs/decisions.md#grpo-normalisation).

A reward module scores a *group* (the G rollouts of one task) and returns a
:class:`GroupCredit`. The trainer gives the tokens of turn ``t`` of rollout ``i`` the advantage
``turn_advantages[i][t]`` when ``turn_advantages`` is not ``None``, else ``advantages[i]``.
"""
from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol, runtime_checkable

import numpy as np

from toolgym.data.records import Task, Trajectory

GRPO_EPS = 1e-6
# Rewards whose range is below this (relative to their magnitude, at least 1) count as "all
# equal": float noise such as 0.1 + 0.2 vs 0.3 must not become a ±1 advantage.
ZERO_VARIANCE_RTOL = 1e-12


def _spread_is_zero(r: np.ndarray, where: np.ndarray | None = None) -> np.ndarray:
    """Per group (last axis): max − min ≤ 1e-12 · max(1, max |R|) over the members in ``where``."""
    hi = np.max(r, axis=-1, keepdims=True, initial=-np.inf, where=True if where is None else where)
    lo = np.min(r, axis=-1, keepdims=True, initial=np.inf, where=True if where is None else where)
    scale = np.maximum(1.0, np.maximum(np.abs(hi), np.abs(lo)))
    return ~((hi - lo) > ZERO_VARIANCE_RTOL * scale)


@dataclass
class GroupCredit:
    """Credit for one group of rollouts of one task.

    ``rewards``: [G] scalar reward per rollout (logged as "reward").
    ``advantages``: [G] outcome advantage, used for every turn when ``turn_advantages`` is None.
    ``turn_advantages``: per rollout an array of length ``num_turns``: the advantage of the tokens
    the policy generated in each (0-based) turn.
    ``components``: every component by name (``"module/name"``), group means, plus
    ``"module/zero_var"`` flags (1.0 when that module's group normalisation saw equal rewards).
    """

    rewards: np.ndarray
    advantages: np.ndarray
    turn_advantages: list[np.ndarray] | None = None
    components: dict[str, float] = field(default_factory=dict)

    def rollout_turn_advantages(self, rollout: int, num_turns: int) -> np.ndarray:
        """Advantages of turns ``0 .. num_turns − 1`` of ``rollout``: the one rule for spreading credit over turns.

        With per-turn credit, ``turn_advantages[rollout]`` cut or zero-padded to ``num_turns`` (a turn
        the scheme did not score, e.g. a cut last turn, gets 0: no credit was assigned to it).
        Without, the outcome advantage ``advantages[rollout]`` on every turn.
        """
        if num_turns < 0:
            raise ValueError(f"num_turns must be ≥ 0, got {num_turns}")
        if self.turn_advantages is None:
            return np.full(num_turns, float(self.advantages[rollout]))
        per_turn = np.asarray(self.turn_advantages[rollout], dtype=np.float64)[:num_turns]
        return np.concatenate([per_turn, np.zeros(num_turns - len(per_turn))])

    def token_advantage(self, rollout: int, turn: int) -> float:
        """The advantage the trainer gives the tokens of ``turn`` of ``rollout`` (:meth:`rollout_turn_advantages`)."""
        return float(self.rollout_turn_advantages(rollout, turn + 1)[turn])


_nonfinite_warned = False


def warn_nonfinite_once(count: int) -> None:
    """One RuntimeWarning per process for NaN/inf rewards (each group also counts them in a component)."""
    global _nonfinite_warned
    if count and not _nonfinite_warned:
        _nonfinite_warned = True
        warnings.warn(f"{count} NaN/inf reward(s) in a group: those rollouts get advantage 0 and the rest are "
                      "normalised without them (counted as '…/nonfinite_rewards'; warned once)", RuntimeWarning, stacklevel=3)


def grpo_advantage(rewards: Iterable[float] | np.ndarray, eps: float = GRPO_EPS) -> np.ndarray:
    """GRPO group normalisation: A_i = (R_i − mean(R)) / (std(R) + eps).

    Population std (ddof=0), eps = 1e-6. A group whose rewards are all equal gets 0 (also when
    the spread is float noise), and so does a group of one. Works on the last axis, so an
    ``[..., G]`` array normalises every group at once. A NaN/inf reward gets 0 and the group is
    normalised over its finite members (:func:`grpo_advantage_masked`), with a warning once.
    """
    r = np.asarray(rewards, dtype=np.float64)
    finite = np.isfinite(r)
    if not finite.all():
        warn_nonfinite_once(int((~finite).sum()))
        return grpo_advantage_masked(r, finite, eps)
    if r.shape[-1] <= 1:
        return np.zeros_like(r)
    mean = r.mean(axis=-1, keepdims=True)
    std = r.std(axis=-1, keepdims=True)
    adv = (r - mean) / (std + eps)
    return np.where(_spread_is_zero(r), 0.0, adv)


def grpo_advantage_masked(rewards: np.ndarray, mask: np.ndarray, eps: float = GRPO_EPS) -> np.ndarray:
    """GRPO normalisation over the members with ``mask`` true only (others get 0).

    A_i = (R_i − mean_{j∈M} R_j) / (std_{j∈M} R + eps) for i ∈ M, else 0; |M| ≤ 1 or equal
    rewards inside M give 0. Last axis is the group axis. NaN/inf rewards are left out of M.
    """
    r = np.asarray(rewards, dtype=np.float64)
    m = np.asarray(mask, dtype=bool) & np.isfinite(r)
    r = np.where(m, r, 0.0)
    n = m.sum(axis=-1, keepdims=True)
    safe_n = np.maximum(n, 1)
    mean = np.where(m, r, 0.0).sum(axis=-1, keepdims=True) / safe_n
    var = np.where(m, (r - mean) ** 2, 0.0).sum(axis=-1, keepdims=True) / safe_n
    std = np.sqrt(var)
    adv = (r - mean) / (std + eps)
    ok = m & (n > 1) & ~_spread_is_zero(r, m)
    return np.where(ok, adv, 0.0)


def is_zero_variance(rewards: Iterable[float] | np.ndarray) -> bool:
    """True when GRPO normalisation of this group gives all zeros (equal finite rewards or ≤ 1 finite)."""
    r = np.asarray(rewards, dtype=np.float64).reshape(-1)
    r = r[np.isfinite(r)]
    return r.size <= 1 or bool(_spread_is_zero(r.reshape(-1)).all())


def nonfinite_count(rewards: np.ndarray) -> int:
    """How many rewards are NaN or ±inf."""
    return int((~np.isfinite(np.asarray(rewards, dtype=np.float64))).sum())


def outcome_credit(rewards: Iterable[float] | np.ndarray, components: dict[str, float] | None = None) -> GroupCredit:
    """The credit of an outcome module: GRPO advantages of its rewards, plus ``zero_var`` and ``nonfinite_rewards``."""
    r = np.asarray(rewards, dtype=np.float64)
    return GroupCredit(
        rewards=r,
        advantages=grpo_advantage(r),
        components={**(components or {}), "zero_var": float(is_zero_variance(r)), "nonfinite_rewards": float(nonfinite_count(r))},
    )


def check_group(trajectories: list[Trajectory], task: Task) -> None:
    """Clear errors for a group that cannot be scored (empty, or rollouts of another task)."""
    if not trajectories:
        raise ValueError(f"task {task.id!r}: a group needs at least one trajectory")
    for t in trajectories:
        if t.task_id != task.id:
            raise ValueError(f"trajectory of task {t.task_id!r} in the group of task {task.id!r}")


@runtime_checkable
class RewardModule(Protocol):
    """What every reward module (and a composite of them) provides.

    ``kind`` is ``"outcome"`` when the module only produces rewards that a composite adds up and
    then normalises (GRPO on the weighted sum), or ``"credit"`` when it produces its own
    advantages (ESM, TCA), which a composite adds up with their weights.

    A module class may declare ``needs``: the runtime objects its constructor must be given
    (a subset of ``{"retrieve", "embed", "judge"}``; absent = none). ``build_reward`` and
    ``toolgym replay`` check them before building (:func:`~toolgym.rewards.build.runtime_needs`).
    """

    name: str
    kind: str

    def score_group(self, trajectories: list[Trajectory], task: Task) -> GroupCredit: ...


# -- registry ------------------------------------------------------------------------------
_REGISTRY: dict[str, Callable[..., RewardModule]] = {}


def register_reward(name: str) -> Callable[[Callable[..., RewardModule]], Callable[..., RewardModule]]:
    """Class/factory decorator: make ``get_reward(name, **options)`` build it."""

    def wrap(factory: Callable[..., RewardModule]) -> Callable[..., RewardModule]:
        if name in _REGISTRY and _REGISTRY[name] is not factory:
            raise ValueError(f"reward module {name!r} is already registered")
        _REGISTRY[name] = factory
        return factory

    return wrap


def reward_names() -> list[str]:
    """Registered module names (schemes such as ``toolsearcher`` are in ``scheme_names()``)."""
    return sorted(_REGISTRY)


def get_reward_factory(name: str) -> Callable[..., RewardModule]:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown reward module {name!r}; registered: {reward_names()}") from None


def option_names(factory: Callable[..., Any]) -> list[str]:
    """The keyword options a module's constructor takes (runtime objects included)."""
    return [p for p in inspect.signature(factory).parameters if p != "self"]


def accepts_option(factory: Callable[..., Any], option: str) -> bool:
    """Whether ``factory(**{option: ...})`` is accepted (a named parameter or ``**kwargs``)."""
    params = inspect.signature(factory).parameters
    return option in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def call_with_supported(factory: Callable[..., Any], options: dict[str, Any], runtime: dict[str, Any]) -> Any:
    """Call ``factory(**options)`` plus those ``runtime`` objects (retrieve, embed, ...) it accepts.

    Unknown *options* are an error (a typo in a config must not pass silently); runtime objects
    a module does not take are simply not passed.
    """
    unknown = [k for k in options if not accepts_option(factory, k)]
    if unknown:
        raise ValueError(f"{getattr(factory, '__name__', factory)}: unknown option(s) {unknown}; "
                         f"accepted: {option_names(factory)}")
    kwargs = dict(options)
    for key, value in runtime.items():
        if value is not None and key not in kwargs and accepts_option(factory, key):
            kwargs[key] = value
    return factory(**kwargs)
