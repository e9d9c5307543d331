"""Weighted composites of reward modules, built from a config, and the named schemes.

Combination rule (weights w_m; weight 0 = computed and logged, no effect on credit):

    reward_i      = Σ_m w_m · R_{m,i}                              (what is logged as "reward")
    A_out         = GRPO(Σ_{m outcome} w_m · R_m)                  (0 if no outcome module)
    advantages_i  = A_out_i + Σ_{m credit} w_m · A_{m,i}
    turn_adv[i][t]= A_out_i + Σ_{m credit} w_m · (turn_adv_m[i][t] if the module has turns else A_{m,i})

``turn_advantages`` is None unless some weighted credit module has per-turn advantages.
So ``magicselector`` is GRPO(α·R_pref + β·R_cf) and ``toolsearcher`` is ESM on search turns
plus TCA on the submit turn.

A config has one shape, ``{modules: [{module, weight, key?, **options}]}``; ``{name, options}``
names a registered module or scheme. Schemes are data: a named list of (module, weight)
(:func:`register_scheme`), expanded to that shape by :func:`scheme_config`.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toolgym.data.records import Task, Trajectory
from toolgym.rewards.base import (
    GroupCredit,
    RewardModule,
    accepts_option,
    call_with_supported,
    check_group,
    get_reward_factory,
    grpo_advantage,
    is_zero_variance,
    nonfinite_count,
    option_names,
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
            if not isinstance(m.weight, (int, float)) or not math.isfinite(m.weight):
                raise ValueError(f"module {m.key!r} has weight {m.weight!r}; a weight must be a finite number")
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
            components["outcome/nonfinite_rewards"] = float(nonfinite_count(outcome_sum))
        turn_adv = None
        if any(c.turn_advantages is not None for _, c in turn_parts):
            turn_adv = []
            for i, traj in enumerate(trajectories):
                n = _num_turns(traj, [c for _, c in turn_parts], i)
                acc = np.full(n, a_out[i])
                for w, c in turn_parts:
                    acc += w * c.rollout_turn_advantages(i, n)
                turn_adv.append(acc)
        components["reward"] = float(reward.mean())
        return GroupCredit(rewards=reward, advantages=a_out + credit_adv, turn_advantages=turn_adv, components=components)


def _num_turns(traj: Trajectory, credits: list[GroupCredit], i: int) -> int:
    lengths = {len(c.turn_advantages[i]) for c in credits if c.turn_advantages is not None}
    if len(lengths) != 1:
        raise ValueError(f"reward modules disagree on the number of turns of a rollout of {traj.task_id!r}: {lengths}")
    return lengths.pop()


RUNTIME_KEYS = ("retrieve", "embed", "judge")


def _as_containers(config: Any) -> Any:
    try:  # omegaconf is optional for callers: plain dicts work the same
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(config, (DictConfig, ListConfig)):
            return OmegaConf.to_container(config, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    return config


# -- named schemes: data, not code ----------------------------------------------------------------
@dataclass(frozen=True)
class Scheme:
    """A named list of (module, weight). ``weight_options`` maps a scheme option to the key whose
    weight it sets (``alpha`` → preference); every other option goes to the modules that accept it."""

    modules: tuple[tuple[str, float], ...]
    weight_options: Mapping[str, str] = field(default_factory=dict)
    doc: str = ""


_SCHEMES: dict[str, Scheme] = {}


def register_scheme(name: str, modules: Sequence[tuple[str, float]], weight_options: Mapping[str, str] | None = None,
                    doc: str = "") -> Scheme:
    """Register a scheme: ``register_scheme("mine", [("esm", 1.0), ("selection_f1", 0.5)])``."""
    if name in _SCHEMES:
        raise ValueError(f"reward scheme {name!r} is already registered")
    keys = [m for m, _ in modules]
    for option, key in (weight_options or {}).items():
        if key not in keys:
            raise ValueError(f"scheme {name!r}: weight option {option!r} names {key!r}, not one of its modules {keys}")
    scheme = Scheme(tuple((str(m), float(w)) for m, w in modules), dict(weight_options or {}), doc)
    _SCHEMES[name] = scheme
    return scheme


def scheme_names() -> list[str]:
    return sorted(_SCHEMES)


def scheme_config(name: str, **options: Any) -> dict[str, Any]:
    """The ``{modules: [{module, weight, **options}]}`` config of a scheme with these options.

    A weight option (e.g. ``alpha``) sets that module's weight; any other option goes to every
    module of the scheme whose constructor accepts it, and one no module accepts is an error.
    """
    if name not in _SCHEMES:
        raise KeyError(f"unknown reward scheme {name!r}; schemes: {scheme_names()}")
    scheme = _SCHEMES[name]
    entries = [{"module": m, "weight": w} for m, w in scheme.modules]
    for option, value in options.items():
        if option in scheme.weight_options:
            next(e for e in entries if e["module"] == scheme.weight_options[option])["weight"] = float(value)
            continue
        takers = [e for e in entries if accepts_option(get_reward_factory(e["module"]), option)]
        if not takers:
            accepted = sorted({p for m, _ in scheme.modules for p in option_names(get_reward_factory(m))} | set(scheme.weight_options))
            raise ValueError(f"reward scheme {name!r}: unknown option {option!r}; accepted: {accepted}")
        for e in takers:
            e[option] = value
    return {"name": name, "modules": entries}


def _module_entries(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The module list of a config in the one shape ``[{module, weight, key?, **options}]``."""
    if "modules" not in config:
        if "name" in config:  # shorthand for a named scheme or module: {name, options}
            unknown = config.keys() - {"name", "options"}
            if unknown:
                raise ValueError(f"reward config {{name, options}} has unknown keys {sorted(unknown)}")
            name, options = str(config["name"]), dict(config.get("options") or {})
            if name in _SCHEMES:
                return scheme_config(name, **options)["modules"]
            if name not in reward_names():
                raise KeyError(f"unknown reward scheme or module {name!r}; schemes: {scheme_names()}, modules: {reward_names()}")
            return [{"module": name, "weight": 1.0, **options}]
        raise ValueError("a reward config needs 'modules': [{module: NAME, weight: W, ...options}] (or {name, options})")
    unknown = config.keys() - {"name", "modules"}
    if unknown:
        raise ValueError(f"reward config has unknown keys {sorted(unknown)}; expected 'modules' (and 'name')")
    modules = config["modules"]
    if not isinstance(modules, list) or not modules:
        raise ValueError("'modules' must be a non-empty list of {module: NAME, weight: W, ...options}")
    entries = []
    for j, entry in enumerate(modules):
        if not isinstance(entry, Mapping) or "module" not in entry:
            raise ValueError(f"modules[{j}] must be a mapping with a 'module' (registry name), got {entry!r:.80}")
        entries.append(dict(entry))
    return entries


