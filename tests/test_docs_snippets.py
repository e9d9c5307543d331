"""The code blocks of docs/writing-envs.md run as written.

A fenced python block right after ``<!-- tested -->`` runs in the default suite, one after
``<!-- tested: slow -->`` in the slow one; blocks run in page order in one namespace (a later
block uses the classes an earlier one defined), so what the page asserts is what passes here.
"""
from __future__ import annotations

import re
from pathlib import Path

import gymnasium
import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "writing-envs.md"
BLOCK = re.compile(r"<!-- tested(?P<slow>: slow)? -->\n```python\n(?P<code>.*?)\n```", re.S)
ENV_ID = "mylab/OneQuery-v0"


def blocks() -> list[tuple[bool, str]]:
    return [(bool(m["slow"]), m["code"]) for m in BLOCK.finditer(PAGE.read_text())]


def run_blocks(upto_slow: bool) -> dict:
    namespace: dict = {"__name__": "writing_envs_doc"}
    try:
        for slow, code in blocks():
            if slow and not upto_slow:
                break
            exec(compile(code, str(PAGE), "exec"), namespace)
    except BaseException:
        gymnasium.registry.pop(ENV_ID, None)
        raise
    return namespace


def test_the_page_marks_its_blocks():
    found = blocks()
    assert [slow for slow, _ in found] == [False, True]
    # every python block of the page is a tested one
    assert PAGE.read_text().count("```python") == len(found)


def test_the_environment_block_runs_and_its_env_behaves():
    ns = run_blocks(upto_slow=False)
    try:
        assert ENV_ID in gymnasium.registry
        env = ns["env"].unwrapped
        assert isinstance(env, ns["OneQueryEnv"]) and env.k == 5
        assert ns["whole"]["reward"] > ns["three"]["reward"]
        # the reward is the share of gold tools in the top 5, recomputed from the trajectory by hand
        obs, info = ns["env"].reset(options={"task": 0})
        task = env.task
        obs, reward, terminated, truncated, info = ns["env"].step(task.query)
        top = env.index.search(task.query, None, 5).ids
        assert reward == len(task.gold & set(top)) / len(task.gold)
        with pytest.raises(RuntimeError):
            ns["env"].step("again")  # the episode is over
        # a running episode's record; an invalid (non-text) action does not raise
        ns["env"].reset(seed=1)
        assert env.trajectory().terminated_by == "running" and env.trajectory().env_reward is None
        assert ns["env"].step({"not": "text"})[2]
        # toolgym's reward modules score its trajectories: search recall equals the env's return here
        from toolgym.rewards import build_reward

        trajectories = []
        for text in (task.query, " ".join(task.query.split()[:2]), ""):
            ns["env"].reset(options={"task": task.id})
            trajectories.append(ns["env"].step(text)[4]["trajectory"])
        credit = build_reward("search_recall").score_group(trajectories, task)
        assert list(credit.rewards) == [t.env_reward for t in trajectories]
        vec = gymnasium.make_vec(ENV_ID, num_envs=2)  # gymnasium's sync vector env
        _, infos = vec.reset(seed=0)
        assert len(infos["task_id"]) == 2
        vec.close()
    finally:
        gymnasium.registry.pop(ENV_ID, None)


@pytest.mark.slow
def test_the_training_block_trains_on_the_new_env(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the block's run_dir is relative: it lands here, not in the repo
    ns = run_blocks(upto_slow=True)
    try:
        assert (tmp_path / "runs" / "one_query" / "eval.json").is_file()
        assert ns["summary"]["steps"] == 2
    finally:
        gymnasium.registry.pop(ENV_ID, None)
