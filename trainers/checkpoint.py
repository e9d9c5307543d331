"""Checkpoints of a local GRPO run: trainable weights, optimiser, and the next step to run.

A checkpoint is written to a temporary folder and renamed into place, so a run killed while
saving leaves the previous checkpoint intact. ``step`` in ``state.json`` is the number of
completed steps: resuming runs step ``step`` next, so no step is lost or repeated.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

STATE_FILE = "state.json"
WEIGHTS_FILE = "trainable.pt"
OPTIMIZER_FILE = "optimizer.pt"


def trainable_state(model: Any) -> dict[str, torch.Tensor]:
    """The parameters that training changes (the LoRA adapter, or every weight without LoRA)."""
    return {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}


def save_checkpoint(run_dir: str | Path, step: int, model: Any, optimizer: Any, state: dict[str, Any], keep: int = 1) -> Path:
    """Write ``run_dir/checkpoints/step_<step>`` atomically and keep only the newest ``keep``."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:06d}"
    tmp = root / f".tmp_step_{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    torch.save(trainable_state(model), tmp / WEIGHTS_FILE)
    if optimizer is not None:
        torch.save(optimizer.state_dict(), tmp / OPTIMIZER_FILE)
    (tmp / STATE_FILE).write_text(json.dumps({**state, "step": step}, indent=2, default=str))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in list_checkpoints(run_dir)[:-max(keep, 1)]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = Path(run_dir) / "checkpoints"
    if not root.exists():
        return []
    return sorted(p for p in root.glob("step_*") if (p / STATE_FILE).exists())


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def read_state(checkpoint: str | Path) -> dict[str, Any]:
    path = Path(checkpoint) / STATE_FILE
    if not path.exists():
        raise FileNotFoundError(f"{checkpoint} is not a toolgym checkpoint (no {STATE_FILE})")
    return json.loads(path.read_text())


def load_weights(checkpoint: str | Path, model: Any) -> None:
    """Load the trainable weights into ``model``; every saved tensor must find its parameter."""
    saved = torch.load(Path(checkpoint) / WEIGHTS_FILE, map_location="cpu", weights_only=True)
    params = dict(model.named_parameters())
    missing = [n for n in saved if n not in params]
    if missing:
        raise ValueError(f"{checkpoint}: {len(missing)} saved tensors have no parameter in the model (e.g. {missing[0]}); "
                         "was it trained with a different model or LoRA setting?")
    with torch.no_grad():
        for name, tensor in saved.items():
            params[name].copy_(tensor.to(params[name].device, params[name].dtype))


def load_optimizer(checkpoint: str | Path, optimizer: Any) -> None:
    path = Path(checkpoint) / OPTIMIZER_FILE
    if path.exists():
        optimizer.load_state_dict(torch.load(path, map_location="cpu", weights_only=False))
