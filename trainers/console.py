"""What the ``toolgym`` commands print: the project's own lines and one progress bar per long stage.

Libraries are quieted unless ``--verbose`` (or ``TOOLGYM_VERBOSE=1``): transformers' weight-loading
and GGUF de-quantisation bars and advisory warnings, huggingface_hub's bars, bm25s's indexing bars
(toolgym passes ``show_progress`` itself), sentence-transformers' encode bars, and the HF
``Trainer``'s per-step dict prints (``toolgym sft`` draws one bar of its own instead). Every bar of
toolgym passes ``disable=`` explicitly, so ``TQDM_DISABLE`` (tqdm's own switch, used for library
bars that take no argument) never hides it.
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator

VERBOSE_ENV = "TOOLGYM_VERBOSE"
# Environment switches the libraries read (at import, or at each bar/warning).
QUIET_ENV = {
    "TQDM_DISABLE": "1",  # bars created without disable= (transformers' GGUF de-quantisation)
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # huggingface_hub's, and transformers' logging.tqdm default
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "TOKENIZERS_PARALLELISM": "false",  # the tokenizers fork warning
}


def verbose() -> bool:
    """Whether library output is wanted (``TOOLGYM_VERBOSE`` set to anything but ``0`` / ``false``)."""
    return os.environ.get(VERBOSE_ENV, "").strip().lower() not in ("", "0", "false", "no")


@contextlib.contextmanager
def quiet_libraries(enabled: bool = True) -> Iterator[None]:
    """Silence library progress bars and chatter for the duration (a command's run); the
    environment and transformers' switches are restored afterwards."""
    if not enabled:
        yield
        return
    saved = {k: os.environ.get(k) for k in QUIET_ENV}
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    # Switches read at import are set above; a library this process already imported (a test
    # session, a notebook) is switched on the live module instead.
    restore = _quiet_transformers() if "transformers.utils.logging" in sys.modules else None
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if restore is not None:
            restore()


def _quiet_transformers():  # noqa: ANN202
    """transformers reads its switches at import: set them on the live module; returns the undo."""
    import functools

    from transformers.utils import logging as hf_logging

    bars, level = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    gguf = sys.modules.get("transformers.modeling_gguf_pytorch_utils")
    gguf_tqdm = getattr(gguf, "tqdm", None)
    if gguf_tqdm is not None:  # its de-quantisation bar takes no switch but tqdm's own, read at tqdm's import
        gguf.tqdm = functools.partial(gguf_tqdm, disable=True)

    def restore() -> None:
        (hf_logging.enable_progress_bar if bars else hf_logging.disable_progress_bar)()
        hf_logging.set_verbosity(level)
        if gguf_tqdm is not None:
            gguf.tqdm = gguf_tqdm

    return restore
