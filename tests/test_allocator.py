"""trainers/allocator.py: glibc's mmap threshold, fixed for a training run."""
from __future__ import annotations

import platform

import pytest

from toolgym.trainers.allocator import MAX_MMAP_THRESHOLD, fix_mmap_threshold
from toolgym.trainers.config import TrainLoopConfig


def test_glibc_takes_the_threshold_and_other_libcs_report_no_effect():
    glibc = platform.libc_ver()[0] == "glibc"
    assert fix_mmap_threshold(1 << 20) is glibc
    # glibc's default again is not restorable (it self-adjusts); 128 KiB is its starting value
    assert fix_mmap_threshold(128 * 1024) is glibc


@pytest.mark.parametrize("bad", [-1, MAX_MMAP_THRESHOLD + 1, 1.5, True, "1048576", None])
def test_out_of_range_or_non_integer_thresholds_are_refused(bad):
    with pytest.raises(ValueError, match="mmap threshold"):
        fix_mmap_threshold(bad)


def test_the_train_section_checks_the_threshold_at_the_door():
    assert TrainLoopConfig(malloc_mmap_threshold=1 << 20).malloc_mmap_threshold == 1 << 20
    for bad in (-1, MAX_MMAP_THRESHOLD + 1):
        with pytest.raises(ValueError, match="train.malloc_mmap_threshold"):
            TrainLoopConfig(malloc_mmap_threshold=bad)


def test_a_training_run_fixes_the_threshold_its_config_names(tmp_path, monkeypatch):
    from conftest import tiny_run_config
    from toolgym.cli.main import main
    from toolgym.trainers import allocator

    calls = []
    monkeypatch.setattr(allocator, "fix_mmap_threshold", lambda n: calls.append(n) or True)
    config = tiny_run_config(tmp_path, tmp_path / "run", steps=1, checkpoint_every=0)
    assert main(["train", config, "train.malloc_mmap_threshold=1048576", "--no-progress"]) == 0
    assert calls == [1048576]
