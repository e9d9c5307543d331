"""Scale-out on this machine: local vs Ray rollouts, the shared retrieval server, Ray's per-step cost.

Measured in one run (ratios compare paths measured back to back):
  * rollouts/s of one GRPO step's episodes: local ``rollout_groups`` (1 thread and all threads)
    vs the Ray backend with 1 and 2 workers (1 thread each); worker start-up reported apart;
  * searches/s of N concurrent clients (Ray actors, one query per call) through one
    ``RetrievalServer`` vs each client holding its own index, and the resident memory the
    index costs each client that holds one;
  * the per-step overhead Ray adds: Ray 1-worker step minus the local 1-thread step (same
    episodes, same thread count), and ``sync_weights`` time and bytes (LoRA adapter vs all weights).

    python -m benchmarks.scale                  # SmolLM2-135M, 2 tasks x 4 rollouts, 2 turns
    python -m benchmarks.scale --model tiny-llama --clients 1 2 4
"""
from __future__ import annotations

import argparse
import functools
import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: shared CPUs collapse with spinning threads

from benchmarks._report import markdown_table, write_report  # noqa: E402

ENV_ID = "toolgym/ToolSearch-v0"


def _policy(model: str, sampling: dict):
    from toolgym.agents.hf_policy import HFChatPolicy

    return HFChatPolicy.from_pretrained(model, sampling=sampling, device="cpu")


def _rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


class SearchClient:
    """A benchmark client: runs queries one at a time, against its own index or the shared server."""

    def __init__(self, env_kwargs: dict, server_name: str | None):
        import gymnasium
        import ray

        import toolgym.envs  # noqa: F401
        from toolgym.trainers.ray_rollout import RemoteIndex

        before = _rss_mb()
        if server_name:
            self.index = RemoteIndex(ray.get_actor(server_name))
        else:
            self.index = gymnasium.make(ENV_ID, **env_kwargs).unwrapped.index
        self.index_mb = _rss_mb() - before

    def run(self, queries: list[str], k: int) -> float:
        start = time.perf_counter()
        for q in queries:
            self.index.search(q, None, k)
        return time.perf_counter() - start

    def memory(self) -> float:
        return self.index_mb


def bench_rollouts(args, ray) -> dict:
    import gymnasium
    import torch

    import toolgym.envs  # noqa: F401
    from toolgym.trainers.ray_rollout import RayRollout
    from toolgym.agents.rollout import rollout_groups

    sampling = {"max_new_tokens": args.max_new_tokens, "temperature": 1.0}
    env_kwargs = {"split": "train", "max_turns": args.max_turns}
    policy = _policy(args.model, sampling)
    probe = gymnasium.make(ENV_ID, **env_kwargs)
    task_ids = [t.id for t in probe.unwrapped.tasks[: args.tasks]]
    n = args.tasks * args.group_size
    envs = [gymnasium.make(ENV_ID, **env_kwargs) for _ in range(n)]
    kwargs = dict(max_context_tokens=4096)
    rows, out = [], {}

    def timed(fn, repeats):
        times, tokens = [], 0
        for r in range(repeats):
            torch.manual_seed(100 + r)
            t0 = time.perf_counter()
            groups = fn(seed=r * n)
            times.append(time.perf_counter() - t0)
            tokens += sum(x.generated_tokens for g in groups for x in g)
        return min(times), tokens / repeats

    all_threads = torch.get_num_threads()
    for threads in sorted({1, all_threads}):
        torch.set_num_threads(threads)
        fn = functools.partial(rollout_groups, policy, envs, task_ids, args.group_size, **kwargs)
        fn(seed=999)  # warm-up
        secs, toks = timed(fn, args.repeats)
        out[f"local_{threads}t"] = {"step_s": secs, "rollouts_per_s": n / secs, "tokens": toks}
        rows.append([f"local, {threads} thread(s)", n, secs, n / secs, "-"])
    torch.set_num_threads(all_threads)
    for workers in (1, 2):
        t0 = time.perf_counter()
        backend = RayRollout(functools.partial(_policy, args.model, sampling), ENV_ID, env_kwargs, num_workers=workers)
        backend.sync_weights(policy.model)
        startup = time.perf_counter() - t0
        fn = functools.partial(backend.rollout_groups, None, None, task_ids, args.group_size, **kwargs)
        fn(seed=999)
        secs, toks = timed(fn, args.repeats)
        out[f"ray_{workers}w"] = {"step_s": secs, "rollouts_per_s": n / secs, "tokens": toks, "startup_s": startup}
        rows.append([f"Ray, {workers} worker(s) x 1 thread", n, secs, n / secs, startup])
        if workers == 2:  # last use of the policy: the LoRA wrap below changes its modules in place
            out["sync_weights"] = bench_sync(backend, policy)
        backend.shutdown()
    base = out["local_1t"]["step_s"]
    out["ray_overhead_per_step_s"] = out["ray_1w"]["step_s"] - base
    out["ratios"] = {k: base / v["step_s"] for k, v in out.items() if isinstance(v, dict) and "step_s" in v}
    return {"results": out, "rows": rows, "episodes": n, "model": args.model}


