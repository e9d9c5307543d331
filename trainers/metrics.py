"""A run's ``metrics.jsonl``: one JSON line per step, appended and fsynced before the step is
checkpointed, read back tolerating a half-written last line (a kill mid-write), and cut back to
the resume point when a run resumes (:func:`plan_metrics`, :func:`keep_metrics_before`). Used by
``toolgym train``, the ``fit-*`` loops and the curve plots."""
from __future__ import annotations

import itertools
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym.data.atomic import refuse_non_regular, write_text_atomic

__all__ = ["MAX_METRICS_LINE_CHARS", "MetricsPlan", "append_metrics_line", "keep_metrics_before", "plan_metrics",
           "read_metrics", "read_metrics_numbered"]

# A metrics line is one step's scalars and task ids (~1-10 kB); anything far larger is not ours.
MAX_METRICS_LINE_CHARS = 1_000_000


def append_metrics_line(path: str | Path, row: dict[str, Any]) -> None:
    """Append one step's metrics as one JSON line, flushed to disk before the step is checkpointed."""
    refuse_non_regular(path)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The metric rows of a ``metrics.jsonl``.

    A last line cut short by a kill (no closing newline, not valid JSON) is dropped; any other
    bad line is a ``ValueError`` naming ``file:line``.
    """
    return [row for _, row in read_metrics_numbered(path)]


def read_metrics_numbered(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """:func:`read_metrics` with each row's line number."""
    path = Path(path)
    refuse_non_regular(path, "file", follow_symlinks=True)
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    rows: list[tuple[int, dict[str, Any]]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        half_written_tail = number == len(lines) and not text.endswith("\n")
        try:
            if len(line) > MAX_METRICS_LINE_CHARS:
                raise ValueError(f"line longer than {MAX_METRICS_LINE_CHARS} characters")
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError(f"expected a JSON object, got {type(row).__name__}")
        except (ValueError, RecursionError) as exc:
            if half_written_tail:
                break
            msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc) or type(exc).__name__
            raise ValueError(f"{path}:{number}: not a metrics line ({msg})") from None
        rows.append((number, row))
    return rows


@dataclass
class MetricsPlan:
    """What resuming at ``step`` does to ``metrics.jsonl``: the rows it keeps, and what it found."""

    kept: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # one line each: bad steps, duplicates, gaps, redone steps


def _lines(numbers: list[int]) -> str:
    shown = ", ".join(map(str, numbers[:5]))
    return f"line {shown}" if len(numbers) == 1 else f"lines {shown}" + (f" (+{len(numbers) - 5} more)" if len(numbers) > 5 else "")


def plan_metrics(path: str | Path, step: int) -> MetricsPlan:
    """Read ``metrics.jsonl`` for a resume at ``step`` without touching it.

    Kept: the first line of each step ``0 <= s < step``. Dropped and said: lines whose ``step``
    is missing or not an integer, repeats of a step, and steps ``>= step`` (logged after the
    checkpoint, so they are redone). Said: steps before ``step`` with no line (they cannot be
    recovered; the plot has a hole there).
    """
    path = Path(path)
    plan = MetricsPlan()
    if not path.exists():
        return plan
    bad: list[int] = []
    repeated: list[int] = []
    later: list[int] = []
    seen: set[int] = set()
    for number, row in read_metrics_numbered(path):
        s = row.get("step")
        if not isinstance(s, int) or isinstance(s, bool) or s < 0:
            bad.append(number)
        elif s >= step:
            later.append(number)
        elif s in seen:
            repeated.append(number)
        else:
            seen.add(s)
            plan.kept.append(row)
    plan.kept.sort(key=lambda r: r["step"])
    if bad:
        plan.notes.append(f"{path}: dropped {len(bad)} line(s) without a non-negative integer 'step' ({_lines(bad)})")
    if repeated:
        plan.notes.append(f"{path}: dropped {len(repeated)} repeated step line(s), the first of each kept ({_lines(repeated)})")
    if later:
        plan.notes.append(f"{path}: dropped {len(later)} line(s) of steps >= {step}, logged after the checkpoint; "
                          "they are redone")
    if len(seen) < step:  # a gap (the first few named; the scan stops there, so it stays bounded)
        examples = list(itertools.islice((s for s in range(step) if s not in seen), 5))
        plan.notes.append(f"{path}: no line for {step - len(seen)} step(s) before {step} (e.g. step "
                          f"{', '.join(map(str, examples))}); those steps are not logged")
    return plan


def keep_metrics_before(path: str | Path, step: int, plan: MetricsPlan | None = None) -> list[dict[str, Any]]:
    """Rewrite ``metrics.jsonl`` with only the rows of steps before ``step`` (the resume point).

    Steps logged after the newest checkpoint (a kill between logging and saving) are redone, so
    their lines go; so do lines without an integer step and repeated steps (:func:`plan_metrics`,
    whose notes are printed on stderr). The file is replaced atomically: a kill here keeps the
    old file whole.
    """
    path = Path(path)
    if not path.exists():
        return []
    plan = plan if plan is not None else plan_metrics(path, step)
    for note in plan.notes:
        print(f"warning: {note}", file=sys.stderr)
    write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in plan.kept))
    return plan.kept
