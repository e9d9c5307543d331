"""Bad input reaching the reward modules: a clear error or a counted fallback, never a crash or a silent zero."""
from __future__ import annotations

import json
import math
import warnings

import numpy as np
from types import SimpleNamespace

import pytest

from toolgym.data.records import SearchEvent, Task, Trajectory, write_rollouts
from toolgym.rewards import ESM, GroupCredit, LLMJudgeScorer, Preference, build_reward, get_reward, grpo_advantage, register_reward
from toolgym.rewards import base as reward_base
from toolgym.rewards.preference import MAX_JUDGE_REPLY_CHARS, PREFERENCE_CRITERIA, parse_judge_scores
from toolgym.cli.main import main

TASK = Task(id="d1", query="then book a taxi there", gold=frozenset({"a", "b"}),
            messages=({"role": "user", "content": "find an airport"},),
            subtasks=("find an airport", "book a taxi to the airport"))
GOOD = json.dumps({c: 7 for c in PREFERENCE_CRITERIA})


# -- the LLM judge reply parser ------------------------------------------------------------------
def test_judge_parser_survives_a_huge_integer():
    # int() of > 4,300 digits raises ValueError inside json.loads; it must be "no score" instead
    reply = json.dumps({c: 7 for c in PREFERENCE_CRITERIA[:-1]})[:-1] + f', "{PREFERENCE_CRITERIA[-1]}": ' + "9" * 5000 + "}"
    assert parse_judge_scores(reply) is None
    assert parse_judge_scores(f"completeness: {'9' * 5000}") is None


@pytest.mark.parametrize("hostile", [
    "{" * 200_000,                                  # unclosed, repeated
    '{"completeness": ' + "[" * 100_000 + "]" * 100_000 + "}",  # deeply nested
    "completeness: " * 100_000,                     # repeated names, no numbers
    "x" * 2_000_000,                                # huge
    '{"completeness": NaN, "accuracy": Infinity}' * 1000,
])
def test_judge_parser_is_bounded_on_hostile_replies(hostile):
    assert parse_judge_scores(hostile) is None


def test_judge_parser_reads_only_the_capped_prefix():
    assert parse_judge_scores(GOOD) == {c: 7.0 for c in PREFERENCE_CRITERIA}
    assert parse_judge_scores(" " * (MAX_JUDGE_REPLY_CHARS - 10) + GOOD) is None  # the scores lie past the cap


def test_judge_returning_none_scores_the_fallback_and_is_counted():
    replies = iter([None, GOOD, 42, GOOD])
    scorer = LLMJudgeScorer(lambda messages: next(replies))
    np.testing.assert_allclose(scorer.score(TASK, [["a"], ["b"], ["c"], ["d"]]), [1.0, 7.0, 1.0, 7.0])
    assert scorer.parse_failures == 2


def test_judge_and_reward_model_read_the_task_dialogue_text():
    seen = []
    LLMJudgeScorer(lambda m: seen.append(m) or GOOD).score(TASK, [["find an airport"]])
    assert TASK.dialogue_text() in seen[0][1]["content"]


