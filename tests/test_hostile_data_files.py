"""Hostile data files: what a careless or malicious user can hand toolgym as a dataset.

Task ids that leak the gold tools, special files (a FIFO) as inputs, tool ids that cannot be
encoded. Each case fails on the code before its fix (issue 21)."""
from __future__ import annotations

import re

import gymnasium
import pytest

import toolgym.envs  # noqa: F401  (registers the env ids)
from toolgym.data import load_dataset
from toolgym.data.loaders import DATASETS
from toolgym.trainers.evaluate import agent_view

BUNDLED = [name for name, spec in DATASETS.items() if spec.bundled]


# -- task ids carry no label ----------------------------------------------------------------
@pytest.mark.parametrize("name", BUNDLED)
def test_no_bundled_task_id_names_a_gold_tool(name):
    """API-Bank ids were dialogue file names listing the APIs called (375 of 406 named a gold tool)."""
    from toolgym.data.dataset import opaque_task_id

    dataset = load_dataset(name)
    corpus = dataset.corpus
    for task in dataset.tasks:
        tid = task.id.lower()
        for gold in task.gold:
            tool = corpus[gold]
            for label in {gold, tool.name}:
                assert label.lower() not in tid, (task.id, label)
        # opaque and stable: a hash of the benchmark's own id, which stays as metadata
        assert re.fullmatch(rf"{re.escape(name)}-[0-9a-f]{{12}}", task.id), task.id
        assert task.source_id and task.id == opaque_task_id(name, task.source_id)


def test_api_bank_env_info_task_id_names_no_gold_tool():
    """What a scripted agent gets (``agent_view(info)``) holds the task id: it must not name gold."""
    env = gymnasium.make("toolgym/ToolSearch-APIBank-v0")
    for task in load_dataset("api_bank").tasks:
        _, info = env.reset(options={"task": task.id})
        shown = agent_view(info)["task_id"].lower()
        assert not [g for g in task.gold if g.lower() in shown], shown
    env.close()


def test_seal_tools_heldout_split_is_unchanged_by_opaque_ids():
    """The held-out draw is over the Seal-Tools ids, so the same 100 tasks stay held out."""
    heldout = load_dataset("seal_tools", "heldout").tasks
    assert all(t.source_id.startswith("dev-difficult-") for t in heldout)
    assert load_dataset("seal_tools").task(heldout[0].source_id) == heldout[0].__class__(
        **{**heldout[0].__dict__, "split": "dev"})
