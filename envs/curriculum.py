"""Category-constrained tool discrimination (CCTD) as a declared schedule.

ToolSearcher trains the first 30% of its run with every search confined to one category
(the search schema gains a required ``category`` argument), then switches to global search
(17 of 56 steps in its appendix). :class:`CategoryCurriculum` states that schedule once; an
environment given one picks each episode's category mode from it and reports the phase in
``info["curriculum_phase"]``.

Progress is, in order of preference, ``options["progress"]`` passed to ``reset`` (training
step / total steps, :func:`training_progress`: both trainers pass it — ``toolgym train`` its
step, the verl plugin verl's global step — which keeps every worker and every pooled env in the
same phase and survives a resume), or the environment's own episode count divided by
``total_episodes`` (a fallback for runs without a trainer; it restarts with the process and
counts per env).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real
from typing import Any

from toolgym.envs.actions import CATEGORY_MODES, CategoryMode


@dataclass(frozen=True)
class CategoryCurriculum:
    """``constrained_mode`` for the first ``required_fraction`` of training, then ``after_mode``."""

    total_episodes: int | None = None
    required_fraction: float = 0.3
    constrained_mode: CategoryMode = "required"
    after_mode: CategoryMode = "off"

    def __post_init__(self) -> None:
        if not 0.0 <= self.required_fraction <= 1.0:
            raise ValueError(f"required_fraction must be in [0, 1], got {self.required_fraction}")
        if self.total_episodes is not None and self.total_episodes <= 0:
            raise ValueError(f"total_episodes must be positive, got {self.total_episodes}")
        for mode in (self.constrained_mode, self.after_mode):
            if mode not in CATEGORY_MODES:
                raise ValueError(f"unknown category mode {mode!r}; choose one of {CATEGORY_MODES}")

    @classmethod
    def from_config(cls, config: "CategoryCurriculum | dict[str, Any] | None") -> "CategoryCurriculum | None":
        if config is None or isinstance(config, CategoryCurriculum):
            return config
        if isinstance(config, dict):
            return cls(**config)
        raise ValueError(f"curriculum must be a CategoryCurriculum or a dict of its fields, got {type(config).__name__}")

    def progress(self, episode: int) -> float:
        """Share of training done before episode ``episode`` (0-based), at most 1."""
        if self.total_episodes is None:
            raise ValueError(
                "this curriculum has no total_episodes: pass options={'progress': p} to reset, or set total_episodes"
            )
        return min(episode / self.total_episodes, 1.0)

    def mode_at(self, progress: float) -> CategoryMode:
        """The category mode for training progress ``progress`` in [0, 1]."""
        if not 0.0 <= progress <= 1.0 + 1e-9:
            raise ValueError(f"progress must be in [0, 1], got {progress}")
        return self.constrained_mode if progress < self.required_fraction else self.after_mode


def training_progress(step: int, total_steps: int) -> float:
    """``options["progress"]`` at 0-based training step ``step`` of ``total_steps``: ``step / total_steps``, at most 1."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"a training step is an int >= 0, got {step!r}")
    if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps <= 0:
        raise ValueError(f"total training steps is an int > 0, got {total_steps!r}")
    return min(step / total_steps, 1.0)


def curriculum_reset_options(env: Any, progress: float | None) -> dict[str, Any]:
    """``{"progress": progress}`` for an env with a category curriculum, else ``{}`` (an env
    without one takes the reset options it always took)."""
    if progress is None or getattr(getattr(env, "unwrapped", env), "curriculum", None) is None:
        return {}
    return {"progress": check_progress(progress)}


def check_progress(value: Any) -> float:
    """``value`` as a float in [0, 1] (training step / total steps), else a ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"options['progress'] must be a number in [0, 1] (training step / total steps), got {type(value).__name__}")
    value = float(value)
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"options['progress'] must be in [0, 1] (training step / total steps), got {value}")
    return value
