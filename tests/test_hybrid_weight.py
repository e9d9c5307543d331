"""The hybrid's BM25 weight per encoder: tuned by fit-retriever on set-aside training queries
(hand-computed cases), saved beside the weights and read by ``build_index``; hostile settings files
are refused with the file named."""
import json

import numpy as np
import pytest

from toolgym.data.records import Task
from toolgym.fitting.retriever import hybrid_rankings, tune_hybrid_bm25_weight
from toolgym.retrieval import build_index
from toolgym.retrieval.corpus import Tool, ToolCorpus
from toolgym.retrieval.index import HYBRID_BM25_WEIGHT
from toolgym.retrieval.models import HYBRID_SETTINGS_FILE, saved_hybrid_bm25_weight

IDS = [f"t{i}" for i in range(12)]


def _source(gold_found_by: str):
    """One task over 12 tools whose gold is the last tool: one retriever scores it 10 (the rest 0),
    the other scores it -1 (the rest 0). z-scores: gold +3.317 / others -0.302 in the first row,
    gold -3.317 / others +0.302 in the second, so the fused gold beats the rest iff the finding
    retriever's weight is above 1/2; at exactly 1/2 every tool ties at 0 and the gold, last by
    position, ranks 12th."""
    strong, weak = np.zeros((1, 12)), np.zeros((1, 12))
    strong[0, 11], weak[0, 11] = 10.0, -1.0
    lex, cos = (strong, weak) if gold_found_by == "bm25" else (weak, strong)
    return [Task(id=f"q-{gold_found_by}", query="q", gold=frozenset({"t11"}))], IDS, lex, cos


def test_hybrid_rankings_on_the_hand_case():
    _, _, lex, cos = _source("bm25")
    assert hybrid_rankings(lex, cos, 0.75, 3)[0].tolist() == [11, 0, 1]
    assert hybrid_rankings(lex, cos, 0.25, 12)[0, -1] == 11
    assert hybrid_rankings(lex, cos, 0.5, 12)[0].tolist() == list(range(12))  # all tie: corpus order


def test_one_source_picks_a_weight_that_keeps_its_gold():
    w, table = tune_hybrid_bm25_weight([_source("bm25")], [0.25, 0.75])
    assert w == 0.75
    assert table["0.25"]["margins"] == [-100.0] and table["0.25"]["shortfall"] == pytest.approx(99.0)
    assert table["0.75"]["margins"] == [0.0] and table["0.75"]["shortfall"] == 0.0
    assert table["0.75"]["objective"] == pytest.approx(100.0) and table["0.25"]["objective"] == 0.0


def test_opposed_sources_tie_and_go_to_the_larger_weight():
    # No weight keeps both golds: w > 1/2 loses source "dense" by 100 points, w < 1/2 source "bm25";
    # at 1/2 both are lost (objective 0). Equal shortfall (99) and objective (50) elsewhere: larger w.
    w, table = tune_hybrid_bm25_weight([_source("bm25"), _source("dense")], [0.0, 0.25, 0.5, 1.0])
    assert w == 1.0
    assert [table[k]["objective"] for k in ("0", "0.25", "0.5", "1")] == pytest.approx([50.0, 50.0, 0.0, 50.0])
    assert all(table[k]["shortfall"] == pytest.approx(99.0) for k in table)
    assert table["0.5"]["margins"] == [-100.0, -100.0]


def test_slack_counts_small_losses_as_none():
    # With slack 100 no weight falls short, so the objective alone decides (here: the same choice).
    w, table = tune_hybrid_bm25_weight([_source("bm25")], [0.25, 0.75], slack=100.0)
    assert w == 0.75 and table["0.25"]["shortfall"] == 0.0


@pytest.mark.parametrize("grid", [[], [1.5], [True]])
def test_bad_grids_are_refused(grid):
    with pytest.raises(ValueError):
        tune_hybrid_bm25_weight([_source("bm25")], grid)


