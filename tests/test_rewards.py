"""ToolSearcher credit on hand numbers: GRPO normalisation, ESM, TCA, monitors, composites."""
from __future__ import annotations

import math

import numpy as np
import pytest

from toolgym.data.records import SearchEvent, Task, Trajectory
from toolgym.rewards import (
    ESM,
    TCA,
    GroupCredit,
    aggregate_components,
    build_reward,
    esm_turn_advantages,
    first_discoveries,
    get_reward,
    grpo_advantage,
    grpo_advantage_masked,
    register_reward,
    reward_names,
    scheme_names,
    tca_selection_advantages,
)
from toolgym.rewards.monitors import duplicate_subtask_rate, invalid_action_rate, repeated_search_rate

PARSER, ENCODER, TEXT_PARSER = "csv_parser", "json_encoder", "csv_to_text"
FILLER = ["xml_encoder", "yaml_dump", "zip_files", "http_get"]


def make_traj(task_id: str, searches: list[list[str]], selection: list[str] | None, queries: list[str] | None = None,
              invalid: int = 0) -> Trajectory:
    """One search per turn (turns 0..n-1), then a submit at turn n if ``selection`` is given."""
    queries = queries or [f"query {t}" for t in range(len(searches))]
    events = [SearchEvent(turn=t, query=q, category=None, results=list(r)) for t, (q, r) in enumerate(zip(queries, searches))]
    submitted = selection is not None
    return Trajectory(task_id=task_id, events=events, selection=selection,
                      terminated_by="submit" if submitted else "max_turns",
                      num_turns=len(searches) + int(submitted), invalid_actions=invalid)


@pytest.fixture()
def csv_task() -> Task:
    return Task(id="csv2json", query="Convert my CSV records to JSON", gold=frozenset({PARSER, ENCODER}))


@pytest.fixture()
def csv_group() -> list[Trajectory]:
    """The ToolSearcher notes' worked example (their "third round" = our 0-based turn 2).

    All 5 rollouts find the parser in turn 0; a second search in turn 1 adds no new gold tool.
    Rollouts 0 and 1 find the encoder in turn 2; rollout 0 then submits the right pair, rollout 1
    submits the plain-text parser with the encoder. Rollouts 2-4 never see the encoder and submit
    the parser alone at turn 3.
    """
    found_parser = [PARSER, TEXT_PARSER] + FILLER[:3]
    again = [TEXT_PARSER, PARSER] + FILLER[1:4]
    encoder = [ENCODER] + FILLER
    nothing = FILLER + [TEXT_PARSER]
    return [
        make_traj("csv2json", [found_parser, again, encoder], [PARSER, ENCODER]),
        make_traj("csv2json", [found_parser, again, encoder], [TEXT_PARSER, ENCODER]),
        make_traj("csv2json", [found_parser, again, nothing], [PARSER]),
        make_traj("csv2json", [found_parser, again, nothing], [PARSER], queries=["q", "q", "q"]),
        make_traj("csv2json", [found_parser, again, nothing], [PARSER], invalid=2),
    ]


# -- GRPO normalisation ---------------------------------------------------------------------
def test_grpo_advantage_hand_numbers():
    # R = [1, 0, 0, 0]: mean 0.25, population std sqrt(0.1875) = 0.4330127
    std = math.sqrt(0.1875)
    expected = np.array([0.75, -0.25, -0.25, -0.25]) / (std + 1e-6)
    np.testing.assert_allclose(grpo_advantage([1, 0, 0, 0]), expected, rtol=1e-12)
    assert grpo_advantage([1, 0, 0, 0])[0] == pytest.approx(1.7320468, rel=1e-6)


def test_grpo_all_equal_and_group_of_one_give_zero():
    np.testing.assert_array_equal(grpo_advantage([0.3, 0.3, 0.3]), 0.0)
    np.testing.assert_array_equal(grpo_advantage([5.0]), 0.0)
    # float noise is "all equal", not a ±1 advantage
    np.testing.assert_array_equal(grpo_advantage([0.1 + 0.2, 0.3, 0.3]), 0.0)


