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


def test_quickstart_seeds_are_their_rows():
    """benchmarks/quickstart_seeds.py: each seed's paired gain and the seed-level figure, as README quotes them,
    recomputed from the kept per-task rows."""
    from toolgym.evaluation.paired import paired_gain

    kept = json.loads((ROOT / "benchmarks" / "results" / "quickstart_seeds.json").read_text())
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    gains = []
    for seed, got in kept["seeds"].items():
        g = paired_gain([r["before"] for r in got["rows"]], [r["after"] for r in got["rows"]])
        assert abs(g["gain"] - got["gain"]) < 1e-12 and abs(g["se"] - got["se"]) < 1e-12, seed
        assert f"{g['gain']:+.3f} ± {g['se']:.3f}" in readme, seed
        gains.append(g["gain"])
    mean = sum(gains) / len(gains)
    se = (sum((x - mean) ** 2 for x in gains) / (len(gains) - 1)) ** 0.5 / len(gains) ** 0.5
    assert f"seed level {mean:+.3f} ± {se:.3f} (t {mean / se:.2f}, df {len(gains) - 1})" in readme
