"""Weighted composites of reward modules, built from a config, and the named schemes.

Combination rule (weights w_m; weight 0 = computed and logged, no effect on credit):

    reward_i      = Σ_m w_m · R_{m,i}                              (what is logged as "reward")
    A_out         = GRPO(Σ_{m outcome} w_m · R_m)                  (0 if no outcome module)
    advantages_i  = A_out_i + Σ_{m credit} w_m · A_{m,i}
    turn_adv[i][t]= A_out_i + Σ_{m credit} w_m · (turn_adv_m[i][t] if the module has turns else A_{m,i})

``turn_advantages`` is None unless some weighted credit module has per-turn advantages.
So ``magicselector`` is GRPO(α·R_pref + β·R_cf) and ``toolsearcher`` is ESM on search turns
plus TCA on the submit turn.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from toolgym.data.records import Task, Trajectory
from toolgym.rewards.base import (
    GroupCredit,
    RewardModule,
    call_with_supported,
    check_group,
    get_reward_factory,
    grpo_advantage,
    is_zero_variance,
    reward_names,
)


@dataclass
class WeightedModule:
    key: str  # the name its components are logged under
    module: RewardModule
    weight: float


class CompositeReward:
    """Several modules with weights, scored together (see the module docstring for the rule)."""

    kind = "credit"

    def __init__(self, modules: list[WeightedModule], name: str = "composite"):
        if not modules:
            raise ValueError("a composite reward needs at least one module")
        keys = [m.key for m in modules]
        if len(set(keys)) != len(keys):
            raise ValueError(f"duplicate module keys in composite: {keys}")
        for m in modules:
            if getattr(m.module, "kind", None) not in ("outcome", "credit"):
                raise ValueError(f"module {m.key!r} has kind {getattr(m.module, 'kind', None)!r}; need outcome or credit")
        self.modules, self.name = modules, name

    def score_group(self, trajectories: list[Trajectory], task: Task) -> GroupCredit:
        check_group(trajectories, task)
        g = len(trajectories)
        parts = [(m, m.module.score_group(trajectories, task)) for m in self.modules]
        components: dict[str, float] = {}
        reward = np.zeros(g)
        outcome_sum = np.zeros(g)
        has_outcome = False
        credit_adv = np.zeros(g)
        turn_parts: list[tuple[float, GroupCredit]] = []
        for m, credit in parts:
            for k, v in credit.components.items():
                components[f"{m.key}/{k}"] = float(v)
            if m.weight == 0:
                continue
            reward += m.weight * credit.rewards
            if m.module.kind == "outcome":
                outcome_sum += m.weight * credit.rewards
                has_outcome = True
            else:
                credit_adv += m.weight * credit.advantages
                turn_parts.append((m.weight, credit))
        a_out = grpo_advantage(outcome_sum) if has_outcome else np.zeros(g)
        if has_outcome:
            components["outcome/zero_var"] = float(is_zero_variance(outcome_sum))
        turn_adv = None
        if any(c.turn_advantages is not None for _, c in turn_parts):
            turn_adv = []
            for i, traj in enumerate(trajectories):
                n = _num_turns(traj, [c for _, c in turn_parts], i)
                acc = np.full(n, a_out[i])
                for w, c in turn_parts:
                    acc += w * (c.turn_advantages[i] if c.turn_advantages is not None else c.advantages[i])
                turn_adv.append(acc)
        components["reward"] = float(reward.mean())
        return GroupCredit(rewards=reward, advantages=a_out + credit_adv, turn_advantages=turn_adv, components=components)


def _num_turns(traj: Trajectory, credits: list[GroupCredit], i: int) -> int:
    lengths = {len(c.turn_advantages[i]) for c in credits if c.turn_advantages is not None}
    if len(lengths) != 1:
        raise ValueError(f"reward modules disagree on the number of turns of a rollout of {traj.task_id!r}: {lengths}")
    return lengths.pop()


def _to_plain(config: Any) -> Any:
    try:  # omegaconf is optional for callers: plain dicts work the same
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(config, (DictConfig, ListConfig)):
            return OmegaConf.to_container(config, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    return config


def _module_entries(modules: Any) -> Iterable[tuple[str, dict[str, Any]]]:
    if isinstance(modules, Mapping):
        for key, entry in modules.items():
            yield str(key), dict(entry or {})
    elif isinstance(modules, list):
        for entry in modules:
            entry = dict(entry)
            key = entry.pop("key", None) or entry.get("module") or entry.pop("name", None)
            if key is None:
                raise ValueError(f"module entry {entry} needs a 'module' (registry name)")
            yield str(key), entry
    else:
        raise ValueError("'modules' must be a mapping {key: {weight, options...}} or a list of entries")


def build_reward(config: Mapping[str, Any] | Any, **runtime: Any) -> RewardModule:
    """Build a composite from a config (omegaconf or plain dict).

    Either ``{"name": module or scheme, "options": {...}}`` (the trainer's form),
    ``{"scheme": "toolsearcher", ...scheme options}`` or
    ``{"modules": {key: {"module": registry name (default: key), "weight": w (default 1), ...options}}}``.
    ``runtime`` carries objects a config cannot (``retrieve``, ``embed``, ``judge``); each module
    gets those its constructor accepts.
    """
    config = _to_plain(config)
    if not isinstance(config, Mapping):
        raise ValueError(f"a reward config must be a mapping, got {type(config).__name__}")
    config = dict(config)
    if "name" in config and "modules" not in config:  # the trainer's form: {name, options}
        unknown = config.keys() - {"name", "options"}
        if unknown:
            raise ValueError(f"reward config {{name, options}} has unknown keys {sorted(unknown)}")
        return get_reward(str(config["name"]), **dict(config.get("options") or {}), **runtime)
    if "scheme" in config:
        scheme = config.pop("scheme")
        if "modules" in config:
            raise ValueError("give either 'scheme' or 'modules', not both")
        options = dict(config.pop("options", None) or {}, **config)
        return get_scheme(scheme, **options, **runtime)
    if "modules" not in config:
        raise ValueError("a reward config needs 'modules' (or 'scheme')")
    built = []
    for key, entry in _module_entries(config["modules"]):
        name = entry.pop("module", key)
        weight = float(entry.pop("weight", 1.0))
        factory = get_reward_factory(name)
        built.append(WeightedModule(key, call_with_supported(factory, entry, runtime), weight))
    return CompositeReward(built, name=str(config.get("name", "composite")))


# -- named schemes ---------------------------------------------------------------------------
_SCHEMES: dict[str, Callable[..., CompositeReward]] = {}


def register_scheme(name: str) -> Callable[[Callable[..., CompositeReward]], Callable[..., CompositeReward]]:
    def wrap(factory: Callable[..., CompositeReward]) -> Callable[..., CompositeReward]:
        _SCHEMES[name] = factory
        return factory

    return wrap


def scheme_names() -> list[str]:
    return sorted(_SCHEMES)


def get_scheme(name: str, **options: Any) -> CompositeReward:
    if name not in _SCHEMES:
        raise KeyError(f"unknown reward scheme {name!r}; schemes: {scheme_names()}")
    composite = _SCHEMES[name](**options)
    composite.name = name
    return composite


def get_reward(name: str, **options: Any) -> RewardModule:
    """A registered module (``esm``, ``tca``, ...) or a named scheme (``toolsearcher``, ...).

    Runtime objects (``retrieve``, ``embed``, ``judge``) are passed to modules that take them.
    """
    runtime_keys = ("retrieve", "embed", "judge")
    if name in _SCHEMES:
        return get_scheme(name, **options)
    factory = get_reward_factory(name)
    runtime = {k: options.pop(k) for k in runtime_keys if k in options}
    return call_with_supported(factory, options, runtime)


@register_scheme("toolsearcher")
def _toolsearcher(gate: str = "full_retrieval", gate_group: str = "all", retrieve: Any = None, embed: Any = None, judge: Any = None) -> CompositeReward:
    """ESM on search turns + TCA on the submit turn (weights 1, 1) + hacking monitors (0)."""
    from toolgym.rewards.monitors import HackingMonitors
    from toolgym.rewards.search import ESM, TCA

    return CompositeReward(
        [WeightedModule("esm", ESM(), 1.0), WeightedModule("tca", TCA(gate, gate_group), 1.0),
         WeightedModule("monitors", HackingMonitors(), 0.0)]
    )


@register_scheme("magicselector")
def _magicselector(
    retrieve: Any = None,
    embed: Any = None,
    judge: Any = None,
    alpha: float = 1.0,
    beta: float = 1.0,
    k: int = 10,
    fusion: str = "round_robin",
    lambda_ndcg: float = 1.0,
    lambda_full: float = 1.0,
    scorer: Any = "reference",
    model: str | None = None,
    scorer_options: dict[str, Any] | None = None,
) -> CompositeReward:
    """GRPO(α · R_pref + β · R_cf) + hacking monitors (weight 0). The paper gives no α, β values."""
    from toolgym.rewards.decomposition import Counterfactual, Preference
    from toolgym.rewards.monitors import HackingMonitors

    return CompositeReward(
        [
            WeightedModule("preference", Preference(scorer, embed=embed, judge=judge, model=model, scorer_options=scorer_options), alpha),
            WeightedModule("counterfactual", Counterfactual(retrieve, k, fusion, lambda_ndcg, lambda_full), beta),
            WeightedModule("monitors", HackingMonitors(), 0.0),
        ]
    )


@register_scheme("grpo_f1")
def _grpo_f1(retrieve: Any = None, embed: Any = None, judge: Any = None) -> CompositeReward:
    """Outcome GRPO on selection F1; search recall and Match logged only."""
    from toolgym.rewards.monitors import HackingMonitors
    from toolgym.rewards.search import SearchRecall, SelectionF1, SelectionMatch

    return CompositeReward(
        [WeightedModule("selection_f1", SelectionF1(), 1.0), WeightedModule("selection_match", SelectionMatch(), 0.0),
         WeightedModule("search_recall", SearchRecall(), 0.0), WeightedModule("monitors", HackingMonitors(), 0.0)]
    )


@register_scheme("grpo_match")
def _grpo_match(retrieve: Any = None, embed: Any = None, judge: Any = None) -> CompositeReward:
    """Outcome GRPO on exact selection Match; F1 and search recall logged only."""
    from toolgym.rewards.monitors import HackingMonitors
    from toolgym.rewards.search import SearchRecall, SelectionF1, SelectionMatch

    return CompositeReward(
        [WeightedModule("selection_match", SelectionMatch(), 1.0), WeightedModule("selection_f1", SelectionF1(), 0.0),
         WeightedModule("search_recall", SearchRecall(), 0.0), WeightedModule("monitors", HackingMonitors(), 0.0)]
    )


SCHEMES_NEEDING_RETRIEVAL = frozenset({"magicselector"})


def aggregate_components(credits: Iterable[GroupCredit]) -> dict[str, float]:
    """Mean of every component over groups; a ``zero_var`` mean is the share of zero-variance groups."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for credit in credits:
        for k, v in credit.components.items():
            sums[k] = sums.get(k, 0.0) + float(v)
            counts[k] = counts.get(k, 0) + 1
    return {k: sums[k] / counts[k] for k in sorted(sums)}


__all__ = [
    "CompositeReward", "WeightedModule", "build_reward", "get_reward", "get_scheme", "scheme_names",
    "register_scheme", "aggregate_components", "reward_names", "SCHEMES_NEEDING_RETRIEVAL",
]
