"""Property tests (hypothesis) for the credit modules, and the vectorised path against the loop."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from toolgym.data.records import SearchEvent, Task, Trajectory
from toolgym.rewards import (
    TCA,
    esm_tool_advantages,
    esm_turn_advantages,
    first_discoveries,
    get_reward,
    grpo_advantage,
    tca_gate,
)

TOOLS = [f"t{j}" for j in range(8)]


def vectorised_credit():
    """benchmarks/vectorised_credit.py: the numpy comparison path (not part of the package)."""
    from benchmarks import vectorised_credit as module

    return module
SETTINGS = settings(max_examples=60, deadline=None)


@st.composite
def trajectories(draw, task_id: str = "T"):
    n_search = draw(st.integers(0, 5))
    events = []
    for turn in range(n_search):
        results = draw(st.lists(st.sampled_from(TOOLS), max_size=5, unique=True))
        query = draw(st.sampled_from(["a", "b", "c"]))
        events.append(SearchEvent(turn=turn, query=query, category=None, results=results))
    submitted = draw(st.booleans())
    selection = draw(st.lists(st.sampled_from(TOOLS), max_size=3, unique=True)) if submitted else None
    return Trajectory(task_id=task_id, events=events, selection=selection,
                      terminated_by="submit" if submitted else "max_turns",
                      num_turns=n_search + int(submitted), invalid_actions=draw(st.integers(0, 2)))


@st.composite
def groups(draw, size: int | None = None):
    gold = frozenset(draw(st.lists(st.sampled_from(TOOLS), min_size=1, max_size=3, unique=True)))
    g = size if size is not None else draw(st.integers(1, 6))
    trajs = [draw(trajectories()) for _ in range(g)]
    return Task(id="T", query="q", gold=gold), trajs


def all_outputs(credit):
    turns = [np.asarray(a) for a in credit.turn_advantages] if credit.turn_advantages is not None else []
    return credit.rewards, credit.advantages, turns


@SETTINGS
@given(groups(), st.randoms(use_true_random=False))
def test_permuting_the_group_permutes_the_outputs(group, rnd):
    task, trajs = group
    perm = list(range(len(trajs)))
    rnd.shuffle(perm)
    for scheme in ("toolsearcher", "grpo_f1", "grpo_match"):
        module = get_reward(scheme)
        base = module.score_group(trajs, task)
        shuffled = module.score_group([trajs[p] for p in perm], task)
        np.testing.assert_allclose(shuffled.rewards, base.rewards[perm], atol=1e-12)
        np.testing.assert_allclose(shuffled.advantages, base.advantages[perm], atol=1e-9)
        if base.turn_advantages is not None:
            for new_i, old_i in enumerate(perm):
                np.testing.assert_allclose(shuffled.turn_advantages[new_i], base.turn_advantages[old_i], atol=1e-9)


@SETTINGS
@given(st.floats(-1e6, 1e6, allow_nan=False), st.integers(1, 16))
def test_all_equal_rewards_give_zero(value, g):
    np.testing.assert_array_equal(grpo_advantage(np.full(g, value)), 0.0)


@SETTINGS
@given(trajectories(), st.integers(1, 5), st.lists(st.sampled_from(TOOLS), min_size=1, max_size=3, unique=True))
def test_identical_rollouts_get_zero_credit(traj, g, gold):
    task = Task(id="T", query="q", gold=frozenset(gold))
    credit = get_reward("toolsearcher").score_group([traj] * g, task)
    for adv in credit.turn_advantages:
        np.testing.assert_array_equal(adv, 0.0)
    np.testing.assert_array_equal(credit.advantages, 0.0)


@SETTINGS
@given(groups())
def test_esm_max_is_at_least_the_mean_version(group):
    task, trajs = group
    tools, z = esm_tool_advantages(trajs, task.gold)
    row = {t: k for k, t in enumerate(tools)}
    adv = esm_turn_advantages(trajs, task.gold)
    for i, traj in enumerate(trajs):
        for turn, found in first_discoveries(traj, task.gold):
            if found:
                mean_version = float(np.mean([z[row[t], i] for t in found]))
                assert adv[i][turn] >= mean_version - 1e-12
            else:
                assert adv[i][turn] == 0.0


@SETTINGS
@given(groups())
def test_outputs_are_finite_and_shaped(group):
    task, trajs = group
    for scheme in ("toolsearcher", "grpo_f1", "grpo_match"):
        credit = get_reward(scheme).score_group(trajs, task)
        rewards, advantages, turns = all_outputs(credit)
        assert rewards.shape == advantages.shape == (len(trajs),)
        assert np.all(np.isfinite(rewards)) and np.all(np.isfinite(advantages))
        for traj, adv in zip(trajs, turns):
            assert adv.shape == (traj.num_turns,) and np.all(np.isfinite(adv))
        assert all(np.isfinite(v) for v in credit.components.values())


@SETTINGS
@given(groups(), st.sampled_from(["full_retrieval", "answered"]), st.sampled_from(["all", "gated"]))
def test_tca_is_zero_wherever_the_gate_is_off(group, gate, gate_group):
    task, trajs = group
    credit = TCA(gate, gate_group).score_group(trajs, task)
    for i, traj in enumerate(trajs):
        if not tca_gate(traj, task.gold, gate):
            assert credit.advantages[i] == 0.0
            np.testing.assert_array_equal(credit.turn_advantages[i], 0.0)
        # selection credit only ever sits on the submit turn
        np.testing.assert_array_equal(credit.turn_advantages[i][:-1], 0.0)


@SETTINGS
@given(st.lists(groups(size=4), min_size=1, max_size=6), st.sampled_from(["full_retrieval", "answered"]),
       st.sampled_from(["all", "gated"]))
def test_vectorised_path_agrees_with_the_loop(batch, gate, gate_group):
    vc = vectorised_credit()
    vec = vc.esm_tca_batch(vc.encode_search_groups(batch, gate=gate), gate_group=gate_group)
    scheme = get_reward("toolsearcher", gate=gate, gate_group=gate_group)
    for b, (task, trajs) in enumerate(batch):
        credit = scheme.score_group(trajs, task)
        for g, adv in enumerate(credit.turn_advantages):
            np.testing.assert_allclose(vec[b, g, : len(adv)], adv, atol=1e-9)
            np.testing.assert_array_equal(vec[b, g, len(adv):], 0.0)


JUDGE_PIECES = st.sampled_from(['{', '}', '[', ']', '"completeness"', '"accuracy"', "coreference resolution", ':', ',', ' ',
                                '7', '-3.5', '1e999', 'NaN', '9' * 5000, 'standard_expression', 'context_consistency: 8'])


@SETTINGS
@given(st.one_of(st.text(max_size=500), st.lists(JUDGE_PIECES, max_size=60).map("".join)))
def test_judge_parser_never_raises_and_returns_finite_scores(text):
    import math

    from toolgym.rewards.preference import PREFERENCE_CRITERIA, parse_judge_scores

    out = parse_judge_scores(text)
    assert out is None or (set(out) == set(PREFERENCE_CRITERIA) and all(math.isfinite(v) for v in out.values()))


@SETTINGS
@given(groups(), st.sampled_from(["toolsearcher", "esm_only", "tca_only", "grpo_f1"]))
def test_every_consumer_spreads_credit_over_turns_the_same_way(group, scheme):
    from toolgym.evaluation.replay import turn_matrix

    task, trajs = group
    credit = get_reward(scheme).score_group(trajs, task)
    for i, (traj, cells) in enumerate(zip(trajs, turn_matrix(credit, trajs))):
        assert cells.shape == (traj.num_turns,)
        if credit.turn_advantages is not None:
            np.testing.assert_array_equal(cells, credit.turn_advantages[i])
        else:
            np.testing.assert_array_equal(cells, credit.advantages[i])
        assert [credit.token_advantage(i, t) for t in range(traj.num_turns)] == cells.tolist()