def test_grpo_masked_normalises_inside_the_mask_only():
    r = np.array([1.0, 0.0, 0.0, 1.0])
    mask = np.array([True, True, False, False])
    # inside the mask: [1, 0] -> mean .5, std .5 -> [+1, -1]; outside 0
    np.testing.assert_allclose(grpo_advantage_masked(r, mask), [0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6), 0, 0])
    np.testing.assert_array_equal(grpo_advantage_masked(r, np.array([True, False, False, False])), 0.0)


# -- the worked CSV -> JSON example -----------------------------------------------------------
def test_worked_example_esm(csv_task, csv_group):
    # Encoder: r = [1, 1, 0, 0, 0]; mean 0.4; population std sqrt((2*.36 + 3*.16)/5) = sqrt(.24)
    z_enc = 0.6 / (math.sqrt(0.24) + 1e-6)  # = 1.2247...
    # Parser: r = [1, 1, 1, 1, 1] -> mastered -> z = 0 for every rollout.
    adv = esm_turn_advantages(csv_group, csv_task.gold)
    assert z_enc == pytest.approx(1.2247, abs=1e-4)
    for i in (0, 1):  # parser event (turn 0) 0, repeat (turn 1) 0, encoder event (turn 2) z_enc, submit 0
        np.testing.assert_allclose(adv[i], [0.0, 0.0, z_enc, 0.0])
    for i in (2, 3, 4):
        np.testing.assert_array_equal(adv[i], [0.0, 0.0, 0.0, 0.0])
    assert adv[0][2] == adv[1][2] > 0  # both encoder discoveries get the same positive advantage


def test_worked_example_tca(csv_task, csv_group):
    # s = Match = [1, 0, 0, 0, 0]: mean .2, std .4 -> [2, -0.5, -0.5, -0.5, -0.5] (/(.4+1e-6))
    d = 0.4 + 1e-6
    paper = tca_selection_advantages(csv_group, csv_task.gold)  # gate full retrieval, normalise over all
    np.testing.assert_allclose(paper, [0.8 / d, -0.2 / d, 0, 0, 0])  # only rollouts 0, 1 saw both tools
    gated = tca_selection_advantages(csv_group, csv_task.gold, gate_group="gated")
    # over the gated pair only: s = [1, 0] -> mean .5, std .5
    np.testing.assert_allclose(gated, [0.5 / 0.500001, -0.5 / 0.500001, 0, 0, 0])
    answered = tca_selection_advantages(csv_group, csv_task.gold, gate="answered")
    np.testing.assert_allclose(answered, [0.8 / d, -0.2 / d, -0.2 / d, -0.2 / d, -0.2 / d])


def test_worked_example_toolsearcher_scheme(csv_task, csv_group):
    credit = get_reward("toolsearcher").score_group(csv_group, csv_task)
    z_enc = 0.6 / (math.sqrt(0.24) + 1e-6)
    d = 0.4 + 1e-6
    assert credit.turn_advantages is not None
    np.testing.assert_allclose(credit.turn_advantages[0], [0, 0, z_enc, 0.8 / d])
    np.testing.assert_allclose(credit.turn_advantages[1], [0, 0, z_enc, -0.2 / d])
    for i in (2, 3, 4):
        np.testing.assert_array_equal(credit.turn_advantages[i], 0.0)
    assert credit.token_advantage(0, 3) == pytest.approx(0.8 / d)
    c = credit.components
    assert c["esm/mastered_tools"] == 0.5 and c["esm/never_found_tools"] == 0.0
    assert c["esm/search_recall"] == pytest.approx((1 + 1 + 0.5 * 3) / 5)
    assert c["tca/full_retrieval"] == pytest.approx(0.4) and c["tca/match"] == pytest.approx(0.2)
    assert c["esm/zero_var"] == 0.0 and c["tca/zero_var"] == 0.0
    # monitors: rollout 3 repeats "q" twice -> 2 repeats of 15 searches; 2 invalid of 20 turns
    assert c["monitors/repeated_search_rate"] == pytest.approx(2 / 15)
    assert c["monitors/invalid_action_rate"] == pytest.approx(2 / 20)
    # logged reward = SRecall + Match (weights 1, 1)
    np.testing.assert_allclose(credit.rewards, [2.0, 1.0, 0.5, 0.5, 0.5])


