"""benchmarks/learning.py builds valid structured train configs for every run it knows."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import learning  # noqa: E402

from toolgym.trainers.train import as_config  # noqa: E402


def test_every_learning_run_config_validates(tmp_path):
    for run, (env_name, reward) in learning.RUNS.items():
        cfg = as_config(learning.grpo_config(env_name, reward, "tiny-llama", tmp_path / run, 60.0))
        assert cfg.reward.name == reward["name"] and dict(cfg.reward.options) == dict(reward.get("options") or {})
        assert cfg.env.id == learning.ENVS[env_name]["id"] and cfg.model.name == "tiny-llama"
        assert not cfg.eval.before and not cfg.eval.after and cfg.train.time_budget_s == 60.0
