"""What the three ``toolgym fit-*`` commands share: config loading, a wall-clock budget, the
metrics JSONL, the curve plot; the train / held-out split of a config's data keys or ``sources``
lives in :mod:`toolgym.data.mixture` (environments use it too) and is imported here.

The training loops call sentence-transformers' loss modules directly (their ``forward`` takes
the texts); the library's ``SentenceTransformerTrainer`` / ``CrossEncoderTrainer`` and
``util.mine_hard_negatives`` need the ``datasets`` package, which toolgym does not depend on,
and a hand loop is also what lets each run stop on a wall-clock budget.
"""
from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from toolgym.data.mixture import FitSource, SourceData, load_sources, load_train_eval  # noqa: F401  (the fit commands' names)
from toolgym.trainers.config import require


class Budget:
    """A wall-clock budget in minutes (``<= 0`` = none): ``spent()`` says when to stop."""

    def __init__(self, minutes: float):
        self.seconds = float(minutes) * 60.0
        self.start = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def spent(self) -> bool:
        return self.seconds > 0 and self.elapsed() >= self.seconds

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Time spent inside does not count against the budget (held-out evaluation between
        training stages: on a CPU it can take longer than a stage's training)."""
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.start += time.monotonic() - t0

    def share(self, fraction: float) -> "Budget":
        """A sub-budget of ``fraction`` of what is left (for one stage of a multi-stage run)."""
        if self.seconds <= 0:
            return Budget(0)
        left = (self.seconds - self.elapsed()) * fraction
        # Never Budget(0), which means "no limit": a used-up budget's share is used up too.
        out = Budget(max(left, 1e-6) / 60.0)
        if left <= 0:
            out.start -= 1.0
        return out


class MetricsLog:
    """Appends one JSON object per line to ``<run_dir>/metrics.jsonl`` (truncated at start)."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")

    def write(self, row: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row, default=float) + "\n")


def plot_fit_curves(metrics_path: str | Path, out_png: str | Path, keys: Sequence[str], title: str) -> Path:
    """One panel per key of ``keys`` against ``step``, one line per ``stage`` of the run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from toolgym.trainers.metrics import read_metrics  # the one metrics reader (a half-written last line is fine)
    from toolgym.trainers.plotting import save_figure

    rows = read_metrics(metrics_path)
    fig, axes = plt.subplots(1, len(keys), figsize=(4.5 * len(keys), 3.2), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        stages = dict.fromkeys(r.get("stage", "") for r in rows if key in r)
        for stage in stages:
            pts = [(r["step"], r[key]) for r in rows if r.get("stage", "") == stage and isinstance(r.get(key), (int, float))]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=2, label=stage or None)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
        if len(stages) > 1:
            ax.legend(fontsize=7)
    fig.suptitle(title)
    return save_figure(fig, out_png)


def set_seed(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


FIT_PRECISIONS = ("float32", "bfloat16", "auto")


def fit_dtype(precision: str) -> Any:
    """The dtype of the forward passes for a config's ``precision`` (one of :data:`FIT_PRECISIONS`)."""
    if precision not in FIT_PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(FIT_PRECISIONS)}, got {precision!r}")
    from toolgym.agents.decoding import sampling_dtype

    return sampling_dtype(precision, "cpu")


@contextmanager
def mixed_precision(precision: str) -> Iterator[None]:
    """Forward passes inside run under ``torch.autocast("cpu", bfloat16)`` when :func:`fit_dtype` is
    bf16 (matrix products in bf16, losses and softmaxes in float32, as autocast decides); a no-op for
    float32. Why autocast, not bf16 weights: the AdamW updates of a minutes-long run are far below
    bf16's resolution of the weights, so the weights must stay float32."""
    import torch

    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=fit_dtype(precision) == torch.bfloat16):
        yield


def optimizer_step(loss: Any, model: Any, optimizer: Any, scheduler: Any, log: "MetricsLog", stage: str, step: int) -> float:
    """Backward, clip the gradient norm at 1, step optimiser and schedule, log ``{stage, step, loss, lr}``
    (``lr``: the rate this step used); returns the loss value. The one update of every ``toolgym fit-*`` loop."""
    import torch

    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    lr = float(optimizer.param_groups[0]["lr"])
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    value = float(loss.item())
    log.write({"stage": stage, "step": step, "loss": value, "lr": lr})
    return value


