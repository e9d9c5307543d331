"""The quickstart's quoted gain is the one its kept per-task rows give (benchmarks/results/quickstart.json)."""
import json
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
