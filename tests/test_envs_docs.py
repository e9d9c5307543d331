"""The README / docs/envs.md snippet that registers an environment on a researcher's own corpus runs."""
from __future__ import annotations

import re
from pathlib import Path

import gymnasium
import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "docs" / "envs.md"]


def snippet(name: str, doc: Path) -> str:
    match = re.search(rf"<!-- snippet: {name} -->\s*```python\n(.*?)```", doc.read_text(), re.S)
    assert match, f"snippet {name!r} not found in {doc}"
    return match.group(1)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_register_snippet_is_short_and_runs(doc):
    code = snippet("register-env", doc)
    lines = [line for line in code.splitlines() if line.strip()]
    assert len(lines) < 20
    namespace: dict = {}
    try:
        exec(compile(code, str(doc), "exec"), namespace)
        assert "mylab/ToolSearch-MyTools-v0" in gymnasium.registry
        assert namespace["info"]["event"].first_found == ["weather.week"]
        venv = gymnasium.make_vec("mylab/ToolSearch-MyTools-v0", num_envs=2)  # the batched vector env
        obs, infos = venv.reset(seed=0)
        assert infos["task_id"].tolist() == ["q1", "q1"]
        venv.close()
    finally:
        gymnasium.registry.pop("mylab/ToolSearch-MyTools-v0", None)