def warmup_decay_factor(step: int, warmup: int, total: int) -> float:
    """Learning-rate multiplier of optimiser step ``step`` (0-based) of ``total``, never 0:

        f(s) = (s + 1) / (w + 1)            for s < w   (warm-up; the first step already moves)
        f(s) = max(T - s, 1) / (T - w)      for s >= w  (linear decay; the last step keeps 1 / (T - w))

    with w = min(``warmup``, T - 1), T = max(``total``, 1). transformers'
    ``get_linear_schedule_with_warmup`` (used before) is s / w and (T - s) / (T - w): its step 0
    trains at lr 0, and a warm-up sized to steps a budget never reaches keeps every step near 0.
    """
    total = max(int(total), 1)
    warmup = min(max(int(warmup), 0), total - 1)
    if step < warmup:
        return (step + 1) / (warmup + 1)
    return max(total - step, 1) / (total - warmup)


class BudgetedWarmupDecay:
    """Linear warm-up and decay sized to the steps that fit: min(planned steps, budget estimate).

    With no budget (or before ``estimate_after`` steps are timed) the schedule spans the
    ``planned`` steps; after that, each step re-estimates how many steps the budget allows from
    the mean time per step so far, so a run the budget cuts short still warms up (warm-up =
    ``warmup_ratio`` of the estimate) and decays within the steps it gets, instead of spending
    them at lr ~0 under a warm-up sized for steps it will never reach. Call it with the number of
    optimiser steps taken (``torch.optim.lr_scheduler.LambdaLR`` does). ``clock``: for tests.
    """

    def __init__(self, planned: int, warmup_ratio: float, budget: "Budget | None" = None, estimate_after: int = 1,
                 clock: Any = None):
        self.planned = max(int(planned), 1)
        self.warmup_ratio = float(warmup_ratio)
        self.budget = budget
        self.estimate_after = max(int(estimate_after), 1)
        self.clock = clock or time.monotonic
        self.start = self.clock()
        self.total = self.planned

    def steps_that_fit(self, done: int) -> int:
        """Planned steps, or fewer when the budget (at the measured pace) ends the run first."""
        budget = self.budget
        if budget is None or budget.seconds <= 0 or done < self.estimate_after:
            return self.planned
        per_step = max(self.clock() - self.start, 1e-9) / done
        left = max(budget.seconds - budget.elapsed(), 0.0)
        return max(1, min(self.planned, done + int(left / per_step)))

    def __call__(self, done: int) -> float:
        self.total = self.steps_that_fit(done)
        return warmup_decay_factor(done, round(self.warmup_ratio * self.total), self.total)


def budgeted_schedule(optimizer: Any, planned_steps: int, warmup_ratio: float, budget: "Budget | None") -> Any:
    """A ``LambdaLR`` over :class:`BudgetedWarmupDecay`: the schedule of every ``toolgym fit-*`` loop."""
    from torch.optim.lr_scheduler import LambdaLR

    return LambdaLR(optimizer, BudgetedWarmupDecay(planned_steps, warmup_ratio, budget))


def check_training_loop(cfg: Any, batch_key: str | None = "batch_size") -> None:
    """The ranges every fit config's training loop shares (epochs, max_steps, batch size, lr, warm-up, length):
    one place, called from each config's ``__post_init__``."""
    require(cfg.epochs >= 1, "epochs", cfg.epochs, "must be >= 1")
    require(cfg.max_steps >= 0, "max_steps", cfg.max_steps, "must be >= 0 (0 = no limit)")
    if batch_key is not None:
        require(getattr(cfg, batch_key) >= 1, batch_key, getattr(cfg, batch_key), "must be >= 1")
    require(cfg.lr >= 0, "lr", cfg.lr, "must be >= 0")
    require(0 <= cfg.warmup_ratio <= 1, "warmup_ratio", cfg.warmup_ratio, "must be in [0, 1]")
    require(cfg.max_length >= 1, "max_length", cfg.max_length, "must be >= 1")