@pytest.fixture(scope="module")
def small_corpus():
    names = ["get weather forecast", "convert currency", "book a flight", "translate text", "send email",
             "search flights by price", "weather alerts for a city", "exchange rates today"]
    return ToolCorpus([Tool(id=f"t{i}", name=n.replace(" ", "_"), description=f"Tool to {n}.", category="c")
                       for i, n in enumerate(names)], name="hybrid-weight")


def test_the_index_reads_the_weight_saved_beside_a_model_folder(small_corpus, tmp_path):
    from toolgym.retrieval.models import minilm_path

    real = tmp_path / "real"  # a "fine-tuned" folder: MiniLM's files, linked
    real.mkdir()
    for f in minilm_path().iterdir():
        (real / f.name).symlink_to(f, target_is_directory=f.is_dir())
    (real / HYBRID_SETTINGS_FILE).write_text(json.dumps({"bm25_weight": 0.2}))
    index = build_index(small_corpus, "hybrid", model=str(real), cache_dir=tmp_path / "cache")
    assert (index.bm25_weight, index.bm25_weight_source) == (0.2, "model folder")
    given = build_index(small_corpus, "hybrid", model=str(real), cache_dir=tmp_path / "cache", bm25_weight=0.9)
    assert (given.bm25_weight, given.bm25_weight_source) == (0.9, "given")
    packaged = build_index(small_corpus, "hybrid", cache_dir=tmp_path / "cache")
    assert (packaged.bm25_weight, packaged.bm25_weight_source) == (HYBRID_BM25_WEIGHT, "default")
    # The index's hybrid order is hybrid_rankings over its own score rows.
    queries = ["weather in paris", "flight prices", "euro to dollar"]
    lex, cos = index.hybrid_score_rows(queries)
    ranked = hybrid_rankings(lex, cos, 0.2, 5)
    assert [list(r.ids) for r in index.search_batch(queries, k=5)] == [[small_corpus.ids[i] for i in row] for row in ranked]
    with pytest.raises(ValueError, match="hybrid index"):
        build_index(small_corpus, "bm25").hybrid_score_rows(queries)


def test_a_corpus_the_encoder_never_trained_on_gets_the_zero_shot_weight(small_corpus, tmp_path):
    from toolgym.retrieval.models import minilm_path

    real = tmp_path / "real"
    real.mkdir()
    for f in minilm_path().iterdir():
        (real / f.name).symlink_to(f, target_is_directory=f.is_dir())
    other = ToolCorpus([Tool(id="x1", name="x", description="A tool.", category="c")], name="other")
    (real / HYBRID_SETTINGS_FILE).write_text(json.dumps(
        {"bm25_weight": 0.2, "trained_corpora": {"mine": small_corpus.ids_hash}, "zero_shot_bm25_weight": 0.6}))
    own = build_index(small_corpus, "hybrid", model=str(real), cache_dir=tmp_path / "cache")
    assert (own.bm25_weight, own.bm25_weight_source) == (0.2, "model folder")
    new = build_index(other, "hybrid", model=str(real), cache_dir=tmp_path / "cache")
    assert (new.bm25_weight, new.bm25_weight_source) == (0.6, "model folder, zero-shot")
    # The library is its tool ids: another text template or tool order is the same library.
    reordered = ToolCorpus(list(reversed(small_corpus.tools)), name="again", text_template="{name}")
    assert reordered.ids_hash == small_corpus.ids_hash != other.ids_hash
    assert build_index(reordered, "hybrid", model=str(real), cache_dir=tmp_path / "cache").bm25_weight == 0.2


