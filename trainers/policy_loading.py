"""A policy from what a user names (:func:`load_policy`): a policy object, a model name or folder,
or a ``toolgym train`` checkpoint or run folder, rebuilt from the config its ``state.json``
saved (:func:`state_config`) with the trained weights loaded. What ``toolgym eval --policy``
and the benchmarks load."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from toolgym.trainers.checkpoint import STATE_FILE, latest_checkpoint, load_weights, read_state

__all__ = ["load_policy", "state_config"]


def state_config(checkpoint: str | Path) -> dict[str, Any]:
    """The run config saved in a checkpoint's ``state.json``, checked for the parts a policy is
    rebuilt from (``model``, ``sampling``, ``grpo``): a damaged file is a ``ValueError`` naming it
    and the part, not ``KeyError: 'config'`` or "dictionary update sequence element #0"."""
    path = Path(checkpoint) / STATE_FILE
    cfg = read_state(checkpoint).get("config")
    if not isinstance(cfg, dict):
        raise ValueError(f"{path}: has no 'config' object (got {type(cfg).__name__}); the checkpoint is damaged")
    out = dict(cfg)
    for key, required in (("model", True), ("sampling", False), ("grpo", False)):
        value = cfg.get(key)
        if value is None and not required:
            out[key] = {}
            continue
        if not isinstance(value, dict):
            raise ValueError(f"{path}: config.{key} must be an object, got {type(value).__name__}; the checkpoint "
                             "is damaged")
        out[key] = dict(value)
    lora = out["grpo"].get("lora")
    if lora is not None and not isinstance(lora, dict):
        raise ValueError(f"{path}: config.grpo.lora must be an object or null, got {type(lora).__name__}")
    return out


def load_policy(policy_or_checkpoint: Any, sampling: Any = None, device: str | None = None) -> Any:
    """An :class:`HFChatPolicy` from a policy object, a model name/path, or a ``toolgym train`` checkpoint/run folder."""
    import dataclasses

    from toolgym.agents.hf_policy import apply_lora
    from toolgym.agents.model import ModelConfig, build_policy
    from toolgym.evaluation.evaluate import as_policy
    from toolgym.trainers.config import strict_dataclass

    if not isinstance(policy_or_checkpoint, (str, Path)):
        return policy_or_checkpoint
    path = Path(policy_or_checkpoint)
    if (path / "checkpoints").is_dir() and not (path / STATE_FILE).exists():
        latest = latest_checkpoint(path)
        if latest is None:
            raise FileNotFoundError(f"{path} has no complete checkpoint")
        path = latest
    if (path / STATE_FILE).exists():
        cfg = state_config(path)
        model = strict_dataclass(ModelConfig, cfg["model"], f"{path / STATE_FILE}: config.model")
        policy = build_policy(dataclasses.replace(model, device=device or model.device), sampling or cfg["sampling"])
        policy.model = apply_lora(policy.model, cfg["grpo"].get("lora"))  # the wrapping training used
        load_weights(path, policy.model)
        policy.model.eval()
        return policy
    return as_policy(policy_or_checkpoint, sampling, device)  # a model name or folder
