"""The C allocator's knob that bounds a CPU training run's resident memory.

PyTorch's CPU tensors come from glibc's ``malloc``. A block of at least ``M_MMAP_THRESHOLD``
bytes is its own ``mmap`` and goes back to the OS when freed; a smaller one comes from the
heap, which only shrinks from its top. glibc raises that threshold (up to 32 MiB) every time a
large mmapped block is freed, so after the first update the multi-MB activations of a variable-length
batch land on the heap, and the gaps they leave keep the process's resident memory growing step by
step while the live tensors stay flat. Fixing the threshold (``mallopt``, which also turns the
raising off) keeps those blocks mmapped. There is no PyPI wrapper for ``mallopt``, hence ctypes.
"""
from __future__ import annotations

import ctypes
import ctypes.util

M_MMAP_THRESHOLD = -3  # glibc's malloc.h
MAX_MMAP_THRESHOLD = 32 * 1024 * 1024  # HEAP_MAX_SIZE / 2 on 64-bit glibc: mallopt refuses more


def fix_mmap_threshold(nbytes: int) -> bool:
    """``mallopt(M_MMAP_THRESHOLD, nbytes)``: from now on every allocation of at least ``nbytes``
    is mmapped and returned to the OS when freed, and glibc stops raising the threshold. Returns
    ``True`` when glibc took it, ``False`` where the C library is not glibc (nothing changes).
    Raises ``ValueError`` outside ``0 .. 32 MiB``."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or not 0 <= nbytes <= MAX_MMAP_THRESHOLD:
        raise ValueError(f"mmap threshold must be an integer number of bytes in 0..{MAX_MMAP_THRESHOLD}, got {nbytes!r}")
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt; macOS, Windows)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, nbytes))