@pytest.mark.parametrize("settings, match", [
    ({"bm25_weight": 0.2, "trained_corpora": ["abc"], "zero_shot_bm25_weight": 0.4}, "trained_corpora must map"),
    ({"bm25_weight": 0.2, "trained_corpora": {"a": 3}, "zero_shot_bm25_weight": 0.4}, "trained_corpora must map"),
    ({"bm25_weight": 0.2, "trained_corpora": {"a": "abc"}}, "without a zero_shot_bm25_weight"),
    ({"bm25_weight": 0.2, "trained_corpora": {"a": "abc"}, "zero_shot_bm25_weight": 2}, r"zero_shot_bm25_weight must be .*\[0, 1\]"),
])
def test_hostile_zero_shot_settings_are_refused_with_the_file_named(tmp_path, settings, match):
    from toolgym.retrieval.models import hybrid_weight_for

    (tmp_path / HYBRID_SETTINGS_FILE).write_text(json.dumps(settings))
    with pytest.raises(ValueError, match=match) as err:
        hybrid_weight_for(str(tmp_path), "not-abc")
    assert HYBRID_SETTINGS_FILE in str(err.value)


def test_a_settings_file_without_trained_corpora_applies_everywhere(tmp_path):
    from toolgym.retrieval.models import hybrid_weight_for

    (tmp_path / HYBRID_SETTINGS_FILE).write_text(json.dumps({"bm25_weight": 0.3}))
    assert hybrid_weight_for(str(tmp_path), "anything") == (0.3, "model folder")
    assert hybrid_weight_for(str(tmp_path / "missing"), "anything") is None and hybrid_weight_for(None, "x") is None


@pytest.mark.parametrize("text, match", [
    ("{", "not JSON"), ("[0.3]", "expected an object"), ('{"x": 1}', "expected an object"),
    ('{"bm25_weight": 7}', r"\[0, 1\]"), ('{"bm25_weight": "0.3"}', r"\[0, 1\]"), ('{"bm25_weight": true}', r"\[0, 1\]"),
    ("[" * 100_000, "not JSON"), ('{"bm25_weight": 0.3, "pad": "' + "x" * (1 << 20) + '"}', "larger than 1 MiB"),
])
def test_hostile_settings_files_are_refused_with_the_file_named(tmp_path, text, match):
    (tmp_path / HYBRID_SETTINGS_FILE).write_text(text)
    with pytest.raises(ValueError, match=match) as err:
        saved_hybrid_bm25_weight(str(tmp_path))
    assert HYBRID_SETTINGS_FILE in str(err.value)


def test_no_file_or_no_folder_means_no_saved_weight(tmp_path):
    assert saved_hybrid_bm25_weight(str(tmp_path)) is None
    assert saved_hybrid_bm25_weight("minilm") is None and saved_hybrid_bm25_weight(None) is None
    assert saved_hybrid_bm25_weight("some/hub-id") is None


def test_a_loss_within_two_paired_standard_errors_is_no_shortfall():
    # Source X, 30 queries: both retrievers find the gold of 29; the 30th only BM25 finds. Below
    # w = 1/2 the hybrid loses that query: margin -3.33, paired se 3.33, so within 2 se (no
    # shortfall; the plain 1-point slack alone would call it 2.33 short). Source Y needs w < 1/2.
    both = np.zeros((29, 12))
    both[:, 11] = 10.0
    _, _, lex1, cos1 = _source("bm25")
    tasks = [Task(id=f"x{i}", query=f"x{i}", gold=frozenset({"t11"})) for i in range(30)]
    x = (tasks, IDS, np.vstack([both, lex1]), np.vstack([both, cos1]))
    w, table = tune_hybrid_bm25_weight([x, _source("dense")], [0.25, 0.75])
    assert w == 0.25
    assert table["0.25"]["margins"][0] == pytest.approx(-100 / 30)
    assert table["0.25"]["margin_se"][0] == pytest.approx(100 / 30)
    assert table["0.25"]["shortfall"] == 0.0 and table["0.75"]["shortfall"] == pytest.approx(99.0)


