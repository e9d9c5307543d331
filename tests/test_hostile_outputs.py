"""Hostile output paths: what is already at ``--json``, a run file or a report path.

``os.replace`` puts a regular file wherever it points, so an atomic write over a device node
(``--json /dev/full`` as root), a FIFO or a symbolic link used to destroy it. Such paths are now
refused before any work, and again right before the rename. Each case fails on the code before
the fix (issue 21). Device nodes are made inside ``tmp_path`` (``os.mknod``, root only), never
the machine's own."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from toolgym.data import atomic
from toolgym.trainers import metrics as run_metrics
from toolgym.cli.main import check_output_file, main


def _char_device(tmp_path: Path) -> Path:
    """A character device node like /dev/null (1, 3), but in tmp_path."""
    path = tmp_path / "null_device"
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, AttributeError, OSError) as exc:
        pytest.skip(f"cannot make a device node here ({exc})")
    return path


@pytest.fixture
def specials(tmp_path):
    """name -> a path holding something other than a regular file, and how to tell it is intact."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    target = tmp_path / "target.json"
    target.write_text("keep me")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    out = {"fifo": (fifo, stat.S_ISFIFO), "symlink": (link, stat.S_ISLNK)}
    try:
        out["device"] = (_char_device(tmp_path), stat.S_ISCHR)
    except pytest.skip.Exception:
        pass
    return out


def _intact(path: Path, test) -> bool:
    return test(os.lstat(path).st_mode)


@pytest.mark.parametrize("kind", ["fifo", "symlink", "device"])
def test_write_text_atomic_refuses_and_keeps_a_non_regular_target(specials, kind):
    if kind not in specials:
        pytest.skip("no device nodes here")
    path, test = specials[kind]
    with pytest.raises(ValueError, match="not a regular file"):
        atomic.write_text_atomic(path, "{}\n")
    assert _intact(path, test)
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]  # no temp file left
    if kind == "symlink":
        assert path.resolve().read_text() == "keep me"


@pytest.mark.parametrize("kind", ["fifo", "symlink", "device"])
def test_check_output_file_refuses_non_regular_targets(specials, kind):
    if kind not in specials:
        pytest.skip("no device nodes here")
    path, _ = specials[kind]
    for flag in ("--json", "--save-rollouts"):
        with pytest.raises(ValueError, match=f"{flag} .*not a regular file"):
            check_output_file(path, flag)


@pytest.mark.parametrize("kind", ["fifo", "symlink", "device"])
def test_eval_json_onto_a_special_file_is_one_line_and_keeps_it(specials, kind, capsys):
    """``--json`` is checked before any work: the evaluation does not run, the node stays."""
    if kind not in specials:
        pytest.skip("no device nodes here")
    path, test = specials[kind]
    assert main(["eval", "--dataset", "seal_tools", "--limit", "5", "--json", str(path)]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "--json" in lines[0] and "not a regular file" in lines[0], err
    assert _intact(path, test)


def test_metrics_append_refuses_a_special_file(specials):
    path, test = specials["symlink"]
    with pytest.raises(ValueError, match="not a regular file"):
        run_metrics.append_metrics_line(path, {"step": 0})
    assert _intact(path, test) and path.resolve().read_text() == "keep me"


def test_regular_files_are_still_replaced_atomically(tmp_path):
    path = tmp_path / "m.json"
    path.write_text("old")
    check_output_file(path, "--json")
    atomic.write_text_atomic(path, "new")
    assert path.read_text() == "new"
