"""The quickstart's quoted gains, timings and memory are the ones its kept rows give
(benchmarks/results/quickstart.json: the GRPO stage of one `make quickstart`; benchmarks/results/quickstart_seeds.json:
the same stage with seeds 0-2, and the configurations tried before)."""
import json
import re
from pathlib import Path

import yaml

from toolgym.evaluation.evaluate import paired_difference

ROOT = Path(__file__).resolve().parent.parent
CONFIG = yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())


def _kept(name: str) -> dict:
    return json.loads((ROOT / "benchmarks" / "results" / f"{name}.json").read_text())


def _doc(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def test_quickstart_gain_in_the_docs_is_its_rows():
    kept = _kept("quickstart")
    gain, se, n = paired_difference(kept["eval"]["before"], kept["eval"]["after"])
    assert n == kept["paired_reward_gain"]["tasks"] == len(kept["eval"]["before"]["per_task"])
    quoted = f"{gain:+.3f} ± {se:.3f}"
    for doc in ("README.md", "docs/training.md"):
        assert quoted in _doc(doc), (doc, quoted)
        assert f"paired over {n} tasks" in _doc(doc) or f"{n} held-out" in _doc(doc), (doc, n)
    assert len(kept["metrics"]) == CONFIG["train"]["steps"]  # the config's fixed step count


def test_quickstart_timings_in_the_docs_are_its_metrics():
    kept = _kept("quickstart")
    text = _doc("docs/training.md")
    m = re.search(r"(\d+) steps of (\d+)–(\d+) s rollout and (\d+)–(\d+) s update \((\d+) s of steps; evaluations of "
                  r"(\d+) s before and (\d+) s", text)
    assert m, "docs/training.md no longer quotes the quickstart's step timings"
    rollout = [r["rollout_s"] for r in kept["metrics"]]
    update = [r["update_s"] for r in kept["metrics"]]
    expected = [len(kept["metrics"]), min(rollout), max(rollout), min(update), max(update),
                sum(r["step_s"] for r in kept["metrics"]), kept["eval"]["before"]["seconds"],
                kept["eval"]["after"]["seconds"]]
    assert [int(x) for x in m.groups()] == [round(x) for x in expected]


def _min_s(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s} s"


def test_make_quickstart_wall_time_and_peak_memory_are_quoted_as_measured():
    """`/usr/bin/time -v make quickstart`: its wall time and maximum resident set size (GB = 10^9 bytes of
    time's KiB) are what README and docs/training.md say."""
    made = _kept("quickstart")["make_quickstart"]
    for doc in ("README.md", "docs/training.md"):
        text = _doc(doc)
        assert _min_s(made["wall_s"]) in text, (doc, _min_s(made["wall_s"]))
        assert f"{made['peak_rss_gb']:.2f} GB" in text, (doc, made["peak_rss_gb"])


def test_quickstart_seeds_are_their_rows():
    """benchmarks/quickstart_seeds.py: each seed's paired gain, how many clear 2 se and the seed-level figure, as
    README quotes them, recomputed from the kept per-task rows; the run is of the committed configs (no overrides),
    on the config's held-out turns."""
    from toolgym.evaluation.paired import paired_gain

    kept = _kept("quickstart_seeds")
    readme = _doc("README.md")
    assert not kept["overrides"] and not kept["sft_overrides"]
    gains, cleared = [], 0
    for seed, got in kept["seeds"].items():
        g = paired_gain([r["before"] for r in got["rows"]], [r["after"] for r in got["rows"]])
        assert abs(g["gain"] - got["gain"]) < 1e-12 and abs(g["se"] - got["se"]) < 1e-12, seed
        assert g["exceeds_2se"] == (abs(g["gain"]) > 2 * g["se"]) == got["exceeds_2se"], seed
        assert f"{g['gain']:+.3f} ± {g['se']:.3f}" in readme, seed
        if CONFIG["eval"]["num_tasks"] is not None:
            assert g["n"] == CONFIG["eval"]["num_tasks"], seed
        gains.append(g["gain"])
        cleared += g["exceeds_2se"]
    assert len({got["n"] for got in kept["seeds"].values()}) == 1
    assert f"{cleared} of {len(gains)} seeds clear 2 se" in readme
    mean = sum(gains) / len(gains)
    se = (sum((x - mean) ** 2 for x in gains) / (len(gains) - 1)) ** 0.5 / len(gains) ** 0.5
    assert f"seed level {mean:+.3f} ± {se:.3f} (t {mean / se:.2f}, df {len(gains) - 1})" in readme


def test_quickstart_seed_stages_peak_memory_is_quoted():
    """Every stage of the seeds benchmark ran under `/usr/bin/time -v`; README gives the largest peak."""
    kept = _kept("quickstart_seeds")
    peaks = {name: st["peak_rss_gb"] for name, st in kept["stages"].items()}
    assert {"demos", "sft"} <= set(peaks) and all(f"train_seed{s}" in peaks for s in kept["seeds"])
    assert f"{max(peaks.values()):.2f} GB" in _doc("README.md")


def test_the_configurations_tried_before_are_their_rows():
    """docs/training.md lists every earlier configuration of the quickstart with its per-seed gains."""
    from toolgym.evaluation.paired import paired_gain

    text = _doc("docs/training.md")
    trials = _kept("quickstart_seeds")["trials"]
    assert trials
    for trial in trials:
        for seed, got in trial["seeds"].items():
            g = paired_gain([r["before"] for r in got["rows"]], [r["after"] for r in got["rows"]])
            assert f"{g['gain']:+.3f} ± {g['se']:.3f}" in text, (trial["label"], seed)