def test_a_partly_seen_corpus_gets_the_weight_between_in_domain_and_zero_shot(tmp_path):
    """A settings file with one pooled tool list (written before per-library weights). A library built
    from two bundled ones: 40 Seal-Tools tools the encoder trained on and 60 MetaTool tools it did not.
    w = f·w_in + (1 − f)·w_zero with f = 0.4 (by hand: 0.4·0.2 + 0.6·0.6 = 0.44); the training library
    itself keeps w_in and an unseen one w_zero."""
    from toolgym.data import load_dataset
    from toolgym.retrieval.models import hybrid_weight_for, overlap_bm25_weight, trained_tool_hashes

    seal, meta = load_dataset("seal_tools").corpus, load_dataset("metatool").corpus
    (tmp_path / HYBRID_SETTINGS_FILE).write_text(json.dumps({
        "bm25_weight": 0.2, "trained_corpora": {"seal_tools": seal.ids_hash}, "zero_shot_bm25_weight": 0.6,
        "trained_tool_hashes": trained_tool_hashes(seal.texts())}))
    mixed = ToolCorpus(list(seal.tools[:40]) + list(meta.tools[:60]), name="partly seen")
    w, source = hybrid_weight_for(str(tmp_path), mixed.ids_hash, mixed.texts)
    assert w == pytest.approx(0.44) == pytest.approx(overlap_bm25_weight([(0.4, 0.2)], 0.6))
    assert source == "model folder, 40% of the tools seen"
    assert hybrid_weight_for(str(tmp_path), seal.ids_hash, seal.texts) == (0.2, "model folder")
    assert hybrid_weight_for(str(tmp_path), meta.ids_hash, meta.texts) == (0.6, "model folder, zero-shot")
    # The same tools in other case and spacing are still seen (the hash ignores those only: a rewritten
    # description is a new tool).
    shouted = ToolCorpus([Tool(id=t.id, name=t.name.upper(), description="  ".join(t.description.split()),
                               category=t.category) for t in seal.tools[:10]], name="shouted")
    assert hybrid_weight_for(str(tmp_path), shouted.ids_hash, shouted.texts)[0] == pytest.approx(0.2)


def test_a_tool_list_that_is_not_one_string_is_refused(tmp_path):
    from toolgym.retrieval.models import hybrid_weight_for

    (tmp_path / HYBRID_SETTINGS_FILE).write_text(json.dumps({
        "bm25_weight": 0.2, "trained_corpora": {"a": "abc"}, "zero_shot_bm25_weight": 0.6,
        "trained_tool_hashes": ["0123456789ab"]}))
    with pytest.raises(ValueError, match="one string of tool hashes"):
        hybrid_weight_for(str(tmp_path), "not-abc", lambda: ["a tool"])


def _library_settings(tmp_path, libraries, pooled=0.2, zero_shot=0.35):
    from toolgym.retrieval.models import trained_tool_hashes

    (tmp_path / HYBRID_SETTINGS_FILE).write_text(json.dumps({
        "bm25_weight": pooled, "zero_shot_bm25_weight": zero_shot,
        "trained_corpora": {name: corpus.ids_hash for name, (corpus, _) in libraries.items()},
        "library_weights": {name: {"bm25_weight": w, "tool_hashes": trained_tool_hashes(corpus.texts())}
                            for name, (corpus, w) in libraries.items() if w is not None}}))