def test_esm_max_not_mean_when_one_event_finds_two_tools():
    task = Task(id="t", query="q", gold=frozenset({"a", "b"}))
    group = [make_traj("t", [["a", "b"]], ["a", "b"]), make_traj("t", [["a"]], ["a"]),
             make_traj("t", [["x"]], ["x"]), make_traj("t", [["x"]], ["x"])]
    # a: r = [1, 1, 0, 0] -> z = +1; b: r = [1, 0, 0, 0] -> z = 0.75/0.4330 = 1.732
    adv = esm_turn_advantages(group, task.gold)
    assert adv[0][0] == pytest.approx(0.75 / (math.sqrt(0.1875) + 1e-6))  # max(1, 1.732)
    assert adv[1][0] == pytest.approx(0.5 / (0.5 + 1e-6))
    assert adv[2][0] == 0.0  # found nothing: no discovery event


def test_esm_mean_aggregate_averages_the_tools_one_event_finds():
    task = Task(id="t", query="q", gold=frozenset({"a", "b"}))
    group = [make_traj("t", [["a", "b"]], ["a", "b"]), make_traj("t", [["a"]], ["a"]),
             make_traj("t", [["x"]], ["x"]), make_traj("t", [["x"]], ["x"])]
    z_a = 0.5 / (0.5 + 1e-6)                          # r = [1, 1, 0, 0]: mean .5, std .5
    z_b = 0.75 / (math.sqrt(0.1875) + 1e-6)           # r = [1, 0, 0, 0]: mean .25, std .433
    mean = esm_turn_advantages(group, task.gold, aggregate="mean")
    assert mean[0][0] == pytest.approx((z_a + z_b) / 2)  # (1 + 1.732) / 2 = 1.366
    assert mean[1][0] == pytest.approx(z_a)              # one tool found: mean = max
    credit = get_reward("toolsearcher", aggregate="mean").score_group(group, task)
    assert credit.turn_advantages[0][0] == pytest.approx((z_a + z_b) / 2)  # the scheme routes the option to ESM; TCA is on turn 1
    assert get_reward("esm", aggregate="mean").score_group(group, task).turn_advantages[0][0] == pytest.approx((z_a + z_b) / 2)
    with pytest.raises(ValueError, match="aggregate"):
        get_reward("esm", aggregate="median")
    # discovery events: rollout 0's one search finds a and b (one event, 2 tools), rollout 1's finds a: 1 of 2
    assert get_reward("esm").score_group(group, task).components["multi_tool_discovery_share"] == pytest.approx(0.5)


def test_esm_turn_without_discovery_is_zero_and_uses_recomputed_first_found(csv_task, csv_group):
    # first_found on the records is ignored (a wrong value there must not change the credit)
    csv_group[0].events[1].first_found = [ENCODER]
    adv = esm_turn_advantages(csv_group, csv_task.gold)
    assert adv[0][1] == 0.0


def test_never_submitted_rollout_gets_no_selection_turn(csv_task, csv_group):
    csv_group[0] = make_traj("csv2json", [[PARSER], [ENCODER]], None)  # saw both, ran out of turns
    credit = TCA().score_group(csv_group, csv_task)
    assert len(credit.turn_advantages[0]) == 2
    np.testing.assert_array_equal(credit.turn_advantages[0], 0.0)


def test_bad_num_turns_is_a_clear_error(csv_task, csv_group):
    csv_group[0].num_turns = 2
    with pytest.raises(ValueError, match="num_turns=2"):
        ESM().score_group(csv_group, csv_task)


def test_group_of_another_task_is_rejected(csv_task, csv_group):
    csv_group[0].task_id = "other"
    with pytest.raises(ValueError, match="other"):
        get_reward("toolsearcher").score_group(csv_group, csv_task)


