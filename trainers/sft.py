"""``toolgym sft CONFIG [key=value ...]``: supervised warm start on demonstration episodes.

A demonstration is a text episode (``toolgym demos`` output: rollout records whose trajectories
carry the chat ``messages``). :func:`episode_tokens` turns it into token ids and a loss mask
with the very calls the GRPO rollout uses (``policy.encode_prompt`` for the prompt, the policy
turn's own ids with mask 1, ``policy.encode_tool_turn`` for every environment turn with mask 0),
so the warm start trains on exactly the layout GRPO later samples and scores: the loss is on
the policy's tokens only; tool results and template glue are masked.

Training runs on transformers' ``Trainer`` (labels = ids where mask is 1, else -100; padding by
``DataCollatorForSeq2Seq``, which pads labels with -100): full fine-tuning by default, LoRA
with ``lora: {r: ..}`` (merged before saving). Outputs in ``run_dir``: ``metrics.jsonl``,
``curves.png``, ``checkpoints/`` (Trainer checkpoints, ``--resume`` continues), ``model/`` (a
plain transformers folder with weights and tokenizer, what ``toolgym train model.name=RUN_DIR/model``,
``model.init_from=RUN_DIR`` and ``toolgym eval --policy RUN_DIR/model`` load).
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from toolgym.trainers.config import MAX_SEED, ModelConfig, check_lora_numbers, config_dict, load_config, require
from toolgym.agents.policy import check_bf16_setting
from toolgym.trainers.console import verbose
from toolgym.data.atomic import write_text_atomic

@dataclass
class SFTDataConfig:
    """The ``data`` section: which demonstrations, and how they are cut.

    Parameters:
        demos (`list[str]`, defaults to `[]`):
            Rollout JSONL files written by ``toolgym demos``.
        max_episodes (`int` or `None`, defaults to `None`):
            At most this many episodes from each file (its first ones); ``None`` = all.
        max_tokens (`int`, defaults to `2048`):
            Longer episodes are dropped.
        min_reward (`float` or `None`, defaults to `None`):
            Keep only trajectories whose env reward is at least this.
        stop_strings (`list[str]`, defaults to `["</tool_call>"]`):
            A policy turn ending with one of these ends there (the rollout stops on the string);
            any other turn ends with the end-of-turn token, which the policy must learn to emit.
    """

    demos: list[str] = field(default_factory=list)
    max_episodes: Optional[int] = None
    max_tokens: int = 2048
    min_reward: Optional[float] = None
    stop_strings: list[str] = field(default_factory=lambda: ["</tool_call>"])

    def __post_init__(self) -> None:
        from toolgym.data.readers import check_finite_fields

        check_finite_fields(self, "data")
        require(self.max_episodes is None or self.max_episodes >= 1, "data.max_episodes", self.max_episodes,
              "must be >= 1, or null for all")
        require(self.max_tokens >= 1, "data.max_tokens", self.max_tokens, "must be >= 1")
        require(all(isinstance(s, str) for s in self.stop_strings), "data.stop_strings", self.stop_strings,
              "must be a list of strings")


@dataclass
class SFTTrainConfig:
    """The ``train`` section: ``transformers.TrainingArguments`` under short names.

    Parameters:
        epochs (`float`, defaults to `1.0`), max_steps (`int`, defaults to `-1`: epochs decide):
            Length of the run.
        lr (`float`, defaults to `5e-5`), lr_scheduler (`str`, defaults to `"cosine"`),
        warmup_ratio (`float`, defaults to `0.05`), weight_decay (`float`, defaults to `0.0`),
        max_grad_norm (`float`, defaults to `1.0`):
            The optimiser and its schedule.
        batch_size (`int`, defaults to `4`), grad_accum (`int`, defaults to `1`):
            Episodes per forward pass and passes per optimiser step.
        save_steps (`int`, defaults to `50`), keep_checkpoints (`int`, defaults to `1`):
            Trainer checkpoints (what ``--resume`` continues from).
        time_budget_s (`float` or `None`, defaults to `None`):
            Stop (and save) after this many seconds of training.
        gradient_checkpointing (`bool`, defaults to `False`):
            Recompute activations in the backward pass.
        bf16 (`bool` or ``"auto"``, defaults to `False`):
            bfloat16 autocast (weights stay float32); ~1.6x faster on CPUs with AVX512-BF16, ~70x
            slower on CPUs without bf16 matrix units; ``auto`` autocasts only where they exist
            (:func:`toolgym.agents.decoding.bf16_autocast`), and gives the same model as ``true`` there.
    """

    epochs: float = 1.0
    max_steps: int = -1
    lr: float = 5e-5
    batch_size: int = 4
    grad_accum: int = 1
    warmup_ratio: float = 0.05
    lr_scheduler: str = "cosine"
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    save_steps: int = 50
    keep_checkpoints: int = 1
    time_budget_s: Optional[float] = None
    gradient_checkpointing: bool = False
    bf16: bool | str = False

    def __post_init__(self) -> None:
        from toolgym.data.readers import check_finite_fields

        check_finite_fields(self, "train")  # lr=.inf trained to NaN weights
        require(self.epochs > 0, "train.epochs", self.epochs, "must be > 0")
        require(self.max_steps == -1 or self.max_steps >= 1, "train.max_steps", self.max_steps,
              "must be >= 1, or -1 to let train.epochs decide")
        require(self.lr >= 0, "train.lr", self.lr, "must be >= 0")
        check_bf16_setting(self.bf16, "train.bf16")
        require(self.batch_size >= 1, "train.batch_size", self.batch_size, "must be >= 1")
        require(self.grad_accum >= 1, "train.grad_accum", self.grad_accum, "must be >= 1")
        require(0 <= self.warmup_ratio <= 1, "train.warmup_ratio", self.warmup_ratio, "must be in [0, 1]")
        require(self.weight_decay >= 0, "train.weight_decay", self.weight_decay, "must be >= 0")
        require(self.max_grad_norm >= 0, "train.max_grad_norm", self.max_grad_norm, "must be >= 0 (0 = no clip)")
        require(self.save_steps >= 1, "train.save_steps", self.save_steps, "must be >= 1")
        require(self.keep_checkpoints >= 1, "train.keep_checkpoints", self.keep_checkpoints, "must be >= 1")
        require(self.time_budget_s is None or self.time_budget_s > 0, "train.time_budget_s", self.time_budget_s,
              "must be > 0, or null")


@dataclass
class SFTConfig:
    """Everything ``toolgym sft`` reads; ``toolgym sft CONFIG --print-config`` shows it merged.

    Parameters:
        run_dir (`str`, defaults to `"runs/sft"`): outputs (metrics, checkpoints, ``model/``).
        seed (`int`, defaults to `0`): model init (tiny models), data order and dropout.
        model: a :class:`~toolgym.trainers.config.ModelConfig` (the weights to start from).
        lora (`dict` or `None`, defaults to `None`):
            ``{r, alpha, dropout, target_modules}`` trains a LoRA adapter (merged before saving);
            ``None`` = full fine-tuning.
    """

    run_dir: str = "runs/sft"
    seed: int = 0
    model: ModelConfig = field(default_factory=ModelConfig)
    data: SFTDataConfig = field(default_factory=SFTDataConfig)
    train: SFTTrainConfig = field(default_factory=SFTTrainConfig)
    lora: Optional[dict[str, Any]] = None

    def __post_init__(self) -> None:
        require(isinstance(self.seed, int) and 0 <= self.seed <= MAX_SEED, "seed", self.seed,
              f"must be an integer in [0, {MAX_SEED}]")
        check_lora_numbers(self.lora, "lora")


def load_sft_config(path: str | Path | None, overrides: Sequence[str] = ()) -> SFTConfig:
    """``SFTConfig`` defaults <- YAML file <- ``key=value`` overrides (:func:`~toolgym.trainers.config.load_config`);
    each section checks its own ranges when it is built."""
    return load_config(SFTConfig, path, overrides)


# -- one code path: text episode -> ids + loss mask --------------------------------------------
def turn_end_id(policy: Any) -> int:
    """The end-of-turn id the chat template closes an assistant turn with (``<|im_end|>``)."""
    head = policy.glue.after_assistant
    for tid in policy.end_ids:
        text = policy.tokenizer.decode([tid])
        if text and head.startswith(text):
            return int(tid)
    return int(policy.end_ids[0])


def episode_tokens(policy: Any, messages: Sequence[dict[str, str]],
                   stop_strings: Sequence[str] = ("</tool_call>",)) -> tuple[list[int], list[int], list[tuple[int, int]]]:
    """``(token_ids, loss_mask, turn_spans)`` of a text episode, laid out as the rollout lays it out.

    The messages before the first assistant message are the prompt (``encode_prompt``, mask 0).
    Each assistant message becomes the ids the policy would have sampled: its text tokenised
    alone, plus the end-of-turn id unless the text ends with a stop string (mask 1). Each
    environment message between two assistant messages becomes ``encode_tool_turn(text,
    generated_end)`` (mask 0). Messages after the last assistant turn (the env's closing
    observation) are not part of the sequence, as in the rollout.
    """
    msgs = list(messages)
    first = next((i for i, m in enumerate(msgs) if m.get("role") == "assistant"), None)
    if first is None:
        raise ValueError("the episode has no assistant message")
    last = max(i for i, m in enumerate(msgs) if m.get("role") == "assistant")
    ids = list(policy.encode_prompt(msgs[:first]))
    mask = [0] * len(ids)
    spans: list[tuple[int, int]] = []
    end_id = turn_end_id(policy)
    generated_end = False
    for m in msgs[first:last + 1]:
        text = str(m.get("content", ""))
        if m.get("role") == "assistant":
            turn = policy.tokenizer.encode(text, add_special_tokens=False)
            if not any(text.endswith(s) for s in stop_strings if s):
                turn = turn + [end_id]
            generated_end = bool(turn) and turn[-1] in policy.end_ids
            spans.append((len(ids), len(ids) + len(turn)))
            ids += turn
            mask += [1] * len(turn)
        else:
            glue = policy.encode_tool_turn(text, generated_end)
            ids += glue
            mask += [0] * len(glue)
    return ids, mask, spans


def load_demo_episodes(paths: Sequence[str | Path], min_reward: float | None = None,
                       max_episodes: int | None = None) -> list[list[dict[str, str]]]:
    """The message lists of the trajectories in the demo files: at most ``max_episodes`` from each
    file (its first ones), optionally only those with ``env_reward >= min_reward``."""
    from toolgym.data.records import read_rollouts

    if not paths:
        raise ValueError("no demonstration files: set data.demos (output of `toolgym demos`)")
    episodes = []
    for path in paths:
        if not Path(path).exists():
            raise FileNotFoundError(f"demonstration file not found: {path}")
        start = len(episodes)
        for _task, trajs in read_rollouts(path):
            if max_episodes and len(episodes) - start >= int(max_episodes):
                break
            for traj in trajs:
                if min_reward is not None and (traj.env_reward is None or traj.env_reward < min_reward):
                    continue
                if traj.messages:
                    episodes.append(list(traj.messages))
    if not episodes:
        raise ValueError(f"no usable episode in {list(map(str, paths))}")
    return episodes


def build_examples(policy: Any, episodes: Sequence[Sequence[dict[str, str]]], stop_strings: Sequence[str],
                   max_tokens: int) -> tuple[list[dict[str, list[int]]], int]:
    """Trainer examples ``{input_ids, attention_mask, labels}`` (labels -100 where mask is 0); returns (examples, dropped)."""
    out, dropped = [], 0
    for messages in episodes:
        ids, mask, _ = episode_tokens(policy, messages, stop_strings)
        if len(ids) > max_tokens or not any(mask):
            dropped += 1
            continue
        out.append({"input_ids": ids, "attention_mask": [1] * len(ids),
                    "labels": [t if m else -100 for t, m in zip(ids, mask)]})
    return out, dropped


# -- training -------------------------------------------------------------------------------
def sft(cfg: SFTConfig, resume: bool = False, progress: bool = True) -> dict[str, Any]:
    """Run the supervised warm start described by ``cfg``; returns a summary dict."""
    import torch
    from transformers import DataCollatorForSeq2Seq, Trainer, TrainerCallback, TrainingArguments

    from toolgym.trainers.plotting import plot_curves
    from toolgym.agents.decoding import bf16_autocast
    from toolgym.agents.model import build_policy

    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    model_dir = run_dir / "model"
    if model_dir.exists() and not resume:
        raise ValueError(f"{model_dir} already exists: choose another run_dir (or --resume an unfinished run)")
    dcfg, tcfg = cfg.data, cfg.train
    torch.manual_seed(cfg.seed)
    policy = build_policy(cfg.model, {"stop_strings": list(dcfg.stop_strings)})
    tok = policy.tokenizer
    if tok.pad_token_id is None:
        tok.pad_token = tok.decode([policy.pad_id])
    episodes = load_demo_episodes(dcfg.demos, dcfg.min_reward, dcfg.max_episodes)
    examples, dropped = build_examples(policy, episodes, dcfg.stop_strings, dcfg.max_tokens)
    if not examples:
        raise ValueError(f"every episode is longer than data.max_tokens={dcfg.max_tokens}")
    n_policy = sum(sum(1 for l in e["labels"] if l != -100) for e in examples)
    n_tokens = sum(len(e["input_ids"]) for e in examples)
    print(f"{len(examples)} episodes ({dropped} dropped as too long), {n_tokens} tokens, {n_policy} trained (mask 1)")

    model = policy.model
    if cfg.lora:
        from peft import LoraConfig, get_peft_model

        lc = dict(cfg.lora)
        model = get_peft_model(model, LoraConfig(r=int(lc.get("r", 16)), lora_alpha=int(lc.get("alpha", 32)),
                                                 lora_dropout=float(lc.get("dropout", 0.0)),
                                                 target_modules=list(lc.get("target_modules") or ["q_proj", "v_proj"]),
                                                 task_type="CAUSAL_LM"))
    if tcfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()

    metrics_path = run_dir / "metrics.jsonl"
    if not resume and metrics_path.exists():
        metrics_path.unlink()
    budget = float(tcfg.time_budget_s) if tcfg.time_budget_s else math.inf

    class _Log(TrainerCallback):
        """Metrics as JSONL (one line per logging step) and a wall-clock budget."""

        def on_train_begin(self, args, state, control, **kw):  # noqa: ANN001
            self.t0 = time.time()

        def on_log(self, args, state, control, logs=None, **kw):  # noqa: ANN001
            row = {"step": state.global_step, "epoch": state.epoch, **{k: v for k, v in (logs or {}).items()
                                                                      if isinstance(v, (int, float))}}
            with open(metrics_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")

        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
            if time.time() - self.t0 >= budget:
                print(f"time budget of {budget:.0f}s spent after {state.global_step} steps")
                control.should_training_stop = True
                control.should_save = True

    class _Bar(TrainerCallback):
        """One tqdm bar for the run, the loss as its postfix."""

        def on_train_begin(self, args, state, control, **kw):  # noqa: ANN001
            from tqdm import tqdm

            self.bar = tqdm(total=state.max_steps, initial=state.global_step, desc="SFT", disable=False)

        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
            self.bar.update(state.global_step - self.bar.n)

        def on_log(self, args, state, control, logs=None, **kw):  # noqa: ANN001
            if logs and "loss" in logs:
                self.bar.set_postfix(loss=f"{logs['loss']:.4f}")

        def on_train_end(self, args, state, control, **kw):  # noqa: ANN001
            self.bar.close()

    args = TrainingArguments(
        output_dir=str(run_dir / "checkpoints"), per_device_train_batch_size=tcfg.batch_size,
        gradient_accumulation_steps=tcfg.grad_accum, learning_rate=tcfg.lr,
        num_train_epochs=tcfg.epochs, max_steps=tcfg.max_steps,
        lr_scheduler_type=tcfg.lr_scheduler, warmup_steps=tcfg.warmup_ratio,
        weight_decay=tcfg.weight_decay, max_grad_norm=tcfg.max_grad_norm,
        logging_steps=1, save_strategy="steps", save_steps=tcfg.save_steps,
        save_total_limit=tcfg.keep_checkpoints, report_to="none", seed=cfg.seed,
        use_cpu=not torch.cuda.is_available(), remove_unused_columns=False,
        dataloader_num_workers=0, disable_tqdm=not progress,
        bf16=bf16_autocast(tcfg.bf16, "cuda" if torch.cuda.is_available() else "cpu", "train.bf16"),
    )
    collator = DataCollatorForSeq2Seq(tok, padding=True, label_pad_token_id=-100, return_tensors="pt")
    trainer = Trainer(model=model, args=args, train_dataset=examples, data_collator=collator, callbacks=[_Log()])
    if not verbose():  # one bar of our own instead of the Trainer's bar and its per-step dict lines
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        trainer.remove_callback(ProgressCallback)
        trainer.remove_callback(PrinterCallback)
        if progress:
            trainer.add_callback(_Bar())
    started = time.time()
    has_ckpt = resume and any((run_dir / "checkpoints").glob("checkpoint-*"))
    result = trainer.train(resume_from_checkpoint=True if has_ckpt else None)
    seconds = time.time() - started

    model = trainer.model
    if cfg.lora:
        model = model.merge_and_unload()  # a plain folder: GRPO and eval load it like any model
    model.save_pretrained(str(model_dir))
    tok.save_pretrained(str(model_dir))
    summary = {"run_dir": str(run_dir), "model": str(model_dir), "episodes": len(examples), "dropped_too_long": dropped,
               "tokens": n_tokens, "trained_tokens": n_policy, "steps": trainer.state.global_step,
               "train_loss": float(result.training_loss), "seconds": seconds, "config": config_dict(cfg)}
    write_text_atomic(run_dir / "summary.json", json.dumps(summary, indent=2))
    if metrics_path.exists() and metrics_path.stat().st_size:
        summary["plot"] = str(plot_curves(metrics_path, run_dir / "curves.png", title=f"SFT {cfg.model.init_from or cfg.model.name}",
                                          panels=SFT_PANELS))
    return summary


SFT_PANELS = [("loss", "loss (policy tokens)"), ("grad_norm", "gradient norm"), ("learning_rate", "learning rate")]
