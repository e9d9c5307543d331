"""One way from a reward config to a reward module, for every caller (``toolgym train``, the verl
plugin, ``toolgym replay``, the TRL and verifiers integrations).

Accepted shapes (:func:`reward_config` reduces them to one of the last two):

* ``None`` or ``{}``: the default, :data:`DEFAULT_REWARD`;
* a name: a scheme (``toolsearcher``, ``grpo_f1``, ...) or a registered module (``counterfactual``);
* ``{name, options}``: that scheme or module with these options (``options`` may be absent);
* ``{modules: [{module, weight, key?, **options}], name?}``: a composite written out (``name`` is
  its label); ``options`` beside ``modules`` is an error, each module's options go in its entry.

A train config's ``reward`` section (``{name, options, modules}``, ``modules: null`` when unset;
omegaconf or a dataclass) and a reward YAML (``reward:`` or top level) are such mappings. A name gives what
:func:`~toolgym.rewards.composite.get_reward` gives: the bare module for a module name, a
:class:`~toolgym.rewards.composite.CompositeReward` for a scheme.

Runtime objects a config cannot hold: ``index`` (anything with ``retriever()``, e.g. a
:class:`~toolgym.retrieval.index.ToolIndex`: its ``retrieve`` is passed to modules that search)
or ``retrieve`` itself, ``embed`` and ``judge``.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from toolgym.rewards.base import RewardModule
from toolgym.rewards.composite import _module_entries, _as_containers, build_composite, get_reward

DEFAULT_REWARD = "grpo_f1"  # outcome GRPO on selection F1: needs no runtime object
CONFIG_KEYS = ("name", "options", "modules")


def reward_config(config: Any = None) -> dict[str, Any]:
    """``config`` (any accepted shape, omegaconf or plain) as ``{name, options}`` or ``{modules, name?}``."""
    config = _as_containers(config)
    if dataclasses.is_dataclass(config) and not isinstance(config, type):  # a typed config section
        config = dataclasses.asdict(config)
    if config is None:
        return {"name": DEFAULT_REWARD, "options": {}}
    if isinstance(config, str):
        return {"name": config, "options": {}}
    if not isinstance(config, Mapping):
        raise ValueError(f"a reward config is a name or a mapping {{name, options}} / {{modules}}, got {type(config).__name__}")
    unknown = sorted(map(str, config.keys() - set(CONFIG_KEYS)))
    if unknown:
        raise ValueError(f"reward config has unknown keys {unknown}; expected {list(CONFIG_KEYS)}")
    options = config.get("options")
    if options is not None and not isinstance(options, Mapping):
        raise ValueError(f"reward 'options' must be a mapping, got {type(options).__name__}")
    options = dict(options or {})
    name = config.get("name")
    if name is not None and not isinstance(name, str):
        raise ValueError(f"reward 'name' must be a string, got {type(name).__name__}")
    if config.get("modules") is not None:
        if options:
            raise ValueError(f"reward 'options' {sorted(options)} beside 'modules': put each module's options in its entry")
        out: dict[str, Any] = {"modules": config["modules"]}
        if name is not None:
            out["name"] = name
        _module_entries(out)  # the list's shape is checked here, for every caller alike
        return out
    return {"name": name or DEFAULT_REWARD, "options": options}


def runtime_needs(config: Any = None) -> frozenset[str]:
    """The runtime objects (``retrieve``, ``embed``, ``judge``) a config's modules need (their ``needs``)."""
    from toolgym.rewards.base import get_reward_factory

    plain = reward_config(config)
    entries = _module_entries(plain if "modules" in plain else {"name": plain["name"], "options": plain["options"]})
    out: set[str] = set()
    for entry in entries:
        out |= set(getattr(get_reward_factory(str(entry["module"])), "needs", ()))
    return frozenset(out)


def build_reward(config: Any = None, *, index: Any = None, retrieve: Callable | None = None, embed: Callable | None = None,
                 judge: Any = None) -> RewardModule:
    """The reward module of ``config`` (any shape in the module docstring; ``None`` = :data:`DEFAULT_REWARD`).

    ``index``: its ``retriever()`` is the ``retrieve`` of modules that search (``retrieve`` can
    be given instead, not both). A module whose ``needs`` are not given is a ``ValueError``, as
    is an option a module does not take.
    """
    if index is not None and retrieve is not None:
        raise ValueError("give the reward an index or a retrieve function, not both")
    if index is not None:
        retrieve = index.retriever()
    runtime = {k: v for k, v in (("retrieve", retrieve), ("embed", embed), ("judge", judge)) if v is not None}
    plain = reward_config(config)
    label = plain.get("name", "composite")
    try:
        if "modules" in plain:
            return build_composite(plain, **runtime)
        return get_reward(plain["name"], **runtime, **plain["options"])
    except TypeError as exc:  # a module's constructor refused an option's value
        raise ValueError(f"reward config for {label!r}: {exc}") from None