def test_tca_unknown_options():
    with pytest.raises(ValueError, match="gate"):
        TCA(gate="sometimes")
    with pytest.raises(ValueError, match="gate_group"):
        get_reward("tca", gate_group="most")


# -- outcome schemes ------------------------------------------------------------------------
def test_grpo_f1_and_match_schemes(csv_task, csv_group):
    f1 = get_reward("grpo_f1").score_group(csv_group, csv_task)
    # F1: [1, 0.5, 2/3, 2/3, 2/3]
    r = np.array([1.0, 0.5, 2 / 3, 2 / 3, 2 / 3])
    np.testing.assert_allclose(f1.rewards, r)
    np.testing.assert_allclose(f1.advantages, (r - r.mean()) / (r.std() + 1e-6))
    assert f1.turn_advantages is None
    assert f1.components["selection_match/mean"] == pytest.approx(0.2)  # logged, weight 0
    match = get_reward("grpo_match").score_group(csv_group, csv_task)
    np.testing.assert_allclose(match.advantages, [0.8 / 0.400001, -0.2 / 0.400001, -0.2 / 0.400001, -0.2 / 0.400001, -0.2 / 0.400001])


def test_monitor_formulas_on_hand_numbers():
    a = Trajectory("t", subtasks=["Book a taxi", "book a taxi!", "Play music"], num_turns=1)
    b = Trajectory("t", subtasks=["x"], num_turns=1, invalid_actions=1)
    assert duplicate_subtask_rate([a, b]) == pytest.approx(1 / 4)
    assert invalid_action_rate([a, b]) == pytest.approx(1 / 2)
    ev = [SearchEvent(0, "weather", None, []), SearchEvent(1, "Weather", None, []), SearchEvent(2, "weather", "travel", [])]
    assert repeated_search_rate([Trajectory("t", events=ev, num_turns=3)]) == pytest.approx(1 / 3)


# -- registry and config --------------------------------------------------------------------
def test_registry_lists_modules_and_schemes():
    assert {"esm", "tca", "counterfactual", "preference", "monitors", "selection_f1", "valid_actions"} <= set(reward_names())
    assert set(scheme_names()) == {"toolsearcher", "esm_only", "tca_only", "magicselector", "grpo_f1", "grpo_match",
                                  "toolsearcher_valid"}
    with pytest.raises(KeyError, match="unknown reward module"):
        get_reward("nope")


def test_register_a_new_module_and_use_it_in_a_config(csv_task, csv_group):
    @register_reward("test_turn_count")
    class TurnCount:
        name, kind = "test_turn_count", "outcome"

        def score_group(self, trajectories, task):
            r = np.array([float(t.num_turns) for t in trajectories])
            return GroupCredit(r, grpo_advantage(r), None, {"mean": float(r.mean())})

    composite = build_reward({"modules": [{"module": "esm", "weight": 1.0}, {"module": "tca", "weight": 2.0, "gate_group": "gated"},
                                          {"module": "test_turn_count", "key": "len", "weight": 0.0}]})
    credit = composite.score_group(csv_group, csv_task)
    assert credit.components["len/mean"] == 4.0  # weight 0: logged only
    gated = tca_selection_advantages(csv_group, csv_task.gold, gate_group="gated")
    esm = esm_turn_advantages(csv_group, csv_task.gold)
    np.testing.assert_allclose(credit.turn_advantages[1], esm[1] + np.array([0, 0, 0, 2 * gated[1]]))


def test_config_from_omegaconf_and_scheme_key(csv_task, csv_group):
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"name": "toolsearcher", "options": {"gate": "answered"}})
    credit = build_reward(cfg).score_group(csv_group, csv_task)
    d = 0.4 + 1e-6
    assert credit.turn_advantages[2][3] == pytest.approx(-0.2 / d)  # answered gate opens rollout 2
    with pytest.raises(ValueError, match="unknown option"):
        build_reward({"modules": [{"module": "tca", "gate_grop": "all"}]})
    with pytest.raises(ValueError, match="unknown option 'gate_grop'"):
        get_reward("toolsearcher", gate_grop="all")  # a scheme option no module takes
    with pytest.raises(ValueError, match="modules"):
        build_reward({"weights": {}})
    with pytest.raises(ValueError, match="list"):
        build_reward({"modules": {"esm": {"weight": 1.0}}})  # the one shape is a list