def _build_module(name: str, options: dict[str, Any], runtime: dict[str, Any]) -> RewardModule:
    """One registered module from its options, given the runtime objects it ``needs`` (else a clear error)."""
    factory = get_reward_factory(name)
    missing = [k for k in sorted(getattr(factory, "needs", ())) if runtime.get(k) is None]
    if missing:
        raise ValueError(f"reward module {name!r} needs runtime {' and '.join(missing)} (pass {missing[0]}=...)")
    return call_with_supported(factory, options, runtime)


def build_composite(config: Mapping[str, Any] | Any, **runtime: Any) -> CompositeReward:
    """Build a composite from a config (omegaconf or plain dict); callers use
    :func:`toolgym.rewards.build_reward`, which takes every config shape.

    The shape: ``{"modules": [{"module": registry name, "weight": w (default 1), "key": log name
    (default the module), ...options}]}``; ``{"name": scheme or module, "options": {...}}`` (the
    trainer's form) is shorthand for a scheme's list. ``runtime`` carries objects a config cannot
    (``retrieve``, ``embed``, ``judge``); each module gets those its constructor accepts, and a
    module whose ``needs`` are missing is a clear error.
    """
    config = _as_containers(config)
    if not isinstance(config, Mapping):
        raise ValueError(f"a reward config must be a mapping, got {type(config).__name__}")
    unknown_runtime = runtime.keys() - set(RUNTIME_KEYS)
    if unknown_runtime:
        raise ValueError(f"unknown runtime object(s) {sorted(unknown_runtime)}; runtime objects: {list(RUNTIME_KEYS)}")
    built = []
    for entry in _module_entries(config):
        name = str(entry.pop("module"))
        key = str(entry.pop("key", name))
        weight = float(entry.pop("weight", 1.0))
        built.append(WeightedModule(key, _build_module(name, entry, runtime), weight))
    return CompositeReward(built, name=str(config.get("name", "composite")))