def bench_sync(backend, policy) -> dict:
    """``sync_weights`` seconds and bytes: every parameter (full fine-tuning) vs a LoRA adapter."""
    from toolgym.agents.hf_policy import apply_lora

    t0 = time.perf_counter()
    full = backend.sync_weights(policy.model)
    full_s = time.perf_counter() - t0
    lora_model = apply_lora(policy.model, {"r": 16, "lora_alpha": 32})
    backend.sync_weights(lora_model)  # the first adapter also wraps each worker's model in LoRA
    t0 = time.perf_counter()
    lora = backend.sync_weights(lora_model)  # steady state: what every later step pays
    lora_s = time.perf_counter() - t0
    policy.model = lora_model.get_base_model() if hasattr(lora_model, "get_base_model") else lora_model
    return {"full_bytes": full, "full_s": full_s, "lora_bytes": lora, "lora_s": lora_s}


def bench_retrieval(args, ray) -> dict:
    import gymnasium

    import toolgym.envs  # noqa: F401
    from toolgym.trainers.ray_rollout import RetrievalServer

    env_kwargs = {"split": "train"}
    tasks = gymnasium.make(ENV_ID, **env_kwargs).unwrapped.tasks
    queries = [t.query for t in tasks][: args.queries]
    server = ray.remote(RetrievalServer).options(name="bench-retrieval", num_cpus=0, max_concurrency=1000).remote(ENV_ID, env_kwargs)
    ray.get(server.stats.remote())
    client_cls = ray.remote(SearchClient).options(num_cpus=0)
    out, rows = {}, []
    for n in args.clients:
        for mode in ("own index", "shared server"):
            clients = [client_cls.remote(env_kwargs, "bench-retrieval" if mode == "shared server" else None) for _ in range(n)]
            mem = ray.get([c.memory.remote() for c in clients])
            ray.get([c.run.remote(queries[:5], 5) for c in clients])  # warm-up
            before = ray.get(server.stats.remote())
            t0 = time.perf_counter()
            ray.get([c.run.remote(queries, 5) for c in clients])
            wall = time.perf_counter() - t0
            after = ray.get(server.stats.remote())
            batches = after["batches"] - before["batches"]
            reqs = after["requests"] - before["requests"]
            rate = n * len(queries) / wall
            key = f"{n}_{mode.replace(' ', '_')}"
            out[key] = {"clients": n, "searches_per_s": rate, "index_mb_per_client": sum(mem) / n,
                        "mean_requests_per_batch": reqs / batches if batches else None}
            rows.append([n, mode, rate, sum(mem) / n, f"{reqs / batches:.2f}" if batches else "-"])
            for c in clients:
                ray.kill(c)
    ray.kill(server)
    return {"results": out, "rows": rows, "queries_per_client": len(queries)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2")
    p.add_argument("--tasks", type=int, default=2)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-turns", type=int, default=2)
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--clients", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--queries", type=int, default=200)
    args = p.parse_args()
    import ray

    from toolgym.trainers.ray_rollout import init_ray

    load_before = os.getloadavg()[0]
    init_ray(num_cpus=os.cpu_count())  # local, on loopback
    try:
        rollouts = bench_rollouts(args, ray)
        retrieval = bench_retrieval(args, ray)
    finally:
        ray.shutdown()
    load = (load_before, os.getloadavg()[0])  # other jobs on a shared machine make step times noisy
    r = rollouts["results"]
    sync = r["sync_weights"]
    body = (
        f"One step of {rollouts['episodes']} episodes ({args.tasks} tasks x {args.group_size}, {args.max_turns} turns, "
        f"{args.max_new_tokens} new tokens per turn, `{args.model}`), best of {args.repeats}; Ray workers are "
        "started once (start-up shown apart, not in the step time). 1-minute load average "
        f"{load[0]:.1f} at the start, {load[1]:.1f} at the end, on {os.cpu_count()} cores: other jobs shared the "
        "CPUs, so differences under about 30% are within noise.\n\n"
        + markdown_table(["rollout backend", "episodes", "step s", "rollouts/s", "start-up s"], rollouts["rows"])
        + "\n\nSpeed vs local 1 thread: "
        + ", ".join(f"{k} {v:.2f}x" for k, v in r["ratios"].items())
        + f". Ray's overhead per step (1 worker minus local, both 1 thread): {r['ray_overhead_per_step_s']:.2f} s. "
        f"`sync_weights`: all weights {sync['full_bytes'] / 2**20:.1f} MiB in {sync['full_s']:.2f} s, "
        f"LoRA r=16 adapter {sync['lora_bytes'] / 2**20:.2f} MiB in {sync['lora_s']:.2f} s.\n\n"
        f"Retrieval (BM25, Seal-Tools): N client actors, {retrieval['queries_per_client']} single-query searches each, "
        "through one shared `RetrievalServer` vs each client holding its own index.\n\n"
        + markdown_table(["clients", "index", "searches/s", "index MiB per client", "requests per batch"], retrieval["rows"])
    )
    write_report("scale", {"rollouts": rollouts, "retrieval": retrieval, "args": vars(args), "load_average": load},
                 "Scale-out: local vs Ray rollouts, shared retrieval", body)
    print(body)


if __name__ == "__main__":
    main()
