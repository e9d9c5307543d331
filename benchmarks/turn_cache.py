"""Multi-turn rollouts with and without the turn cache, same tasks, same seeds, one run.

``collect_rollouts`` on ``toolgym/ToolSearch-v0`` (``max_turns: 4``, the learning benchmark's
setting) with a GRPO-shaped batch (``--tasks`` tasks x ``--group`` rollouts): once with
:class:`toolgym.agents.hf_policy.TurnCache` (each turn feeds only the environment's new tokens;
a group's shared first prompt is encoded once) and once re-encoding every prompt, alternated so
machine load hits both alike. Reports seconds per batch, prompt tokens fed to the model, and how
many rollouts came out token-identical (greedy: all should; sampled: the same seed gives the same
draws unless float rounding flips a near-tie).

    python -m benchmarks.turn_cache --policy runs/sft_warmstart/model --tasks 4 --group 8
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: shared CPUs collapse with spinning threads

from benchmarks._report import ROOT, markdown_table, write_report  # noqa: E402


class _Uncached:
    """The same policy without the ``turn_cache`` parameter: every turn re-encodes the conversation."""

    def __init__(self, policy):
        self._policy = policy

    def __getattr__(self, name):
        return getattr(self._policy, name)

    def generate_batch(self, prompts, max_new_tokens=None):
        return self._policy.generate_batch(prompts, max_new_tokens)


def main(argv: list[str] | None = None) -> int:
    import torch

    from toolgym.agents.hf_policy import TurnCache
    from toolgym.trainers.checkpoint import load_policy
    from toolgym.agents.rollout import rollout_groups
    from toolgym.evaluation.evaluate import env_tasks, make_envs

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_policy = ROOT / "runs" / "sft_warmstart" / "model"
    ap.add_argument("--policy", default=str(default_policy.relative_to(ROOT)) if default_policy.is_dir() else "smollm2")
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)

    policy = load_policy(args.policy, sampling={"max_new_tokens": 96, "stop_strings": ["</tool_call>"],
                                                "temperature": args.temperature})
    n = args.tasks * args.group
    envs = make_envs("toolgym/ToolSearch-v0", {"max_turns": 4, "split": "train"}, n)
    refs = [t.id for t in env_tasks(envs[0])[: args.tasks]]
    fed: dict[str, int] = {}
    original = TurnCache.clear

    def counting_clear(self):  # the rollout clears its cache at the end: read its statistics then
        fed["cached"] = fed.get("cached", 0) + self.fed_tokens
        fed["reused"] = fed.get("reused", 0) + self.reused_tokens
        self.fed_tokens = self.reused_tokens = 0
        original(self)

    TurnCache.clear = counting_clear
    seconds = {"cached": 0.0, "uncached": 0.0}
    same = total = turns = 0
    prompt_tokens = 0
    for rep in range(args.repeats):
        runs = {}
        for name, pol in (("cached", policy), ("uncached", _Uncached(policy))):
            torch.manual_seed(rep)
            started = time.perf_counter()
            groups = rollout_groups(pol, envs, refs, args.group, seed=100 * rep)
            seconds[name] += time.perf_counter() - started
            runs[name] = [r for g in groups for r in g]
        for a, b in zip(runs["cached"], runs["uncached"]):
            same += a.trajectory.token_ids == b.trajectory.token_ids
            total += 1
            turns += b.trajectory.num_turns
            # what the uncached path feeds: every turn's whole prompt
            prompt_tokens += sum(start for start, _ in b.trajectory.turn_spans)
    TurnCache.clear = original
    payload = {
        "policy": args.policy, "tasks": args.tasks, "group": args.group, "temperature": args.temperature,
        "repeats": args.repeats, "episodes": total, "mean_turns": turns / total,
        "seconds_per_batch": {k: v / args.repeats for k, v in seconds.items()},
        "speedup": seconds["uncached"] / seconds["cached"],
        "prompt_tokens_fed": {"uncached": prompt_tokens, "cached": fed.get("cached", 0)},
        "identical_rollouts": same / total,
        "torch_threads": torch.get_num_threads(),
    }
    p = payload
    body = (f"`collect_rollouts` on ToolSearch-v0 (`max_turns: 4`, train split), {args.tasks} tasks x {args.group} "
            f"rollouts, temperature {args.temperature}, policy `{args.policy}`, "
            f"{args.repeats} alternated repeats; {p['mean_turns']:.2f} turns per episode.\n\n"
            + markdown_table(["path", "s / batch", "prompt tokens fed"],
                             [["re-encode every turn", p["seconds_per_batch"]["uncached"], p["prompt_tokens_fed"]["uncached"]],
                              ["turn cache", p["seconds_per_batch"]["cached"], p["prompt_tokens_fed"]["cached"]]])
            + f"\n\nSpeed-up {p['speedup']:.2f}x; {100 * p['identical_rollouts']:.0f} % of the rollouts token-identical "
              "to the re-encoded ones under the same seed (a difference is float rounding flipping a near-tie; the "
              "trainer recomputes every log-prob without a cache either way).\n")
    print(body)
    write_report("turn_cache", payload, "Turn cache: multi-turn rollouts without re-encoding the conversation", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
