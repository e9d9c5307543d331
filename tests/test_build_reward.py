"""One ``toolgym.rewards.build_reward`` behind every caller: ``toolgym train`` (its structured
``reward`` section), the verl plugin (``TurnCreditScorer`` from the ``toolgym`` config section) and
``toolgym replay`` (a YAML ``--scheme``) accept the same shapes, build the same module with the
same default, and search the same index."""
from __future__ import annotations

import json

import gymnasium
import numpy as np
import pytest
import yaml

import toolgym.envs  # noqa: F401  (registers the ids)
from toolgym.rewards import DEFAULT_REWARD, build_reward, get_reward, reward_config, runtime_needs

ENV_KWARGS = {"split": "train", "max_turns": 4}


def _call(name, **args):
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


@pytest.fixture(scope="module")
def search_group():
    """Three real ToolSearch episodes on one task: found and submitted; a wrong search and tool; found, then
    the gold plus a wrong tool."""
    env = gymnasium.make("toolgym/ToolSearch-v0", **ENV_KWARGS)
    task = env.unwrapped.tasks[0]
    wrong = next(i for i in env.unwrapped.corpus.ids if i not in task.gold)
    scripts = [[_call("search", query=task.query), _call("submit", tools=sorted(task.gold))],
               [_call("search", query="weather forecast"), _call("submit", tools=[wrong])],
               [_call("search", query=task.query), _call("search", query="sports"), _call("submit", tools=sorted(task.gold) + [wrong])]]
    group = []
    for actions in scripts:
        env.reset(seed=0, options={"task": task.id})
        for action in actions:
            *_, info = env.step(action)
        group.append(info["trajectory"])
    return env, task, group


@pytest.fixture(scope="module")
def decompose_group():
    env = gymnasium.make("toolgym/Decompose-v0", split="train")
    task = env.unwrapped.tasks[0]
    group = []
    for answer in ("grow tomatoes flowering stage\nnutrient requirements phosphorus\ntimber resources", task.query):
        env.reset(seed=0, options={"task": task.id})
        group.append(env.step(answer)[-1]["trajectory"])
    return env, task, group


def _by_train(shape, env):
    """What ``toolgym train`` builds: its validated structured config's ``reward`` section."""
    from toolgym.trainers.train import as_config

    cfg = as_config({} if shape is None else {"env": {"id": env.spec.id}, "reward": shape})
    return build_reward(cfg.reward, index=env.unwrapped.index)


def _by_verl(shape, env, env_kwargs):
    pytest.importorskip("verl")
    from omegaconf import OmegaConf

    from toolgym.trainers.verl.agent_loop import TurnCreditScorer

    section = {"env_id": env.spec.id, "env_kwargs": env_kwargs, **({} if shape is None else {"reward": shape})}
    return TurnCreditScorer.from_config(OmegaConf.create({"toolgym": section})).reward


def _by_replay(shape, env, tmp_path):
    from toolgym.evaluation.replay import build_scheme, make_index

    path = tmp_path / "reward.yaml"
    path.write_text(yaml.safe_dump({"reward": {} if shape is None else shape}))
    return build_scheme(str(path), make_index(None, None, "bm25", corpus=env.unwrapped.corpus))[1]


def _same_credit(a, b):
    assert a.components == pytest.approx(b.components)
    np.testing.assert_allclose(a.rewards, b.rewards, rtol=0, atol=0)
    np.testing.assert_allclose(a.advantages, b.advantages, rtol=0, atol=0)
    assert (a.turn_advantages is None) == (b.turn_advantages is None)
    for x, y in zip(a.turn_advantages or (), b.turn_advantages or ()):
        np.testing.assert_allclose(x, y, rtol=0, atol=0)


SEARCH_SHAPES = {
    "default": (None, "grpo_f1", {}),
    "empty": ({}, "grpo_f1", {}),
    "scheme with options": ({"name": "toolsearcher", "options": {"gate": "answered"}}, "toolsearcher", {"gate": "answered"}),
    "module by name": ({"name": "selection_f1"}, "selection_f1", {}),
    "modules": ({"modules": [{"module": "esm", "weight": 1.0}, {"module": "tca", "weight": 2.0, "gate": "answered"}]}, None, None),
    "train section with modules": ({"name": "mine", "options": {}, "modules": [{"module": "selection_match", "weight": 1.0}]},
                                   None, None),
}


