"""The mixture Decompose env: every task searched in its own library, exactly as the single-source env."""
from __future__ import annotations

from pathlib import Path

import gymnasium
import pytest

from toolgym.data.records import Task, Trajectory
from toolgym.envs import DecompositionEnv, check_tool_env, shared_dataset
from toolgym.envs.mixture import MixtureDecompositionEnv, interleave

ROOT = Path(__file__).resolve().parent.parent
# two bundled libraries (no ../shared needed): multi-intent Seal-Tools, dialogue API-Bank
TWO = [{"dataset": "seal_tools", "train_split": "train", "eval_split": "heldout"},
       {"dataset": "api_bank", "heldout_fraction": 0.2}]


def _task(i: str) -> Task:
    return Task(id=i, query=i, gold=["x"])


def test_interleave_takes_one_of_each_in_turn():
    a, b, c = [_task("a1"), _task("a2"), _task("a3")], [_task("b1")], [_task("c1"), _task("c2")]
    assert [t.id for t in interleave([a, b, c])] == ["a1", "b1", "c1", "a2", "c2", "a3"]
    assert interleave([]) == []


@pytest.fixture(scope="module")
def two_sources():
    seal_corpus, seal = shared_dataset("seal_tools", "heldout")
    bank_corpus, bank = shared_dataset("api_bank")
    return [("seal_tools", seal_corpus, seal[:6]), ("api_bank", bank_corpus, bank[:4])]


def test_each_task_is_the_single_source_envs_episode(two_sources):
    env = MixtureDecompositionEnv(two_sources)
    assert env.sources == ["seal_tools", "api_bank"]
    assert [env.source_of[t.id] for t in env.tasks[:8]] == ["seal_tools", "api_bank"] * 4
    for name, corpus, tasks in two_sources:
        single = DecompositionEnv(corpus, tasks)
        task = tasks[1]
        obs, info = env.reset(seed=3, options={"task": task.id})
        obs_single, info_single = single.reset(seed=3, options={"task": task.id})
        assert obs == obs_single and info["source"] == name
        assert {k: v for k, v in info.items() if k != "source"} == info_single
        action = "find the weather\nbook a table"
        _, reward, done, _, step_info = env.step(action)
        _, reward_single, _, _, step_info_single = single.step(action)
        assert done and reward == reward_single
        assert step_info["raw_ranking"] == step_info_single["raw_ranking"]
        assert set(step_info["raw_ranking"]) <= set(corpus.ids)  # searched in its own library
        assert env.trajectory() == single.trajectory()
        assert env.task.id == task.id


def test_random_resets_draw_every_source_and_repeat_with_the_seed(two_sources):
    env = MixtureDecompositionEnv(two_sources)
    drawn = [env.reset(seed=s)[1]["task_id"] for s in range(40)]
    assert {env.source_of[t] for t in drawn} == {"seal_tools", "api_bank"}
    assert drawn == [env.reset(seed=s)[1]["task_id"] for s in range(40)]


def test_the_contract_holds(two_sources):
    check_tool_env(MixtureDecompositionEnv(two_sources), valid_action=lambda obs, info: "subtask one\nsubtask two")
    from gymnasium.utils.env_checker import check_env

    check_env(MixtureDecompositionEnv(two_sources), skip_render_check=True)


def test_bad_mixtures_and_options_are_clear_errors(two_sources):
    (name, corpus, tasks), other = two_sources[0], two_sources[1]
    with pytest.raises(ValueError, match="at least one source"):
        MixtureDecompositionEnv([])
    with pytest.raises(ValueError, match="two sources are named"):
        MixtureDecompositionEnv([two_sources[0], (name, other[1], other[2])])
    with pytest.raises(ValueError, match="unique across a mixture"):
        MixtureDecompositionEnv([two_sources[0], ("copy", corpus, tasks[:2])])
    env = MixtureDecompositionEnv(two_sources)
    with pytest.raises(RuntimeError, match="reset"):
        env.step("x")
    with pytest.raises(ValueError, match="unknown task id"):
        env.reset(options={"task": "nope"})
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"tsak": tasks[0].id})
    with pytest.raises(ValueError, match="must be a dict"):
        env.reset(options=["task"])
    with pytest.raises(ValueError, match="in no source"):
        env.index.index_for("nope")
    with pytest.raises(ValueError, match="needs the task"):
        env.index.retriever()(["weather"], 5)


def test_counterfactual_reward_searches_each_tasks_own_library(two_sources):
    """R_cf through the mixture's index equals R_cf over the task's own index, and the env's reward."""
    from toolgym.rewards import build_reward

    env = MixtureDecompositionEnv(two_sources)
    mixed = build_reward({"name": "counterfactual"}, index=env.index)
    for name, _, tasks in two_sources:
        own = build_reward({"name": "counterfactual"}, index=env.envs[name].index)
        task = tasks[0]
        rollouts = []
        for action in ("search the weather\nconvert currency", task.query):
            env.reset(options={"task": task.id})
            env.step(action)
            rollouts.append(env.trajectory())
        assert all(isinstance(t, Trajectory) for t in rollouts)
        got, want = mixed.score_group(rollouts, task), own.score_group(rollouts, task)
        assert list(got.rewards) == pytest.approx(list(want.rewards))
        assert list(got.rewards) == pytest.approx([t.env_reward for t in rollouts])


