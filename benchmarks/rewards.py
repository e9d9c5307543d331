"""ESM + TCA credit over 256 tasks × 5 rollouts × 8 turns: the package's per-group loop vs a vectorised numpy path.

Both are real implementations and must agree (checked here on the benchmark data, and in
tests/test_rewards_properties.py on random groups):

- loop: per group, ``esm_turn_advantages`` + ``tca_selection_advantages`` placed on the submit
  turn (the functions the ``toolsearcher`` scheme calls), one rollout at a time;
- vectorised (``benchmarks/vectorised_credit.py``, not in the package): ``encode_search_groups``
  (records -> padded arrays, a Python pass over the events using the package's
  ``first_discoveries`` and ``tca_gate``) + ``esm_tca_batch`` (pure numpy). Reported both end to
  end and for the numpy core alone.

Also timed: the full ``toolsearcher`` scheme (adds components and monitors). Target: the
vectorised path end to end < 50 ms. Run: ``python -m benchmarks.rewards``.
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

from benchmarks._report import markdown_table, write_report  # noqa: E402

from toolgym.data.records import SearchEvent, Task, Trajectory  # noqa: E402
from benchmarks.vectorised_credit import encode_search_groups, esm_tca_batch  # noqa: E402

from toolgym.rewards import esm_turn_advantages, get_reward, tca_selection_advantages  # noqa: E402
from toolgym.rewards.search import place_on_submit_turn  # noqa: E402

TASKS, ROLLOUTS, TURNS, TOP_K, N_TOOLS = 256, 5, 8, 5, 2000
REPEATS = 7
TARGET_MS = 50.0


def make_groups(seed: int = 0) -> list[tuple[Task, list[Trajectory]]]:
    """Synthetic groups shaped like ToolSearcher training: 1-4 gold tools, top-5 results per
    search, up to 7 searches then a submit (or 8 searches and no submit)."""
    rng = np.random.default_rng(seed)
    tools = [f"tool_{j}" for j in range(N_TOOLS)]
    groups = []
    for b in range(TASKS):
        gold = list(rng.choice(N_TOOLS, size=rng.integers(1, 5), replace=False))
        task = Task(id=f"task{b}", query=f"request {b}", gold=frozenset(tools[g] for g in gold))
        skill = rng.uniform(0.05, 0.6)  # per-task chance a search surfaces a given gold tool
        trajs = []
        for _ in range(ROLLOUTS):
            n_search = int(rng.integers(1, TURNS + 1))
            submitted = n_search < TURNS  # 8 searches leave no turn to submit
            events = []
            for t in range(n_search):
                hits = [tools[g] for g in gold if rng.random() < skill]
                fill = [tools[j] for j in rng.integers(0, N_TOOLS, size=TOP_K)]
                results = list(dict.fromkeys(hits + fill))[:TOP_K]
                events.append(SearchEvent(turn=t, query=f"q{t}", category=None, results=results))
            seen = {x for e in events for x in e.results}
            selection = [x for x in task.gold if x in seen] if submitted else None
            if submitted and rng.random() < 0.3:
                selection = (selection or []) + [tools[int(rng.integers(0, N_TOOLS))]]
            trajs.append(Trajectory(task.id, events=events, selection=selection,
                                    terminated_by="submit" if submitted else "max_turns",
                                    num_turns=n_search + int(submitted)))
        groups.append((task, trajs))
    return groups


def loop_path(groups) -> list[list[np.ndarray]]:
    out = []
    for task, trajs in groups:
        esm = esm_turn_advantages(trajs, task.gold)
        sel = place_on_submit_turn(trajs, tca_selection_advantages(trajs, task.gold))
        out.append([e + s for e, s in zip(esm, sel)])
    return out


def vectorised_path(groups) -> np.ndarray:
    return esm_tca_batch(encode_search_groups(groups))


def scheme_path(groups, scheme) -> list:
    return [scheme.score_group(trajs, task) for task, trajs in groups]


def timed(fn, *args) -> tuple[float, object]:
    times, result = [], None
    for _ in range(REPEATS):
        start = time.perf_counter()
        result = fn(*args)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), result


def main() -> int:
    load = os.getloadavg()[0]  # a shared box: the numbers scale with it, so the report says it
    groups = make_groups()
    batch = encode_search_groups(groups)
    scheme = get_reward("toolsearcher")
    loop_ms, loop_out = timed(loop_path, groups)
    vec_ms, vec_out = timed(vectorised_path, groups)
    core_ms, _ = timed(esm_tca_batch, batch)
    encode_ms, _ = timed(encode_search_groups, groups)
    scheme_ms, _ = timed(scheme_path, groups, scheme)

    max_diff = 0.0
    for b, group in enumerate(loop_out):
        for g, adv in enumerate(group):
            max_diff = max(max_diff, float(np.abs(vec_out[b, g, : len(adv)] - adv).max(initial=0.0)))
            assert not vec_out[b, g, len(adv):].any()
    if max_diff > 1e-9:
        raise SystemExit(f"vectorised and loop credit disagree (max |diff| = {max_diff})")
    nonzero = float(np.mean(vec_out != 0))

    rows = [
        ["per-rollout loop (esm_turn_advantages + tca_selection_advantages)", loop_ms, 1.0],
        ["vectorised, end to end (encode_search_groups + esm_tca_batch)", vec_ms, loop_ms / vec_ms],
        ["  of which encode_search_groups (records -> arrays)", encode_ms, loop_ms / encode_ms],
        ["  of which esm_tca_batch (numpy core)", core_ms, loop_ms / core_ms],
        ["full toolsearcher scheme (components + monitors)", scheme_ms, loop_ms / scheme_ms],
    ]
    payload = {
        "shape": {"tasks": TASKS, "rollouts": ROLLOUTS, "turns": TURNS, "top_k": TOP_K},
        "repeats": REPEATS,
        "median_ms": {"loop": loop_ms, "vectorised": vec_ms, "encode": encode_ms, "numpy_core": core_ms, "scheme": scheme_ms},
        "speedup_vectorised_vs_loop": loop_ms / vec_ms,
        "speedup_core_vs_loop": loop_ms / core_ms,
        "target_ms": TARGET_MS,
        "meets_target": vec_ms < TARGET_MS,
        "max_abs_diff": max_diff,
        "nonzero_turn_share": nonzero,
        "load_average_1min": load,
    }
    body = (
        f"ESM + TCA per-turn credit for {TASKS} tasks × {ROLLOUTS} rollouts × {TURNS} turns "
        f"(median of {REPEATS} runs, same process). Both paths give the same advantages "
        f"(max |diff| {max_diff:.1e}); {nonzero:.1%} of turn cells get non-zero credit. 1-minute load "
        f"average at the start: {load:.1f} on {os.cpu_count()} cores. The vectorised path lives in "
        "benchmarks/vectorised_credit.py; the package keeps the per-group loop.\n\n"
        + markdown_table(["path", "median ms", "speed-up vs loop"], rows)
        + f"\n\nTarget: vectorised end to end < {TARGET_MS:.0f} ms — {'met' if vec_ms < TARGET_MS else 'NOT met'}."
    )
    write_report("rewards", payload, "Rewards: ESM + TCA credit, vectorised vs loop", body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