def test_each_training_library_gets_its_own_weight_and_a_mixed_corpus_mixes_them(tmp_path):
    """Seal-Tools tuned to 0.5, MetaTool to 0.05, API-Bank never trained on (zero-shot 0.35). A corpus of
    40 Seal-Tools, 30 MetaTool and 30 API-Bank tools: by hand 0.4·0.5 + 0.3·0.05 + 0.3·0.35 = 0.32."""
    from toolgym.data import load_dataset
    from toolgym.retrieval.models import hybrid_weight_for, overlap_bm25_weight

    seal, meta, bank = (load_dataset(n).corpus for n in ("seal_tools", "metatool", "api_bank"))
    _library_settings(tmp_path, {"seal_tools": (seal, 0.5), "metatool": (meta, 0.05)})
    mixed = ToolCorpus(list(seal.tools[:40]) + list(meta.tools[:30]) + list(bank.tools[:30]), name="mixed")
    w, source = hybrid_weight_for(str(tmp_path), mixed.ids_hash, mixed.texts)
    assert w == pytest.approx(0.32) == pytest.approx(overlap_bm25_weight([(0.4, 0.5), (0.3, 0.05)], 0.35))
    assert source == "model folder, 70% of the tools seen"
    assert hybrid_weight_for(str(tmp_path), seal.ids_hash, seal.texts) == (0.5, "model folder, tuned on seal_tools")
    assert hybrid_weight_for(str(tmp_path), meta.ids_hash, meta.texts) == (0.05, "model folder, tuned on metatool")
    assert hybrid_weight_for(str(tmp_path), bank.ids_hash, bank.texts) == (0.35, "model folder, zero-shot")
    # A tool two training libraries hold counts once, for the first library the file lists.
    both = ToolCorpus(list(seal.tools[:10]), name="copy")
    _library_settings(tmp_path, {"seal_tools": (seal, 0.5), "again": (both, 0.1)})
    assert hybrid_weight_for(str(tmp_path), both.ids_hash + "-other", both.texts)[0] == pytest.approx(0.5)


def test_a_training_library_without_its_own_weight_keeps_the_pooled_one(tmp_path):
    from toolgym.data import load_dataset
    from toolgym.retrieval.models import hybrid_weight_for

    seal, meta = load_dataset("seal_tools").corpus, load_dataset("metatool").corpus
    _library_settings(tmp_path, {"seal_tools": (seal, 0.5), "metatool": (meta, None)}, pooled=0.25)
    assert hybrid_weight_for(str(tmp_path), meta.ids_hash, meta.texts) == (0.25, "model folder")


@pytest.mark.parametrize("libraries, match", [
    (["a"], "library_weights must map"),
    ({"a": {"bm25_weight": 0.2}}, "needs a bm25_weight and one string of tool hashes"),
    ({"a": {"bm25_weight": 0.2, "tool_hashes": ["0123456789ab"]}}, "one string of tool hashes"),
    ({"a": {"bm25_weight": 1.5, "tool_hashes": ""}}, r"library_weights\['a'\].bm25_weight must be .*\[0, 1\]"),
    ({"a": {"tool_hashes": ""}}, r"bm25_weight must be .*\[0, 1\], got None"),
])
def test_hostile_library_weights_are_refused_with_the_file_named(tmp_path, libraries, match):
    from toolgym.retrieval.models import hybrid_weight_for

    (tmp_path / HYBRID_SETTINGS_FILE).write_text(json.dumps({
        "bm25_weight": 0.2, "trained_corpora": {"a": "abc"}, "zero_shot_bm25_weight": 0.6, "library_weights": libraries}))
    with pytest.raises(ValueError, match=match) as err:
        hybrid_weight_for(str(tmp_path), "not-abc", lambda: ["a tool"])
    assert HYBRID_SETTINGS_FILE in str(err.value)


def test_seen_shares_above_one_are_refused():
    from toolgym.retrieval.models import overlap_bm25_weight

    assert overlap_bm25_weight([], 0.35) == pytest.approx(0.35)
    assert overlap_bm25_weight([(0.5, 0.1), (0.5, 0.3)], 0.9) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="sum to at most 1"):
        overlap_bm25_weight([(0.7, 0.1), (0.5, 0.3)], 0.9)


