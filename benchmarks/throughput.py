"""Sampling, rollout, GRPO-step and evaluation throughput: ``generate`` (float32) against the lean
bf16 decoder, everything in one run so the ratios hold on a shared machine.

* GEMM rate (GFLOP/s) at SmolLM2-135M's shapes, float32 and bfloat16, at 1 / 8 / 32 / 64 / 512 rows.
* Sampled tokens/s of one turn (every row decodes ``--new-tokens`` tokens, no stop) at batch
  1 / 8 / 32 / 64 from a real ToolSearch-v0 prompt: ``generate`` in float32 (the old rollout
  path) and the lean engine in the sampling dtype; decode efficiency = model FLOPs per token x
  tokens/s / the measured bf16 GEMM rate at that row count.
* The rollout path on real envs, GRPO-shaped batches: ToolSearch-v0 as in
  ``configs/learning_grpo.yaml`` (4 turns, 96 new tokens), Decompose-Dialogue-v0 as in
  ``configs/quickstart.yaml`` and Decompose-v0 (128 new tokens), ``engine=generate`` vs ``engine=lean``.
* One GRPO step (LoRA, ``toolsearcher`` credit) split into rollout / credit / update: ``generate``
  rollouts + the per-sequence update against lean rollouts + ``grpo.share_prompt_prefix``, both
  updates on the same batch.
* Where the lean rollout's time goes (prefill / decode / the rest; the engine's own timers), from
  the GRPO step's lean rollout.
* The targets of the throughput issue, each measured ratio against its wanted value.
* Greedy evaluation episodes/s on held-out ToolSearch-v0 tasks, both paths.

    python -m benchmarks.throughput                 # ~15 min on 2 cores
    python -m benchmarks.throughput --quick         # smaller batches, for a smoke run
"""
from __future__ import annotations

import argparse
import contextlib
import os
import resource
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: shared CPUs collapse with spinning threads

from benchmarks._report import markdown_table, write_report  # noqa: E402

SHAPES = {"qkv": (576, 960), "o": (576, 576), "gate_up": (576, 3072), "down": (1536, 576), "lm_head": (576, 49152)}


def _timed(fn, repeat: int = 1) -> float:
    fn()  # warm-up (oneDNN picks kernels on first use)
    t = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t) / repeat


def gemm_rates(rows_list: list[int]) -> dict[str, dict[str, float]]:
    import torch

    out: dict[str, dict[str, float]] = {}
    for dtype in (torch.float32, torch.bfloat16):
        name = str(dtype).split(".")[-1]
        out[name] = {}
        for rows in rows_list:
            flops = secs = 0.0
            for k, n in SHAPES.values():  # the model's mix: one of each per layer (lm_head once)
                x, w = torch.randn(rows, k).to(dtype), torch.randn(n, k).to(dtype)
                reps = max(3, int(2e9 / (2 * rows * k * n)))
                secs += _timed(lambda: torch.nn.functional.linear(x, w), reps)
                flops += 2 * rows * k * n
            out[name][str(rows)] = flops / secs / 1e9
    return out


