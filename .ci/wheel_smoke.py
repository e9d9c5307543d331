"""Run from outside the repository by .ci/wheel_smoke.sh, in a fresh venv holding the built wheel:
the package as a user installs it makes an env, steps it and scores a group with a reward module."""
import json
import math
import subprocess
import sys
from pathlib import Path

import gymnasium

import toolgym

here = Path.cwd()
assert "site-packages" in toolgym.__file__, f"toolgym came from {toolgym.__file__}, not the installed wheel"
assert "torch" not in sys.modules, "import toolgym imported torch"
assert set(toolgym.__all__) <= set(dir(toolgym)) and toolgym.__version__

import toolgym.envs  # noqa: E402  (registers the built-in ids)

env = gymnasium.make("toolgym/ToolSearch-v0")
toolgym.check_tool_env(env)


def call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


group, task = [], None
for query in ("zzz qqq", "weather", None, None):  # None: the request itself
    obs, info = env.reset(seed=0)
    task = env.unwrapped.task
    obs, reward, terminated, truncated, info = env.step(call("search", query=query if query is not None else task.query))
    assert not terminated and not info["invalid"], obs[:200]
    obs, reward, terminated, truncated, info = env.step(call("submit", tools=info["seen"][:3] or env.unwrapped.corpus.ids[:1]))
    assert terminated or truncated
    group.append(info["trajectory"])

credit = toolgym.get_reward("toolsearcher").score_group(group, task)
assert len(credit.rewards) == len(group) and all(math.isfinite(float(r)) for r in credit.rewards), credit
assert max(credit.rewards) > min(credit.rewards), f"the request's own search should beat junk: {credit.rewards}"
toolgym.write_rollouts(here / "rollouts.jsonl", [(task, group)])
assert toolgym.read_rollouts(here / "rollouts.jsonl")[0][1][0].task_id == task.id

cli = subprocess.run([str(Path(sys.executable).with_name("toolgym")), "envs"], capture_output=True, text=True, check=True)
assert "toolgym/ToolSearch-v0" in cli.stdout, cli.stdout
print(f"wheel smoke ok: toolgym {toolgym.__version__} from {Path(toolgym.__file__).parent}; "
      f"rewards {[round(float(r), 3) for r in credit.rewards]}; torch imported: {'torch' in sys.modules}")