@pytest.mark.parametrize("label", sorted(SEARCH_SHAPES))
def test_train_verl_and_replay_build_the_same_reward_from_each_shape(label, search_group, tmp_path):
    env, task, group = search_group
    shape, name, options = SEARCH_SHAPES[label]
    built = [_by_train(shape, env), _by_verl(shape, env, ENV_KWARGS), _by_replay(shape, env, tmp_path)]
    assert len({type(r) for r in built}) == 1
    credits = [r.score_group(group, task) for r in built]
    # the reference: the scheme or module itself by name, or the composite written out
    reference = get_reward(name, **options) if name else build_reward({"modules": shape["modules"]})
    expected = reference.score_group(group, task)
    assert np.any(expected.advantages) or any(np.any(t) for t in expected.turn_advantages or ())  # not all zeros
    for credit in credits:
        _same_credit(credit, expected)


def test_the_default_is_one_name_everywhere(search_group, tmp_path):
    from toolgym.trainers.config import RewardConfig

    env, task, group = search_group
    assert DEFAULT_REWARD == "grpo_f1" == RewardConfig().name
    assert reward_config(None) == reward_config({}) == reward_config({"options": {}}) == {"name": "grpo_f1", "options": {}}
    f1 = [1.0, 0.0, 2 / 3]  # gold alone; a wrong tool; the one gold tool plus a wrong one (P = 1/2, R = 1)
    for reward in (_by_train(None, env), _by_verl(None, env, ENV_KWARGS), _by_replay(None, env, tmp_path)):
        credit = reward.score_group(group, task)
        np.testing.assert_allclose(credit.rewards, f1)
        assert any(k.startswith("selection_f1/") for k in credit.components)


def test_a_retrieving_reward_searches_the_callers_index(decompose_group, tmp_path):
    """``counterfactual`` needs ``retrieve``: every caller hands it the same corpus's index, so R_cf is the env's own."""
    env, task, group = decompose_group
    shape = {"name": "counterfactual", "options": {"k": 10}}
    assert runtime_needs(shape) == {"retrieve"} == runtime_needs("magicselector")
    for reward in (_by_train(shape, env), _by_verl(shape, env, {"split": "train"}), _by_replay(shape, env, tmp_path)):
        np.testing.assert_allclose(reward.score_group(group, task).rewards, [t.env_reward for t in group], atol=1e-12)
    assert len({t.env_reward for t in group}) == 2  # two different answers, two different R_cf
    with pytest.raises(ValueError, match="needs runtime retrieve"):
        build_reward(shape)  # no index given


def test_every_caller_refuses_a_bad_shape_the_same_way(search_group, tmp_path):
    env, _, _ = search_group
    bad = {"modules": [{"module": "esm", "weight": 1.0}], "options": {"gate": "answered"}}
    for build in (lambda: _by_train(bad, env), lambda: _by_verl(bad, env, ENV_KWARGS), lambda: _by_replay(bad, env, tmp_path)):
        with pytest.raises(ValueError, match="beside 'modules'"):
            build()
    with pytest.raises(ValueError, match="unknown keys"):
        reward_config({"nmae": "grpo_f1"})
    with pytest.raises(ValueError, match="not both"):
        build_reward("grpo_f1", index=env.unwrapped.index, retrieve=lambda qs, k: [])


def test_tool_index_retriever_returns_the_ranked_ids_with_scores(bm25):
    retrieve = bm25.retriever()
    queries = ["convert a csv file to json", "weather forecast for tomorrow"]
    lists = retrieve(queries, 3)
    results = bm25.search_batch(queries, None, 3)
    assert lists == [list(zip(r.ids, r.scores)) for r in results]
    assert all(len(ranked) == 3 and ranked[0][1] >= ranked[-1][1] for ranked in lists)