def test_outcome_and_credit_modules_combine_by_the_documented_rule(csv_task, csv_group):
    composite = build_reward({"modules": [{"module": "esm", "weight": 0.5}, {"module": "selection_f1", "weight": 1.0}]})
    credit = composite.score_group(csv_group, csv_task)
    f1 = np.array([1.0, 0.5, 2 / 3, 2 / 3, 2 / 3])
    a_out = (f1 - f1.mean()) / (f1.std() + 1e-6)
    esm = esm_turn_advantages(csv_group, csv_task.gold)
    for i in range(5):
        np.testing.assert_allclose(credit.turn_advantages[i], a_out[i] + 0.5 * esm[i])


def test_aggregate_components_gives_zero_variance_share(csv_task, csv_group):
    scheme = get_reward("grpo_match")
    all_fail = [make_traj("csv2json", [[PARSER]], [PARSER]) for _ in range(5)]
    credits = [scheme.score_group(csv_group, csv_task), scheme.score_group(all_fail, csv_task)]
    agg = aggregate_components(credits)
    assert agg["selection_match/zero_var"] == 0.5
    assert agg["outcome/zero_var"] == 0.5


def test_every_shipped_reward_config_builds_and_scores(csv_task, csv_group):
    from pathlib import Path

    from omegaconf import OmegaConf

    configs = sorted((Path(__file__).resolve().parent.parent / "configs" / "rewards").glob("*.yaml"))
    assert len(configs) >= 5
    decomposition = Task(id="csv2json", query=csv_task.query, gold=csv_task.gold, subtasks=("parse csv", "encode json"))
    for path in configs:
        cfg = OmegaConf.load(path)["reward"]
        reward = build_reward(cfg, retrieve=lambda qs, k: [[PARSER, ENCODER][:k] for _ in qs],
                              embed=lambda texts: np.ones((len(texts), 3)))
        task = decomposition if path.name.startswith(("magicselector", "decomposition")) else csv_task
        group = ([Trajectory("csv2json", subtasks=["parse csv"], num_turns=1, env_reward=0.5)] * 2 if task is decomposition
                 else csv_group)
        credit = reward.score_group(group, task)
        assert np.all(np.isfinite(credit.advantages)), path.name
    trainer_form = build_reward({"name": "toolsearcher", "options": {"gate": "answered"}})
    assert trainer_form.score_group(csv_group, csv_task).turn_advantages[2][3] < 0


# -- one definition each: first discovery, credit over turns, schemes as data ------------------
def test_first_found_is_one_function_in_rank_order_each_id_once():
    from toolgym.data.records import first_found, first_found_per_search

    assert first_found(["x", "b", "b", "a"], frozenset({"a", "b"}), {"x"}) == ["b", "a"]
    assert first_found_per_search([["a", "x"], ["x", "a", "b"], ["b"]], {"a", "b"}) == [["a"], ["b"], []]
    traj = make_traj("t", [["a", "x"], ["x", "a", "b"], ["b"]], None)
    assert first_discoveries(traj, {"a", "b"}) == [(0, ["a"]), (1, ["b"]), (2, [])]


def test_recorded_first_found_is_checked_not_trusted(csv_task, csv_group):
    csv_group[0].events[0].first_found = [PARSER]  # agrees with the results
    csv_group[0].events[1].first_found = [ENCODER]  # wrong: turn 1 finds nothing new
    credit = ESM().score_group(csv_group, csv_task)
    assert credit.turn_advantages[0][1] == 0.0
    assert credit.components["first_found_mismatches"] == 1.0  # None (not recorded) is never a mismatch