def test_registered_id_parts_limits_and_seed():
    train = gymnasium.make("toolgym/Decompose-Mixture-v0", sources=TWO, limit=5).unwrapped
    held = gymnasium.make("toolgym/Decompose-Mixture-v0", sources=TWO, split="heldout", limit=5).unwrapped
    assert len(train.tasks) == len(held.tasks) == 10
    assert not {t.id for t in train.tasks} & {t.id for t in held.tasks}
    assert not {t.context_text() for t in train.tasks} & {t.context_text() for t in held.tasks}
    again = gymnasium.make("toolgym/Decompose-Mixture-v0", sources=TWO, limit=5).unwrapped
    assert [t.id for t in again.tasks] == [t.id for t in train.tasks]
    other = gymnasium.make("toolgym/Decompose-Mixture-v0", sources=TWO, limit=5, seed=1).unwrapped
    assert [t.id for t in other.tasks] != [t.id for t in train.tasks]
    multi = gymnasium.make("toolgym/Decompose-Mixture-v0", sources=TWO, limit=20, min_gold=2).unwrapped
    assert all(len(t.gold) >= 2 for t in multi.tasks)
    for bad, match in (({"split": "test"}, "split must be 'train' or 'heldout'"), ({"limit": 0}, "limit"),
                       ({"sources": [{"datset": "api_bank"}]}, "datset"), ({"sources": "api_bank"}, "list of source"),
                       ({"sources": [{"dataset": "api_bank", "heldout_fraction": 1.5}]}, "heldout_fraction"),
                       ({"sources": TWO, "min_gold": 50}, "no train task with at least 50")):
        with pytest.raises(ValueError, match=match):
            gymnasium.make("toolgym/Decompose-Mixture-v0", **bad)


def test_default_sources_are_the_mixture_retrievers():
    """The env's default parts are the ones configs/fit_retriever_mixture.yaml trains and holds out."""
    import yaml

    from toolgym.data.mixture import MIXTURE_SOURCES

    cfg = yaml.safe_load((ROOT / "configs" / "fit_retriever_mixture.yaml").read_text())
    assert [dict(s) for s in MIXTURE_SOURCES] == cfg["sources"]
    assert cfg.get("seed", 0) == 0


def test_grpo_trains_on_the_mixture_with_r_cf(tmp_path):
    """``toolgym train`` on the mixture id with the counterfactual reward: rollouts from both sources."""
    import json

    import yaml

    from toolgym.cli.main import main

    cfg = {"model": {"name": "tiny-llama"}, "run_dir": str(tmp_path / "run"),
           "env": {"id": "toolgym/Decompose-Mixture-v0", "kwargs": {"sources": TWO, "limit": 4}},
           "sampling": {"max_new_tokens": 8}, "grpo": {"lr": 1.0e-3, "lora": {"r": 2, "alpha": 4}},
           "reward": {"name": "counterfactual"},
           "train": {"steps": 2, "tasks_per_step": 2, "group_size": 2, "skip_zero_advantage": False,
                     "save_rollouts": True},
           "eval": {"before": False, "after": False}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["train", str(path), "--no-progress"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    env = gymnasium.make("toolgym/Decompose-Mixture-v0", sources=TWO, limit=4).unwrapped
    trained = [t for r in rows for t in r["task_ids"]]
    assert len(trained) == 4 and {env.source_of[t] for t in trained} == {"seal_tools", "api_bank"}


def test_unseen_by_retriever_trains_only_on_the_queries_the_encoder_set_aside(tmp_path):
    """The training part keeps the tasks the retriever folder lists as set aside (a reward there sees
    retrieval as on new requests); the held-out part stays whole; without a model folder it is an error."""
    import json

    from toolgym.envs.mixture import mixture_sources
    from toolgym.envs.registry import make_mixture_decomposition_env
    from toolgym.retrieval.models import HYBRID_SETTINGS_FILE, minilm_path

    bank = [{"dataset": "api_bank", "heldout_fraction": 0.2}]
    (_, _, train), = mixture_sources(bank, "train", 0, None)
    (_, _, heldout), = mixture_sources(bank, "heldout", 0, None)
    unseen = [train[5].id, train[1].id, "api_bank-not-a-task"]
    model = tmp_path / "model"
    model.mkdir()
    for f in minilm_path().iterdir():
        (model / f.name).symlink_to(f, target_is_directory=f.is_dir())
    (model / HYBRID_SETTINGS_FILE).write_text(json.dumps({"bm25_weight": 0.3, "set_aside_tasks": {"api_bank": unseen}}))
    kwargs = {"sources": bank, "unseen_by_retriever": True, "retriever": "hybrid",
              "retriever_options": {"model": str(model), "cache_dir": str(tmp_path / "cache")}}
    env = make_mixture_decomposition_env(split="train", **kwargs)
    assert [t.id for t in env.tasks] == [train[1].id, train[5].id]  # the part's order, unknown ids ignored
    assert [t.id for t in make_mixture_decomposition_env(split="heldout", **kwargs).tasks] == [t.id for t in heldout]
    assert len(make_mixture_decomposition_env(sources=bank, split="train").tasks) == len(train)
    with pytest.raises(ValueError, match="needs retriever_options.model"):
        make_mixture_decomposition_env(sources=bank, split="train", unseen_by_retriever=True)
