"""Train SmolLM2-135M on toolgym/ToolSearch-v0 with TRL's GRPOTrainer; paired held-out F1 before and after.

The environment is toolgym's, run through :mod:`toolgym.integrations.trl` (TRL's
``environment_factory``: one env per rollout, ``search`` / ``submit`` as tools, the reward owned by
the env through a toolgym outcome module, ``grpo_f1`` by default). The model is the packaged
SmolLM2 GGUF (``--model smollm2``) or a supervised warm start (``--model runs/.../sft/model``,
what ``toolgym sft`` writes). Before and after training the same held-out tasks are evaluated by
toolgym's own evaluator (greedy, one episode per task, :func:`toolgym.evaluation.paired.evaluate_per_task`)
and compared pairwise (:func:`toolgym.evaluation.paired.compare`). The tokenizer both times is
the one TRL trained with (:func:`toolgym.integrations.trl.prepare_tokenizer`).

Writes ``--out`` (default ``benchmarks/results/trl_grpo.json``): settings, TRL's log history,
the paired F1 and reward gains, timings; and ``<out stem>_tasks.json``: every task's row before
and after. CPU-heavy; a 1-step run shows the time per step::

    python examples/trl_grpo.py --steps 1 --eval-tasks 2 --out /tmp/trl_1step.json
    python examples/trl_grpo.py --model runs/sft_warmstart/model --steps 10 --eval-tasks 30
    python examples/trl_grpo.py --report    # docs/benchmarks.md's section from benchmarks/results/trl_grpo.json
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: shared CPUs collapse with spinning threads
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing downloads

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "benchmarks" / "results" / "trl_grpo.json"  # the file --report renders
sys.path.insert(0, str(ROOT / "benchmarks"))  # _report: the tables and sections every benchmark writes
ENV_ID = "toolgym/ToolSearch-v0"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2", help="smollm2 (the packaged GGUF), a model folder, or a warm start")
    p.add_argument("--env-id", default=ENV_ID)
    p.add_argument("--max-turns", type=int, default=4, help="env turn budget (also TRL's max_tool_calling_iterations)")
    p.add_argument("--reward", default="grpo_f1", help="a toolgym outcome module or scheme")
    p.add_argument("--steps", type=int, default=10, help="GRPO steps (TRL max_steps)")
    p.add_argument("--prompts-per-step", type=int, default=4)
    p.add_argument("--generations", type=int, default=4, help="GRPO group size (TRL num_generations)")
    p.add_argument("--train-tasks", type=int, default=64, help="first N train-split tasks TRL samples prompts from")
    p.add_argument("--eval-tasks", type=int, default=30, help="first N held-out tasks, evaluated before and after")
    p.add_argument("--max-completion-length", type=int, default=1024,
                   help="TRL counts the tool results in it: 4 turns of a call and 5 results need ~1,000")
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--lora-r", type=int, default=16, help="LoRA rank (0: train all weights)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--out", default=str(RESULT))
    p.add_argument("--run-dir", default=str(ROOT / "runs" / "trl_grpo"), help="TRL's output_dir (checkpoints not saved)")
    p.add_argument("--report", action="store_true",
                   help="train nothing: rewrite the trl_grpo section of docs/benchmarks.md from --out")
    return p.parse_args(argv)


def _mean(values):
    values = [float(v) for v in values if v is not None]
    return sum(values) / len(values) if values else float("nan")


def report_markdown(result: dict) -> str:
    """The docs/benchmarks.md section of one run: settings, the paired held-out gains, TRL's log per step."""
    from _report import markdown_table

    def gain(g):
        verdict = "above 2 se" if g["exceeds_2se"] else ("below -2 se" if g["gain"] < -2 * g["se"] else "within 2 se")
        return f"{g['gain']:+.3f} ± {g['se']:.3f} ({g['before']:.3f} → {g['after']:.3f}; {verdict})"

    sec = result["seconds"]
    log = [h for h in result["trl_log"] if "reward" in h]
    rows = [[i, f"{float(h['reward']):.3f}", f"{float(h['reward_std']):.3f}", f"{float(h['frac_reward_zero_std']):.2f}",
             f"{float(h.get('tools/call_frequency', 0)):.2f}", f"{float(h['completions/mean_length']):.0f}",
             f"{float(h['step_time']):.0f}"] for i, h in enumerate(log)]
    lines = [
        f"`{result['env_id']}` (env kwargs `{json.dumps(result['env_kwargs'])}`), model `{result['model']}`, "
        f"TRL `GRPOTrainer` {result['steps']} steps of {result['prompts_per_step']} prompts × "
        f"{result['generations']} generations, LoRA r={result['lora_r']}, lr {result['lr']:g}, reward "
        f"`{result['reward']}`, seed {result['seed']}"
        + (f", {result['threads']} torch thread(s)" if result.get("threads") else "") + ".",
        "",
        f"Held-out, toolgym's evaluator (greedy, one episode per task), paired over {result['eval_tasks']} tasks, "
        "after − before:",
        "",
        f"- **F1** {gain(result['paired_f1'])}",
        f"- **reward** (`{result['reward']}`) {gain(result['paired_reward'])}",
        "",
        f"Time: {sec['train'] / 60:.1f} min of training ({sec['per_step']:.0f} s per step), "
        f"{sec['eval_once'] / 60:.1f} min per evaluation, {sec['total'] / 60:.1f} min in all.",
        "",
        "TRL's log per step (its reward is the env-owned toolgym reward; `zero-std groups` is the share of "
        "groups whose rollouts all scored the same, which give no gradient):",
        "",
        markdown_table(["step", "reward", "reward std", "zero-std groups", "tool calls / rollout", "tokens / completion",
                        "step s"], rows),
        "",
        f"Mean over steps: reward {_mean(h['reward'] for h in log):.3f}, zero-std groups "
        f"{_mean(h['frac_reward_zero_std'] for h in log):.2f}. Per-task rows before and after: "
        "`benchmarks/results/trl_grpo_tasks.json`.",
    ]
    return "\n".join(lines)