def test_rollout_turn_advantages_pads_cuts_and_broadcasts():
    per_turn = GroupCredit(np.zeros(2), np.array([9.0, 9.0]), [np.array([1.0, -2.0]), np.array([0.5])])
    np.testing.assert_array_equal(per_turn.rollout_turn_advantages(0, 3), [1.0, -2.0, 0.0])  # unscored turn: 0
    np.testing.assert_array_equal(per_turn.rollout_turn_advantages(0, 1), [1.0])
    np.testing.assert_array_equal(per_turn.rollout_turn_advantages(1, 0), np.zeros(0))
    outcome = GroupCredit(np.zeros(2), np.array([0.25, -0.75]))
    np.testing.assert_array_equal(outcome.rollout_turn_advantages(1, 3), [-0.75] * 3)
    assert per_turn.token_advantage(0, 2) == 0.0 and outcome.token_advantage(1, 5) == -0.75
    with pytest.raises(ValueError, match="num_turns"):
        outcome.rollout_turn_advantages(0, -1)


def test_trainer_and_replay_spread_credit_the_same_way(csv_task, csv_group):
    from toolgym.trainers.grpo import trajectory_token_advantages
    from toolgym.evaluation.replay import turn_matrix

    for scheme in ("toolsearcher", "grpo_match"):
        credit = get_reward(scheme).score_group(csv_group, csv_task)
        matrix = turn_matrix(credit, csv_group)
        for i, traj in enumerate(csv_group):
            # one token per turn: the token advantages are the per-turn advantages
            spans = [(t + 1, t + 2) for t in range(traj.num_turns)]
            tokens = Trajectory(traj.task_id, token_ids=list(range(traj.num_turns + 1)), turn_spans=spans)
            np.testing.assert_allclose(trajectory_token_advantages(tokens, credit, i)[1:], matrix[i], rtol=1e-6)  # float32 tokens
            assert [credit.token_advantage(i, t) for t in range(traj.num_turns)] == matrix[i].tolist()


def test_ablation_schemes_are_each_half_of_toolsearcher(csv_task, csv_group):
    full = get_reward("toolsearcher").score_group(csv_group, csv_task)
    esm = get_reward("esm_only").score_group(csv_group, csv_task)
    tca = get_reward("tca_only", gate_group="gated").score_group(csv_group, csv_task)
    z_enc = 0.6 / (math.sqrt(0.24) + 1e-6)
    np.testing.assert_allclose(esm.turn_advantages[0], [0, 0, z_enc, 0])  # no selection credit
    np.testing.assert_allclose(tca.turn_advantages[0], [0, 0, 0, 0.5 / 0.500001])  # gated group: [1, 0] -> ±1
    assert esm.components["tca/match"] == pytest.approx(0.2)  # weight 0: logged, no effect
    tca_all = get_reward("tca_only").score_group(csv_group, csv_task)
    for i in range(5):
        np.testing.assert_allclose(esm.turn_advantages[i] + tca_all.turn_advantages[i], full.turn_advantages[i])


def test_scheme_options_route_to_the_modules_that_take_them():
    from toolgym.rewards.composite import scheme_config

    cfg = scheme_config("magicselector", alpha=0.25, k=5, fusion="rrf")
    by_module = {e["module"]: e for e in cfg["modules"]}
    assert by_module["preference"]["weight"] == 0.25 and by_module["counterfactual"]["weight"] == 1.0
    assert by_module["counterfactual"]["k"] == 5 and "k" not in by_module["preference"]
    assert scheme_config("toolsearcher", gate="answered")["modules"][1] == {"module": "tca", "weight": 1.0, "gate": "answered"}


def test_modules_declare_the_runtime_objects_they_need():
    from toolgym.rewards import runtime_needs

    assert runtime_needs("magicselector") == {"retrieve"}
    assert runtime_needs("toolsearcher") == frozenset()
    assert runtime_needs({"modules": [{"module": "env_return"}, {"module": "preference"}]}) == frozenset()
    assert runtime_needs({"modules": [{"module": "counterfactual", "k": 3}]}) == {"retrieve"}
    with pytest.raises(ValueError, match="needs runtime retrieve"):
        get_reward("magicselector")
    with pytest.raises(ValueError, match="needs runtime retrieve"):
        get_reward("counterfactual", k=3)
    with pytest.raises(TypeError, match="retriever"):
        build_reward({"name": "toolsearcher"}, retriever=lambda qs, k: [])  # a misspelt runtime object


