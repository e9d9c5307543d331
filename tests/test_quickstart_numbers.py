"""The quickstart's quoted gain and timings are the ones its kept rows give (benchmarks/results/quickstart.json)."""
import json
import re
from pathlib import Path

from toolgym.evaluation.evaluate import paired_difference

ROOT = Path(__file__).resolve().parent.parent


def test_quickstart_gain_in_the_docs_is_its_rows():
    kept = json.loads((ROOT / "benchmarks" / "results" / "quickstart.json").read_text())
    gain, se, n = paired_difference(kept["eval"]["before"], kept["eval"]["after"])
    assert n == kept["paired_reward_gain"]["tasks"] == len(kept["eval"]["before"]["per_task"])
    quoted = f"{gain:+.3f} ± {se:.3f}"
    for doc in ("README.md", "docs/training.md"):
        assert quoted in (ROOT / doc).read_text(encoding="utf-8"), (doc, quoted)
    assert len(kept["metrics"]) == 10  # the config's fixed step count


def test_quickstart_timings_in_the_docs_are_its_metrics():
    kept = json.loads((ROOT / "benchmarks" / "results" / "quickstart.json").read_text())
    text = (ROOT / "docs" / "training.md").read_text(encoding="utf-8")
    m = re.search(r"10 steps of (\d+)–(\d+) s rollout and (\d+)–(\d+) s update \((\d+) s of steps; evaluations of "
                  r"(\d+) s before and (\d+) s", text)
    assert m, "docs/training.md no longer quotes the quickstart's step timings"
    rollout = [r["rollout_s"] for r in kept["metrics"]]
    update = [r["update_s"] for r in kept["metrics"]]
    expected = [min(rollout), max(rollout), min(update), max(update), sum(r["step_s"] for r in kept["metrics"]),
                kept["eval"]["before"]["seconds"], kept["eval"]["after"]["seconds"]]
    assert [int(x) for x in m.groups()] == [round(x) for x in expected]