def test_fit_saves_a_weight_per_library_tuned_on_its_own_set_aside_queries(tmp_path):
    """The real path: the packaged MiniLM (a copy, so the settings land beside it), two bundled libraries
    with 20 set-aside queries each; each library's saved weight is the one the same rule picks on its
    queries alone, and an index over that library uses it."""
    from types import SimpleNamespace

    from toolgym.data import load_dataset
    from toolgym.fitting.retriever import tune_and_save_hybrid_weight
    from toolgym.retrieval.models import minilm_path, trained_tool_hashes

    model = tmp_path / "model"
    model.mkdir()
    for f in minilm_path().iterdir():
        (model / f.name).symlink_to(f, target_is_directory=f.is_dir())
    sources = [SimpleNamespace(name=n, corpus=d.corpus, tasks=d.tasks[:20])
               for n, d in ((n, load_dataset(n)) for n in ("api_bank", "metatool"))]
    grid = [0.0, 0.25, 0.5, 0.75, 1.0]
    saved = tune_and_save_hybrid_weight(model, sources, {s.name: s.tasks for s in sources}, grid, 0.35)
    assert json.loads((model / HYBRID_SETTINGS_FILE).read_text()) == saved
    for s in sources:
        index = build_index(s.corpus, "hybrid", model=str(model), cache_dir=tmp_path / "cache")
        lex, cos = index.hybrid_score_rows([t.context_text() for t in s.tasks])
        alone, _ = tune_hybrid_bm25_weight([(s.tasks, s.corpus.ids, lex, cos)], grid)
        entry = saved["library_weights"][s.name]
        assert entry == {"bm25_weight": alone, "tool_hashes": trained_tool_hashes(s.corpus.texts())}
        assert (index.bm25_weight, index.bm25_weight_source) == (alone, f"model folder, tuned on {s.name}")
    assert saved["bm25_weight"] in grid and saved["zero_shot_bm25_weight"] == 0.35


def test_the_set_aside_queries_are_saved_and_read_back(tmp_path):
    """What fit-retriever never trained on travels with the weights, so a reward can be computed
    where this encoder's retrieval is honest; a folder without the list says how to record it."""
    from types import SimpleNamespace

    from toolgym.data import load_dataset
    from toolgym.fitting.retriever import tune_and_save_hybrid_weight
    from toolgym.retrieval.models import minilm_path, set_aside_task_ids

    model = tmp_path / "model"
    model.mkdir()
    for f in minilm_path().iterdir():
        (model / f.name).symlink_to(f, target_is_directory=f.is_dir())
    bank = load_dataset("api_bank")
    sources = [SimpleNamespace(name="api_bank", corpus=bank.corpus), SimpleNamespace(name="empty", corpus=bank.corpus)]
    tune_and_save_hybrid_weight(model, sources, {"api_bank": bank.tasks[:7], "empty": []}, [0.0, 0.5, 1.0], 0.35)
    assert set_aside_task_ids(model) == {"api_bank": [t.id for t in bank.tasks[:7]]}  # a source with none: no entry
    with pytest.raises(ValueError, match="not a fine-tuned encoder folder"):
        set_aside_task_ids("minilm")


@pytest.mark.parametrize("value, match", [
    (None, "no set_aside_tasks .*retune_hybrid_weight"),
    (["a"], "must map library names to lists of task ids"),
    ({"a": "task-1"}, "must map library names to lists of task ids"),
    ({"a": [1, 2]}, "must map library names to lists of task ids"),
])
def test_hostile_set_aside_lists_are_refused_with_the_file_named(tmp_path, value, match):
    from toolgym.retrieval.models import set_aside_task_ids

    settings = {"bm25_weight": 0.2} if value is None else {"bm25_weight": 0.2, "set_aside_tasks": value}
    (tmp_path / HYBRID_SETTINGS_FILE).write_text(json.dumps(settings))
    with pytest.raises(ValueError, match=match) as err:
        set_aside_task_ids(tmp_path)
    assert HYBRID_SETTINGS_FILE in str(err.value)
