"""CrossEncoderReranker: ordering contract, batching, errors, and a tiny fine-tune on Seal-Tools."""
import numpy as np
import pytest

from toolgym.retrieval import SearchResult
from toolgym.retrieval.rerank import CrossEncoderReranker


@pytest.fixture(scope="module")
def reranker(seal):
    with pytest.warns(UserWarning, match="randomly initialised"):
        return CrossEncoderReranker(corpus=seal.corpus, max_length=128)


def test_rerank_orders_by_cross_encoder_score(seal, bm25, reranker):
    task = seal.tasks[3]
    first = bm25.search(task.query, k=8)
    out = reranker.rerank(task.query, first, k=5)
    assert len(out) == 5 and set(out.ids) <= set(first.ids)
    texts = [seal.corpus.text(seal.corpus[i]) for i in first.ids]
    raw = reranker.score(task.query, texts)
    expected = [first.ids[i] for i in np.argsort(-raw, kind="stable")[:5]]
    assert list(out.ids) == expected
    np.testing.assert_allclose(out.scores, np.sort(raw)[::-1][:5], rtol=1e-4, atol=1e-6)
    assert len(reranker.rerank(task.query, first)) == 8  # k=None keeps every candidate


def test_batch_equals_single_and_head_is_seeded(seal, bm25, reranker):
    tasks = seal.tasks[:4]
    firsts = bm25.search_batch([t.query for t in tasks], k=6)
    batch = reranker.rerank_batch([t.query for t in tasks], firsts, k=3)
    single = [reranker.rerank(t.query, f, k=3) for t, f in zip(tasks, firsts)]
    for b, s in zip(batch, single):
        assert b.ids == s.ids
        np.testing.assert_allclose(b.scores, s.scores, rtol=1e-4, atol=1e-6)
    with pytest.warns(UserWarning):
        again = CrossEncoderReranker(corpus=seal.corpus, max_length=128)
    assert again.rerank(tasks[0].query, firsts[0], k=3).ids == batch[0].ids  # same seed, same head


def test_bad_input(seal, reranker):
    res = SearchResult(("getWeather",), (1.0,)) if "getWeather" in seal.corpus else SearchResult(
        (seal.corpus.tools[0].id,), (1.0,))
    with pytest.raises(ValueError, match="empty"):
        reranker.rerank("  ", res)
    with pytest.raises(ValueError, match="k must be"):
        reranker.rerank("weather", res, k=0)
    with pytest.raises(ValueError, match="2 queries but 1 results"):
        reranker.rerank_batch(["a", "b"], [res])
    with pytest.raises(ValueError, match="texts"):
        reranker.rerank("weather", res, texts=["one", "two"])
    with pytest.warns(UserWarning):
        bare = CrossEncoderReranker(max_length=64)
    with pytest.raises(ValueError, match="corpus="):
        bare.rerank("weather", res)
    assert len(bare.rerank("weather", res, texts=["the weather tool"])) == 1
    assert reranker.rerank_batch([], []) == []


@pytest.mark.slow
def test_tiny_fine_tune_moves_the_gold_up(seal, bm25):
    """A few steps on (query, gold, BM25 hard negative) pairs teach the untrained head."""
    import torch

    torch.manual_seed(0)
    corpus = seal.corpus
    # Single-tool tasks whose gold BM25 finds in its top 8 but not first: room to move up.
    cases = []
    for task in seal.tasks:
        (gold,) = task.gold if len(task.gold) == 1 else (None,)
        if gold is None:
            continue
        res = bm25.search(task.query, k=8)
        if gold in res.ids[1:]:
            cases.append((task.query, gold, res))
        if len(cases) == 8:
            break
    assert len(cases) == 8
    with pytest.warns(UserWarning):
        reranker = CrossEncoderReranker(corpus=corpus, max_length=64)

    def gold_rank(rr):
        out = rr.rerank_batch([q for q, _, _ in cases], [r for _, _, r in cases])
        return np.mean([o.ids.index(g) + 1 for o, (_, g, _) in zip(out, cases)])

    before = gold_rank(reranker)
    pairs, labels = [], []
    for q, gold, res in cases:
        pairs.append((q, corpus.text(corpus[gold])))
        labels.append(1.0)
        for neg in [i for i in res.ids if i != gold][:3]:
            pairs.append((q, corpus.text(corpus[neg])))
            labels.append(0.0)
    ce = reranker.model
    model, tok = ce.model, ce.tokenizer
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    y = torch.tensor(labels)
    for _ in range(12):
        enc = tok([a for a, _ in pairs], [b for _, b in pairs], padding=True, truncation=True,
                  max_length=64, return_tensors="pt")
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(**enc).logits.squeeze(-1), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    after = gold_rank(reranker)
    bm25_rank = np.mean([r.ids.index(g) + 1 for _, g, r in cases])
    print(f"mean gold rank: untrained {before:.2f}, BM25 {bm25_rank:.2f}, fine-tuned {after:.2f}")
    assert after < before - 0.5 and after < bm25_rank - 0.5, (before, after, bm25_rank)


def test_model_loading_prints_no_weight_progress_bar(capfd):
    """Every index build and reranker load used to print transformers' "Loading weights" bar; the
    caller's progress-bar setting is restored afterwards."""
    from transformers.utils import logging as hf_logging

    from toolgym.retrieval.models import quiet_weight_loading

    hf_logging.enable_progress_bar()
    with pytest.warns(UserWarning):
        CrossEncoderReranker(max_length=32)
    captured = capfd.readouterr()
    assert "Loading weights" not in captured.err + captured.out
    assert hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    with quiet_weight_loading():
        pass
    assert not hf_logging.is_progress_bar_enabled()  # a caller who had it off keeps it off
    hf_logging.enable_progress_bar()
