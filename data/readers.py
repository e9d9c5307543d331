"""File readers whose errors name the file and the line: JSONL, whole-file JSON, CSV.

Every reader is linear in the file size and bounded: a JSONL line, a JSON file and the nesting
depth of a JSON value are capped *before* ``json.loads`` runs (the C parser recurses once per
level, so a 100k-deep ``[[[...`` would otherwise end in ``RecursionError``), and a violation is
a :class:`DatasetFormatError` naming the file and line like any other bad input.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import os
import stat
import zlib
from pathlib import Path
from typing import IO, Any, Iterator

import numpy as np

__all__ = [
    "DatasetFormatError",
    "csv_header",
    "MAX_JSON_CHARS",
    "MAX_JSON_DEPTH",
    "MAX_JSONL_LINE_CHARS",
    "iter_csv_numbered",
    "iter_jsonl",
    "iter_jsonl_numbered",
    "json_depth",
    "loads_json",
    "MAX_JSONL_CHARS",
    "MAX_JSONL_LINES",
    "non_regular_kind",
    "open_regular",
    "open_text",
    "read_json",
    "read_jsonl",
    "require_file",
]

# Real files: the largest benchmark file is 1.3 MB, the deepest value 7 levels, the longest
# JSONL line 0.2 MB; the caps leave two orders of magnitude of room.
MAX_JSON_CHARS = 256 * 1024 * 1024
MAX_JSONL_LINE_CHARS = 16 * 1024 * 1024
MAX_JSON_DEPTH = 100
# A whole JSONL / CSV file, counted after gunzip: a 1 MB gzip of newlines is 1 GiB of blank lines
# (~220 s to read); the line cap (blank lines count) ends it in about a second.
MAX_JSONL_CHARS = 1 << 30
MAX_JSONL_LINES = 4_000_000


class DatasetFormatError(ValueError):
    """A dataset file is truncated or malformed; the message names the file and line."""


_KINDS = ((stat.S_ISLNK, "symbolic link"), (stat.S_ISDIR, "folder"), (stat.S_ISFIFO, "FIFO (named pipe)"),
          (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"))


def _kind(mode: int) -> str | None:
    return None if stat.S_ISREG(mode) else next((name for test, name in _KINDS if test(mode)), "special file")


def non_regular_kind(path: str | Path, *, follow_symlinks: bool = False) -> str | None:
    """What is at ``path`` when it is neither a regular file nor absent: ``"FIFO (named pipe)"``,
    ``"character device"``, ``"symbolic link"`` (unless ``follow_symlinks``)...; else None."""
    try:
        mode = os.stat(path, follow_symlinks=follow_symlinks).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    return _kind(mode)


def open_regular(path: str | Path) -> IO[bytes]:
    """Open a regular file for binary reading; anything else (a FIFO, a device) is refused.

    The file is opened non-blocking and checked with ``fstat`` before any read, so a FIFO can
    neither hang the reader nor be swapped in after a check.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    kind = _kind(os.fstat(fd).st_mode)
    if kind is not None:
        os.close(fd)
        raise DatasetFormatError(f"{path}: is a {kind}, not a regular file")
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def open_text(path: Path) -> IO[str]:
    """Open a regular text file (:func:`open_regular`), gunzipping ``.gz``. utf-8-sig: a
    byte-order mark (common in CSVs saved by spreadsheets) must not rename a column."""
    raw = open_regular(path)
    if path.suffix == ".gz":
        return io.TextIOWrapper(_OwningGzipFile(raw), encoding="utf-8-sig", newline="")
    return io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")


def _unreadable(path: Path, exc: BaseException) -> DatasetFormatError:
    """A read that failed under the reader (``/proc/self/mem``: EIO; a bad gzip), naming the file."""
    if isinstance(exc, OSError) and exc.strerror:
        why = exc.strerror
    else:
        why = f"{type(exc).__name__}: {exc}"
    return DatasetFormatError(f"{path}: unreadable ({why})")


