"""JSON / JSONL reading with errors that name the file and the line."""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Iterator


class DatasetFormatError(ValueError):
    """A dataset file is truncated or malformed; the message names the file and line."""


def open_text(path: Path):
    """Open a text file, gunzipping ``.gz``.

    utf-8-sig: a byte-order mark (common in CSVs saved by spreadsheets) must not rename a column.
    """
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8-sig", newline="")
    return open(path, encoding="utf-8-sig", newline="")


def require_file(path: str | Path) -> Path:
    """``Path(path)``, or ``FileNotFoundError`` naming it."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"dataset file not found: {path}")
    return path


def iter_jsonl_numbered(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, record)`` per non-blank line of a (gzipped) JSONL file.

    A bad line raises ``DatasetFormatError("file:line: ...")``; a truncated or corrupt gzip
    raises it naming the file.
    """
    path = require_file(path)
    try:
        with open_text(path) as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DatasetFormatError(
                        f"{path}:{lineno}: malformed JSON ({exc.msg} at column {exc.colno})"
                    ) from None
                if not isinstance(record, dict):
                    raise DatasetFormatError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
                yield lineno, record
    except (EOFError, gzip.BadGzipFile, UnicodeDecodeError) as exc:
        raise DatasetFormatError(f"{path}: unreadable ({type(exc).__name__}: {exc})") from None


def iter_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield one dict per non-blank line (see :func:`iter_jsonl_numbered`)."""
    for _, record in iter_jsonl_numbered(path):
        yield record


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    return list(iter_jsonl(path))


def read_json(path: str | Path) -> Any:
    """Load a whole JSON file; a parse error names the file and its line."""
    path = require_file(path)
    try:
        with open_text(path) as f:
            text = f.read()
    except (EOFError, gzip.BadGzipFile, UnicodeDecodeError) as exc:
        raise DatasetFormatError(f"{path}: unreadable ({type(exc).__name__}: {exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetFormatError(f"{path}:{exc.lineno}: malformed JSON ({exc.msg} at column {exc.colno})") from None
