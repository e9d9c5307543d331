"""How much of a GRPO update does the shared prompt cost? ``grpo.share_prompt_prefix`` off vs on.

The update of the learning runs (SmolLM2-135M, LoRA r=16 on q/k/v/o, bf16 autocast, micro-batches
of 4) on one task group: ``--group-size`` rollouts that share the task's real prompt (the
``ToolSearch-v0`` system prompt, tool schemas and request, encoded by the policy) and then diverge
into multi-turn continuations of ``--continuation`` tokens (half policy tokens, half masked tool
results). Each repeat runs both settings, alternating which goes first, on the same batch; the
wall times are forward + backward + optimiser step (``GRPOTrainer.train_on``). The two updates'
gradients are compared (relative L2 difference, bf16) before anything is timed. Writes
``benchmarks/results/update_prefix.json`` and a docs/benchmarks.md section. Not run in CI.

    python -m benchmarks.update_prefix                      # ~3 min on 2 cores
    python -m benchmarks.update_prefix --continuation 800 --repeats 5
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: shared CPUs collapse with spinning threads

from benchmarks._report import markdown_table, write_report  # noqa: E402


def group_batch(policy, group_size: int, continuation: int, seed: int = 0):
    """One task's prompt (a real ToolSearch-v0 reset) and ``group_size`` random continuations."""
    import gymnasium
    import numpy as np

    import toolgym.envs  # noqa: F401  (registers the ids)
    from toolgym.trainers.grpo import TokenBatch

    env = gymnasium.make("toolgym/ToolSearch-v0", split="train", max_turns=4)
    _, info = env.reset(seed=seed)
    prompt = list(policy.encode_prompt(info["messages"]))
    rng = np.random.default_rng(seed)
    vocab = len(policy.tokenizer)
    seqs, masks, adv = [], [], []
    for i in range(group_size):
        n = continuation + int(rng.integers(-continuation // 4, continuation // 4 + 1))
        mask = [0] * len(prompt) + [int((p // 40) % 2 == 0) for p in range(n)]  # policy turns and tool results
        seqs.append(prompt + rng.integers(10, vocab - 10, n).tolist())
        masks.append(mask)
        adv.append(np.asarray(mask, dtype=float) * (1.0 if i % 2 else -1.0))
    return TokenBatch(token_ids=seqs, loss_mask=masks, advantages=adv), len(prompt)


def gradient_difference(model, batch) -> float:
    """Relative L2 difference of the loss gradient with and without the shared prefix (the first
    micro-batch, bf16 autocast as in the update). Weight changes are not compared: Adam's first
    step is ~lr·sign(g) per weight, so a gradient entry near 0 flips its step on rounding alone."""
    import torch

    from toolgym.trainers.grpo import response_logprobs

    grads = []
    seqs, masks = batch.token_ids[:4], batch.loss_mask[:4]
    for share in (False, True):
        model.zero_grad(set_to_none=True)
        lp = response_logprobs(model, seqs, masks, autocast_bf16=True, share_prefix=share)
        sum((l * (-1.0) ** k).sum() for k, l in enumerate(lp)).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    model.zero_grad(set_to_none=True)
    return float((grads[0] - grads[1]).norm() / grads[0].norm())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--continuation", type=int, default=400, help="mean continuation tokens per rollout")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-report", action="store_true")
    args = ap.parse_args(argv)

    import torch

    from toolgym.agents.hf_policy import HFChatPolicy, apply_lora
    from toolgym.trainers.grpo import GRPOTrainer

    policy = HFChatPolicy.from_pretrained("smollm2", sampling={"max_new_tokens": 8}, device="cpu")
    base = apply_lora(policy.model, {"r": 16, "lora_alpha": 32, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]})
    batch, prompt_len = group_batch(policy, args.group_size, args.continuation)
    config = {"lr": 3e-4, "kl_coef": 0.0, "micro_batch_size": 4, "autocast_bf16": True}

    def update(share: bool) -> tuple[float, dict]:
        model = copy.deepcopy(base)
        trainer = GRPOTrainer(model, {**config, "share_prompt_prefix": share})
        start = time.perf_counter()
        trainer.train_on(batch)
        return time.perf_counter() - start, {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}

    worst = gradient_difference(base, batch)
    times: dict[bool, list[float]] = {False: [], True: []}
    for r in range(args.repeats):
        for share in ((False, True) if r % 2 == 0 else (True, False)):
            times[share].append(update(share)[0])
    med = {k: statistics.median(v) for k, v in times.items()}
    tokens = sum(len(s) for s in batch.token_ids)
    result = {"group_size": args.group_size, "prompt_tokens": prompt_len, "tokens": tokens,
              "continuation_mean": (tokens - args.group_size * prompt_len) / args.group_size,
              "seconds": {"plain": times[False], "shared": times[True]},
              "median_s": {"plain": med[False], "shared": med[True]}, "speedup": med[False] / med[True],
              "gradient_relative_difference": worst, "threads": torch.get_num_threads()}
    rows = [["plain (each row runs the prompt)", f"{med[False]:.2f}", "1.00x"],
            ["share_prompt_prefix", f"{med[True]:.2f}", f"{result['speedup']:.2f}x"]]
    body = (f"One GRPO update (`train_on`: forward, backward, optimiser step) of {args.group_size} rollouts of one "
            f"`ToolSearch-v0` task: a {prompt_len}-token prompt and continuations of "
            f"{result['continuation_mean']:.0f} tokens on average; SmolLM2-135M with LoRA r=16, bf16 autocast, "
            f"micro-batches of 4, {torch.get_num_threads()} threads, median of {args.repeats} alternating repeats. "
            f"The two loss gradients differ by {100 * worst:.2f} % (relative L2, bf16 rounding; in float32 the "
            f"log-probs, gradients and updated weights agree to 1e-4, tests/test_grpo.py).\n\n"
            + markdown_table(["update", "seconds", "speed-up"], rows))
    print(body)
    if not args.no_report:
        write_report("update_prefix", result, "GRPO update: the shared prompt prefix", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
