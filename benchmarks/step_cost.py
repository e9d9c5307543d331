"""Cost of local GRPO with the quickstart config, and rollout generation vs plain ``generate``.

Measured in one run, same process, same prompts:
  * seconds per GRPO step (rollout, update, total) and peak resident memory;
  * generated tokens per second of ``collect_rollouts`` (env + exact-token bookkeeping + stop
    check) vs ``model.generate`` called directly on the same prompt ids with the same
    sampling settings; the ratio is the overhead of the rollout machinery.

    python -m benchmarks.step_cost                 # configs/quickstart.yaml, 3 steps
    python -m benchmarks.step_cost --steps 5 grpo.micro_batch_size=8
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: shared CPUs collapse with spinning threads

from benchmarks._report import markdown_table, write_report  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def plain_generate_tokens(policy, prompts: list[list[int]]) -> int:
    """``model.generate`` on left-padded prompts, same sampling; counts tokens up to each row's end token."""
    import torch

    s = policy.sampling
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), policy.pad_id)
    attn = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        attn[i, width - len(p):] = 1
    kwargs = dict(max_new_tokens=s.max_new_tokens, eos_token_id=policy.end_ids, pad_token_id=policy.pad_id)
    if s.temperature > 0:
        kwargs.update(do_sample=True, temperature=s.temperature, top_p=s.top_p, top_k=s.top_k)
    else:
        kwargs.update(do_sample=False)
    with torch.no_grad():
        out = policy.model.generate(input_ids=ids.to(policy.device), attention_mask=attn.to(policy.device), **kwargs)
    total = 0
    for row in out[:, width:].tolist():
        n = len(row)
        for j, t in enumerate(row):
            if t in policy.end_ids:
                n = j + 1
                break
        total += n
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(ROOT / "configs" / "quickstart.yaml"))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=8, help="prompts for the generation comparison")
    ap.add_argument("--repeats", type=int, default=2)
    args, overrides = ap.parse_known_args(argv)

    import torch

    from toolgym.agents.rollout import collect_rollouts
    from toolgym.trainers.config import config_dict
    from toolgym.agents.model import build_policy
    from toolgym.evaluation.evaluate import env_tasks, make_envs
    from toolgym.trainers.config import load_train_config
    from toolgym.trainers.train import train

    cfg = load_train_config(args.config, overrides)
    plain = config_dict(cfg)
    # 1. generation: rollouts vs plain generate on the same prompts (first turn of each task)
    torch.manual_seed(0)
    policy = build_policy(cfg.model, cfg.sampling)
    env_kwargs = {**plain["env"]["kwargs"], **plain["env"]["train_kwargs"]}
    envs = make_envs(plain["env"]["id"], env_kwargs, args.prompts)
    task_ids = [t.id for t in env_tasks(envs[0])[: args.prompts]]
    prompts = [policy.encode_prompt(env.reset(seed=0, options={"task": tid})[1]["messages"]) for env, tid in zip(envs, task_ids)]
    policy.sampling.max_new_tokens = int(plain["sampling"]["max_new_tokens"])
    roll_tok = roll_s = plain_tok = plain_s = 0.0
    for _ in range(args.repeats):  # alternate so drift in machine load hits both paths alike
        t = time.perf_counter()
        plain_tok += plain_generate_tokens(policy, prompts)
        plain_s += time.perf_counter() - t
        for env, tid in zip(envs, task_ids):
            env.reset(seed=0, options={"task": tid})
        t = time.perf_counter()
        # one turn per env: Decompose episodes are one step; for multi-turn envs count the first turn only
        gens = policy.generate_batch(prompts)
        for env, g in zip(envs, gens):
            env.step(g.text)
        roll_tok += sum(len(g.token_ids) for g in gens)
        roll_s += time.perf_counter() - t
    t = time.perf_counter()
    full = collect_rollouts(policy, envs, task_ids, seeds=list(range(len(task_ids))))
    episode_s = time.perf_counter() - t
    episode_tok = sum(r.generated_tokens for r in full)
    del policy

    # 2. GRPO steps with the config (evaluation off), in a temporary run folder
    with tempfile.TemporaryDirectory() as tmp:
        cfg.run_dir = tmp
        cfg.train.steps = args.steps
        cfg.train.checkpoint_every = 0
        cfg.eval.before = cfg.eval.after = False
        train(cfg, progress=False)
        rows = [json.loads(l) for l in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
    measured = rows[1:] if len(rows) > 1 else rows  # the first step pays one-off warm-up
    mean = lambda k: sum(r.get(k, 0.0) for r in measured) / len(measured)  # noqa: E731
    trained = [r for r in rows if r.get("trained_sequences")]  # steps whose groups all had zero advantage skip the update
    payload = {
        "config": args.config, "overrides": overrides, "torch_threads": torch.get_num_threads(),
        "step_s": mean("step_s"), "rollout_s": mean("rollout_s"), "update_s": mean("update_s"),
        "policy_tokens_per_step": mean("policy_tokens"), "sequences_per_step": mean("trained_sequences"),
        "update_s_when_trained": sum(r["update_s"] for r in trained) / len(trained) if trained else None,
        "step_s_when_trained": sum(r["step_s"] for r in trained) / len(trained) if trained else None,
        "peak_rss_mb": peak_rss_mb(),
        "peak_cuda_mb": torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None,
        "generation": {
            "prompts": len(prompts), "repeats": args.repeats,
            "plain_generate_tok_s": plain_tok / plain_s, "rollout_turn_tok_s": roll_tok / roll_s,
            "rollout_over_plain": (roll_tok / roll_s) / (plain_tok / plain_s),
            "full_episode_tok_s": episode_tok / episode_s,
        },
        "steps": rows,
    }
    g = payload["generation"]
    body = (
        f"Config `{Path(args.config).name}` {' '.join(overrides)}; {payload['torch_threads']} torch threads; "
        f"mean over steps 2..{len(rows)} of {len(rows)}.\n\n"
        + markdown_table(["s/step", "rollout s", "update s", "s/step with an update", "update s (when run)",
                          "policy tokens/step", "peak RSS MB"],
                         [[payload["step_s"], payload["rollout_s"], payload["update_s"], payload["step_s_when_trained"] or "-",
                           payload["update_s_when_trained"] or "-", payload["policy_tokens_per_step"], payload["peak_rss_mb"]]])
        + "\n\nGeneration on the same prompts, same run (tokens/s):\n\n"
        + markdown_table(["plain model.generate", "rollout turn (policy + env step)", "ratio", "full episodes"],
                         [[g["plain_generate_tok_s"], g["rollout_turn_tok_s"], g["rollout_over_plain"], g["full_episode_tok_s"]]])
    )
    write_report("step_cost", payload, "GRPO step cost (quickstart config)", body)
    print(json.dumps({k: v for k, v in payload.items() if k != "steps"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