def model_flops_per_token(model) -> float:
    """2 x the matrix parameters a token passes through (embedding lookup excluded, LM head included)."""
    cfg = model.config
    d, inter, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    hd = getattr(cfg, "head_dim", None) or d // cfg.num_attention_heads
    per_layer = d * (cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * hd + cfg.num_attention_heads * hd * d + 3 * d * inter
    return 2.0 * (layers * per_layer + d * cfg.vocab_size)


def bench_sampling(policy, prompt: list[int], batches: list[int], new_tokens: int) -> list[dict]:
    import torch

    rows = []
    for b in batches:
        row = {"batch": b, "context": len(prompt) + new_tokens}
        for engine in ("generate", "lean"):
            policy.sampling = replace(policy.sampling, engine=engine, max_new_tokens=new_tokens, stop_strings=())
            saved = policy.end_ids
            policy.end_ids = [-1]  # every row decodes new_tokens: the rate is not a matter of when rows stop
            try:
                torch.manual_seed(0)
                secs = _timed(lambda: policy.generate_batch([prompt] * b), 1)
            finally:
                policy.end_ids = saved
            row[f"{engine}_tok_s"] = b * new_tokens / secs
        row["speedup"] = row["lean_tok_s"] / row["generate_tok_s"]
        rows.append(row)
    return rows


def bench_rollouts(policy, env_id: str, env_kwargs: dict, tasks: int, group: int, sampling: dict, seed: int = 0) -> dict:
    import torch

    from toolgym.agents.rollout import rollout_groups
    from toolgym.trainers.train import env_tasks, make_envs

    envs = make_envs(env_id, env_kwargs, tasks * group)
    refs = [t.id for t in env_tasks(envs[0])[:tasks]]
    out = {"env": env_id, "tasks": tasks, "group": group, "max_new_tokens": sampling["max_new_tokens"]}
    for engine in ("generate", "lean"):
        policy.sampling = replace(policy.sampling, engine=engine, **sampling)
        torch.manual_seed(seed)
        t = time.perf_counter()
        groups = rollout_groups(policy, envs, refs, group, seed=seed, max_context_tokens=4096)
        secs = time.perf_counter() - t
        flat = [r for g in groups for r in g]
        gen = sum(r.generated_tokens for r in flat)
        out[engine] = {"seconds": secs, "generated_tokens": gen, "tok_s": gen / secs,
                       "turns": sum(len(r.trajectory.turn_spans) for r in flat)}
    out["speedup_tok_s"] = out["lean"]["tok_s"] / out["generate"]["tok_s"]
    out["speedup_wall"] = out["generate"]["seconds"] / out["lean"]["seconds"]
    return out


def bench_grpo_step(policy, env_id: str, env_kwargs: dict, tasks: int, group: int, sampling: dict) -> dict:
    """One GRPO step, before (``generate`` rollouts, per-sequence update) and after (lean rollouts,
    ``grpo.share_prompt_prefix``). Which sequences a step trains depends on which groups drew a
    reward spread, so both updates train on the same batch (the lean rollouts'), each from a fresh
    LoRA on the same weights: the update columns compare equal work. The ``generate`` rollouts'
    own batch size is kept as ``own_trained_sequences``."""
    import torch

    from toolgym.agents.hf_policy import apply_lora
    from toolgym.rewards import get_reward
    from toolgym.trainers.grpo import GRPOTrainer
    from toolgym.agents.rollout import rollout_groups
    from toolgym.trainers.train import credit_batch, env_tasks, make_envs

    envs = make_envs(env_id, env_kwargs, tasks * group)
    step_tasks = env_tasks(envs[0])[:tasks]
    reward = get_reward("toolsearcher")
    base_state = {k: v.clone() for k, v in policy.model.state_dict().items()}
    out: dict = {"env": env_id, "tasks": tasks, "group": group}
    batches = {}
    for engine in ("generate", "lean"):
        policy.sampling = replace(policy.sampling, engine=engine, **sampling)
        with engine_stats(policy) as decode:
            torch.manual_seed(1)
            t0 = time.perf_counter()
            groups = rollout_groups(policy, envs, [t.id for t in step_tasks], group, seed=1, max_context_tokens=4096)
            t1 = time.perf_counter()
        batches[engine], stats = credit_batch(groups, step_tasks, reward, skip_zero_advantage=True)
        t2 = time.perf_counter()
        generated = sum(r.generated_tokens for g in groups for r in g)
        out[engine] = {"rollout_s": t1 - t0, "credit_s": t2 - t1, "own_trained_sequences": stats["trained_sequences"],
                       "generated_tokens": generated, "rollout_tok_s": generated / (t1 - t0)}
        if decode:  # the lean path: where its rollout's time went
            out["lean_profile"] = rollout_profile(env_id, tasks, group, t1 - t0, generated, decode)
    batch = batches["lean"] if batches["lean"].token_ids else batches["generate"]
    for engine, share in (("generate", False), ("lean", True)):
        policy.model.load_state_dict(base_state)
        model = apply_lora(policy.model, {"r": 16, "lora_alpha": 32})
        trainer = GRPOTrainer(model, {"lr": 3e-4, "kl_coef": 0.0, "micro_batch_size": 4, "autocast_bf16": True,
                                      "share_prompt_prefix": share, "lora": {"r": 16}}, temperature=1.0)
        t = time.perf_counter()
        update = trainer.train_on(batch) if batch.token_ids else {}
        row = out[engine]
        row.update(update_s=time.perf_counter() - t, share_prompt_prefix=share, trained_sequences=len(batch.token_ids),
                   **{k: update[k] for k in ("sampler_logp_gap", "tis_weight_mean", "tis_weight_std") if k in update})
        row["step_s"] = row["rollout_s"] + row["credit_s"] + row["update_s"]
        policy.model = model.unload() if hasattr(model, "unload") else model  # back to the plain model
    policy.model.load_state_dict(base_state)
    out["speedup_step"] = out["generate"]["step_s"] / out["lean"]["step_s"]
    out["speedup_update"] = out["generate"]["update_s"] / max(out["lean"]["update_s"], 1e-9)
    out["speedup_rollout_tok_s"] = out["lean"]["rollout_tok_s"] / out["generate"]["rollout_tok_s"]
    return out


@contextlib.contextmanager
def engine_stats(policy):
    """Sum the :class:`~toolgym.agents.decoding.DecodeEngine` stats (token counts, prefill and decode
    seconds) of every engine ``policy`` builds inside the block into the yielded dict."""
    engines = []
    make_engine = policy.decode_engine

    def capture(*a, **k):
        engine = make_engine(*a, **k)
        if engine is not None:  # None: the policy samples with generate
            engines.append(engine)
        return engine

    totals: dict = {}
    policy.decode_engine = capture
    try:
        yield totals
    finally:
        del policy.decode_engine  # back to the class's method
        for engine in engines:
            for k, v in engine.stats.items():
                totals[k] = totals.get(k, 0) + v


def rollout_profile(env_id: str, tasks: int, group: int, wall_s: float, generated: int, stats: dict) -> dict:
    """Where a lean rollout's wall time went: prefill (prompts and the env's observations), decode
    forwards, and the rest (env steps, tokenising turns, bookkeeping)."""
    return {"env": env_id, "tasks": tasks, "group": group, "wall_s": wall_s, "other_s": wall_s - stats["prefill_s"] - stats["decode_s"],
            "generated_tokens": generated, "decode_tok_s": generated / stats["decode_s"], **stats}


def profile_lean_rollout(policy, env_id: str, env_kwargs: dict, tasks: int, group: int, sampling: dict) -> dict:
    """:func:`rollout_profile` of one lean rollout as the GRPO step's (``--profile-only``)."""
    import torch

    from toolgym.agents.rollout import rollout_groups
    from toolgym.trainers.train import env_tasks, make_envs

    envs = make_envs(env_id, env_kwargs, tasks * group)
    refs = [t.id for t in env_tasks(envs[0])[:tasks]]
    policy.sampling = replace(policy.sampling, engine="lean", **sampling)
    with engine_stats(policy) as stats:
        torch.manual_seed(1)
        t = time.perf_counter()
        groups = rollout_groups(policy, envs, refs, group, seed=1, max_context_tokens=4096)
        wall = time.perf_counter() - t
    return rollout_profile(env_id, tasks, group, wall, sum(r.generated_tokens for g in groups for r in g), stats)


def bench_eval(policy, env_id: str, env_kwargs: dict, num_tasks: int, batches: dict[str, int], max_new: int) -> dict:
    from toolgym.evaluation.evaluate import choose_tasks, evaluate, make_envs

    out = {"env": env_id, "tasks": num_tasks}
    for engine, batch in batches.items():
        envs = make_envs(env_id, {**env_kwargs, "split": "heldout"}, batch)
        tasks = choose_tasks(envs[0], None, num_tasks)
        policy.sampling = replace(policy.sampling, engine=engine, temperature=0.0, max_new_tokens=max_new,
                                  stop_strings=("</tool_call>",))
        res = evaluate(policy, envs, tasks, max_context_tokens=4096, progress=False)
        out[engine] = {"batch": batch, "seconds": res["seconds"], "episodes_s": len(tasks) / res["seconds"],
                       "f1": res.get("F1"), "invalid": res.get("invalid"), "generated_tokens": res.get("generated_tokens"),
                       "per_task_f1": {tid: row["F1"] for tid, row in res["per_task"].items()}}
    out["speedup"] = out["lean"]["episodes_s"] / out["generate"]["episodes_s"]
    return out


def main(argv: list[str] | None = None) -> int:
    import torch

    from toolgym.agents.decoding import cpu_has_bf16_matmul
    from toolgym.agents.hf_policy import HFChatPolicy
    from toolgym.trainers.train import make_envs

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    warm = Path(__file__).resolve().parent.parent / "runs" / "sft_toolsearch" / "model"
    ap.add_argument("--model", default=str(warm) if warm.is_dir() else "smollm2",
                    help="policy weights (default: the ToolSearch warm start of configs/sft_toolsearch.yaml if built)")
    ap.add_argument("--quick", action="store_true", help="small batches: a smoke run, not the table")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--no-report", action="store_true")
    ap.add_argument("--profile-only", action="store_true",
                    help="add only the lean rollout's time split to the existing results file and re-render")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    quick = args.quick
    policy = HFChatPolicy.from_pretrained(args.model, sampling={"temperature": 1.0})
    policy.model.eval()
    ts_kwargs = {"max_turns": 4}
    env = make_envs("toolgym/ToolSearch-v0", {**ts_kwargs, "split": "train"}, 1)[0]
    _, info = env.reset(seed=0)
    prompt = policy.encode_prompt(info["messages"])

    ts_sampling = {"max_new_tokens": 96, "temperature": 1.0, "stop_strings": ("</tool_call>",)}
    if args.profile_only:
        import json

        from benchmarks._report import RESULTS

        payload = json.loads((RESULTS / "throughput.json").read_text())
        payload.pop("machine")
        payload.setdefault("main_run_date", payload.pop("date"))  # the stamp becomes this run's; the rest is older
        payload["rollout_profile"] = profile_lean_rollout(policy, "toolgym/ToolSearch-v0", {**ts_kwargs, "split": "train"},
                                                          4, 8, ts_sampling)
        write_report("throughput", payload, "Throughput: `generate` (float32) vs the lean bf16 decoder", report(payload))
        return 0
    started, load_before = time.time(), os.getloadavg()[0]
    batches = [1, 8] if quick else [1, 8, 32, 64]
    payload: dict = {"threads": args.threads, "cpu_bf16_matmul": cpu_has_bf16_matmul(), "model": args.model,
                     "flops_per_token": model_flops_per_token(policy.model), "prompt_tokens": len(prompt)}
    payload["gemm_gflops"] = gemm_rates(sorted(set(batches) | {512}))
    payload["sampling"] = bench_sampling(policy, prompt, batches, 16 if quick else args.new_tokens)
    bf16 = payload["gemm_gflops"]["bfloat16"]
    for row in payload["sampling"]:
        row["decode_efficiency"] = payload["flops_per_token"] * row["lean_tok_s"] / 1e9 / bf16[str(row["batch"])]
    payload["rollouts"] = [  # the quickstart's context; ToolSearch's rollout path is the GRPO step's
        bench_rollouts(policy, env_id, {"k": 10, "split": "train"}, 2, 2 if quick else 8,
                       {"max_new_tokens": 32 if quick else 128, "temperature": 1.0, "stop_strings": ()})
        for env_id in ("toolgym/Decompose-Dialogue-v0", "toolgym/Decompose-v0")  # the quickstart's env first
    ]
    payload["grpo_step"] = bench_grpo_step(policy, "toolgym/ToolSearch-v0", {**ts_kwargs, "split": "train"},
                                           1 if quick else 4, 4 if quick else 8, ts_sampling)
    payload["eval"] = bench_eval(policy, "toolgym/ToolSearch-v0", ts_kwargs, 8 if quick else 40,
                                 {"generate": 8 if quick else 20, "lean": 8 if quick else 40}, 96)
    payload["rollout_profile"] = payload["grpo_step"].pop("lean_profile")
    payload["targets"] = targets(payload)
    payload["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    payload["seconds"] = time.time() - started
    payload["load_average"] = [load_before, os.getloadavg()[0]]  # other jobs on the machine make times noisy
    if not args.no_report and not quick:
        write_report("throughput", payload, "Throughput: `generate` (float32) vs the lean bf16 decoder", report(payload))
    else:
        import json

        print(json.dumps(payload, indent=1, default=str))
        print(report(payload))  # the smoke run renders the table too
    return 0


TARGETS = {  # the throughput issue's item 4: ratios within one run
    "rollout tok/s at the step's batch (GRPO step rollout, 4x8 rows)": 5.0,
    "GRPO step": 3.0,
    "greedy evaluation episodes/s": 4.0,
    "decode efficiency at batch 32 (of the bf16 GEMM rate at 32 rows)": 0.25,
    "decode efficiency at batch 64": 0.25,
}


def targets(p: dict) -> list[dict]:
    """Each target of the throughput issue against this run's measured ratio."""
    by_batch = {r["batch"]: r for r in p["sampling"]}
    measured = [p["grpo_step"]["speedup_rollout_tok_s"], p["grpo_step"]["speedup_step"], p["eval"]["speedup"],
                by_batch.get(32, {}).get("decode_efficiency"), by_batch.get(64, {}).get("decode_efficiency")]
    return [{"target": name, "wanted": want, "measured": got, "met": got is not None and got >= want}
            for (name, want), got in zip(TARGETS.items(), measured)]


def profile(p: dict) -> str:
    """Where the lean ToolSearch rollout's time goes (absent from runs before it was measured)."""
    r = p.get("rollout_profile")
    if not r:
        return ""
    when = (f", measured in a separate `--profile-only` run; every other table here is from the run of {p['main_run_date']}"
            if "main_run_date" in p else "")
    rows = [[part, round(r[key], 1), f"{100 * r[key] / r['wall_s']:.0f} %"]
            for part, key in (("prefill (prompts, observations)", "prefill_s"), ("decode steps", "decode_s"),
                              ("env steps, tokenising, bookkeeping", "other_s"), ("rollout", "wall_s"))]
    table = markdown_table(["part", "s", "share"], rows)
    return f"""**Where the lean rollout's time goes** ({r['env']}, {r['tasks']}x{r['group']}{when}): {r['generated_tokens']} tokens
sampled in {r['decode_steps']} decode steps ({r['decode_rows'] / max(r['decode_steps'], 1):.1f} rows per step on average,
{r['decode_tok_s']:.0f} tokens/s while decoding); {r['prefill_tokens']} tokens prefilled (the prompts' unshared parts and the
env's observations), {r['shared_prompt_tokens']} prompt tokens copied from a cached row instead.

{table}"""


def report(p: dict) -> str:
    g = p["gemm_gflops"]
    gemm = markdown_table(["rows"] + list(g["float32"]),
                          [["float32 GFLOP/s"] + [round(v) for v in g["float32"].values()],
                           ["bfloat16 GFLOP/s"] + [round(v) for v in g["bfloat16"].values()]])
    samp = markdown_table(["batch", "generate fp32 tok/s", "lean tok/s", "speed-up", "decode efficiency (of bf16 GEMM)"],
                          [[r["batch"], round(r["generate_tok_s"], 1), round(r["lean_tok_s"], 1), f"{r['speedup']:.2f}x",
                            f"{100 * r['decode_efficiency']:.0f} %"] for r in p["sampling"]])
    s = p["grpo_step"]
    rows = [[f"{r['env']} ({r['tasks']}x{r['group']}, {r['max_new_tokens']} new)",
             f"{r['generate']['seconds']:.1f} / {r['generate']['tok_s']:.0f}",
             f"{r['lean']['seconds']:.1f} / {r['lean']['tok_s']:.0f}",
             f"{r['speedup_tok_s']:.2f}x", f"{r['speedup_wall']:.2f}x"] for r in p["rollouts"]]
    rows.append([f"{s['env']} ({s['tasks']}x{s['group']}, 96 new, 4 turns; the GRPO step's rollout)",
                 f"{s['generate']['rollout_s']:.1f} / {s['generate']['rollout_tok_s']:.0f}",
                 f"{s['lean']['rollout_s']:.1f} / {s['lean']['rollout_tok_s']:.0f}",
                 f"{s['speedup_rollout_tok_s']:.2f}x", f"{s['generate']['rollout_s'] / s['lean']['rollout_s']:.2f}x"])
    roll = markdown_table(["env (tasks x group)", "generate: s / tok/s", "lean: s / tok/s", "tok/s speed-up", "wall speed-up"], rows)
    step = markdown_table(["path", "rollout s", "credit s", "update s", "step s", "sequences trained (own batch)"],
                          [[f"{k}{' + shared prompt' if s[k]['share_prompt_prefix'] else ''}", round(s[k]["rollout_s"], 1),
                            round(s[k]["credit_s"], 2), round(s[k]["update_s"], 1), round(s[k]["step_s"], 1),
                            f"{s[k]['trained_sequences']} ({s[k]['own_trained_sequences']})"] for k in ("generate", "lean")])
    e = p["eval"]
    ev = markdown_table(["path", "batch", "episodes/s", "F1", "invalid"],
                        [[k, e[k]["batch"], round(e[k]["episodes_s"], 3), round(e[k]["f1"] or 0, 3), round(e[k]["invalid"] or 0, 3)]
                         for k in ("generate", "lean")])
    gap = s["lean"].get("sampler_logp_gap")
    pct = lambda v: f"{100 * v:.0f} %" if v < 1 else f"{v:.2f}x"  # noqa: E731
    tgt = markdown_table(["target", "wanted", "measured", "met"],
                         [[t["target"], pct(t["wanted"]), "-" if t["measured"] is None else pct(t["measured"]),
                           "yes" if t["met"] else "no"] for t in p.get("targets", [])])
    return f"""{p['model']}, {p['threads']} threads, CPU bf16 matrix units: {p['cpu_bf16_matmul']}; model FLOPs per
token {p['flops_per_token'] / 1e6:.0f} M; prompt {p['prompt_tokens']} tokens (a ToolSearch-v0 system prompt + request).

**Targets** (lean path against `generate`, same run):

{tgt}

**GEMM rate at the model's shapes** (its per-layer mix of q/k/v, o, gate/up, down, plus the LM head):

{gemm}

**One sampled turn, every row decoding {p['sampling'][0]['context'] - p['prompt_tokens']} tokens:**

{samp}

**The rollout path on real envs** (GRPO-shaped batches; same tasks, same env seeds; sampled, T = 1):

{roll}

**One GRPO step** ({s['env']}, {s['tasks']} tasks x {s['group']}, LoRA r 16, `toolsearcher`, on-policy, bf16
autocast in the update; both updates train the same batch, the lean rollouts', from the same weights): {s['speedup_step']:.2f}x faster
(update {s['speedup_update']:.2f}x with the group's prompt run once).{'' if gap is None else f" Sampler/trainer gap on the lean path: mean |Δ log p| {gap:.4f} per token, TIS weight {s['lean']['tis_weight_mean']:.3f} ± {s['lean']['tis_weight_std']:.3f}."}

{step}

{profile(p)}

**Greedy evaluation** ({e['tasks']} held-out {e['env']} tasks; each path at its batch): {e['speedup']:.2f}x the episodes/s.

{ev}

Peak RSS of the whole benchmark: {p['peak_rss_mb']:.0f} MB; wall {p['seconds'] / 60:.1f} min; 1-minute load
average {p['load_average'][0]:.1f} at the start, {p['load_average'][1]:.1f} at the end (2 cores).
"""


if __name__ == "__main__":
    raise SystemExit(main())