def write_docs(out: Path) -> None:
    from _report import DOC, write_report

    if out.resolve() != RESULT.resolve():
        raise ValueError(f"--report writes docs/benchmarks.md from {RESULT.relative_to(ROOT)} only, not {out}")
    result = json.loads(out.read_text())
    write_report("trl_grpo", result, "TRL GRPOTrainer on ToolSearch-v0 (SmolLM2 warm start)", report_markdown(result),
                 script="examples/trl_grpo.py --report")
    print(f"wrote the trl_grpo section of {DOC}", file=sys.stderr)


def evaluate(model, tokenizer, env_kwargs, n):
    from toolgym.agents.hf_policy import HFChatPolicy
    from toolgym.evaluation.paired import evaluate_per_task

    policy = HFChatPolicy(model, tokenizer, {"max_new_tokens": 96, "temperature": 0.0})
    model.eval()
    try:
        return evaluate_per_task(policy, ENV_ID, {**env_kwargs, "split": "heldout"}, num_tasks=n, progress=False)
    finally:
        model.train()


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.report:
        write_docs(Path(args.out))
        return 0
    import torch
    from trl import GRPOConfig, GRPOTrainer

    from toolgym.agents.hf_policy import lora_config, load_causal_lm
    from toolgym.integrations import trl as tg
    from toolgym.evaluation.paired import compare

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    started = time.time()
    model, tokenizer = load_causal_lm(args.model)
    tokenizer = tg.prepare_tokenizer(copy.deepcopy(tokenizer))
    env_kwargs = {"max_turns": args.max_turns}
    print(f"[trl_grpo] evaluating {args.model} on {args.eval_tasks} held-out tasks", file=sys.stderr, flush=True)
    t = time.time()
    before = evaluate(model, tokenizer, env_kwargs, args.eval_tasks)
    eval_s = time.time() - t

    kwargs = tg.grpo_trainer_kwargs(args.env_id, env_kwargs, args.reward, split="train", max_tasks=args.train_tasks)
    config = GRPOConfig(
        output_dir=args.run_dir, use_cpu=not torch.cuda.is_available(), max_steps=args.steps,
        per_device_train_batch_size=args.prompts_per_step * args.generations, num_generations=args.generations,
        max_completion_length=args.max_completion_length, max_tool_calling_iterations=args.max_turns,
        learning_rate=args.lr, logging_steps=1, report_to=[], save_strategy="no", seed=args.seed, bf16=False,
        dataloader_num_workers=0)
    peft = lora_config({"r": args.lora_r}) if args.lora_r else None
    trainer = GRPOTrainer(model=model, args=config, processing_class=tokenizer, peft_config=peft, **kwargs)
    print(f"[trl_grpo] {args.steps} GRPO step(s), {args.prompts_per_step} prompts x {args.generations}", file=sys.stderr, flush=True)
    t = time.time()
    trainer.train()
    train_s = time.time() - t
    trained = trainer.model
    if peft is not None:
        trained = trained.merge_and_unload()
    after = evaluate(trained, tokenizer, env_kwargs, args.eval_tasks)

    result = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),  # when it ran; --report keeps it
        "env_id": args.env_id, "env_kwargs": env_kwargs, "model": args.model, "reward": args.reward,
        "steps": args.steps, "prompts_per_step": args.prompts_per_step, "generations": args.generations,
        "lora_r": args.lora_r, "lr": args.lr, "seed": args.seed, "threads": args.threads,
        "max_completion_length": args.max_completion_length, "train_tasks": args.train_tasks,
        "eval_tasks": before["num_tasks"],
        "f1_before": before["mean"].get("f1"), "f1_after": after["mean"].get("f1"),
        "paired_f1": compare(before, after, "f1"), "paired_reward": compare(before, after, "reward"),
        "seconds": {"eval_once": eval_s, "train": train_s, "per_step": train_s / max(1, args.steps),
                    "total": time.time() - started},
        "trl_log": trainer.state.log_history,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    rows = {"before": before["rows"], "after": after["rows"]}
    out.with_name(out.stem + "_tasks.json").write_text(json.dumps(rows, indent=1) + "\n")
    pf = result["paired_f1"]
    print(json.dumps({"f1_before": result["f1_before"], "f1_after": result["f1_after"], "paired_f1": pf,
                      "seconds": result["seconds"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