@dataclass
class FitDataConfig:
    """The data keys every ``toolgym fit-*`` config shares (top-level keys of its YAML).

    Parameters:
        dataset (`str`, defaults to `"seal_tools"`), train_split (`str`, defaults to `"train"`),
        eval_split (`str` or `None`, defaults to `"heldout"`):
            A registered dataset and two of its splits; ``eval_split: null`` holds out
            ``heldout_fraction`` of ``train_split`` instead.
        corpus_path (`str` or `None`), tasks_path (`str` or `None`), both defaulting to `None`:
            Or a corpus and a tasks JSONL (Tool / Task records), held out by ``split_tasks``.
        heldout_fraction (`float`, defaults to `0.2`):
            Share of tasks held out when there is no eval split.
        train_limit (`int`, defaults to `0`), eval_limit (`int`, defaults to `0`):
            Use the first N training / held-out tasks; ``0`` = all.
        output_dir (`str`, defaults to `"runs/fit"`), seed (`int`, defaults to `0`),
        budget_minutes (`float`, defaults to `6.0`):
            Run folder, seed of every draw, wall-clock budget of training (``<= 0``: none).
        progress (`bool`, defaults to `True`): progress bars.
        precision (`str`, defaults to `"float32"`):
            ``float32``, ``bfloat16`` or ``auto`` (bf16 where the CPU multiplies bf16 matrices natively,
            AMX-BF16 / AVX512-BF16, else float32): the forward passes of training and of the scoring
            between stages run under bf16 autocast (:func:`mixed_precision`); weights, gradients and
            the optimiser state stay float32. Speed: ``benchmarks/fit_precision.py``.
    """

    dataset: str = "seal_tools"
    train_split: Optional[str] = "train"
    eval_split: Optional[str] = "heldout"
    corpus_path: Optional[str] = None
    tasks_path: Optional[str] = None
    heldout_fraction: float = 0.2
    train_limit: int = 0
    eval_limit: int = 0
    output_dir: str = "runs/fit"
    seed: int = 0
    budget_minutes: float = 6.0
    progress: bool = True
    precision: str = "float32"

    def __post_init__(self) -> None:
        """The data keys' ranges, one ``ValueError`` naming the key (subclasses add their own)."""
        from toolgym.data.readers import check_finite_fields
        from toolgym.trainers.config import MAX_SEED

        check_finite_fields(self, "fit")
        require(0 <= self.heldout_fraction < 1, "heldout_fraction", self.heldout_fraction, "must be in [0, 1)")
        require(self.train_limit >= 0, "train_limit", self.train_limit, "must be >= 0 (0 = all)")
        require(self.eval_limit >= 0, "eval_limit", self.eval_limit, "must be >= 0 (0 = all)")
        require(isinstance(self.seed, int) and 0 <= self.seed <= MAX_SEED, "seed", self.seed,
                f"must be an integer in [0, {MAX_SEED}]")
        require(self.precision in FIT_PRECISIONS, "precision", self.precision,
                f"must be one of {', '.join(FIT_PRECISIONS)}")


def mean_over_sources(by_source: dict[str, dict[str, float]]) -> dict[str, float]:
    """Held-out numbers of a run: one source's own, or a mixture's unweighted mean over its sources."""
    if not by_source:
        return {}
    keys = next(iter(by_source.values()))
    return {k: float(sum(v[k] for v in by_source.values()) / len(by_source)) for k in keys}


def proportional_batches(batches: dict[str, list[list[int]]], weights: dict[str, float],
                         rng: random.Random, total: int | None = None) -> list[tuple[str, list[int]]]:
    """A seeded order of ``(source, batch)``: every batch comes from one source (in-batch negatives
    stay in the query's own library), and source ``s`` gets ``total · w_s / Σw`` of the ``total``
    batches (default: all the sources' batches), largest remainders rounding the shares; a source
    with fewer batches than its share cycles through them again."""
    names = [n for n in batches if batches[n]]
    if not names:
        return []
    total = sum(len(batches[n]) for n in names) if total is None else int(total)
    weight_sum = sum(weights[n] for n in names)
    exact = {n: total * weights[n] / weight_sum for n in names}
    counts = {n: int(exact[n]) for n in names}
    for n in sorted(names, key=lambda n: (counts[n] - exact[n], names.index(n)))[: total - sum(counts.values())]:
        counts[n] += 1
    plan = [(n, batches[n][i % len(batches[n])]) for n in names for i in range(counts[n])]
    rng.shuffle(plan)
    return plan
