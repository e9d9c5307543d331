"""``toolgym fit-preference CONFIG``: train the decomposition preference scorer s_φ(x, y) (MagicSelector §3.3).

Pairs (x, y*, y⁻): y* = a task's reference subtasks (UltraTool, read from the shared data at
run time via ``toolgym.data.load_dataset("ultratool")``, never bundled), y⁻ = a corruption of
y* along one quality criterion (``toolgym.data.training_data.CORRUPTIONS``: merged
intents, dropped intent, duplicated subtask, unresolved reference, invented task).

Model: the MiniLM body as a one-logit cross-encoder over (x, numbered subtasks). Loss: the
Bradley–Terry pairwise loss −log σ(s(x, y*) − s(x, y⁻)) (the form of eq. 20), as
sentence-transformers' ``RankNetLoss`` (natural log, no weighting) on the two-item list
[y*, y⁻]. Tasks are split before pairs are built, so no held-out context is ever trained on;
the held-out pairwise accuracy, mean 1[s(x, y*) > s(x, y⁻)], is reported overall and per
corruption, before (untrained head) and after training. The model folder
``<output_dir>/model`` is what ``toolgym.rewards.preference_model.CrossEncoderPreferenceScorer`` loads.
"""
from __future__ import annotations

import dataclasses
import json
import random
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from toolgym.data.atomic import write_text_atomic
from toolgym.trainers.config import require
from toolgym.fitting.common import (
    check_training_loop,
    FitDataConfig,
    Budget,
    MetricsLog,
    optimizer_step,
    budgeted_schedule,
    fit_dtype,
    load_train_eval,
    mixed_precision,
    plot_fit_curves,
    set_seed,
)


@dataclass
class FitPreferenceConfig(FitDataConfig):
    """Everything ``toolgym fit-preference`` reads (and the data keys of :class:`FitDataConfig`,
    here defaulting to UltraTool's train split with 20 % held out).

    ``corruptions``: the kinds of corrupted decomposition each task yields as a rejected answer;
    ``corruptions_per_task`` (0 = every applicable one); ``batch_size`` counts pairs.
    """

    model: str = "minilm"
    dataset: str = "ultratool"
    eval_split: Optional[str] = None
    corruptions: list[str] = field(default_factory=lambda: ["merged_intents", "dropped_intent", "duplicated_subtask",
                                                            "unresolved_reference", "invented_task"])
    corruptions_per_task: int = 0
    output_dir: str = "runs/fit_preference"
    epochs: int = 1
    max_steps: int = 0
    batch_size: int = 16
    lr: float = 3.0e-5
    warmup_ratio: float = 0.1
    max_length: int = 256
    eval_before: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.corruptions_per_task >= 0, "corruptions_per_task", self.corruptions_per_task,
                "must be >= 0 (0 = every applicable one)")
        check_training_loop(self)


def pairwise_accuracy(scorer: Any, pairs: Sequence[Any]) -> dict[str, Any]:
    """Share of pairs (in %) where s(x, y*) > s(x, y⁻), overall and per corruption kind; ``per_pair``
    keeps every pair's task id, kind and two scores, the rows the accuracies are computed from."""
    from toolgym.rewards.preference_model import preference_inputs

    texts = [p for pair in pairs for p in preference_inputs(pair.task, [list(pair.chosen), list(pair.rejected)])]
    scores = scorer.score_pairs(texts).reshape(-1, 2) if texts else np.zeros((0, 2))
    wins = scores[:, 0] > scores[:, 1]
    by_kind: dict[str, list[bool]] = defaultdict(list)
    for pair, win in zip(pairs, wins):
        by_kind[pair.kind].append(bool(win))
    return {
        "accuracy": 100.0 * float(wins.mean()) if len(pairs) else 0.0,
        "pairs": len(pairs),
        "by_kind": {k: 100.0 * float(np.mean(v)) for k, v in sorted(by_kind.items())},
        "per_pair": [{"task_id": pair.task.id, "kind": pair.kind, "chosen": float(sc[0]), "rejected": float(sc[1]),
                      "win": bool(win)} for pair, sc, win in zip(pairs, scores, wins)],
    }


