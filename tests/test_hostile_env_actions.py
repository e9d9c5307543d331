"""Hostile env construction and reset: what a careless caller passes to ``gym.make`` / ``reset``.

Counts that are not integers (``inf``, ``2.7``, ``True``), reset options that are not a mapping.
Each is a ``ValueError`` naming the setting; none is silently rounded. Each case fails on the
code before the fix (issue 21)."""
from __future__ import annotations

import gymnasium
import pytest

import toolgym.envs  # noqa: F401  (registers the env ids)

BAD_COUNTS = [float("inf"), float("nan"), 2.7, True, "3", None]


@pytest.mark.parametrize("key", ["max_turns", "top_k", "max_query_tokens", "token_budget"])
@pytest.mark.parametrize("value", BAD_COUNTS, ids=repr)
def test_tool_search_counts_must_be_integers(key, value):
    with pytest.raises(ValueError, match=f"{key} must be an integer"):
        gymnasium.make("toolgym/ToolSearch-v0", **{key: value})


@pytest.mark.parametrize("key", ["k", "max_subtasks"])
@pytest.mark.parametrize("value", BAD_COUNTS, ids=repr)
def test_decompose_counts_must_be_integers(key, value):
    with pytest.raises(ValueError, match=f"{key} must be an integer"):
        gymnasium.make("toolgym/Decompose-v0", **{key: value})


def test_integral_values_still_work():
    env = gymnasium.make("toolgym/ToolSearch-v0", max_turns=3.0, top_k=4)
    assert env.unwrapped.max_turns == 3 and type(env.unwrapped.max_turns) is int
    env.close()


@pytest.mark.parametrize("options", [5, "task", ["task_id"], 1.5])
@pytest.mark.parametrize("env_id", ["toolgym/ToolSearch-v0", "toolgym/Decompose-v0"])
def test_reset_options_that_are_not_a_mapping_are_a_value_error(env_id, options):
    env = gymnasium.make(env_id)
    with pytest.raises(ValueError, match="reset options must be a dict"):
        env.reset(options=options)  # used to be a TypeError from dict(5)
    env.reset(seed=0)  # the env is still usable
    env.close()


def test_vector_reset_options_that_are_not_a_mapping_are_a_value_error():
    venv = gymnasium.make_vec("toolgym/ToolSearch-v0", num_envs=2)
    with pytest.raises(ValueError, match="reset options must be a dict"):
        venv.reset(options=5)
    venv.close()
