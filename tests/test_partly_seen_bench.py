"""benchmarks/partly_seen.py on a real (packaged) MiniLM folder that says it trained on API-Bank:
the library API-Bank ∪ MetaTool is partly seen, and the hybrid mixes API-Bank's own weight with the
zero-shot one by the seen share."""
from __future__ import annotations

import json
import shutil

import pytest

from benchmarks import partly_seen as ps


@pytest.fixture(scope="module")
def parts():
    from toolgym.data import load_dataset

    bank, meta = load_dataset("api_bank"), load_dataset("metatool")
    return [("api_bank", bank.corpus, list(bank.tasks)[:6]), ("metatool", meta.corpus, list(meta.tasks)[:6])]


def test_the_union_prefixes_ids_keeps_texts_and_maps_gold(parts):
    corpus, tasks = ps.union_library(parts)
    bank, meta = parts[0][1], parts[1][1]
    assert len(corpus) == len(bank) + len(meta)
    assert corpus.tools[0].id == f"api_bank/{bank.tools[0].id}" and corpus.texts()[0] == bank.texts()[0]
    assert tasks[0].id == f"api_bank/{parts[0][2][0].id}"
    assert set(tasks[-1].gold) == {f"metatool/{g}" for g in parts[1][2][-1].gold}
    assert all(g in corpus for t in tasks for g in t.gold)


def test_margin_against_the_better_part_on_hand_numbers():
    rows = lambda xs: [{"task_id": str(i), "C@10": x} for i, x in enumerate(xs)]  # noqa: E731
    got = ps.margin({"bm25": rows([100, 0, 0, 0]), "dense": rows([100, 100, 0, 0])}, rows([100, 100, 100, 0]), "C@10")
    # better part: dense (mean 50); d = [0, 0, 100, 0]: gain 25, sd 50, se 25
    assert got["better"] == "dense" and got["gain"] == pytest.approx(25.0) and got["se"] == pytest.approx(25.0)
    assert got["holds"]
    low = ps.margin({"bm25": rows([100, 100, 0, 0]), "dense": rows([0, 0, 0, 0])}, rows([100, 0, 0, 0]), "C@10")
    assert low["better"] == "bm25" and low["gain"] == pytest.approx(-25.0) and not low["holds"]


def test_a_partly_seen_library_gets_w_f_and_every_row(tmp_path, parts):
    from toolgym.retrieval import build_index
    from toolgym.retrieval.models import HYBRID_SETTINGS_FILE, minilm_path, overlap_bm25_weight, trained_tool_hashes

    model = tmp_path / "model"
    shutil.copytree(minilm_path(), model)
    bank = parts[0][1]
    (model / HYBRID_SETTINGS_FILE).write_text(json.dumps({
        "bm25_weight": 0.2, "trained_corpora": {"api_bank": bank.ids_hash}, "zero_shot_bm25_weight": 0.6,
        "library_weights": {"api_bank": {"bm25_weight": 0.3, "tool_hashes": trained_tool_hashes(bank.texts())}}}))
    cell = ps.library_cell(str(model), parts)
    share = len(bank) / cell["tools"]
    assert cell["weight"] == pytest.approx(overlap_bm25_weight([(share, 0.3)], 0.6))  # API-Bank's own weight, not 0.2
    assert cell["weight_from"] == f"model folder, {share:.0%} of the tools seen" and cell["zero_shot_weight"] == 0.6
    assert set(cell["rows"]) == {"bm25", "dense", "hybrid", "hybrid at the pooled weight", "hybrid at the zero-shot weight"}
    # the rule before, for comparison: the pooled 0.2 mixed by the seen share
    corpus, tasks = ps.union_library(parts)
    pooled = build_index(corpus, "hybrid", model=str(model), bm25_weight=overlap_bm25_weight([(share, 0.2)], 0.6))
    assert cell["rows"]["hybrid at the pooled weight"] == ps.query_rows(pooled, tasks)
    assert all(len(v) == 12 for v in cell["rows"].values())
    again = ps.margin({"bm25": cell["rows"]["bm25"], "dense": cell["rows"]["dense"]}, cell["rows"]["hybrid"], "N@5")
    assert cell["margins"]["hybrid"]["N@5"] == again
    assert cell["holds"] == all(m["gain"] >= -1 for m in cell["margins"]["hybrid"].values())
    cell["model"] = "minus_metatool"
    md = ps.markdown([cell])
    assert "api_bank+metatool" in md and f"{cell['weight']:.3f}" in md
    assert f"on both metrics on {int(cell['holds'])} of 1 partly-seen libraries" in md