def test_get_reward_takes_a_config_and_keeps_the_trainer_call(csv_task, csv_group):
    by_config = get_reward({"modules": [{"module": "esm", "weight": 1.0}, {"module": "tca", "weight": 1.0, "gate": "answered"}]})
    trainer_call = get_reward("toolsearcher", retrieve=lambda qs, k: [[] for _ in qs], gate="answered")
    a, b = by_config.score_group(csv_group, csv_task), trainer_call.score_group(csv_group, csv_task)
    for x, y in zip(a.turn_advantages, b.turn_advantages):
        np.testing.assert_allclose(x, y)
    with pytest.raises(ValueError, match="inside the config"):
        get_reward({"name": "toolsearcher"}, gate="answered")


def test_env_return_reads_the_envs_own_reward():
    task = Task(id="d", query="q", gold=frozenset({"a"}))
    group = [Trajectory("d", num_turns=1, env_reward=r) for r in (1.0, 0.0, 0.0, 0.0)]
    credit = get_reward("env_return").score_group(group, task)
    np.testing.assert_allclose(credit.advantages, np.array([0.75, -0.25, -0.25, -0.25]) / (math.sqrt(0.1875) + 1e-6))
    assert credit.components["mean"] == 0.25 and credit.components["zero_var"] == 0.0
    group[2].env_reward = None
    with pytest.raises(ValueError, match=r"rollout\(s\) \[2\] have no env_reward"):
        get_reward("env_return").score_group(group, task)
    # in a composite with the preference weight the decomposition env's R_cf is used as is
    joint = build_reward({"modules": [{"module": "env_return", "weight": 2.0}, {"module": "monitors", "weight": 0.0}]})
    group[2].env_reward = 0.5
    np.testing.assert_allclose(joint.score_group(group, task).rewards, [2.0, 0.0, 1.0, 0.0])


def test_valid_actions_rewards_the_share_of_accepted_turns_and_pushes_down_rejected_ones():
    """R = 1 − invalid/turns: [1, .5, 0] -> GRPO: mean .5, population std sqrt(1/6) -> A = ±sqrt(1.5), 0."""
    task = Task("v", "q", frozenset({"a"}))
    found = Trajectory("v", events=[SearchEvent(0, "q", None, ["a"])], selection=["a"], terminated_by="submit",
                       num_turns=2)
    half = Trajectory("v", events=[SearchEvent(1, "q", None, ["b"])], invalid_actions=1, num_turns=2)
    cut = Trajectory("v", invalid_actions=2, num_turns=2)  # e.g. two queries cut at the turn's token limit
    group = [found, half, cut]
    credit = get_reward("valid_actions").score_group(group, task)
    assert credit.rewards.tolist() == [1.0, 0.5, 0.0]
    assert credit.advantages == pytest.approx([math.sqrt(1.5), 0.0, -math.sqrt(1.5)], abs=1e-5)
    # ESM never scores the rollout that found nothing; the format term is what pushes it down
    assert get_reward("toolsearcher").score_group(group, task).rollout_turn_advantages(2, 2).tolist() == [0.0, 0.0]
    with_format = get_reward("toolsearcher_valid").score_group(group, task)
    assert with_format.rollout_turn_advantages(2, 2) == pytest.approx([-math.sqrt(1.5)] * 2, abs=1e-5)
    # the rollout that found the gold tool: ESM's z on its search turn, TCA's on its submit turn, +A_valid on both
    z = (1 - 1 / 3) / math.sqrt(2 / 9)
    assert with_format.rollout_turn_advantages(0, 2) == pytest.approx([z + math.sqrt(1.5)] * 2, abs=1e-5)
    assert get_reward("valid_actions").score_group([Trajectory("v")], task).rewards.tolist() == [1.0]  # no turns
