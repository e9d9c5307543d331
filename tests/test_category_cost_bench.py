"""benchmarks/category_cost.py: a policy's own searches re-run without their category, on the real
Seal-Tools env (BM25), with rejected calls and hostile turns."""
import json

import pytest

from benchmarks.category_cost import episode_category_cost, error_kind, summarise
from toolgym.evaluation.evaluate import env_tasks, make_envs


@pytest.fixture(scope="module")
def env():
    return make_envs("toolgym/ToolSearch-v0", {"max_turns": 4, "min_gold": 2, "category_mode": "optional",
                                               "split": "heldout"}, 1)[0]


def call(name: str, arguments: dict) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_rejected_and_confining_categories_are_told_apart(env):
    base = env.unwrapped
    task = env_tasks(env)[0]
    gold = set(task.gold)
    first = base.corpus[sorted(task.gold)[0]]
    query = f"{first.name} {first.description}"
    found = set(base.index.search(query, None, base.top_k).ids[: base.top_k])
    assert first.id in found  # the gold tool's own text finds it in the whole library
    category_of = {t.id: t.category for t in base.corpus.tools}
    wrong = next(c for c in base.corpus.categories if all(category_of[g] != c for g in gold))
    env.reset(options={"task": task})
    env.step(call("search", {"query": query, "category": "No Such Category"}))  # rejected: not in the enum
    env.step(call("search", {"query": query, "category": wrong}))  # valid, confined where no gold tool is
    env.step('<tool_call>{"name": "search", "arguments": {"query": "a "quoted" word"}}</tool_call>')  # malformed JSON
    *_, info = env.step(call("submit", {"tools": [first.id]}))
    trajectory = info["trajectory"]
    assert trajectory.invalid_actions == 2 and len(trajectory.events) == 1

    row = episode_category_cost(task, trajectory, base.index, base.corpus.categories, category_of, base.top_k)
    assert row["recall_as_run"] == 0.0  # the one search that ran was confined away from every gold tool
    # the rejected call searched without its unknown category finds what the query finds; the
    # confined one still finds nothing, and without any category both find the same set
    assert row["recall_unknown_dropped"] == pytest.approx(len(gold & found) / len(gold))
    assert row["recall_no_category"] == pytest.approx(len(gold & found) / len(gold))
    assert (row["rejected_unknown_category"], row["rejected_malformed_JSON"], row["rejected_other"]) == (1, 1, 0)
    assert (row["named_category"], row["category_holds_unseen_gold"]) == (1, 0)


def test_a_right_category_counts_and_hostile_turns_are_skipped(env):
    base = env.unwrapped
    task = env_tasks(env)[1]
    first = base.corpus[sorted(task.gold)[0]]
    env.reset(options={"task": task})
    env.step(call("search", {"query": first.name, "category": first.category}))
    env.step("<tool_call>" + "{" * 100_000)  # unclosed, deeply nested and huge: one rejected turn
    *_, info = env.step(call("submit", {"tools": [first.id]}))
    trajectory = info["trajectory"]
    trajectory.messages.append({"role": "assistant", "content": "x" * 2_000_000})  # over the parser's cap
    trajectory.messages.append({"role": "assistant"})  # no content at all
    category_of = {t.id: t.category for t in base.corpus.tools}
    row = episode_category_cost(task, trajectory, base.index, base.corpus.categories, category_of, base.top_k)
    assert (row["named_category"], row["category_holds_unseen_gold"]) == (1, 1)
    assert row["rejected_other"] == 1 and row["searches"] == 1


def test_summary_by_hand():
    rows = [{"recall_as_run": 0.0, "recall_unknown_dropped": 0.5, "recall_no_category": 1.0, "turns": 4, "searches": 2,
             "named_category": 2, "category_holds_unseen_gold": 1, "rejected_unknown_category": 1,
             "rejected_malformed_JSON": 0, "rejected_other": 0},
            {"recall_as_run": 1.0, "recall_unknown_dropped": 1.0, "recall_no_category": 1.0, "turns": 4, "searches": 4,
             "named_category": 2, "category_holds_unseen_gold": 2, "rejected_unknown_category": 0,
             "rejected_malformed_JSON": 0, "rejected_other": 1}]
    s = summarise(rows)
    assert s["as_run"] == {"mean": 0.5, "se": pytest.approx(0.5)}  # sd 0.7071 / sqrt 2
    # gaps d = (0.5, 0) and (0.5, 0): mean 0.25, se = 0.3536 / sqrt 2 = 0.25
    assert s["rejected_gap"]["gain"] == pytest.approx(0.25) and s["rejected_gap"]["se"] == pytest.approx(0.25)
    assert s["category_gap"]["gain"] == pytest.approx(0.25)
    assert s["rejected_unknown_category_share_of_turns"] == pytest.approx(1 / 8)
    assert s["named_category_share"] == pytest.approx(4 / 6) and s["category_holds_unseen_gold_share"] == pytest.approx(3 / 4)


def test_error_kinds():
    assert error_kind("Error: unknown category 'X'; use one of ...") == "unknown category"
    assert error_kind("Error: the function call is not valid JSON (Expecting ',' ...)") == "malformed JSON"
    assert error_kind("Error: submit needs ...") == "other"
