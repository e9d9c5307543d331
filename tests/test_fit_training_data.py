"""toolgym.data.training_data: negatives (eq. 22), batches, splits, lists, preference corruptions."""
import random
import time

import pytest

from toolgym.data.records import Task
from toolgym.retrieval.index import _model_slug
from toolgym.data.training_data import (
    CORRUPTIONS,
    check_disjoint,
    contrastive_triples,
    corrupt_decomposition,
    listwise_groups,
    no_duplicate_batches,
    pointwise_examples,
    positive_pairs,
    preference_pairs,
    random_negatives,
    split_tasks,
    top_k_hard_negatives,
)


def test_top_k_hard_negatives_hand_example():
    cands = ["a", "b", "c", "d", "e"]
    scores = [0.1, 0.9, 0.5, 0.7, 0.5]
    # by teacher score: b .9, d .7, c .5, e .5 (tie keeps candidate order), a .1; b is gold
    assert top_k_hard_negatives(cands, scores, {"b"}, 3) == ["d", "c", "e"]
    assert top_k_hard_negatives(cands, None, {"a", "c"}, 2) == ["b", "d"]  # already ranked
    assert top_k_hard_negatives(["a", "a", "b"], None, set(), 5) == ["a", "b"]  # repeats count once
    assert top_k_hard_negatives(cands, scores, set(cands), 3) == []
    with pytest.raises(ValueError, match="teacher scores"):
        top_k_hard_negatives(cands, [1.0], set(), 1)


def test_random_negatives_exclude_gold_and_repeat_with_the_seed():
    ids = [f"t{i}" for i in range(100)]
    gold = {"t1", "t2"}
    a = random_negatives(gold, ids, 10, random.Random(3))
    assert len(a) == len(set(a)) == 10 and not set(a) & gold
    assert a == random_negatives(gold, ids, 10, random.Random(3))
    small = random_negatives({"t0"}, ids[:4], 10, random.Random(0))  # pool of 3: all of it
    assert sorted(small) == ["t1", "t2", "t3"]


def test_no_duplicate_batches_cover_everything_once_without_repeated_keys():
    items = [("q1", "t1"), ("q1", "t2"), ("q2", "t1"), ("q3", "t3"), ("q4", "t4"), ("q1", "t5")]
    batches = no_duplicate_batches(items, 3, lambda it: it, random.Random(0))
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(len(items)))
    for b in batches:
        keys = [k for i in b for k in items[i]]
        assert len(keys) == len(set(keys)) and len(b) <= 3
    with pytest.raises(ValueError):
        no_duplicate_batches(items, 0, lambda it: it, random.Random(0))


def _tasks(n=10):
    return [Task(id=f"x{i}", query=f"query number {i}", gold=frozenset({f"t{i}"})) for i in range(n)]


def test_split_tasks_is_disjoint_deterministic_and_leaks_are_caught():
    tasks = _tasks(20)
    train, held = split_tasks(tasks, 0.25, seed=1)
    assert len(held) == 5 and len(train) == 15
    assert {t.id for t in train}.isdisjoint({t.id for t in held})
    assert (train, held) == split_tasks(tasks, 0.25, seed=1)
    check_disjoint(train, held)
    with pytest.raises(ValueError, match="also training tasks"):
        check_disjoint(train, held + [train[0]])
    copy = Task(id="other", query=train[0].query, gold=frozenset({"t0"}))  # same text, new id
    with pytest.raises(ValueError, match="also training tasks"):
        check_disjoint(train, [copy])
    with pytest.raises(ValueError):
        split_tasks(tasks, 1.0)


def test_split_tasks_keeps_repeated_texts_on_one_side_and_is_unchanged_without_them():
    tasks = _tasks(20)
    ids = sorted(t.id for t in tasks)
    old_held = set(random.Random(1).sample(ids, 5))  # the rule before repeated texts were grouped
    assert {t.id for t in split_tasks(tasks, 0.25, seed=1)[1]} == old_held
    repeats = tasks + [Task(id=f"dup{i}", query=tasks[i].query, gold=frozenset({"t0"})) for i in range(0, 20, 2)]
    for seed in range(5):
        train, held = split_tasks(repeats, 0.25, seed=seed)
        check_disjoint(train, held)  # no held-out text is a training text
        assert len(train) + len(held) == len(repeats)


def test_pairs_triples_points_and_lists_on_seal_tools(seal):
    corpus = seal.corpus
    tasks = [t for t in seal.tasks if len(t.gold) >= 2][:3]
    pairs = positive_pairs(tasks, corpus)
    assert len(pairs) == sum(len(t.gold) for t in tasks)
    negs = {t.id: [i for i in corpus.ids[:6] if i not in t.gold][:2] for t in tasks}
    triples = contrastive_triples(tasks, corpus, negs, 2)
    assert len(triples) == len(pairs) and all(len(tr.negatives) == 2 for tr in triples)
    assert triples[0].query == tasks[0].context_text()
    assert triples[0].positive == corpus.text(corpus[sorted(tasks[0].gold)[0]])
    assert contrastive_triples(tasks, corpus, negs, 3) == []  # too few negatives: skipped
    points = pointwise_examples(tasks, corpus, negs)
    assert sum(y for _, _, y in points) == len(pairs) and len(points) == len(pairs) + 6
    cands = {t.id: list(t.gold) + negs[t.id] for t in tasks}
    groups = listwise_groups(tasks, corpus, cands, 3, random.Random(0))
    for task, (q, docs, labels) in zip(tasks, groups):
        gold_texts = {corpus.text(corpus[i]) for i in task.gold}
        assert q == task.context_text() and gold_texts <= set(docs)
        assert labels == [float(d in gold_texts) for d in docs]
        assert len(docs) == max(3, len(task.gold))  # every gold kept, then filled with negatives
    with pytest.raises(ValueError, match="not in corpus"):
        positive_pairs([Task(id="z", query="q", gold=frozenset({"no-such-tool"}))], corpus)


