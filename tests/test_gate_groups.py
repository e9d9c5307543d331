"""benchmarks/gate_groups.py on hand-made groups: which rewards tell a gated group's outcomes apart."""
from __future__ import annotations

import json

import pytest

from benchmarks import gate_groups


def _rollout(subtasks, selection, reward):
    return {"subtasks": subtasks, "selection": selection, "env_reward": reward}


WHOLE = _rollout(["a b"], ["a", "b", "x"], 0.0)  # gold {a, b}: NDCG 1, complete
WORSE = _rollout(["a b", "a", "b"], ["a", "x", "b"], 0.0)  # NDCG (1 + 1/2) / (1 + 1/log2 3) < 1, complete: clip gives 0
BETTER = _rollout(["a b", "a", "b"], ["a", "b", "x"], 0.0)


def test_a_split_that_ranks_the_gold_lower_is_a_loss_only_the_signed_reward_sees():
    got = gate_groups.group_signal(["a", "b"], [WHOLE, WORSE, WORSE, WHOLE], k=3)
    assert got == {"rollouts": 4, "split": 2, "mixed": True, "clipped_differs": False, "signed_differs": True,
                   "hidden": "loss"}
    level = gate_groups.group_signal(["a", "b"], [WHOLE, BETTER], k=3)  # the same list: nothing to learn
    assert level["mixed"] and not level["clipped_differs"] and not level["signed_differs"] and level["hidden"] is None
    gain = gate_groups.group_signal(["b"], [_rollout(["q"], ["x", "b"], 0.0), _rollout(["q", "c"], ["b", "x"], 0.37)], k=2)
    assert gain["clipped_differs"] and gain["signed_differs"] and gain["hidden"] is None
    same = gate_groups.group_signal(["a", "b"], [WORSE, WORSE], k=3)
    assert not same["mixed"] and same["split"] == 2


def test_read_groups_and_the_split_shares_per_source(tmp_path):
    rollouts = tmp_path / "rollouts"
    rollouts.mkdir()
    task = {"id": "seal_tools-1a", "gold": ["a", "b"]}
    other = {"id": "api_bank-2b", "gold": ["a", "b"]}
    (rollouts / "step_000000.jsonl").write_text(json.dumps({"task": task, "trajectories": [WHOLE, WORSE]}) + "\n")
    (rollouts / "step_000001.jsonl").write_text(json.dumps({"task": other, "trajectories": [WHOLE, WHOLE]}) + "\n")
    groups = gate_groups.read_groups(tmp_path)
    assert [(g["step"], g["source"], g["hidden"]) for g in groups] == [(0, "seal_tools", "loss"), (1, "api_bank", None)]
    summary = gate_groups.summarise(groups)
    assert summary["groups"] == 2 and summary["mixed"] == 1 and summary["hidden_loss"] == 1
    assert summary["split_share"] == {"api_bank": 0.0, "seal_tools": 0.5}
    with pytest.raises(SystemExit, match="no rollouts"):
        gate_groups.read_groups(tmp_path / "missing")


@pytest.mark.parametrize("name", ["/dev/null", "../gate", "a b", ""])
def test_a_name_that_is_not_a_plain_file_name_is_refused(name, tmp_path):
    with pytest.raises(SystemExit):
        gate_groups.main(["--runs", str(tmp_path), "--name", name])
