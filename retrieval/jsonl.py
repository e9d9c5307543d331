"""JSON / JSONL reading with errors that name the file and the line."""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Iterator


class DatasetFormatError(ValueError):
    """A dataset file is truncated or malformed; the message names the file and line."""


def _open_text(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def iter_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield one dict per non-blank line; a bad line raises ``DatasetFormatError(file:line)``."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"dataset file not found: {path}")
    with _open_text(path) as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetFormatError(f"{path}:{lineno}: malformed JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(record, dict):
                raise DatasetFormatError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
            yield record


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    return list(iter_jsonl(path))


def read_json(path: str | Path) -> Any:
    """Load a whole JSON file; a parse error names the file and its line."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"dataset file not found: {path}")
    with _open_text(path) as f:
        text = f.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetFormatError(f"{path}:{exc.lineno}: malformed JSON ({exc.msg} at column {exc.colno})") from None