def get_reward(name_or_config: str | Mapping[str, Any] | Any, **options: Any) -> RewardModule:
    """A registered module (``esm``, ``tca``, ...), a named scheme (``toolsearcher``, ...) or a config.

    ``get_reward(name, retrieve=..., **options)``: runtime objects (``retrieve``, ``embed``,
    ``judge``) go to modules that take them, the rest are options. A module name gives the bare
    module (components unprefixed); a scheme or config gives a :class:`CompositeReward`.
    """
    runtime = {k: options.pop(k) for k in RUNTIME_KEYS if k in options}
    if not isinstance(name_or_config, str):
        if options:
            raise ValueError(f"options {sorted(options)} go inside the config, not beside it")
        return build_composite(name_or_config, **runtime)
    if name_or_config in _SCHEMES:
        return build_composite(scheme_config(name_or_config, **options), **runtime)
    return _build_module(name_or_config, options, runtime)


register_scheme("toolsearcher", [("esm", 1.0), ("tca", 1.0), ("monitors", 0.0)],
                doc="ESM on search turns + TCA on the submit turn; options gate, gate_group")
register_scheme("esm_only", [("esm", 1.0), ("tca", 0.0), ("monitors", 0.0)],
                doc="ablation: ESM search credit alone (TCA logged, weight 0)")
register_scheme("tca_only", [("esm", 0.0), ("tca", 1.0), ("monitors", 0.0)],
                doc="ablation: TCA selection credit alone (ESM logged, weight 0)")
register_scheme("toolsearcher_valid", [("esm", 1.0), ("tca", 1.0), ("valid_actions", 1.0), ("monitors", 0.0)],
                doc="toolsearcher + GRPO(valid-action share) on every turn: a format term against cut turns")
register_scheme("magicselector", [("preference", 1.0), ("counterfactual", 1.0), ("monitors", 0.0)],
                weight_options={"alpha": "preference", "beta": "counterfactual"},
                doc="GRPO(α·R_pref + β·R_cf); the paper gives no α, β values")
register_scheme("grpo_f1", [("selection_f1", 1.0), ("selection_match", 0.0), ("search_recall", 0.0), ("monitors", 0.0)],
                doc="outcome GRPO on selection F1")
register_scheme("grpo_match", [("selection_match", 1.0), ("selection_f1", 0.0), ("search_recall", 0.0), ("monitors", 0.0)],
                doc="outcome GRPO on exact selection Match")


def aggregate_components(credits: Iterable[GroupCredit]) -> dict[str, float]:
    """Mean of every component over groups; a ``zero_var`` mean is the share of zero-variance groups."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for credit in credits:
        for k, v in credit.components.items():
            sums[k] = sums.get(k, 0.0) + float(v)
            counts[k] = counts.get(k, 0) + 1
    return {k: sums[k] / counts[k] for k in sorted(sums)}