_READ_ERRORS = (EOFError, UnicodeDecodeError, OSError, zlib.error)  # gzip.BadGzipFile is an OSError


class _OwningGzipFile(gzip.GzipFile):
    """A ``GzipFile`` over an open binary file that it closes too (``GzipFile`` leaves it open)."""

    def __init__(self, raw: IO[bytes]):
        super().__init__(fileobj=raw, mode="rb")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def require_file(path: str | Path) -> Path:
    """``Path(path)``, or ``FileNotFoundError`` naming it (a folder is fine: loaders take both)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"dataset file not found: {path}")
    return path


def _require_regular_file(path: str | Path) -> Path:
    path = require_file(path)
    if path.is_dir():
        raise DatasetFormatError(f"{path}: is a directory, expected a file")
    kind = non_regular_kind(path, follow_symlinks=True)
    if kind is not None:  # open_text checks again on the open descriptor
        raise DatasetFormatError(f"{path}: is a {kind}, not a regular file")
    return path


def json_depth(text: str) -> int:
    """Deepest ``[``/``{`` nesting of a JSON text, brackets inside strings not counted. O(n).

    Vectorised over the UTF-8 bytes: a quote is a string delimiter unless an odd run of
    backslashes precedes it; a byte is inside a string when an odd number of delimiters
    precede it.
    """
    if text.count("[") + text.count("{") == 0:
        return 0
    b = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    idx = np.arange(b.size)
    backslash = b == 0x5C
    # Index of the last non-backslash byte at or before i; i - that = the backslash run ending at i.
    last_plain = np.maximum.accumulate(np.where(backslash, -1, idx))
    run_before = np.zeros(b.size, dtype=np.int64)
    run_before[1:] = idx[:-1] - last_plain[:-1]
    delimiter = (b == 0x22) & (run_before % 2 == 0)
    inside = (np.cumsum(delimiter) - delimiter) % 2 == 1  # delimiters strictly before i
    step = np.zeros(b.size, dtype=np.int64)
    step[(b == 0x5B) | (b == 0x7B)] = 1
    step[(b == 0x5D) | (b == 0x7D)] = -1
    step[inside | delimiter] = 0
    return int(np.cumsum(step).max(initial=0))


def _loads_bounded(text: str, where: str, max_depth: int) -> Any:
    """``json.loads`` after the depth check; ``where`` is ``file:line`` (or the file)."""
    if text.count("[") + text.count("{") > max_depth and json_depth(text) > max_depth:
        raise DatasetFormatError(f"{where}: JSON nested deeper than {max_depth} levels")
    return json.loads(text)


def loads_json(text: str, where: str, *, max_chars: int = MAX_JSONL_LINE_CHARS, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """One JSON text read from a file cell or field (``where`` names it: ``file row N column``),
    capped in length and depth before ``json.loads``; every failure is a
    :class:`DatasetFormatError` naming ``where``."""
    if not isinstance(text, str):
        raise DatasetFormatError(f"{where}: expected JSON text (a string), got {_type_name(text)}")
    if len(text) > max_chars:
        raise DatasetFormatError(f"{where}: longer than {max_chars} characters")
    try:
        return _loads_bounded(text, where, max_depth)
    except json.JSONDecodeError as exc:
        raise DatasetFormatError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer over Python's digit limit
        if isinstance(exc, DatasetFormatError):
            raise
        raise DatasetFormatError(f"{where}: not valid JSON ({str(exc).split(';')[0][:120]})") from None


def _type_name(value: Any) -> str:
    return {type(None): "null", list: "a list", dict: "an object", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


def iter_jsonl_numbered(
    path: str | Path, *, max_line_chars: int = MAX_JSONL_LINE_CHARS, max_depth: int = MAX_JSON_DEPTH
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, record)`` per non-blank line of a (gzipped) JSONL file.

    A bad line (malformed, not an object, longer than ``max_line_chars``, nested deeper than
    ``max_depth``) raises ``DatasetFormatError("file:line: ...")``; a truncated or corrupt gzip
    or a folder given as the file raises it naming the file.
    """
    path = _require_regular_file(path)
    try:
        with open_text(path) as f:
            lineno = chars = 0
            while True:
                # readline(limit): an endless line is never held in memory whole.
                line = f.readline(max_line_chars + 1)
                if not line:
                    return
                lineno += 1
                chars += len(line)
                if lineno > MAX_JSONL_LINES:
                    raise DatasetFormatError(f"{path}:{lineno}: more than {MAX_JSONL_LINES:,} lines (blank lines count)")
                if chars > MAX_JSONL_CHARS:
                    raise DatasetFormatError(f"{path}:{lineno}: larger than {MAX_JSONL_CHARS:,} characters "
                                             "(after decompression)")
                if len(line) > max_line_chars:
                    raise DatasetFormatError(f"{path}:{lineno}: line longer than {max_line_chars} characters")
                if not line.strip():
                    continue
                try:
                    record = _loads_bounded(line, f"{path}:{lineno}", max_depth)
                except json.JSONDecodeError as exc:
                    raise DatasetFormatError(
                        f"{path}:{lineno}: malformed JSON ({exc.msg} at column {exc.colno})"
                    ) from None
                if not isinstance(record, dict):
                    raise DatasetFormatError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
                yield lineno, record
    except _READ_ERRORS as exc:
        raise _unreadable(path, exc) from None


def iter_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield one dict per non-blank line (see :func:`iter_jsonl_numbered`)."""
    for _, record in iter_jsonl_numbered(path):
        yield record


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    return list(iter_jsonl(path))


def read_json(path: str | Path, *, max_chars: int = MAX_JSON_CHARS, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Load a whole JSON file (at most ``max_chars``, nested at most ``max_depth``); a parse
    error names the file and its line."""
    path = _require_regular_file(path)
    try:
        with open_text(path) as f:
            text = f.read(max_chars + 1)
    except _READ_ERRORS as exc:
        raise _unreadable(path, exc) from None
    if len(text) > max_chars:
        raise DatasetFormatError(f"{path}: larger than {max_chars} characters")
    try:
        return _loads_bounded(text, str(path), max_depth)
    except json.JSONDecodeError as exc:
        raise DatasetFormatError(f"{path}:{exc.lineno}: malformed JSON ({exc.msg} at column {exc.colno})") from None


def iter_csv_numbered(path: str | Path) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield ``(line number, row)`` keyed by the header; a row with the wrong number of fields,
    an unclosed quote (a truncated file) or a field over ``csv.field_size_limit()`` raises
    ``DatasetFormatError(file:line)``. The line is where the row *ends* (a quoted field may
    span lines); MetaTool task ids are built from it, so it stays that way."""
    path = _require_regular_file(path)
    try:
        yield from _iter_csv(path)
    except _READ_ERRORS as exc:
        raise _unreadable(path, exc) from None


def _iter_csv(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    with open_text(path) as f:
        reader = csv.reader(f, strict=True)
        try:
            header = next(reader)
        except StopIteration:
            raise DatasetFormatError(f"{path}:1: empty CSV file (no header)") from None
        except csv.Error as exc:
            raise DatasetFormatError(f"{path}:{reader.line_num}: malformed CSV ({exc})") from None
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                raise DatasetFormatError(f"{path}:{reader.line_num}: malformed CSV ({exc})") from None
            if reader.line_num > MAX_JSONL_LINES:
                raise DatasetFormatError(f"{path}:{reader.line_num}: more than {MAX_JSONL_LINES:,} lines (blank lines count)")
            if not row:
                continue
            if len(row) != len(header):
                raise DatasetFormatError(
                    f"{path}:{reader.line_num}: expected {len(header)} fields ({', '.join(header)}), got {len(row)}"
                )
            yield reader.line_num, dict(zip(header, row))


def csv_header(path: str | Path) -> list[str]:
    """The header row of a CSV file (``[]`` for an empty file)."""
    path = _require_regular_file(path)
    with open_text(path) as f:
        try:
            return next(csv.reader(f, strict=True))
        except StopIteration:
            return []
        except csv.Error as exc:
            raise DatasetFormatError(f"{path}:1: malformed CSV ({exc})") from None


# -- YAML configs -----------------------------------------------------------------------------
MAX_CONFIG_BYTES = 1 << 20


# YAML aliases and ${} interpolations expand when omegaconf copies/resolves them: with k of them a
# file can grow to about e^(k/e) nodes, so a small cap keeps alias/interpolation bombs harmless.
MAX_CONFIG_REFERENCES = 8


MAX_CONFIG_DEPTH = 32


def yaml_references(text: str) -> int:
    """YAML aliases (``*name``) and ``${...}`` interpolations in ``text``: a linear scan."""
    import re

    return len(re.findall(r"(?:^|[\s,\[{:])\*[^\s,\]}]+", text)) + text.count("${")


def read_yaml_mapping(path: str | Path, override_references: int = 0) -> Any:
    """The config file as a DictConfig; size, alias count (with the overrides') and nesting are
    capped before parsing."""
    from omegaconf import DictConfig, OmegaConf

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"config file not found: {path}")
    if not path.is_file():
        raise ValueError(f"config {path} is not a file")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ValueError(f"config {path} is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"config {path} is not UTF-8 text") from None
    references = yaml_references(text)
    if references + override_references > MAX_CONFIG_REFERENCES:
        also = f" (with the overrides' {override_references})" if override_references else ""
        raise ValueError(f"config {path} uses more than {MAX_CONFIG_REFERENCES} YAML aliases / ${{}} interpolations{also}")
    if flow_depth(text) > MAX_CONFIG_DEPTH:
        raise ValueError(f"config {path} nests deeper than {MAX_CONFIG_DEPTH} levels")
    try:
        node = OmegaConf.create(text)
    except Exception as exc:  # yaml's scanner/parser errors
        raise ValueError(f"config {path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if node is None or (isinstance(node, DictConfig) and len(node) == 0):
        # An empty file (or one of comments only) used to start a full default run without a word.
        raise ValueError(f"config {path} holds no settings (it is empty or only comments); give settings, "
                         "or leave the config file out to run with the defaults")
    if not isinstance(node, DictConfig):
        raise ValueError(f"config {path} must be a mapping of sections, got a {type(node).__name__}")
    return node


def flow_depth(text: str) -> int:
    """Deepest flow-style ``[``/``{`` nesting of a YAML text (a linear scan, quotes not special:
    a bound, not a parse)."""
    depth = deepest = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
    return deepest


def check_override_shapes(overrides: list[str]) -> None:
    """Each ``key=value`` override's key has at most ``MAX_CONFIG_DEPTH`` dotted parts and its value
    nests at most as deep: omegaconf builds and merges both recursively (a 10,000-part key
    ``a.a.a...=1`` or a value ``[[[...]]]`` 20,000 deep ended in ``RecursionError``)."""
    for override in overrides:
        key, _, value = override.partition("=")
        parts = key.count(".") + 1
        if parts > MAX_CONFIG_DEPTH:
            raise ValueError(f"override key {key[:60]!r}{'…' if len(key) > 60 else ''} has {parts} dotted parts; "
                             f"configs nest at most {MAX_CONFIG_DEPTH} levels")
        if flow_depth(value) > MAX_CONFIG_DEPTH:
            raise ValueError(f"override {key[:60]!r}: value nests deeper than {MAX_CONFIG_DEPTH} levels")



# -- config sections ---------------------------------------------------------------------------
def check_finite_fields(section: Any, prefix: str) -> None:
    """Every float field of the dataclass ``section`` is finite: ``.inf`` / ``.nan`` (YAML) pass
    omegaconf's type check and trained to all-NaN weights with exit 0. A ``ValueError`` naming
    ``prefix.field``; called from each config section's own checks (its ``__post_init__``)."""
    import dataclasses
    import math

    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{prefix}.{f.name}={value!r}: must be a finite number")