REF = ["Check available flights from Beijing to Shanghai", "Change the ticket to March 25th", "Send a message to Li Lei"]


def test_each_corruption_on_a_hand_example():
    rng = random.Random(0)
    merged = corrupt_decomposition(REF, "merged_intents", rng)
    assert len(merged) == 2 and sum(" and " in s for s in merged) == 1
    dropped = corrupt_decomposition(REF, "dropped_intent", rng)
    assert len(dropped) == 2 and set(dropped) < set(REF)
    dup = corrupt_decomposition(REF, "duplicated_subtask", rng)
    assert len(dup) == 4 and len(set(dup)) == 3
    unres = corrupt_decomposition(REF, "unresolved_reference", random.Random(1))
    changed = [s for s in unres if s not in REF]
    assert len(unres) == 3 and len(changed) == 1
    assert set(changed[0].split()) & {"it", "that", "there"}
    invented = corrupt_decomposition(REF, "invented_task", rng, ["Play some jazz music"])
    assert len(invented) == 4 and "Play some jazz music" in invented
    assert corrupt_decomposition(["One task only"], "merged_intents", rng) is None
    assert corrupt_decomposition(["One task only"], "dropped_intent", rng) is None
    assert corrupt_decomposition(REF, "invented_task", rng, REF) is None  # nothing foreign to add
    assert corrupt_decomposition(["", "  "], "duplicated_subtask", rng) is None
    with pytest.raises(ValueError, match="unknown corruption"):
        corrupt_decomposition(REF, "shuffled", rng)


def test_corruptions_are_bounded_on_hostile_text():
    rng = random.Random(0)
    huge = "Book " + "Beijing " * 200_000  # 1.6 MB, one capitalised run
    many = [f"Step {i} Do Thing{i}" for i in range(20_000)]
    start = time.perf_counter()
    for kind in CORRUPTIONS:
        out = corrupt_decomposition([huge, "Call (((( [[[[ Mom"], kind, rng, ["Open it"])
        assert out is None or all(len(s) <= 4_000 for s in out)
        corrupt_decomposition(many, kind, rng, ["Open it"])
    assert time.perf_counter() - start < 30  # generous: linear work, not a timing target


def test_preference_pairs_reject_something_else_than_the_reference():
    tasks = [Task(id=f"u{i}", query=f"q{i}", gold=frozenset({"a"}), subtasks=(f"Find Item{i} in Paris", f"Buy Gift{i} for Anna"))
             for i in range(6)] + [Task(id="none", query="q", gold=frozenset({"a"}))]
    pairs = preference_pairs(tasks, random.Random(0))
    assert {p.kind for p in pairs} == set(CORRUPTIONS)
    assert all(p.rejected != p.chosen and p.task.id != "none" for p in pairs)
    for p in pairs:
        if p.kind == "invented_task":
            extra = set(p.rejected) - set(p.chosen)
            assert extra and not any(p.task.id[1:] in s for s in extra)  # from another task
    capped = preference_pairs(tasks, random.Random(0), per_task=2)
    assert len(capped) <= 2 * 6
    with pytest.raises(ValueError, match="unknown corruption"):
        preference_pairs(tasks, random.Random(0), kinds=["nope"])


def test_embedding_cache_is_keyed_by_the_weights_of_a_model_folder(tmp_path, monkeypatch):
    folder = tmp_path / "model"
    folder.mkdir()
    weights = folder / "model.safetensors"
    weights.write_bytes(b"x" * 10)
    first = _model_slug(str(folder))
    assert _model_slug(str(folder)) == first
    weights.write_bytes(b"y" * 11)  # re-trained in place
    assert _model_slug(str(folder)) != first
    second = _model_slug(str(folder))
    monkeypatch.chdir(tmp_path)
    assert _model_slug("model") == second  # a relative path names the same folder, same cache file


def test_mine_with_index_is_eq_22_over_the_index_list(seal, bm25):
    from toolgym.fitting.retriever import mine_with_index

    tasks = [t for t in seal.tasks if len(t.gold) >= 2][:4]
    mined = mine_with_index(bm25, tasks, k=3, depth=20)
    for task in tasks:
        ranked = bm25.search(task.context_text(), k=20).ids
        assert mined[task.id] == [t for t in ranked if t not in task.gold][:3]


def test_a_share_of_a_spent_budget_is_spent_and_zero_means_no_limit():
    from toolgym.fitting.common import Budget

    used = Budget(1 / 60)  # one second
    used.start -= 5  # five seconds ago
    assert used.spent() and used.share(0.5).spent() and used.share(1.0).spent()
    fresh = Budget(10)
    assert not fresh.spent() and not fresh.share(0.5).spent()
    assert not Budget(0).spent() and not Budget(0).share(0.3).spent()  # <= 0: unlimited