# -- NaN / inf rewards ---------------------------------------------------------------------------
def test_nonfinite_rewards_get_zero_and_the_rest_normalise_without_them(monkeypatch):
    monkeypatch.setattr(reward_base, "_nonfinite_warned", False)
    with pytest.warns(RuntimeWarning, match="NaN/inf"):
        adv = grpo_advantage([1.0, math.nan, 0.0, math.inf])
    # finite members [1, 0]: mean .5, std .5
    np.testing.assert_allclose(adv, [0.5 / (0.5 + 1e-6), 0.0, -0.5 / (0.5 + 1e-6), 0.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per process: the second group is silent
        grpo_advantage([math.nan, 1.0])


def test_nonfinite_rewards_are_counted_in_the_components(monkeypatch):
    monkeypatch.setattr(reward_base, "_nonfinite_warned", True)
    group = [Trajectory("d1", num_turns=1, env_reward=r) for r in (1.0, math.nan, 0.0)]
    credit = get_reward("env_return").score_group(group, TASK)
    assert credit.components["nonfinite_rewards"] == 1.0 and credit.components["zero_var"] == 0.0
    assert credit.advantages[1] == 0.0 and credit.advantages[0] > 0 > credit.advantages[2]
    joint = build_reward({"modules": [{"module": "env_return", "weight": 1.0}]}).score_group(group, TASK)
    assert joint.components["outcome/nonfinite_rewards"] == 1.0 and joint.components["env_return/nonfinite_rewards"] == 1.0

    @register_reward("test_nan_scorer_reward")
    class NaNScore:
        name, kind = "test_nan_scorer_reward", "outcome"

        def score_group(self, trajectories, task):
            return reward_base.outcome_credit(np.full(len(trajectories), math.nan))

    all_nan = get_reward("test_nan_scorer_reward").score_group(group, TASK)
    assert all_nan.components["nonfinite_rewards"] == 3.0 and not all_nan.advantages.any()


def test_preference_scorer_nan_is_counted(monkeypatch):
    monkeypatch.setattr(reward_base, "_nonfinite_warned", True)
    class NaNScorer:
        def score(self, task, decompositions):
            return np.array([1.0, math.nan] + [0.0] * (len(decompositions) - 2))

    group = [Trajectory("d1", subtasks=[s], num_turns=1) for s in ("a", "b", "c")]
    credit = Preference(scorer=NaNScorer()).score_group(group, TASK)
    assert credit.components["nonfinite_rewards"] == 1.0 and credit.advantages[1] == 0.0


# -- ESM on a task with no gold ------------------------------------------------------------------
def test_esm_on_an_empty_gold_set_is_zero_credit_not_a_crash():
    # Task itself refuses empty gold; a module must still not crash on a task-like record without it.
    task = SimpleNamespace(id="e", query="q", gold=frozenset(), messages=(), subtasks=None, category=None)
    group = [Trajectory("e", events=[SearchEvent(0, "q", None, ["x", "y"])], selection=["x"], terminated_by="submit", num_turns=2),
             Trajectory("e", events=[], selection=None, num_turns=1)]
    credit = ESM().score_group(group, task)
    assert [a.tolist() for a in credit.turn_advantages] == [[0.0, 0.0], [0.0]]
    assert credit.components["zero_var"] == 1.0 and credit.components["mastered_tools"] == 0.0
    full = get_reward("toolsearcher").score_group(group, task)
    assert all(not a.any() for a in full.turn_advantages)


# -- records and toolgym replay --------------------------------------------------------------------
def test_a_string_selection_is_not_a_list_of_characters():
    with pytest.raises(ValueError, match="'selection' must be a list"):
        Trajectory.from_dict({"task_id": "t", "selection": "abc"})
    with pytest.raises(ValueError, match="'results' must be a list"):
        SearchEvent.from_dict({"turn": 0, "query": "q", "results": "abc"})
    assert Trajectory.from_dict({"task_id": "t", "selection": ["abc"]}).selection == ["abc"]


def test_replay_rejects_a_string_selection_naming_the_file(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    task = Task(id="t", query="q", gold=frozenset({"abc"}))
    write_rollouts(path, [(task, [Trajectory("t", selection=["abc"], terminated_by="submit", num_turns=1)])])
    record = json.loads(path.read_text())
    record["trajectories"][0]["selection"] = "abc"
    path.write_text(json.dumps(record) + "\n")
    assert main(["replay", str(path), "--scheme", "grpo_match", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "'selection' must be a list" in err


@pytest.mark.parametrize("text", ["reward: {modules: [", "reward:\n  modules:\n\t- esm\n", "- 1\n- 2\n", "reward: 3\n",
                                  "reward: {modules: [esm]}\n", "reward: {name: ${nope}}\n", "reward: {name: tca, options: {gate: x}}\n"])
def test_replay_invalid_scheme_yaml_is_one_line_exit_2(tmp_path, capsys, text):
    rollouts = tmp_path / "r.jsonl"
    task = Task(id="t", query="q", gold=frozenset({"a"}))
    write_rollouts(rollouts, [(task, [Trajectory("t", selection=["a"], terminated_by="submit", num_turns=1)])])
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    assert main(["replay", str(rollouts), "--scheme", str(cfg), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(cfg) in err


def test_group_credit_is_what_the_outcome_helper_builds():
    credit = reward_base.outcome_credit([1.0, 0.0])
    assert isinstance(credit, GroupCredit) and credit.components == {"zero_var": 0.0, "nonfinite_rewards": 0.0}


@pytest.mark.parametrize("weights", [{"lambda_ndcg": math.inf}, {"lambda_full": math.nan},
                                     {"lambda_ndcg": "heavy"}, {"lambda_full": None}])
def test_counterfactual_weights_must_be_finite_numbers(weights):
    retrieve = lambda queries, k: [[] for _ in queries]  # noqa: E731  (never called: construction fails first)
    name = next(iter(weights))
    with pytest.raises(ValueError, match=name):
        get_reward("counterfactual", retrieve=retrieve, **weights)


def test_decompose_env_refuses_nonfinite_weights_before_building_its_index(monkeypatch):
    import gymnasium

    import toolgym.envs  # noqa: F401
    from toolgym.envs import base as env_base

    def no_index(*args, **kwargs):
        raise AssertionError("the index was built before the weights were checked")

    monkeypatch.setattr(env_base.ToolEnv, "__init__", no_index)
    with pytest.raises(ValueError, match="lambda_ndcg must be finite"):
        gymnasium.make("toolgym/Decompose-v0", lambda_ndcg=math.inf)


def test_scheme_weight_must_be_finite():
    with pytest.raises(ValueError, match="finite"):
        build_reward({"modules": [{"module": "esm", "weight": math.nan}, {"module": "tca"}]})
    assert build_reward({"modules": [{"module": "esm", "weight": -0.5}, {"module": "tca"}]}) is not None