def _scorer_from(model: Any) -> Any:
    """Wrap an in-memory CrossEncoder as a scorer without reloading it from disk."""
    from toolgym.rewards.preference_model import CrossEncoderPreferenceScorer

    scorer = CrossEncoderPreferenceScorer.__new__(CrossEncoderPreferenceScorer)
    scorer.model, scorer.batch_size, scorer.model_dir = model, 16, "<in memory>"
    return scorer


def fit_preference(cfg: Any) -> dict[str, Any]:
    import torch
    from sentence_transformers.cross_encoder.losses import RankNetLoss
    from tqdm.auto import tqdm

    from toolgym.data.training_data import preference_pairs
    from toolgym.rewards.preference_model import preference_inputs
    from toolgym.fitting.reranker import load_reranker

    fit_dtype(cfg.precision)  # a bad precision fails here, before any data is read
    set_seed(int(cfg.seed))
    rng = random.Random(int(cfg.seed))
    out_dir = Path(cfg.output_dir)
    log = MetricsLog(out_dir)
    _, train_tasks, eval_tasks = load_train_eval(cfg)
    per_task = int(cfg.corruptions_per_task) or None
    train_pairs = preference_pairs(train_tasks, rng, list(cfg.corruptions), per_task)
    eval_pairs = preference_pairs(eval_tasks, random.Random(int(cfg.seed) + 1), list(cfg.corruptions), per_task)
    if not train_pairs:
        raise ValueError("no training pairs: the training tasks have no reference subtasks")
    budget = Budget(float(cfg.budget_minutes))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        model = load_reranker(cfg.model, int(cfg.max_length)).model
    scorer = _scorer_from(model)
    summary: dict[str, Any] = {"command": "fit-preference", "train_tasks": len(train_tasks), "eval_tasks": len(eval_tasks),
                               "train_pairs": len(train_pairs)}
    if cfg.eval_before and eval_pairs:
        summary["heldout_before"] = pairwise_accuracy(scorer, eval_pairs)
        log.write({"stage": "eval", "step": 0, "heldout_accuracy": summary["heldout_before"]["accuracy"]})

    loss_fn = RankNetLoss(model, reduction_log="natural")
    order: list[int] = []
    for _ in range(max(int(cfg.epochs), 1)):
        epoch = list(range(len(train_pairs)))
        rng.shuffle(epoch)
        order += epoch
    bs = int(cfg.batch_size)
    batches = [order[i : i + bs] for i in range(0, len(order), bs)]
    if int(cfg.max_steps) > 0:
        batches = batches[: int(cfg.max_steps)]
    optimizer = torch.optim.AdamW(model.parameters(), lr=float(cfg.lr))
    scheduler = budgeted_schedule(optimizer, len(batches), float(cfg.warmup_ratio), budget)
    model.train()
    step, window = 0, []
    bar = tqdm(batches, desc="fit-preference", disable=not cfg.progress)
    for batch in bar:
        if budget.spent():
            log.write({"stage": "train", "step": step, "event": "budget_spent", "elapsed_s": budget.elapsed()})
            break
        pairs = [train_pairs[i] for i in batch]
        texts = [preference_inputs(p.task, [list(p.chosen), list(p.rejected)]) for p in pairs]
        inputs = [[t[0][0] for t in texts], [[t[0][1], t[1][1]] for t in texts]]
        with mixed_precision(cfg.precision):
            loss = loss_fn(inputs, [torch.tensor([1.0, 0.0]) for _ in pairs])
        step += 1
        window = (window + [optimizer_step(loss, model, optimizer, scheduler, log, "train", step)])[-20:]
        bar.set_postfix(loss=f"{np.mean(window):.3f}")
    bar.close()
    model.eval()
    model_dir = out_dir / "model"
    model.save(str(model_dir))
    if eval_pairs:
        summary["heldout"] = pairwise_accuracy(scorer, eval_pairs)
        log.write({"stage": "eval", "step": step, "heldout_accuracy": summary["heldout"]["accuracy"]})
    summary.update(model_dir=str(model_dir), steps=step, elapsed_s=budget.elapsed(),
                   budget_minutes=float(cfg.budget_minutes), config=dataclasses.asdict(cfg))
    write_text_atomic(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    plot_fit_curves(log.path, out_dir / "curves.png", ["loss", "heldout_accuracy"], "fit-preference (pairwise, eq. 20 form)")
    return summary
