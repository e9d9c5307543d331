"""The default hybrid never falls clearly below the better of its two retrievers.

On the held-out part of every bundled dataset (benchmarks/fusion.py's parts, the same seeded
sample of at most 300 queries), hybrid C@10 >= max(BM25 C@10, dense C@10) - 1 point. The old
equal-weight RRF failed this on Seal-Tools (-23), MetaTool and API-Bank. Slow: it encodes
every bundled corpus with MiniLM (the embeddings are cached on disk after the first run).
"""
from pathlib import Path

import numpy as np
import pytest

from toolgym.retrieval import build_index
from toolgym.retrieval.metrics import completeness_at_k

ROOT = Path(__file__).resolve().parent.parent


def fusion_benchmark():
    import benchmarks.fusion

    return benchmarks.fusion


def c_at_10(index, tasks) -> float:
    results = index.search_batch([t.context_text() for t in tasks], k=10)
    return 100 * float(np.mean([completeness_at_k(r.ids, t.gold, 10) for r, t in zip(results, tasks)]))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["seal_tools", "stabletoolbench", "metatool", "metatool_multi", "api_bank"])
def test_hybrid_is_never_clearly_below_its_better_part(name):
    bench = fusion_benchmark()
    assert name in bench.BUNDLED
    corpus, train, held = bench.dataset_parts(name)
    held = bench.seeded_sample(held, 300)
    assert not {t.id for t in train} & {t.id for t in held}
    scores = {method: c_at_10(build_index(corpus, method, cache_size=0), held) for method in ("bm25", "dense", "hybrid")}
    assert scores["hybrid"] >= max(scores["bm25"], scores["dense"]) - 1.0, scores


def test_fusion_results_are_their_rows_and_the_doc_section_renders_from_them():
    """benchmarks/results/fusion.json: every held-out mean is the mean of its per-query rows, the
    weight the train parts chose is the index default, and docs/benchmarks.md's section is its rendering."""
    import json
    import re

    from toolgym.retrieval.index import HYBRID_BM25_WEIGHT

    bench = fusion_benchmark()
    data = json.loads((ROOT / "benchmarks" / "results" / "fusion.json").read_text())
    assert set(data["heldout_rows"]) == set(bench.BUNDLED)
    for name, rows in data["heldout_rows"].items():
        assert len(rows) == data["parts"][name]["heldout"] and len({r["task"] for r in rows}) == len(rows)
        for system in bench.SYSTEMS:
            for metric, value in bench.means(rows, system).items():
                assert abs(value - data["heldout"][name][system][metric]) < 1e-9, (name, system, metric)
        m = data["heldout"][name]
        assert m["hybrid"]["C@10"] >= max(m["bm25"]["C@10"], m["dense"]["C@10"]) - 1.0, name
    assert data["chosen_weight"] == bench.choose_weight(data["grid"], data["train_best_single"])
    assert float(data["chosen_weight"]) == HYBRID_BM25_WEIGHT
    doc = (ROOT / "docs" / "benchmarks.md").read_text()
    section = re.search(r"<!-- fusion:start -->.*?\n\n_.*?_ \(.*?\)\n\n(.*?)\n<!-- fusion:end -->", doc, re.S)
    assert section is not None and section.group(1).strip() == bench.report_markdown(data).strip()


def test_weight_choice_by_hand():
    """The largest worst-case margin wins; equal margins go to the larger mean."""
    bench = fusion_benchmark()
    grid = {"a": {"0.4": 70.0, "0.5": 72.0, "0.6": 75.0}, "b": {"0.4": 80.0, "0.5": 79.0, "0.6": 70.0}}
    best = {"a": 71.0, "b": 80.0}  # margins: 0.4 -> -1, 0.5 -> -1, 0.6 -> -10
    assert bench.choose_weight(grid, best) == "0.5"  # ties with 0.4 on the margin, larger mean (75.5 vs 75)


def test_retrieval_doc_fusion_table_is_the_benchmarks():
    """docs/retrieval.md's before/after table: each printed number is fusion.json's, to 0.1."""
    import json

    data = json.loads((ROOT / "benchmarks" / "results" / "fusion.json").read_text())["heldout"]
    text = (ROOT / "docs" / "retrieval.md").read_text()
    section = text[text.index("## Hybrid fusion"):]
    section = section[: section.find("\n## ", 1) if "\n## " in section[1:] else None]  # up to the next section
    names = {"Seal-Tools": "seal_tools", "StableToolBench": "stabletoolbench", "MetaTool": "metatool",
             "MetaTool two-tool": "metatool_multi", "API-Bank": "api_bank"}
    seen = set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        label = cells[0].rsplit(" (", 1)[0]
        if not line.startswith("|") or label not in names:
            continue
        m = data[names[label]]
        pair = lambda s: f"{m[s]['C@10']:.1f} / {m[s]['N@5']:.1f}"  # noqa: E731
        best = max(m["bm25"]["C@10"], m["dense"]["C@10"])
        assert cells[1:5] == [pair(s) for s in ("bm25", "dense", "hybrid rrf", "hybrid")], label
        assert [c.replace("−", "-") for c in cells[5:7]] == [f"{m[s]['C@10'] - best:+.1f}" for s in ("hybrid rrf", "hybrid")], label
        seen.add(names[label])
    assert seen == set(names.values())
